"""One setting against another, method by method (``experiments.settings``) on hand-made seeds."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.definitions import get_experiment
from experiments.runs import Runs
from experiments.settings import SETTINGS_LEGEND, batches_without_signal, setting_differences, settings_table

TERMINAL = get_experiment("terminal")


def _cell(algo: str, finals: list[float]) -> Runs:
    """One seed per final; each seed's batch errors are 1, 1, 0.5 then its final."""
    curves = np.array([[1.0, 1.0, 0.5, f] for f in finals], dtype=np.float32)
    meta = [{"spec": {"algo": algo, "kwargs": {"group_mode": "sequence"}}}] * len(finals)
    return Runs(list(range(len(finals))), {"update/error": curves}, meta)


def test_batches_without_signal_count_errors_of_exactly_zero_or_one():
    curves = np.array([[1.0, 0.999, 0.0, 1.0], [0.5, 0.0, 0.001, 0.2]], dtype=np.float32)
    assert batches_without_signal(curves).tolist() == [3, 1]


def test_each_method_of_the_variant_against_the_same_method_of_the_baseline():
    runs = {"prompts/H10": {"ppo": _cell("ppo", [1.0]), "tpo": _cell("tpo", [0.2, 0.4]),
                            "grpo": _cell("grpo", [0.0, 1.0])},
            "skip/H10": {"tpo": _cell("tpo", [0.1, 0.1, 0.1]), "grpo": _cell("grpo", [0.5, 0.5])}}
    order = [("prompts/H10", a) for a in ("ppo", "tpo", "grpo")] + [("skip/H10", a) for a in ("tpo", "grpo")]
    tpo, grpo = setting_differences(TERMINAL, runs, order)
    assert (tpo["variant"], tpo["baseline"], tpo["algo"], tpo["seeds"]) == ("skip/H10", "prompts/H10", "tpo",
                                                                           [3, 2])
    assert tpo["final_difference"] == pytest.approx(0.1 - 0.3)
    assert tpo["final_lower"] == 1.0 and tpo["final_difference_ci"][1] < 0
    assert grpo["final_difference"] == pytest.approx(0.0) and grpo["final_lower"] == 0.5
    # seeds of [1, 1, 0.5, final]: 2 batches without signal, 3 where the final is 0 or 1
    assert tpo["without_signal"] == [2.0, 2.0] and grpo["without_signal"] == [2.0, 3.0]
    assert setting_differences(TERMINAL, {"prompts/H10": runs["prompts/H10"]}, order[:3]) == []


def test_table():
    runs = {"prompts/H10": {"tpo": _cell("tpo", [0.2])}, "skip/H10": {"tpo": _cell("tpo", [0.1])}}
    order = [("prompts/H10", "tpo"), ("skip/H10", "tpo")]
    lines = settings_table(setting_differences(TERMINAL, runs, order)).splitlines()
    assert lines[0].startswith("| variant − baseline | method | seeds | final: difference (pp) [95%] |")
    assert lines[2] == ("| skip/H10 − prompts/H10 | tpo (sequence) | 1 / 1 | -10.00 [-10.00, -10.00] | 1 | "
                        "1.00 | 2.0 / 2.0 |")
    assert lines[-1] == SETTINGS_LEGEND
