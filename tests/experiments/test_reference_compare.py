"""``experiments.reference_compare``: our per-seed curves against the reference's published ones."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from experiments import reference_compare as rc
from experiments.metrics import fisher_exact_test


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
    assert grpo["fisher_p"] == pytest.approx(fisher_exact_test(8, 10, 2, 10))
    assert rows["tpo"]["fisher_p"] == 1.0  # 10 of 10 on both sides
    assert rows["tpo"]["at"][300] == pytest.approx((0.02, 0.02))
    text = rc.table(list(rows.values()))
    assert "| rank-sum p | Fisher p (below 5%) |" in text
    assert f"| grpo | 10, 10 | 8, 2 | -60.0 [{100 * grpo['interval'][0]:+.1f}, " in text
    assert f"| {grpo['p']:.3g} | 0.023 |" in text


def tables_as_likely(successes_a: int, n_a: int, successes_b: int, n_b: int) -> float:
    """Fisher's two-sided p by listing every 2x2 table with the observed margins: x successes in the first
    row has probability C(K, x) C(N - K, n_a - x) / C(N, n_a); sum those no more likely than the observed."""
    total, successes = n_a + n_b, successes_a + successes_b
    probability = {x: math.comb(successes, x) * math.comb(total - successes, n_a - x) / math.comb(total, n_a)
                   for x in range(0, n_a + 1) if 0 <= successes - x <= n_b}
    assert sum(probability.values()) == pytest.approx(1.0)
    return sum(q for q in probability.values() if q <= probability[successes_a] * (1 + 1e-7))


def test_fisher_exact_test_of_13_of_20_against_7_of_20_lists_every_table():
    p = fisher_exact_test(13, 20, 7, 20)
    assert p == pytest.approx(tables_as_likely(13, 20, 7, 20), rel=1e-12)
    assert p == pytest.approx(0.112833775483096, rel=1e-12)
    assert fisher_exact_test(7, 20, 13, 20) == pytest.approx(p, rel=1e-12)  # the rows swapped


def test_fisher_exact_test_counts_every_way_to_place_the_successes():
    """4 of 6 against 1 of 6: each of the C(12, 5) placements of the 5 successes among 12 seeds equally
    likely; p = the share whose first-six count is as unlikely as 4 (4, 5, 1 or 0 of the 5)."""
    placements = list(itertools.combinations(range(12), 5))
    first = [sum(seed < 6 for seed in placement) for placement in placements]
    count = {x: first.count(x) for x in set(first)}
    as_unlikely = sum(c for x, c in count.items() if c <= count[4])
    assert fisher_exact_test(4, 6, 1, 6) == pytest.approx(as_unlikely / len(placements), rel=1e-12)
    assert as_unlikely / len(placements) == pytest.approx(0.2424242424, rel=1e-9)


def test_fisher_exact_test_with_a_zero_cell_and_with_equal_rates():
    # 20 of 20 against 14 of 20 (no failure in the first row): K = 34 successes, 6 failures; x = 20 and its
    # mirror x = 14 each have probability C(34, 14) / C(40, 20), every table between is more likely
    zero_cell = 2 * math.comb(34, 14) / math.comb(40, 20)
    assert fisher_exact_test(20, 20, 14, 20) == pytest.approx(zero_cell, rel=1e-12)
    assert zero_cell == pytest.approx(tables_as_likely(20, 20, 14, 20), rel=1e-12)
    assert zero_cell == pytest.approx(0.0201960202, rel=1e-9)
    # 0 of 10 against 5 of 10: x = 0 and x = 5 each C(15, 10) / C(20, 10)
    expected = 2 * math.comb(15, 10) / math.comb(20, 10)
    assert fisher_exact_test(0, 10, 5, 10) == pytest.approx(expected, rel=1e-12)
    for rates in [(7, 20, 7, 20), (0, 20, 0, 20), (20, 20, 20, 20), (3, 10, 6, 20)]:
        assert fisher_exact_test(*rates) == 1.0
    with pytest.raises(ValueError, match="successes must lie in 0..n"):
        fisher_exact_test(21, 20, 0, 20)


def test_fisher_exact_test_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for a, n_a, b, n_b in itertools.product(range(0, 9, 2), (8, 20), range(0, 13, 3), (12,)):
        if a <= n_a:
            expected = stats.fisher_exact([[a, n_a - a], [b, n_b - b]]).pvalue
            assert fisher_exact_test(a, n_a, b, n_b) == pytest.approx(expected, rel=1e-9), (a, n_a, b, n_b)


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
