"""MNIST contextual bandit (paper Section 3.3, Fig. 5a/5b; spec 2.5, 3.3, 4.4).

``TPO/MNISTBandit-v0`` with ``MlpPolicy`` (784-50-50-10), Adam lr 1e-3, B = 100 images per step drawn
with replacement, one optimizer step per batch. PG and DG use the expected baseline sum_k pi_k^2 (TPO and
Group PG only use its sign); GRPO is REINFORCE with batch-standardised rewards; CE is the supervised
oracle on ``batch_size`` images. Greedy error on the 10k test images every 200 steps, the i-th
evaluation (after (i+1)*200 steps) at x = i*200. The Fig. 5b mechanism diagnostics are computed at each
evaluation for pg, dg, tpo, grpo (NaN, as in the reference) and group_pg.
"""

from __future__ import annotations

from experiments.core import Experiment, Grid, RunSpec, Size

ALGOS = ("ce", "pg", "dg", "tpo", "grpo", "group_pg")
EVAL_EVERY = 200
SMOKE_EVAL_EVERY = 20


def build(updates: int, smoke: bool) -> Grid:
    """One variant, the six methods of Fig. 5a."""
    every = SMOKE_EVAL_EVERY if smoke else EVAL_EVERY
    runs = {}
    for algo in ALGOS:
        kwargs = dict(learning_rate=1e-3, batch_size=100, n_epochs=1,
                      group_mode="population" if algo == "ce" else "single")
        if algo in ("pg", "dg", "tpo", "group_pg"):
            kwargs["baseline"] = "expected"
        runs[algo] = RunSpec(algo, "TPO/MNISTBandit-v0", {}, "MlpPolicy", kwargs, updates,
                             recorder="mnist", recorder_kwargs={"eval_every": every, "mechanism_algo": algo})
    return {"B100": runs}


MNIST = Experiment(
    name="mnist", paper="Fig. 5a/5b (Section 3.3)", full=Size(20, 10_000), smoke=Size(2, 100),
    build=build, metric="eval/error", threshold=0.05, log_panels=(True,),
    notes="greedy test error every 200 steps (x = label of the evaluation, spec 11.8).",
)
