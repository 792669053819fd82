"""Whole updates held equal to the paper's reference code (JAX), on its own rollout batches.

``tests/fixtures/reference_updates.npz`` (written by ``tests/fixtures/make_reference_updates.py`` with the
reference's code and environment; no JAX here) holds, for every transformer method of the paper, the
reference's parameters before and after one whole update (rollout, targets or advantages, every epoch
of Muon/Adam as the paper sets it) and the batch it sampled. From the same parameters and batch our
update must give the same parameters:

* ``init``: a seed's first update (for the terminal methods at least one group succeeds);
* ``one_group``: a first batch in which exactly one group succeeds;
* ``all_fail``: a first batch without any success. The reference's GRPO (and GRPO without KL) leaves
  its parameters exactly where they were, and so does ours, and so do Group PG's zero weights; its
  TPO moves by a full Muon step (~5e-3 here) on a first-epoch gradient that is rounding noise (its
  p - q on groups where q = p_old), which ours does not take: a zero-variance group has an exactly
  zero TPO gradient here, as the paper says (Sec. 4.2). TPO without anchor has a real gradient there
  (q is uniform, p is not) and matches;
* ``run``: the first three updates of one seed, each from where the previous one left (optimizer state
  included), replaying the reference's sampled batches.

Tolerance, measured: at most 7e-7 after one update and below 1e-6 after three on an AVX2 machine
(parameters of magnitude up to ~1, steps of ~5e-3: float32 round-off through Muon's Newton-Schulz
iteration and four epochs); ``ATOL`` leaves room for other CPUs' kernels.
The attention key biases are left out: they change no output (a query's logits over the keys
all shift by q . b_k, which the softmax removes), so their gradient is rounding noise in both codes,
and the reference's partition gives these (heads, head_dim) matrices to Muon, which scales that noise
to a full step in a direction of its own in each code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

import tpo_gym  # noqa: F401  (registers the envs)
from tpo_agents.modes.episodes import Episodes
from tpo_agents.modes.token import TokenGroups
from tpo_agents.zoo.registry import get_algo

torch.set_num_threads(1)
FIXTURES = np.load(Path(__file__).resolve().parents[1] / "fixtures" / "reference_updates.npz")
H, V, B, K = 4, 2, 6, 4
MODEL = dict(d_model=8, n_heads=2, n_layers=2, ffn_mult=4)
ATOL = 5e-6
#: method -> (zoo algorithm, collection mode, env reward, hyperparameters beyond the shared ones)
METHODS = {
    "tpo": ("tpo", "sequence", "terminal", {}),
    "tpo_no_anchor": ("tpo_no_anchor", "sequence", "terminal", {"anchor": False}),
    "group_pg": ("group_pg", "sequence", "terminal", {}),
    "grpo": ("grpo", "sequence", "terminal", {"beta": 0.04, "clip_range": 0.2}),
    "grpo_no_kl": ("grpo_no_kl", "sequence", "terminal", {"beta": 0.0, "clip_range": 0.2}),
    "tpo_token": ("tpo", "token", "bag_of_tokens", {}),
    "grpo_token": ("grpo", "token", "bag_of_tokens", {"beta": 0.04, "clip_range": 0.2}),
    "ppo": ("ppo", "single", "bag_of_tokens", {"clip_range": 0.2, "baseline": "batch_mean"}),
    "dg": ("dg", "single", "bag_of_tokens", {"baseline": "batch_mean", "eta": 1.0}),
}
#: The cases whose reference update is float noise made into a Muon step (see the module docstring).
NOISE_STEPS = {("tpo", "all_fail")}


def our_name(flax_path: str, n_layers: int = MODEL["n_layers"]) -> str:
    """The parameter of our ``CausalTransformer`` that a flax path (``params/Dense_3/kernel``) names.

    flax numbers modules in order of creation: per layer LayerNorm, SelfAttention, LayerNorm, Dense,
    Dense; then the final LayerNorm and Dense (the head). Shapes and layouts are the same
    (kernels (in, out), attention kernels (d_model, heads, head_dim) and (heads, head_dim, d_model))."""
    parts = flax_path.split("/")[1:]
    module, leaf = parts[0], parts[-1]
    kind, _, number = module.rpartition("_")
    if module == "pos_emb":
        return "position_embedding"
    if kind == "Embed":
        return "token_embedding"
    index = int(number)
    if kind == "SelfAttention":
        return f"layers.{index}.attn.{parts[1]}.{leaf}"
    if index == 2 * n_layers:
        return {"Dense": "head", "LayerNorm": "ln_f"}[kind] + f".{leaf}"
    layer, second = divmod(index, 2)
    module = {"Dense": f"mlp.fc{second + 1}", "LayerNorm": f"ln{second + 1}"}[kind]
    return f"layers.{layer}.{module}.{leaf}"


def parameters(prefix: str) -> dict[str, torch.Tensor]:
    """Our-named tensors of the fixture's parameter set stored under ``prefix``."""
    return {our_name(key[len(prefix) + 1:]): torch.from_numpy(FIXTURES[key].copy())
            for key in FIXTURES.files if key.startswith(prefix + "/")}


def build(method: str):
    algo, mode, reward, extra = METHODS[method]
    model = get_algo(algo)(
        "TransformerPolicy", "TPO/TokenReversal-v0", learning_rate=1e-3, batch_size=B, group_size=K,
        group_mode=mode, n_epochs=1 if algo == "dg" else 4, seed=0, policy_kwargs=MODEL,
        env_kwargs=dict(reward=reward, sequence_length=H, vocab_size=V), **extra,
    )  # fmt: skip
    model.set_logger(Logger(None, []))
    return model


def reference_batch(name: str, mode: str) -> Episodes | TokenGroups:
    """The reference's sampled batch as our collection modes hold it (pi_old: the update's first forward)."""

    def field(key: str) -> torch.Tensor:
        return torch.from_numpy(FIXTURES[f"{name}/batch/{key}"].copy())

    prompts = field("prompts").long()
    if mode == "token":
        candidates, scores = field("candidates").long(), field("candidate_rewards").float()
        return TokenGroups(
            obs=field("states").long(), actions=candidates[..., 0], candidates=candidates, scores=scores,
            old_log_probs=None, token_rewards=scores[..., 0], returns=scores[..., 0].sum(-1),
            prompts=prompts,
        )  # fmt: skip
    actions, rewards = field("actions").long(), field("rewards").float()
    group = K if mode == "sequence" else 1
    actions, rewards = actions.reshape(B * group, H), rewards.reshape(B * group, H)
    return Episodes(
        obs=torch.zeros(B * group, H, 2 * H, dtype=torch.long), actions=actions,
        old_log_probs=None, token_rewards=rewards, returns=rewards.sum(-1),
        contexts=torch.arange(B).repeat_interleave(group), n_contexts=B, group_size=group,
        prompts=prompts.repeat_interleave(group, 0),
    )  # fmt: skip


def update(model, name: str, mode: str) -> None:
    """One whole update of ours on the reference's batch ``name``: pi_old from the first forward, epochs."""
    model.train(reference_batch(name, mode))


def load(model, prefix: str) -> None:
    state = model.policy.model.state_dict()
    loaded = parameters(prefix)
    assert sorted(loaded) == sorted(state)
    model.policy.model.load_state_dict(loaded)


def assert_parameters(model, prefix: str, message: str) -> None:
    """Our parameters equal the fixture's set ``prefix`` to ``ATOL``, but for the attention key biases
    (:func:`test_the_key_bias_changes_no_output`)."""
    ours = dict(model.policy.model.named_parameters())
    for key, value in parameters(prefix).items():
        if not key.endswith("attn.key.bias"):
            torch.testing.assert_close(ours[key].detach(), value, atol=ATOL, rtol=0, msg=f"{message}: {key}")


def cases(method: str) -> list[str]:
    return sorted({key.split("/")[1] for key in FIXTURES.files if key.startswith(f"{method}/")} - {"run"})


@pytest.mark.parametrize(("method", "case"), [(m, c) for m in METHODS for c in cases(m)])
def test_one_whole_update_equals_the_reference_s(method, case):
    name = f"{method}/{case}"
    model = build(method)
    start = str(FIXTURES[f"{name}/start"])
    load(model, start)
    update(model, name, METHODS[method][1])
    if (method, case) in NOISE_STEPS:
        moved = max((FIXTURES[key] - FIXTURES[key.replace(f"{name}/params_after", start)]).__abs__().max()
                    for key in FIXTURES.files if key.startswith(f"{name}/params_after/"))
        assert moved > 1e-3  # the reference's noise step
        assert_parameters(model, start, f"{name} (ours: no step)")
        return
    assert_parameters(model, f"{name}/params_after", name)


@pytest.mark.parametrize("method", list(METHODS))
def test_the_first_updates_replaying_the_reference_s_batches(method):
    model = build(method)
    load(model, str(FIXTURES[f"{method}/run/0/start"]))
    for episode in range(3):
        name = f"{method}/run/{episode}"
        update(model, name, METHODS[method][1])
        assert_parameters(model, f"{name}/params_after", name)


def test_the_reference_s_all_fail_batches_have_no_success_and_one_group_one():
    for method in ("tpo", "grpo"):
        rewards = FIXTURES[f"{method}/all_fail/batch/rewards"]
        assert rewards.max() == 0
        groups = (FIXTURES[f"{method}/one_group/batch/rewards"].min(-1) > 0).any(-1)
        assert groups.sum() == 1


def test_the_key_bias_changes_no_output():
    model = build("tpo").policy.model
    tokens = torch.randint(0, V, (5, 2 * H), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(tokens)
        for layer in model.layers:
            layer.attn.key.bias.add_(torch.randn(layer.attn.key.bias.shape))
        torch.testing.assert_close(model(tokens), before, atol=2e-6, rtol=0)
