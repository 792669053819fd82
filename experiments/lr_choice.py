"""The learning rate of each method on each task of a grid experiment (``llm_grid``, ``agents_grid``).

A grid experiment (``Experiment.rate_grid``, :class:`experiments.core.RateGrid`) trains TPO and GRPO on
every task at every rate and evaluates them on held-out items every 10 updates: ``llm_grid`` the greedy
answers to validation prompts (no question of the train split, none of the test split), ``agents_grid``
conversations on the env's fixed tasks. The score of a rate, :func:`selection_error`, is the validation
error of the reward the task trains with (exact match or success for ``binary``, reasoning-gym's partial
credit for ``native``) averaged over the last :data:`LAST_EVALUATIONS` evaluations and the seeds (the mean
of the last three smooths one evaluation's noise). :func:`chosen_rates` takes, per task and method, the
rate of the lowest score (a tie: the smaller rate); :func:`grid_table` prints every score with the choice
(``python -m experiments.report <grid>`` and ``experiments.docs_tables``' ``lr-grid:<grid>``).
"""

from __future__ import annotations

from typing import Any

from experiments.core import Experiment
from experiments.runs import Runs

__all__ = ["ERROR_OF_REWARD", "LAST_EVALUATIONS", "chosen_rates", "grid_rows", "grid_table", "lr_grid",
           "selection_error"]

LAST_EVALUATIONS = 3
"""Evaluations averaged at the end of a grid run (updates 30, 40 and 50 of 50)."""
ERROR_OF_REWARD = {"binary": "eval/error", "native": "eval/native_error"}
"""The validation error a rate is chosen on, by the reward the task trains with."""


def selection_error(cell: Runs, reward: str) -> float:
    """The mean over seeds and the last :data:`LAST_EVALUATIONS` evaluations of the task's validation
    error (:data:`ERROR_OF_REWARD`)."""
    values = cell.arrays[ERROR_OF_REWARD[reward]]
    return float(values[:, -LAST_EVALUATIONS:].mean())


def grid_rows(runs: dict[str, dict[str, Runs]], tasks: dict[str, tuple[str, str]],
              rates: tuple[float, ...], label: Any) -> list[dict[str, Any]]:
    """One row per (task variant, method) with any committed rate: ``scores`` (rate -> selection error,
    None where the rate has not run), ``updates`` and ``seeds`` (of the first cell that ran) and ``chosen``
    (the rate of the lowest score once every rate has run, else None). ``label(rate)`` is the variant
    suffix of a rate (``experiments.definitions.llm.rate_label``)."""
    rows = []
    for variant, (_, reward) in tasks.items():
        methods = sorted({algo for rate in rates for algo in runs.get(f"{variant}/{label(rate)}", {})})
        for algo in methods:
            cells = {rate: runs.get(f"{variant}/{label(rate)}", {}).get(algo) for rate in rates}
            done = {rate: cell for rate, cell in cells.items() if cell is not None}
            scores = {rate: selection_error(cell, reward) if cell is not None else None
                      for rate, cell in cells.items()}
            first = next(iter(done.values()))
            chosen = (min(rates, key=lambda rate: (scores[rate], rate)) if len(done) == len(rates) else None)
            rows.append({"variant": variant, "algo": algo, "reward": reward, "scores": scores,
                         "seeds": len(first.seeds), "updates": int(first.x(ERROR_OF_REWARD[reward])[-1]),
                         "chosen": chosen})
    return rows


def chosen_rates(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``variant -> method -> chosen rate`` of the rows whose every rate has run."""
    result: dict[str, dict[str, float]] = {}
    for row in rows:
        if row["chosen"] is not None:
            result.setdefault(row["variant"], {})[row["algo"]] = row["chosen"]
    return result


def grid_table(rows: list[dict[str, Any]], rates: tuple[float, ...]) -> str:
    """``grid_rows`` as Markdown: the selection error of each rate (``–`` not yet run) and the choice."""
    head = ["task", "method", "error of", "seeds x updates",
            *(f"lr {rate:g}" for rate in rates), "chosen"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        error = "the binary reward" if row["reward"] == "binary" else "partial credit"
        cells = [row["variant"], row["algo"], error, f"{row['seeds']} x {row['updates']}",
                 *("–" if row["scores"][rate] is None else f"{row['scores'][rate]:.3f}" for rate in rates),
                 f"{row['chosen']:g}" if row["chosen"] is not None else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lr_grid(experiment: Experiment, runs: dict[str, dict[str, Runs]]) -> str | None:
    """The table of a grid experiment's committed seeds (its :attr:`~experiments.core.Experiment.rate_grid`),
    None for another experiment or where none has run."""
    grid = experiment.rate_grid
    if grid is None:
        return None
    rows = grid_rows(runs, grid.tasks, grid.rates, grid.label)
    if not rows:
        return None
    return grid_table(rows, grid.rates) + "\n\n" + _legend(grid.error)


def _legend(error: str) -> str:
    return (f"Error: {error}, averaged over the last {LAST_EVALUATIONS} evaluations (every 10 "
            "updates) and the seeds; chosen: the rate of the lowest (a tie: the smaller rate), once every "
            "rate has run.")
