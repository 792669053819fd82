"""The learning-rate choice of the grid experiments (``experiments.lr_choice``) on hand-made seeds."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.definitions.llm import rate_label
from experiments.lr_choice import LAST_EVALUATIONS, chosen_rates, grid_rows, grid_table, selection_error
from experiments.runs import Runs

RATES = (3e-6, 1e-5, 3e-5)
TASKS = {"exact/add": ("add", "binary"), "partial/spell": ("spell", "native")}


def _cell(exact: list[float], native: list[float], seeds: int = 1) -> Runs:
    """Evaluations at updates 0, 10, ..., 10 * (len - 1) of the exact and native errors (each seed the
    same curve + 0.01 * seed)."""
    offsets = 0.01 * np.arange(seeds)[:, None]
    n = len(exact)
    return Runs(list(range(seeds)), {"eval/x": np.tile(10.0 * np.arange(n), (seeds, 1)),
                                     "eval/error": np.array([exact]) + offsets,
                                     "eval/native_error": np.array([native]) + offsets})


def test_selection_error_is_the_mean_of_the_last_evaluations_and_seeds() -> None:
    cell = _cell([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [0.5, 0.5, 0.5, 0.3, 0.2, 0.1], seeds=2)
    assert LAST_EVALUATIONS == 3
    assert selection_error(cell, "binary") == pytest.approx((0.6 + 0.5 + 0.4) / 3 + 0.005)
    assert selection_error(cell, "native") == pytest.approx((0.3 + 0.2 + 0.1) / 3 + 0.005)


def test_rows_choose_the_lowest_error_of_the_trained_reward() -> None:
    flat = [0.9] * 6
    runs = {
        # binary task: the exact error decides (3e-5 lowest), not the native one
        "exact/add/lr3e-06": {"tpo": _cell(flat, [0.1] * 6), "grpo": _cell(flat, flat)},
        "exact/add/lr1e-05": {"tpo": _cell([0.9, 0.9, 0.9, 0.5, 0.5, 0.5], flat), "grpo": _cell(flat, flat)},
        "exact/add/lr3e-05": {"tpo": _cell([0.9, 0.9, 0.9, 0.4, 0.4, 0.4], flat), "grpo": _cell(flat, flat)},
        # native task: the native error decides; 1e-5 not run yet for grpo
        "partial/spell/lr3e-06": {"tpo": _cell(flat, [0.2] * 6), "grpo": _cell(flat, [0.3] * 6)},
        "partial/spell/lr1e-05": {"tpo": _cell([0.0] * 6, [0.6] * 6)},
        "partial/spell/lr3e-05": {"tpo": _cell(flat, [0.7] * 6), "grpo": _cell(flat, [0.1] * 6)},
    }
    rows = grid_rows(runs, TASKS, RATES, rate_label)
    by_cell = {(row["variant"], row["algo"]): row for row in rows}
    assert by_cell[("exact/add", "tpo")]["chosen"] == 3e-5
    assert by_cell[("exact/add", "grpo")]["chosen"] == 3e-6  # a tie goes to the smaller rate
    assert by_cell[("partial/spell", "tpo")]["chosen"] == 3e-6
    assert by_cell[("partial/spell", "grpo")]["chosen"] is None
    assert by_cell[("partial/spell", "grpo")]["scores"][1e-5] is None
    assert by_cell[("exact/add", "tpo")]["updates"] == 50 and by_cell[("exact/add", "tpo")]["seeds"] == 1
    assert chosen_rates(rows) == {"exact/add": {"grpo": 3e-6, "tpo": 3e-5}, "partial/spell": {"tpo": 3e-6}}
    lines = grid_table(rows, RATES).splitlines()
    assert lines[0] == ("| task | method | error of | seeds x updates | lr 3e-06 | lr 1e-05 | "
                        "lr 3e-05 | chosen |")
    assert "| exact/add | tpo | the binary reward | 1 x 50 | 0.900 | 0.500 | 0.400 | 3e-05 |" in lines
    assert "| partial/spell | grpo | partial credit | 1 x 50 | 0.300 | – | 0.100 | – |" in lines


def test_no_rows_without_grid_runs() -> None:
    assert grid_rows({"other": {"tpo": _cell([0.5] * 6, [0.5] * 6)}}, TASKS, RATES, rate_label) == []


def test_each_grid_experiment_tables_its_own_tasks() -> None:
    """``lr_grid`` reads the experiment's ``rate_grid``: the agents grid's GuessNumber cells give its table
    and legend, the language-model grid's tasks give none of them, an experiment without a grid None."""
    from experiments.definitions import get_experiment
    from experiments.lr_choice import lr_grid

    curve = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
    runs = {f"guess_number/{rate_label(rate)}": {"tpo": _cell(curve, curve), "grpo": _cell(curve, curve)}
            for rate in RATES}
    table = lr_grid(get_experiment("agents_grid"), runs)
    assert "| guess_number | tpo | the binary reward | 1 x 50 | 0.600 | 0.600 | 0.600 | 3e-06 |" in table
    assert "2 sampled conversations on each of the env's tasks" in table
    assert lr_grid(get_experiment("llm_grid"), runs) is None
    assert lr_grid(get_experiment("terminal"), runs) is None
