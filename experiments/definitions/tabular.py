"""Tabular bandits (paper Sections 3.1-3.2, Figs. 3-4, App. B).

Explicit logit tables (``TabularPolicy``) moved by the normalised step z <- z + alpha g / ||g||,
alpha = 0.1, one step per update. Every setting is the zoo's (``zoo_configs/<algo>.yml``):

* ``tabular_single`` (Fig. 3): ``TPO/KArmedBandit-v0`` (100 arms, y* = 0), zero logits, B = 100 sampled
  arms per step, constant baseline 0.5 for PG, DG and TPO (the reference code's; the paper does not say),
  batch-standardised rewards for GRPO; 150 steps, 100 seeds.
* ``tabular_multi`` (Fig. 4): ``TPO/MultiContextBandit-v0`` (100 contexts x 10 arms), N(0, 1) logits,
  exact updates (``group_mode="exact"``), with the CE oracle; 1,000 steps, 100 seeds.
"""

from __future__ import annotations

from experiments.core import Experiment, Grid, Size
from experiments.zoo import zoo_run

SINGLE_ALGOS = ("pg", "dg", "tpo", "grpo")
MULTI_ALGOS = ("pg", "dg", "tpo", "grpo", "ce")


def build_single(updates: int, smoke: bool) -> Grid:
    """The single-context grid: one variant, four methods."""
    return {"K100": {a: zoo_run(a, "TPO/KArmedBandit-v0", updates, recorder="tabular_single")
                     for a in SINGLE_ALGOS}}


def build_multi(updates: int, smoke: bool) -> Grid:
    """The multi-context grid: one variant, four methods and the CE oracle."""
    return {"N100_K10": {a: zoo_run(a, "TPO/MultiContextBandit-v0", updates, recorder="tabular_multi")
                         for a in MULTI_ALGOS}}


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
