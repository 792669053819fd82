"""How the seeds of a cell end (``experiments.outcomes``): counts on hand-made curves, and the table."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.definitions import get_experiment
from experiments.outcomes import outcomes_table, seed_outcomes
from experiments.runs import Runs

TERMINAL = get_experiment("terminal")  # update/error, threshold 5%


def _runs(curves: list[list[float]]) -> dict[str, dict[str, Runs]]:
    meta = {"spec": {"algo": "tpo", "kwargs": {"group_mode": "sequence"}}}
    arrays = {"update/error": np.array(curves, dtype=np.float32)}
    return {"prompts/H10": {"tpo": Runs(list(range(len(curves))), arrays, [meta] * len(curves))}}


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
