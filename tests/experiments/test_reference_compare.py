"""``experiments.reference_compare``: our per-seed curves against the reference's published ones."""

from __future__ import annotations

import numpy as np
import pytest

from experiments import reference_compare as rc


def curves(finals: list[float], episodes: int = 400) -> np.ndarray:
    """Seeds whose error is 1 for the first half and ``final`` for the second."""
    out = np.ones((len(finals), episodes))
    out[:, episodes // 2:] = np.asarray(finals)[:, None]
    return out


def test_seed_finals_are_the_mean_of_the_last_window():
    c = np.tile(np.arange(200.0), (2, 1))
    assert rc.seed_finals(c, window=100).tolist() == [149.5, 149.5]


def test_compare_gives_the_difference_its_interval_and_the_rank_sum_p():
    ours = {"grpo": curves([0.0] * 8 + [1.0] * 2), "tpo": curves([0.02] * 10), "ppo": curves([1.0] * 3)}
    reference = {"grpo": curves([0.0] * 2 + [1.0] * 8), "tpo": curves([0.02] * 10)}
    rows = {r["method"]: r for r in rc.compare(ours, reference)}
    assert sorted(rows) == ["grpo", "tpo"]  # only methods in both
    grpo = rows["grpo"]
    assert grpo["below_5"] == (8, 2) and grpo["seeds"] == (10, 10)
    assert grpo["difference"] == pytest.approx(-0.6)
    assert grpo["interval"][0] <= -0.6 <= grpo["interval"][1] < 0
    assert grpo["p"] < 0.05 and rows["tpo"]["p"] == pytest.approx(1.0)
    assert rows["tpo"]["at"][300] == pytest.approx((0.02, 0.02))
    assert "| grpo | 10, 10 | 8, 2 | -60.0" in rc.table(list(rows.values()))


def test_read_reference_takes_the_errors_arrays(tmp_path):
    path = tmp_path / "ref.npz"
    np.savez(path, episodes=np.arange(4), tpo_errors=np.zeros((2, 4), np.float32), match="prompts")
    assert list(rc.read_reference(path)) == ["tpo"]


def test_bad_paths_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        rc.main(["--reference-npz", str(tmp_path / "missing.npz")])
    assert "missing.npz: no such file" in capsys.readouterr().err
    path = tmp_path / "ref.npz"
    np.savez(path, tpo_errors=np.zeros((2, 4)))
    with pytest.raises(SystemExit):
        rc.main(["--reference-npz", str(path), "--out", str(tmp_path)])
    assert "no terminal seeds for variant 'prompts/H10'" in capsys.readouterr().err
