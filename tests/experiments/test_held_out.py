"""The language-model experiments' held-out evaluations (``experiments.held_out``) on hand-made seeds."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.held_out import (
    HELD_OUT,
    SHORTCUT,
    WITHOUT_SIGNAL,
    held_out,
    held_out_rows,
    native_pairwise,
)
from experiments.runs import Runs


def _cell(seeds: int, first: float, last: float) -> Runs:
    """``seeds`` seeds evaluated at updates 0, 10 and 20: every held-out value goes first -> (middle) ->
    last + 0.1 * seed; the shortcut's errors are 0.9 and 0.8."""
    offsets = 0.1 * np.arange(seeds)[:, None]
    curve = np.array([[first, (first + last) / 2, last]]) + offsets
    arrays = {key: curve.copy() for key, _ in HELD_OUT}
    arrays["eval/x"] = np.tile([0.0, 10.0, 20.0], (seeds, 1))
    arrays["eval/shortcut_error"] = np.full((seeds, 3), 0.9)
    arrays["eval/shortcut_native_error"] = np.full((seeds, 3), 0.8)
    arrays[WITHOUT_SIGNAL] = np.tile(np.repeat([0.1, 0.5, 0.9], 10), (seeds, 1))  # 30 updates
    return Runs(list(range(seeds)), arrays)


def test_rows_hold_the_seed_means_before_and_after_and_the_shortcut():
    runs = {"task": {"tpo": _cell(3, 0.9, 0.2), "grpo": _cell(2, 0.9, 0.5)}}
    rows = held_out_rows(runs, [("task", "tpo"), ("task", "grpo")])
    assert [r["algo"] for r in rows] == ["tpo", "grpo"]
    tpo, grpo = rows
    assert tpo["seeds"] == 3 and tpo["x"] == [0.0, 20.0]
    for key, _ in HELD_OUT:
        assert tpo[key] == pytest.approx([1.0, 0.3])  # seed offsets 0, 0.1, 0.2 average to 0.1
        assert grpo[key] == pytest.approx([0.95, 0.55])
    assert (tpo["eval/shortcut_error"], tpo["eval/shortcut_native_error"]) == pytest.approx((0.9, 0.8))
    assert tpo[WITHOUT_SIGNAL] == pytest.approx([0.1, 0.9])  # the first and the last 10 updates


def test_native_pairwise_is_tpo_minus_each_method_of_the_final_native_error():
    runs = {"task": {"tpo": _cell(3, 0.9, 0.2), "grpo": _cell(2, 0.9, 0.5)}}
    (pair,) = native_pairwise(runs, [("task", "tpo"), ("task", "grpo")])
    assert pair["algo"] == "grpo" and pair["seeds"] == [3, 2]
    assert pair["difference"] == pytest.approx(0.3 - 0.55)  # means of (0.2, 0.3, 0.4) and (0.5, 0.6)
    low, high = pair["ci"]
    assert low <= pair["difference"] <= high < 0
    assert pair["lower"] == 1.0  # every TPO final is below every GRPO final


def test_table_and_cells_without_evaluations():
    runs = {"task": {"tpo": _cell(1, 0.9, 0.2), "grpo": _cell(1, 0.8, 0.4)}}
    text = held_out(runs, [("task", "tpo"), ("task", "grpo")])
    lines = text.splitlines()
    assert lines[0].startswith("| variant | method | seeds | updates | exact error (before → after) |")
    assert lines[2] == ("| task | tpo | 1 | 0 → 20 | " + "0.900 → 0.200 | " * len(HELD_OUT)
                        + f"{0.9:.3f} / {0.8:.3f} | 0.100 → 0.900 |")
    assert "| task | tpo − grpo | 1 / 1 | -20.00 [-20.00, -20.00] | 1 | 1.00 |" in lines
    bare = {"task": {"tpo": Runs([0], {"eval/error": np.zeros((1, 3)), "eval/x": np.zeros((1, 3))})}}
    assert held_out(bare, [("task", "tpo")]) is None
    untrained = _cell(1, 0.9, 0.2)
    del untrained.arrays[WITHOUT_SIGNAL]
    assert held_out({"task": {"tpo": untrained}}, [("task", "tpo")]).splitlines()[2].endswith("| – |")
    assert {key for key, _ in SHORTCUT} == {"eval/shortcut_error", "eval/shortcut_native_error"}


def test_figure_draws_the_best_constant_on_the_error_panels():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.figures import _shortcut_line

    fig, (native, sampled) = plt.subplots(1, 2)
    cell = {"tpo": _cell(2, 0.9, 0.2)}
    _shortcut_line(native, cell, "eval/native_error")
    _shortcut_line(sampled, cell, "eval/sampled_native_error")
    (line,) = native.get_lines()
    assert line.get_ydata()[0] == pytest.approx(0.8) and line.get_label() == "shortcut"
    assert sampled.get_lines() == []
    plt.close(fig)


def _agent_cell(seeds: int) -> Runs:
    """An agent's evaluations (``AgentEvalRecorder``) at updates 0 and 10: errors 1 -> 0.5, 5 -> 3 turns."""
    values = {"eval/error": [1.0, 0.5], "eval/greedy_error": [1.0, 0.25], "eval/turns": [5.0, 3.0],
              "eval/format_rate": [0.2, 1.0], "eval/shortcut_error": [0.75, 0.75], "eval/x": [0.0, 10.0]}
    arrays = {key: np.tile(value, (seeds, 1)) for key, value in values.items()}
    return Runs(list(range(seeds)), arrays)


def test_an_agent_s_evaluations_get_their_own_columns_and_the_env_s_shortcut():
    runs = {"guess": {"tpo": _agent_cell(2), "grpo": _agent_cell(3)}}
    order = [("guess", "tpo"), ("guess", "grpo")]
    tpo, _ = held_out_rows(runs, order)
    assert tpo["evaluations"] == "agents" and tpo["x"] == [0.0, 10.0] and tpo["eval/shortcut_error"] == 0.75
    assert tpo["eval/turns"] == [5.0, 3.0] and native_pairwise(runs, order) == []
    lines = held_out(runs, order).splitlines()
    assert lines[0] == ("| variant | method | seeds | updates | sampled error (before → after) | "
                        "greedy error (before → after) | turns (before → after) | turns in format (before → "
                        "after) | the env's shortcut: error | training groups without signal (first → last "
                        "10 updates) |")
    assert lines[2] == ("| guess | tpo | 2 | 0 → 10 | 1.000 → 0.500 | 1.000 → 0.250 | 5.000 → 3.000 | "
                        "0.200 → 1.000 | 0.750 | – |")
    assert len(lines) == 4  # no native pairwise table for agents
