"""Tabular bandits (paper Sections 3.1-3.2, Figs. 3-4; spec 2.6, 3.1, 3.2).

Explicit logit tables (``TabularPolicy``) moved by the normalised step z <- z + alpha g / ||g||,
alpha = 0.1, one step per update (``n_epochs=1``).

* ``tabular_single``: ``TPO/KArmedBandit-v0`` (100 arms, y* = 0), zero logits, B = 100 sampled arms per
  step, constant baseline 0.5 for PG, DG and TPO, batch-standardised rewards for GRPO; 150 steps, 100 seeds.
* ``tabular_multi``: ``TPO/MultiContextBandit-v0`` (100 contexts x 10 arms), N(0, 1) logits, exact
  (population) updates, with the CE oracle; 1,000 steps, 100 seeds.
"""

from __future__ import annotations

from experiments.core import Experiment, Grid, RunSpec, Size

SINGLE_ALGOS = ("pg", "dg", "tpo", "grpo")
MULTI_ALGOS = ("pg", "dg", "tpo", "grpo", "ce")


def build_single(updates: int, smoke: bool) -> Grid:
    """The single-context grid: one variant, four methods."""
    runs = {}
    for algo in SINGLE_ALGOS:
        kwargs = dict(learning_rate=0.1, batch_size=100, group_mode="single", n_epochs=1)
        if algo != "grpo":
            kwargs["baseline"] = 0.5
        runs[algo] = RunSpec(algo, "TPO/KArmedBandit-v0", {"n_arms": 100}, "TabularPolicy", kwargs,
                             updates, recorder="tabular_single")
    return {"K100": runs}


def build_multi(updates: int, smoke: bool) -> Grid:
    """The multi-context grid: one variant, four methods and the CE oracle."""
    kwargs = dict(learning_rate=0.1, batch_size=100, group_mode="population", n_epochs=1,
                  policy_kwargs={"init": "normal"})
    env_kwargs = {"n_contexts": 100, "n_arms": 10}
    return {"N100_K10": {algo: RunSpec(algo, "TPO/MultiContextBandit-v0", env_kwargs, "TabularPolicy",
                                       kwargs, updates, recorder="tabular_multi")
                         for algo in MULTI_ALGOS}}


TABULAR_SINGLE = Experiment(
    name="tabular_single", paper="Fig. 3 (Section 3.1)", full=Size(100, 150), smoke=Size(2, 20),
    build=build_single, threshold=0.01, panels=("update/misalignment",), log_panels=(True, True),
    notes="error = 1 - pi(y*) before each update; misalignment to the exact gradient pi_y (e_y - pi).",
)
TABULAR_MULTI = Experiment(
    name="tabular_multi", paper="Fig. 4 (Section 3.2)", full=Size(100, 1000), smoke=Size(2, 50),
    build=build_multi, threshold=0.01, panels=("update/misalignment",), log_panels=(True, True),
    notes="error = 1 - mean_n pi_n(y_n) after each update; misalignment to the CE direction e_y - pi.",
)
