"""MNIST contextual bandit (paper Section 3.3, Fig. 5a/5b, App. C).

``TPO/MNISTBandit-v0`` with ``MlpPolicy`` (784-50-50-10), Adam lr 1e-3, B = 100 images per step drawn
with replacement, one optimizer step per batch; every setting is the zoo's (``zoo_configs/<algo>.yml``).
PG and DG use the expected baseline sum_k pi_k^2 (TPO and Group PG only use its sign); GRPO is REINFORCE
with batch-standardised rewards; CE is the supervised oracle on ``batch_size`` images. Greedy error on
the 10k test images every 200 steps, the i-th evaluation (after (i+1)*200 steps) at x = i*200, as the
reference code plots it. The Fig. 5b mechanism diagnostics are computed at each evaluation for pg, dg,
tpo, grpo (NaN, as in the reference code) and group_pg.
"""

from __future__ import annotations

from experiments.core import Experiment, Grid, Size
from experiments.zoo import zoo_run

ALGOS = ("ce", "pg", "dg", "tpo", "grpo", "group_pg")
EVAL_EVERY = 200
SMOKE_EVAL_EVERY = 20


def build(updates: int, smoke: bool) -> Grid:
    """One variant, the six methods of Fig. 5a."""
    every = SMOKE_EVAL_EVERY if smoke else EVAL_EVERY
    return {"B100": {a: zoo_run(a, "TPO/MNISTBandit-v0", updates, recorder="mnist",
                                recorder_kwargs={"eval_every": every, "mechanism_algo": a})
                     for a in ALGOS}}


MNIST = Experiment(
    name="mnist", paper="Fig. 5a/5b (Section 3.3)", full=Size(20, 10_000), smoke=Size(2, 100),
    build=build, metric="eval/error", threshold=0.05, log_panels=(True,),
    notes="greedy test error every 200 steps (x = label of the evaluation, as in the reference code).",
    stored=("eval/mechanism_",),
)
