"""Token tasks with dense reward (paper Sections 3.4-3.5, Tables 1, 2 and 5, Figs. 6-7).

A 2-layer causal transformer (``TransformerPolicy``, Muon + Adam at lr 1e-3) writes H = 10 tokens per
prompt. TPO and GRPO group K = 8 next-token candidates at every prefix state (``group_mode="token"``);
PPO and DG follow one sampled trajectory per prompt with the batch-mean baseline at each position.
Every method follows one behaviour trajectory per prompt, B = 100 prompts per episode. The metric is the
training-batch error before the update (Sec. 3.4, as the reference code measures it). The settings are
the zoo's (``zoo_configs/<algo>.yml``); an experiment sets the task, the reward, K, the matching, the
grouping level and what it sweeps.

* ``vocab_sweep`` (Table 1, Fig. 6): reverse copy, bag-of-tokens, V in {2, 4, 8, 16}; 20 seeds,
  1,000 episodes.
* ``variations`` (Table 2, Fig. 7): 4 target logics x {bag-of-tokens, sequential}, V = 2, 10 seeds,
  1,000 episodes, prompt-matched; interaction-matched PPO/DG (B*K prompts, lr x sqrt(K)). Token-level
  grouped methods already use the same interactions (Sec. 3.4), so they run once.
* ``eta_sweep`` (Table 5): token-level TPO on reverse copy, V = 2, eta in {0.25, 0.5, 1, 2, 4}; 10 seeds.
"""

from __future__ import annotations

from typing import Any

from experiments.core import Experiment, Grid, RunSpec, Size
from experiments.zoo import zoo_run

TOKEN_ENVS = {"copy": "TPO/TokenCopy-v0", "flip": "TPO/TokenFlip-v0",
              "reverse_copy": "TPO/TokenReversal-v0", "reverse_flip": "TPO/TokenReverseFlip-v0"}
SINGLE_SAMPLE = ("ppo", "dg")
DENSE_ALGOS = ("ppo", "dg", "tpo", "grpo")


def token_run(algo: str, updates: int, logic: str = "reverse_copy", reward: str = "bag_of_tokens",
              H: int | None = None, V: int | None = None, B: int | None = None, K: int = 8,
              match: str = "prompts", **extra: Any) -> RunSpec:
    """A token-task run with the zoo's settings: grouped methods at the token level (dense reward) or the
    sequence level (terminal); H, V and B default to the zoo's, ``extra`` (n_epochs, eta) overrides it."""
    kwargs: dict[str, Any] = {"group_size": K, "match": match, **extra}
    if algo not in SINGLE_SAMPLE:
        kwargs["group_mode"] = "sequence" if reward == "terminal" else "token"
    if B is not None:
        kwargs["batch_size"] = B
    env_kwargs: dict[str, Any] = {"reward": reward}
    env_kwargs.update({k: v for k, v in (("sequence_length", H), ("vocab_size", V)) if v is not None})
    return zoo_run(algo, TOKEN_ENVS[logic], updates, env_kwargs, **kwargs)


def build_vocab(updates: int, smoke: bool) -> Grid:
    """V in {2, 4, 8, 16} x {ppo, dg, tpo, grpo}."""
    return {f"V{V}": {a: token_run(a, updates, V=V) for a in DENSE_ALGOS} for V in (2, 4, 8, 16)}


def build_variations(updates: int, smoke: bool) -> Grid:
    """Prompt-matched 8 variants x 4 methods; interaction-matched PPO/DG (full size only)."""
    grid: Grid = {}
    for reward in ("bag_of_tokens", "sequential"):
        for logic in TOKEN_ENVS:
            grid[f"prompts/{reward}/{logic}"] = {
                a: token_run(a, updates, logic, reward) for a in DENSE_ALGOS}
            if not smoke:
                grid[f"interactions/{reward}/{logic}"] = {
                    a: token_run(a, updates, logic, reward, match="interactions") for a in SINGLE_SAMPLE}
    return grid


ETAS = (0.25, 0.5, 1.0, 2.0, 4.0)


def build_eta(updates: int, smoke: bool) -> Grid:
    """Token-level TPO at each eta."""
    return {f"eta{eta:g}": {"tpo": token_run("tpo", updates, eta=eta)} for eta in ETAS}


VOCAB_SWEEP = Experiment(
    name="vocab_sweep", paper="Table 1, Fig. 6 (Section 3.4)", full=Size(20, 1000), smoke=Size(2, 50),
    build=build_vocab, threshold=0.01, log_panels=(True,),
)
VARIATIONS = Experiment(
    name="variations", paper="Table 2, Fig. 7 (Section 3.5)", full=Size(10, 1000), smoke=Size(2, 30),
    build=build_variations, threshold=0.01, log_panels=(True,),
    notes="smoke: prompt-matched only. Interaction-matched TPO/GRPO (token level) = the prompt-matched runs.",
)
ETA_SWEEP = Experiment(
    name="eta_sweep", paper="Table 5", full=Size(10, 1000), smoke=Size(2, 50),
    build=build_eta, threshold=0.01, log_panels=(True,),
)
