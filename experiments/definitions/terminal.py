"""Terminal (exact-match) reward (paper Sections 3.6-3.7, Table 3, Figs. 8-9).

Reverse copy, V = 2, B = 100 prompts, K = 8 full completions per prompt for the grouped methods
(sequence-level TPO, GRPO, GRPO without KL, TPO without anchor, Group PG), one completion for PPO/DG;
2,000 episodes, 20 seeds; the settings are the zoo's (``zoo_configs/<algo>.yml``) but for the terminal
reward, H, K, the matching and the sequence-level grouping. Metric: exact-match error of the training
batch (all K completions count).

* ``terminal`` (Table 3, Fig. 8): H in {7, 8, 9, 10}, prompt-matched and interaction-matched (PPO/DG
  with B*K = 800 prompts and lr x sqrt(8), Sec. 3.6; the grouped methods are unchanged, so their
  interaction-matched cells are the prompt-matched runs); ``skip/H10`` (smoke: ``skip/H7``): TPO and GRPO
  prompt-matched with ``skip_batches_without_signal=True`` (no update on a batch in which no group carries
  signal, instead of the optimizer's step on a zero gradient), set against the ``prompts/H10`` cells by the
  report (``compared_variants``).
* ``ablations`` (Section 3.7, Fig. 9): TPO, TPO-no-anchor, Group PG, GRPO, GRPO (no KL) at H in {7, 8, 10}.
  TPO, GRPO and GRPO (no KL) are Table 3's prompt-matched runs (``cells_from``): their seeds are trained
  into and read from ``terminal``'s folder.
"""

from __future__ import annotations

from experiments.core import Experiment, Grid, Size
from experiments.definitions.tokens import SINGLE_SAMPLE, token_run

TERMINAL_ALGOS = ("ppo", "dg", "tpo", "grpo", "grpo_no_kl")
SKIP_ALGOS = ("tpo", "grpo")
ABLATION_ALGOS = ("tpo", "tpo_no_anchor", "group_pg", "grpo", "grpo_no_kl")


def build_terminal(updates: int, smoke: bool) -> Grid:
    """Prompt-matched: all five methods; interaction-matched: PPO and DG; TPO and GRPO skipping the batches
    without signal at the largest H (smoke: H = 7 only)."""
    grid: Grid = {}
    horizons = (7,) if smoke else (7, 8, 9, 10)
    for H in horizons:
        grid[f"prompts/H{H}"] = {a: token_run(a, updates, reward="terminal", H=H) for a in TERMINAL_ALGOS}
        grid[f"interactions/H{H}"] = {a: token_run(a, updates, reward="terminal", H=H, match="interactions")
                                      for a in SINGLE_SAMPLE}
    grid[f"skip/H{horizons[-1]}"] = {
        a: token_run(a, updates, reward="terminal", H=horizons[-1], skip_batches_without_signal=True)
        for a in SKIP_ALGOS}
    return grid


def build_ablations(updates: int, smoke: bool) -> Grid:
    """The five grouped variants at each H (smoke: H = 7 only)."""
    return {f"H{H}": {a: token_run(a, updates, reward="terminal", H=H) for a in ABLATION_ALGOS}
            for H in ((7,) if smoke else (7, 8, 10))}


TERMINAL = Experiment(
    name="terminal", paper="Table 3, Fig. 8 (Section 3.6)", full=Size(20, 2000), smoke=Size(2, 20),
    build=build_terminal, threshold=0.05, log_panels=(False,),
    compared_variants=(("skip/H10", "prompts/H10"), ("skip/H7", "prompts/H7")),
    more_seeds=(("prompts/H10", ("tpo", "grpo"), 40),),
    notes="exact-match error; interaction-matched grouped cells = the prompt-matched runs (Sec. 3.6); "
          "prompts/H10 runs TPO and GRPO at 40 seeds, for TPO against GRPO and against the reference's "
          "file.",
)
ABLATIONS = Experiment(
    name="ablations", paper="Section 3.7, Fig. 9", full=Size(20, 2000), smoke=Size(2, 20),
    build=build_ablations, threshold=0.05, log_panels=(False,),
    cells_from=tuple((f"H{H}", "terminal", f"prompts/H{H}") for H in (7, 8, 10)),
)
