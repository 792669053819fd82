"""How the seeds of a cell end (``experiments.outcomes``): counts on hand-made curves, and the table."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.definitions import get_experiment
from experiments.metrics import fisher_exact_test
from experiments.outcomes import outcome_differences, outcome_differences_table, outcomes_table, seed_outcomes
from experiments.runs import Runs

TERMINAL = get_experiment("terminal")  # update/error, threshold 5%


def _cell(algo: str, curves: list[list[float]]) -> Runs:
    meta = {"spec": {"algo": algo, "kwargs": {"group_mode": "sequence"}}}
    arrays = {"update/error": np.array(curves, dtype=np.float32)}
    return Runs(list(range(len(curves))), arrays, [meta] * len(curves))


def _runs(curves: list[list[float]]) -> dict[str, dict[str, Runs]]:
    return {"prompts/H10": {"tpo": _cell("tpo", curves)}}


CURVES = [
    [0.9, 0.04, 0.0],   # crosses at 1, ends at exactly 0
    [0.9, 0.6, 0.03],   # crosses at 2, ends below
    [0.9, 0.01, 0.3],   # crosses at 1, ends at or above 5%
    [0.9, 0.2, 0.7],    # never below 5% (lowest 0.2), fails
    [0.95, 0.9, 0.99],  # never below 5% (lowest 0.9), fails
    [0.9, 0.05, 0.05],  # exactly at 5% is not below it: never crosses (lowest 0.05)
]


def test_counts_and_ranges_on_hand_made_seeds():
    (row,) = seed_outcomes(TERMINAL, _runs(CURVES), [("prompts/H10", "tpo")])
    assert row["label"] == "tpo (sequence)" and row["seeds"] == 6
    assert (row["ends_below"], row["crossed"], row["crossed_ended_above"]) == (2, 3, 1)
    assert (row["ends_at_zero"], row["failed"]) == (1, 2)
    assert row["first_crossing_range"] == [1.0, 2.0]
    assert row["never_lowest_range"] == pytest.approx([0.05, 0.9])


def test_the_counts_partition_the_seeds():
    """Every seed either ends below X or does not; of the latter, those that crossed earlier are counted
    apart: ends_below + crossed_ended_above + never = seeds, whatever the curves."""
    rng = np.random.default_rng(0)
    curves = rng.choice([0.0, 0.02, 0.049, 0.05, 0.3, 0.8], size=(40, 12)).tolist()
    (row,) = seed_outcomes(TERMINAL, _runs(curves), [("prompts/H10", "tpo")])
    never = row["seeds"] - row["crossed"]
    assert row["ends_below"] + row["crossed_ended_above"] + never == 40
    assert row["ends_below"] <= row["crossed"]


def test_no_crossing_or_no_failure_gives_an_empty_range_and_the_table_a_dash():
    rows = seed_outcomes(TERMINAL, _runs([[0.9, 0.0], [0.9, 0.01]]), [("prompts/H10", "tpo")])
    assert rows[0]["never_lowest_range"] is None and rows[0]["first_crossing_range"] == [1.0, 1.0]
    lines = outcomes_table(TERMINAL, rows).splitlines()
    assert lines[0].startswith("| variant | method | seeds | final below 5% | ever below 5% |")
    assert lines[2] == "| prompts/H10 | tpo (sequence) | 2 | 2 | 2 | 0 | 1 | 0 | 1 | — |"
    rows = seed_outcomes(TERMINAL, _runs(CURVES), [("prompts/H10", "tpo")])
    row = outcomes_table(TERMINAL, rows).splitlines()[2]
    assert row == "| prompts/H10 | tpo (sequence) | 6 | 2 | 3 | 1 | 1 | 2 | 1–2 | 5.0–90.0% |"


def test_an_experiment_without_a_threshold_is_refused():
    with pytest.raises(ValueError, match="'terminal' has none"):
        seed_outcomes(dataclasses.replace(TERMINAL, threshold=None), _runs(CURVES), [("prompts/H10", "tpo")])


def test_outcome_differences_give_both_counts_the_share_difference_its_interval_and_fishers_p():
    """TPO's 6 hand-made seeds (2 below 5% at the end, 1 at exactly 0, 2 failed) against 4 GRPO seeds
    (all at exactly 0 but one that fails): each end state's counts, share difference, interval around it
    and the Fisher p of the two counts; a variant without TPO gives no row."""
    grpo = [[0.9, 0.0], [0.9, 0.0], [0.9, 0.0], [0.9, 1.0]]
    runs = {"prompts/H10": {"tpo": _cell("tpo", CURVES), "grpo": _cell("grpo", grpo)},
            "prompts/H7": {"grpo": _cell("grpo", grpo)}}
    cells = [("prompts/H10", "tpo"), ("prompts/H10", "grpo"), ("prompts/H7", "grpo")]
    (row,) = outcome_differences(TERMINAL, runs, cells)
    assert (row["variant"], row["label"], row["seeds"]) == ("prompts/H10", "grpo (sequence)", [6, 4])
    expected = {"ends_below": (2, 3), "ends_at_zero": (1, 3), "failed": (2, 1)}
    for name, (a, b) in expected.items():
        end = row[name]
        assert end["counts"] == [a, b]
        assert end["difference"] == pytest.approx(a / 6 - b / 4)
        assert end["ci"][0] <= end["difference"] <= end["ci"][1]
        assert end["p"] == fisher_exact_test(a, 6, b, 4)
    line = outcome_differences_table(TERMINAL, [row]).splitlines()[2]
    assert line.startswith("| prompts/H10 | tpo (sequence) − grpo (sequence) | 6 / 4 | 2 vs 3: -41.7 pp [")
