"""Two methods compared over their independent seeds (experiments/metrics.py, experiments/pairwise.py,
experiments/report.py): the difference with its bootstrap interval and the exact rank-sum test."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from experiments.core import save_seed, seed_path
from experiments.definitions import get_experiment
from experiments.metrics import BOOTSTRAP_SEED, bootstrap_difference, difference, rank_sum_test
from experiments.pairwise import compare, findings, pairwise, pairwise_table
from experiments.report import _ordered, load_runs, report


def _brute_force_p(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided exact p by listing every split of the pooled midranks into len(a) and len(b)."""
    pooled = np.concatenate([a, b])
    ranks = np.array([(pooled < v).sum() + ((pooled == v).sum() + 1) / 2 for v in pooled])
    mean = len(a) * (len(pooled) + 1) / 2
    observed = abs(ranks[: len(a)].sum() - mean)
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    return sum(abs(ranks[list(split)].sum() - mean) >= observed - 1e-9 for split in splits) / len(splits)


@pytest.mark.parametrize(("n", "p"), [(3, 2 / 20), (5, 2 / 252), (20, 2 / math.comb(40, 20))])
def test_complete_separation_gives_two_of_all_the_splits(n, p):
    # only the observed split and its mirror image are as extreme: p = 2 / C(2n, n)
    low, high = np.arange(n, dtype=np.float64), np.arange(n, 2 * n, dtype=np.float64)
    u, exact = rank_sum_test(low, high)
    assert u == 0.0 and exact == pytest.approx(p, rel=1e-12)
    assert rank_sum_test(high, low) == (n * n, exact)


def test_rank_sum_test_matches_a_hand_computed_example_with_ties():
    # pooled 1, 2, 2, 2, 3: midranks 1, 3, 3, 3, 5; R_a = 7, U = 7 - 6 = 1, E[R_a] = 9, |7 - 9| = 2. Of the
    # 10 splits, a = {2, 2, 2} (R = 9, once) and a = {1, 2, 3} (R = 9, three times) deviate by 0, the
    # other 6 by 2: p = 6 / 10
    u, p = rank_sum_test(np.array([1.0, 2.0, 2.0]), np.array([2.0, 3.0]))
    assert (u, p) == (1.0, pytest.approx(0.6))
    assert p == _brute_force_p(np.array([1.0, 2.0, 2.0]), np.array([2.0, 3.0]))


@pytest.mark.parametrize("seed", range(8))
def test_rank_sum_test_agrees_with_every_split_listed(seed):
    rng = np.random.default_rng(seed)
    n_a, n_b = rng.integers(1, 8, size=2)
    a, b = (rng.integers(0, 3, size=n).astype(np.float64) for n in (n_a, n_b))  # values of {0, 1, 2}: ties
    p = rank_sum_test(a, b)[1]
    assert 0 < p <= 1 and p == pytest.approx(_brute_force_p(a, b), rel=1e-12)
    assert rank_sum_test(b, a)[1] == pytest.approx(p, rel=1e-12)


def test_rank_sum_test_is_one_for_identical_samples_and_symmetric():
    values = np.array([0.3, 0.1, 0.2, 0.2, 0.5])
    assert rank_sum_test(values, values)[1] == 1.0
    assert rank_sum_test(values, values[::-1])[1] == 1.0
    assert rank_sum_test(np.full(4, 0.7), np.full(3, 0.7)) == (6.0, 1.0)  # all tied
    assert rank_sum_test(np.array([0.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.5]))[1] == 1.0  # every split as far
    assert rank_sum_test(np.array([]), np.array([1.0, 2.0])) == (0.0, 1.0)
    a, b = np.random.default_rng(0).normal(size=(2, 9))
    u_ab, p_ab = rank_sum_test(a, b)
    u_ba, p_ba = rank_sum_test(b, a)
    assert p_ab == pytest.approx(p_ba) and u_ab + u_ba == 81


def test_rank_sum_test_ranks_never_after_every_crossing_and_ties_the_nevers():
    crossings = np.array([10.0, 20.0, 30.0])
    # the ranks of 10, 20, 30 against 40, 40, 40 (a group of 3 ties): U = 0
    assert rank_sum_test(crossings, np.full(3, math.inf)) == rank_sum_test(crossings, np.full(3, 40.0))
    assert rank_sum_test(crossings, np.full(3, math.inf)) == (0.0, pytest.approx(0.1))
    assert rank_sum_test(np.full(3, math.inf), np.full(3, math.inf))[1] == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_rank_sum_test_agrees_with_scipys_exact_test_without_ties(seed):
    stats = pytest.importorskip("scipy.stats")
    a, b = np.random.default_rng(seed).normal(size=(2, 12))
    b = b[: 7 + seed] + 0.5
    expected = stats.mannwhitneyu(a, b, method="exact")
    assert rank_sum_test(a, b) == pytest.approx((expected.statistic, expected.pvalue), rel=1e-9)


def test_a_known_difference_lies_in_its_interval_and_separated_samples_have_a_small_p():
    rng = np.random.default_rng(1)
    a, b = rng.normal(1.0, 0.1, size=30), rng.normal(0.0, 0.1, size=20)
    assert difference(a, b) == pytest.approx(a.mean() - b.mean())
    low, high = bootstrap_difference(a, b)
    assert low < difference(a, b) < high and low < 1.0 < high and high - low < 0.2
    result = compare(a, b)
    assert result["p"] < 1e-6 and result["lower"] == 0.0  # every a above every b


def test_samples_of_one_distribution_have_a_large_p_and_an_interval_around_zero():
    a, b = np.random.default_rng(2).uniform(size=(2, 20))
    result = compare(a, b)
    assert result["p"] > 0.05 and result["ci"][0] < 0 < result["ci"][1]  # no difference at the 5% level
    assert 0.3 < result["lower"] < 0.7


def test_bootstrap_difference_resamples_each_method_with_the_fixed_generator():
    a, b = np.random.default_rng(3).normal(size=(2, 8))
    seeded = bootstrap_difference(a, b, rng=np.random.default_rng(BOOTSTRAP_SEED))
    assert bootstrap_difference(a, b) == seeded  # reproducible: the report's generator seed
    assert bootstrap_difference(np.full(5, 0.5), np.full(3, 0.25)) == (0.25, 0.25)
    medians = bootstrap_difference(a, b, np.median)
    assert medians[0] <= difference(a, b, np.median) <= medians[1]


def test_a_median_difference_with_never_is_infinite_and_never_minus_never_is_zero():
    never = np.full(4, math.inf)
    assert difference(np.array([1.0, 2.0, 3.0]), never, np.median) == -math.inf
    assert difference(never, never, np.median) == 0.0
    assert bootstrap_difference(never, never, np.median) == (0.0, 0.0)
    assert bootstrap_difference(np.array([5.0, math.inf]), np.array([1.0]), np.median)[1] == math.inf


def _write(tmp_path, experiment, variant, algo, curves):
    """One seed file per curve of ``curves`` for (variant, algo), as ``experiments.run`` writes them."""
    spec = experiment.build(len(curves[0]), True)[variant][algo]
    for seed, curve in enumerate(curves):
        meta = {"experiment": experiment.name, "variant": variant, "seed": seed, "wall_s": 1.0,
                "spec": {"algo": algo, "n_updates": len(curve), "kwargs": {"group_mode": "token"}},
                "fingerprint": spec.fingerprint()}
        path = seed_path(tmp_path, experiment.name, variant, algo, seed)
        save_seed(path, {"update/error": np.array(curve)}, meta)


def test_report_compares_tpo_with_each_method_of_its_cell_and_keeps_the_rows(tmp_path):
    experiment = get_experiment("vocab_sweep")
    _write(tmp_path, experiment, "V2", "tpo", [[1.0, 0.0, 0.0], [1.0, 0.0, 0.02], [1.0, 0.5, 0.0]])
    _write(tmp_path, experiment, "V2", "grpo", [[1.0, 1.0, 0.5], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    _write(tmp_path, experiment, "V4", "grpo", [[1.0, 1.0, 1.0]])  # no TPO in V4: no pair
    runs = load_runs(tmp_path, "vocab_sweep")
    row, = pairwise(experiment, runs, _ordered(experiment, runs))
    assert (row["variant"], row["algo"], row["seeds"]) == ("V2", "grpo", [3, 3])
    assert row["final_difference"] == pytest.approx(0.02 / 3 - 1.5 / 3)
    assert row["final_difference_ci"][0] <= row["final_difference"] <= row["final_difference_ci"][1]
    # per-seed crossings of 1%: TPO 1, 1, 2 (median 1); GRPO never, never, 2 (median never): TPO lower in
    # 8 of the 9 pairs of seeds, tied in one
    assert row["seed_steps_difference"] == "-inf" and row["seed_steps_lower"] == pytest.approx(8.5 / 9)
    assert row["seed_steps_reached"] == [3, 1]
    text = report("vocab_sweep", tmp_path, tmp_path / "figs")
    assert "pairwise differences" in text and "| V2 | tpo (token) − grpo (token) | 3 / 3 |" in text
    summary = json.loads((tmp_path / "figs" / "vocab_sweep.json").read_text())
    assert summary["pairwise"] == [row]
    assert [r["algo"] for r in summary["rows"]] == ["tpo", "grpo", "grpo"]


def _row(variant, seeds, difference_, ci, p, lower=0.5, algo="grpo"):
    return {"variant": variant, "algo": algo, "label": algo, "reference": "tpo", "seeds": seeds,
            "final_difference": difference_, "final_difference_ci": ci, "final_p": p, "final_lower": lower}


def test_findings_say_no_result_before_the_full_seeds_and_read_the_interval_after():
    study = get_experiment("llm_study")
    full = study.seeds_of("exact/gcd_60", "tpo")
    rows = [_row("exact/gcd_60", [full, full - 1], -0.1, [-0.2, -0.05], 0.03),
            _row("exact/gcd_60", [full, full], -0.0625, [-0.125, -0.015625], 2 / 252),
            _row("exact/chain_sum_2x2", [full, full], 0.03125, [-0.0625, 0.09375], 0.5),
            _row("partial/spell_backward_3", [full, full], 0.05, [0.01, 0.09], 0.0159)]
    lines = findings(study, rows).splitlines()
    head = "- `exact/gcd_60`, tpo − grpo:"
    assert lines[0] == f"{head} no result yet ({full} and {full - 1} of {full} seeds committed)."
    assert lines[1] == (f"{head} final error -6.25 pp (95% interval [-12.50, -1.56], exact rank-sum "
                        f"p = 0.0079, {full} against {full} seeds): tpo lower.")
    assert lines[2].endswith(f"the interval holds zero: no difference shown at {full} against {full} seeds.")
    assert "+3.12 pp" in lines[2]
    assert lines[3].endswith("p = 0.016, 5 against 5 seeds): tpo higher.") and full == 5


def test_findings_read_the_interval_and_the_ranks_together_and_give_the_crossing_with_a_threshold():
    """terminal (threshold 5%): an interval below zero with p >= 0.05 is a lead in the mean only, p < 0.05
    with an interval holding zero a lead in the ranks only; the per-seed crossing gets its own verdict; a
    method run at fewer seeds than TPO in its cell (prompts/H10: TPO at 40, PPO at 20) is complete at its
    own number."""
    terminal = get_experiment("terminal")
    steps = {"seed_steps_difference": -254, "seed_steps_difference_ci": [-620.5, -34.5],
             "seed_steps_p": 0.001, "seed_steps_lower": 0.8}
    never = {"seed_steps_difference": "-inf", "seed_steps_difference_ci": ["-inf", 12],
             "seed_steps_p": 0.3, "seed_steps_lower": 0.6}
    rows = [_row("prompts/H7", [20, 20], -0.1532, [-0.3255, -0.0137], 0.6, 0.46) | steps,
            _row("prompts/H8", [20, 20], -0.02, [-0.1, 0.05], 0.01, 0.7) | never,
            _row("prompts/H10", [30, 20], -0.88, [-0.94, -0.81], 1e-9, 1.0, algo="ppo") | steps,
            _row("prompts/H10", [40, 20], -0.88, [-0.94, -0.81], 1e-9, 1.0, algo="ppo") | steps]
    lines = findings(terminal, rows).splitlines()
    assert lines[0] == ("- `prompts/H7`, tpo − grpo: final error -15.32 pp (95% interval [-32.55, -1.37], "
                        "exact rank-sum p = 0.6, 20 against 20 seeds): tpo lower in the mean; the ranks do "
                        "not separate the two; per-seed first crossing of 5% -254 steps (95% interval "
                        "[-620.5, -34.5], p = 0.001): tpo lower.")
    assert lines[1].endswith("p = 0.01, 20 against 20 seeds): the interval holds zero; the ranks put tpo "
                             "lower; per-seed first crossing of 5% -inf steps (95% interval [-inf, +12], "
                             "p = 0.3): the interval holds zero: no difference shown at 20 against 20 seeds.")
    assert lines[2] == "- `prompts/H10`, tpo − ppo: no result yet (30 of 40 and 20 of 20 seeds committed)."
    assert "40 against 20 seeds): tpo lower; per-seed" in lines[3]


def test_a_crossing_no_seed_of_either_reaches_is_said_so_not_given_as_a_zero_difference(tmp_path):
    """Neither method's seeds cross the threshold (vocab_sweep: 1%): never - never is a tie of +0 steps,
    which the table and the findings state as no crossing at all."""
    experiment = get_experiment("vocab_sweep")
    full = experiment.seeds_of("V2", "tpo")
    _write(tmp_path, experiment, "V2", "tpo", [[1.0, 0.5, 0.2]] * full)
    _write(tmp_path, experiment, "V2", "grpo", [[1.0, 0.6, 0.3]] * experiment.seeds_of("V2", "grpo"))
    runs = load_runs(tmp_path, "vocab_sweep")
    row, = pairwise(experiment, runs, _ordered(experiment, runs))
    assert row["seed_steps_reached"] == [0, 0] and row["seed_steps_difference"] == 0
    assert pairwise_table(experiment, [row]).splitlines()[2].endswith("| never − never | – | – |")
    assert findings(experiment, [row]).endswith("; no seed of either first crosses 1%.")
