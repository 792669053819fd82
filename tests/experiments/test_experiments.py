"""The experiment runner, the report's statistics and the recorders' metrics (experiments/)."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch as th

from experiments import jobs, zoo
from experiments.core import load_seed, save_seed, seed_path
from experiments.definitions import EXPERIMENTS, borrowed_cells, get_experiment
from experiments.metrics import (
    bootstrap_final,
    bootstrap_steps,
    final,
    mechanism,
    outside,
    steps_to,
)
from experiments.recorders import (
    CurveBuffer,
    CurveRecorder,
    MNISTRecorder,
    TabularMultiRecorder,
    TabularSingleRecorder,
)
from experiments.report import (
    DAGGER_LEGEND,
    Runs,
    default_figures,
    load_runs,
    markdown_table,
    report,
    summarize,
)
from experiments.report import _shared as report_shared
from experiments.report import main as report_main
from experiments.run import parse_args, seed_list
from experiments.runner import Task, build_model, plan, run_job, run_tasks
from experiments.runs import SharedFrom, share_grouped_runs
from tpo_agents.losses import cosine_misalignment
from tpo_agents.zoo.hyperparams import ZOO_KEYS, load_hyperparams
from tpo_agents.zoo.results import seed_mean_se

th.set_num_threads(1)

# ------------------------------------------------------------------------------- report statistics


def test_steps_to_is_first_x_with_seed_mean_strictly_below_threshold():
    curves = np.array([[1.0, 0.5, 0.25, 0.375, 0.0], [1.0, 0.0, 0.25, 0.125, 0.0]])
    # seed means 1, 0.25, 0.25, 0.25, 0: a mean equal to the threshold is not below it
    assert steps_to(curves, 0.25) == 4
    assert steps_to(curves, 0.3) == 1
    assert steps_to(curves, 0.25, x=np.array([0, 200, 400, 600, 800])) == 800  # MNIST labels
    assert steps_to(curves, 0.0) is None  # "never"


def test_final_is_seed_mean_of_last_point_with_population_se():
    curves = np.array([[0.9, 0.2, 0.011], [0.9, 0.1, 0.009], [0.9, 0.3, 0.013]])
    mean, se = final(curves)
    assert mean == pytest.approx(0.011)
    assert se == pytest.approx(np.std([0.011, 0.009, 0.013]) / math.sqrt(3))
    m, s = seed_mean_se(curves)
    assert m[1] == pytest.approx(0.2) and s[0] == 0.0


def test_bootstrap_of_identical_seeds_or_one_seed_is_the_point_estimate():
    curves = np.array([[0.5, 0.25, 0.125]] * 3)
    assert bootstrap_final(curves) == (0.125, 0.125) == (final(curves)[0],) * 2
    assert bootstrap_steps(curves, 0.3) == (1.0, 1.0)
    assert bootstrap_steps(curves, 0.3, x=np.array([0, 200, 400])) == (200.0, 200.0)
    assert bootstrap_final(np.array([[0.9, 0.3]])) == (0.3, 0.3)


def test_bootstrap_steps_counts_a_resample_that_never_reaches_the_threshold_as_infinity():
    curves = np.array([[1.0, 0.5, 0.0], [1.0, 1.0, 1.0]])  # seed mean 1, 0.75, 0.5: steps to 0.6 = 2
    # resamples {0, 0}: 1 (p = 1/4); {0, 1}: 2 (p = 1/2); {1, 1}: never (p = 1/4)
    assert steps_to(curves, 0.6) == 2
    assert bootstrap_steps(curves, 0.6) == (1.0, math.inf)
    assert bootstrap_steps(curves, 0.0) == (math.inf, math.inf)


def test_bootstrap_final_interval_contains_the_point_estimate_and_is_reproducible():
    curves = np.array([[0.5, 0.01], [0.5, 0.02], [0.5, 0.03], [0.5, 0.04]])
    low, high = bootstrap_final(curves)
    assert 0.01 <= low < final(curves)[0] < high <= 0.04
    assert bootstrap_final(curves) == (low, high)  # fixed default seed
    assert bootstrap_final(curves, level=0.5) != (low, high)
    wide = bootstrap_final(curves, rng=np.random.default_rng(1))
    assert wide[0] < final(curves)[0] < wide[1]


def test_outside_flags_only_a_number_beyond_the_interval():
    assert outside(0.5, (0.1, 0.4)) and outside(0.05, (0.1, 0.4))
    assert not outside(0.4, (0.1, 0.4)) and not outside(0.2, (0.1, 0.4))
    assert not outside(None, (0.1, 0.4)) and not outside(math.nan, (0.1, 0.4))
    assert outside(math.inf, (55.0, 70.0)) and not outside(math.inf, (55.0, math.inf))  # paper "never"


def _eta1_runs(drop: int) -> dict[str, dict[str, Runs]]:
    """eta_sweep's (eta1, tpo) cell, paper final 0.7% and steps to 1% 96: 3 seeds dropping at ``drop``."""
    curves = np.array([[0.02] * drop + [final] * (120 - drop) for final in (0.006, 0.007, 0.008)])
    meta = [{"spec": {"algo": "tpo", "kwargs": {}, "n_updates": 120}, "wall_s": 1.0}] * 3
    return {"eta1": {"tpo": Runs([0, 1, 2], {"update/error": curves}, meta)}}


def test_table_shows_bootstrap_intervals_and_daggers_paper_values_outside_them():
    experiment = get_experiment("eta_sweep")
    inside = summarize(experiment, _eta1_runs(96))
    assert inside[0]["final_ci"] == pytest.approx([0.006, 0.008]) and inside[0]["steps_ci"] == [96, 96]
    table = markdown_table(experiment, inside)
    assert "| 0.70% ± 0.05% [0.60, 0.80] | 0.70% |" in table and "| 96 [96, 96] | 96 |" in table
    assert "†" not in table
    late = summarize(experiment, _eta1_runs(100))
    assert late[0]["steps_outside"] and not late[0]["final_outside"]
    table = markdown_table(experiment, late)
    assert "| 100 [100, 100] | 96 † |" in table and table.endswith("\n\n" + DAGGER_LEGEND)
    json.dumps(late, allow_nan=False)  # the summary JSON stays strict JSON


def misalignment(g1, g2) -> float:
    return float(cosine_misalignment(th.as_tensor(g1, dtype=th.float64), th.as_tensor(g2, dtype=th.float64)))


def test_misalignment_matches_the_reference_formula():
    assert misalignment(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(1 - 1 / math.sqrt(2))
    assert misalignment(np.array([[2.0, 0.0]]), np.array([3.0, 0.0])) == pytest.approx(0.0, abs=1e-12)
    assert misalignment(np.zeros(3), np.ones(3)) == pytest.approx(1.0)


def test_mechanism_surplus_vanishes_for_one_vs_rest_methods_and_symmetric_errors():
    probs = np.array([[0.05] + [0.95 / 9] * 9,  # symmetric wrong classes: concentration 1/9
                      [0.1, 0.8] + [0.1 / 8] * 8])  # one confusing class: concentration 0.89
    labels = np.array([0, 0])
    for algo in ("pg", "group_pg"):
        surplus = np.nan_to_num(mechanism(probs, labels, algo)["surplus"])
        assert surplus == pytest.approx(np.zeros(4), abs=1e-12)
    tpo = mechanism(probs, labels, "tpo")
    assert tpo["counts"].tolist() == [1, 0, 0, 1]
    assert tpo["surplus"][0] == pytest.approx(0.0, abs=1e-12)  # symmetric: exact = scalar surrogate
    assert tpo["surplus"][3] > 0.01  # concentrated error mass: TPO's class-specific update helps
    assert mechanism(probs, labels, "dg")["surplus"][0] == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(mechanism(probs, labels, "grpo")["surplus"]).all()
    assert mechanism(probs[:1] * 0 + np.eye(10)[0], labels[:1], "tpo")["counts"].sum() == 0  # correct


# ------------------------------------------------------------------------------- recorders


def _learn(model, recorder, n_updates):
    model.learn(n_iterations=n_updates, callback=recorder, log_interval=0)
    assert recorder.updates_done == n_updates
    return recorder.arrays()


def test_tabular_multi_step_matches_the_normalised_step_by_hand():
    spec = get_experiment("tabular_multi").build(1, True)["N100_K10"]["pg"]
    spec = replace(spec, env_kwargs={"n_contexts": 3, "n_arms": 4})
    model = build_model(spec, seed=0)
    z = th.tensor([[0.0, 1.0, -1.0, 0.5], [2.0, 0.0, 0.0, 0.0], [-1.0, 0.3, 0.2, 0.1]])
    with th.no_grad():
        model.policy.logits.copy_(z)
    arrays = _learn(model, TabularMultiRecorder(), 1)
    pi = th.softmax(z.double(), -1).numpy()
    v = np.eye(4)[[0, 0, 0]] - pi
    g = pi[:, :1] * v  # PG's exact ascent direction p_n (e_0 - pi_n)
    z_after = z.double().numpy() + 0.1 * g / np.sqrt((g**2).sum())
    pi_after = np.exp(z_after) / np.exp(z_after).sum(1, keepdims=True)
    assert arrays["update/error"][0] == pytest.approx(1 - pi_after[:, 0].mean(), abs=1e-6)
    expected = 1 - (g * v).sum() / np.sqrt((g**2).sum() * (v**2).sum())
    assert arrays["update/misalignment"][0] == pytest.approx(expected, abs=1e-5)
    assert not [key for key in arrays if "rollout/" in key or "batch_error" in key]  # none computed


def test_tabular_multi_population_records_each_member_as_float64_would():
    """Several members (an action-major table): each member's error and misalignment, computed in
    float32 with float64 sums, equal the float64 formulas on the same tables, also where the step is
    nearly parallel to the CE direction (CE: misalignment ~1e-11, float32 round-off shows there)."""
    for algo, members in (("ce", 3), ("tpo", 2)):
        spec = get_experiment("tabular_multi").build(1, True)["N100_K10"][algo]
        spec = replace(spec, env_kwargs={"n_contexts": 20, "n_arms": 5})
        model = build_model(spec, seed=0, n_seeds=members)
        recorder = TabularMultiRecorder()
        tables: list[th.Tensor] = []
        snap = partial(_snapshot, model, tables)
        recorder.before_update = _wrap(recorder.before_update, snap)
        model.learn(n_iterations=3, callback=recorder, log_interval=0)
        snap()
        labels = th.tensor(model.vector_env.unwrapped.correct_arms)
        onehot = th.nn.functional.one_hot(labels, 5).double()
        for m, arrays in enumerate(recorder.member_arrays()):
            for t in range(3):
                before, after = tables[t][m], tables[t + 1][m]
                pi_after = th.softmax(after, -1)
                error = 1 - (pi_after * onehot).sum(-1).mean()
                assert arrays["update/error"][t] == pytest.approx(float(error), rel=1e-5)
                expected = misalignment(after - before, onehot - th.softmax(before, -1))
                assert arrays["update/misalignment"][t] == pytest.approx(expected, rel=1e-3, abs=1e-13)
        if algo == "ce":
            assert 0 < arrays["update/misalignment"].max() < 1e-9


def test_tabular_single_error_before_update_and_misalignment_of_the_step():
    spec = get_experiment("tabular_single").build(2, True)["K100"]["tpo"]
    model = build_model(spec, seed=3)
    recorder = TabularSingleRecorder()
    tables = []
    recorder.before_update = _wrap(recorder.before_update, lambda: tables.append(model.policy.logits.detach()
                                                                                 .double().clone()))
    arrays = _learn(model, recorder, 2)
    assert len(arrays["update/error"]) == 2
    assert arrays["update/error"][0] == pytest.approx(0.99)  # uniform over 100 arms, before the first update
    z0, z1 = tables[0][0].numpy(), tables[1][0].numpy()
    pi = np.full(100, 0.01)
    assert np.linalg.norm(z1 - z0) == pytest.approx(0.1, rel=1e-5)  # normalised step, alpha = 0.1
    oracle = 0.01 * (np.eye(100)[0] - pi)
    assert arrays["update/misalignment"][0] == pytest.approx(misalignment(z1 - z0, oracle))
    assert arrays["update/error"][1] == pytest.approx(1 - np.exp(z1[0]) / np.exp(z1).sum())


def _snapshot(model, tables):
    tables.append(model.policy.logits.detach().double().clone())


def _wrap(method, before):
    def wrapped(row):
        before()
        return method(row)

    return wrapped


def test_mnist_recorder_evaluates_every_k_updates_at_the_offset_label():
    spec = get_experiment("mnist").build(4, True)["B100"]["tpo"]
    model = build_model(spec, seed=0)
    arrays = _learn(model, MNISTRecorder(eval_every=2, mechanism_algo="tpo"), 4)
    assert arrays["eval/x"].tolist() == [0, 2]  # evaluations after 2 and 4 updates
    assert arrays["eval/error"].shape == (2,) and 0.5 < arrays["eval/error"][0] < 1
    assert arrays["eval/mechanism_surplus"].shape == (2, 4)
    assert arrays["eval/mechanism_counts"].sum(1) == pytest.approx(arrays["eval/error"] * 10_000)


# ------------------------------------------------------------------------------- runner and report


@pytest.mark.slow
def test_runner_writes_each_seed_resumes_and_reports(tmp_path, capsys):
    experiment = get_experiment("tabular_single")
    tasks = plan(experiment, tmp_path, smoke=True, n_seeds=2, updates=3, algorithms=["tpo", "pg"])
    assert len(tasks) == 4
    summary = run_tasks(tasks, n_jobs=2)
    assert summary["ran"] == 4 and not summary["failed"]
    path = seed_path(tmp_path, "tabular_single", "K100", "tpo", 1)
    arrays, meta = load_seed(path)
    assert arrays["update/error"].shape == (3,) and meta["seed"] == 1 and meta["spec"]["n_updates"] == 3
    stamp = os.stat(path).st_mtime_ns
    again = run_tasks(tasks, n_jobs=1)
    assert again["skipped"] == 4 and again["ran"] == 0 and os.stat(path).st_mtime_ns == stamp
    longer = plan(experiment, tmp_path, smoke=True, n_seeds=2, updates=4, algorithms=["tpo"])
    assert run_tasks(longer, n_jobs=1)["ran"] == 2  # other settings: not the same run, so it reruns

    stamp = os.stat("docs/figures/tabular_single.png").st_mtime_ns
    assert report_main(["tabular_single", "--out", str(tmp_path)]) == 0  # other runs: their own figures
    assert (tmp_path / "figures" / "tabular_single.png").exists()
    assert os.stat("docs/figures/tabular_single.png").st_mtime_ns == stamp
    assert default_figures("results/paper") == default_figures("results/smoke") == Path("docs/figures")

    runs = load_runs(tmp_path, "tabular_single")
    assert runs["K100"]["tpo"].arrays["update/error"].shape == (2, 4)
    rows = summarize(experiment, runs)
    assert [r["algo"] for r in rows] == ["pg", "tpo"]
    table = markdown_table(experiment, rows)
    assert "| K100 | tpo | 2 | 4 |" in table and "5.20e-05" in table
    text = report("tabular_single", tmp_path, tmp_path / "figs", smoke=True)
    assert (tmp_path / "figs" / "tabular_single_smoke.png").stat().st_size > 0
    assert "steps to 1%" in text


def test_plan_rejects_unknown_variants_and_algorithms(tmp_path):
    experiment = get_experiment("vocab_sweep")
    assert len(plan(experiment, tmp_path, n_seeds=1, variants=["V2"], algorithms=["tpo"])) == 1
    with pytest.raises(ValueError, match="V3"):
        plan(experiment, tmp_path, variants=["V3"])
    with pytest.raises(ValueError, match="tpo_token"):
        plan(experiment, tmp_path, algorithms=["tpo_token"])


def test_seeds_plans_only_the_seeds_it_names(tmp_path):
    """``--seeds 3,7-9`` plans seeds 3, 7, 8 and 9 of each run, also past a cell's default count (the
    ablations' 20), so that two cores can share one run's seeds; it is a one-line error with ``--n-seeds``
    or for a malformed seed or range."""
    assert seed_list("3,7-9") == [3, 7, 8, 9]
    assert seed_list(" 5 ,2,5, 0-1") == [0, 1, 2, 5]
    for bad, item in (("9-7", "9-7"), ("3,x", "x"), ("1,,2", ""), ("-1", "-1"), ("2-", "2-"), ("", "")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^'{item}' in '{bad}': give seeds >= 0"):
            seed_list(bad)
    experiment = get_experiment("ablations")
    tasks = plan(experiment, tmp_path, variants=["H10"], algorithms=["group_pg", "tpo_no_anchor"],
                 seeds=[19, 3, 25])
    assert [(t.seed, t.spec.algo) for t in tasks] == [(seed, algo) for seed in (3, 19, 25)
                                                      for algo in ("tpo_no_anchor", "group_pg")]
    assert Path(tasks[2].path).name == "seed_19.npz"
    with pytest.raises(ValueError, match="n_seeds"):
        plan(experiment, tmp_path, n_seeds=4, seeds=[3])
    with pytest.raises(ValueError, match="seeds"):
        plan(experiment, tmp_path, seeds=[])
    assert parse_args(["ablations", "--seeds", "12,17-19"]).seeds == [12, 17, 18, 19]
    with pytest.raises(SystemExit):
        parse_args(["ablations", "--seeds", "3", "--n-seeds", "4"])


def test_a_cell_with_more_seeds_runs_them_by_default(tmp_path):
    """terminal's prompts/H10 runs TPO and GRPO at 40 seeds (``more_seeds``), its other methods and every
    other cell the full 20; ``--n-seeds`` and the smoke size set every cell's."""
    experiment = get_experiment("terminal")
    assert experiment.seeds_of("prompts/H10", "tpo") == experiment.seeds_of("prompts/H10", "grpo") == 40
    assert experiment.seeds_of("prompts/H10", "ppo") == experiment.seeds_of("prompts/H7", "tpo") == 20
    seeds = {}
    for task in plan(experiment, tmp_path, variants=["prompts/H10", "prompts/H7"], algorithms=["tpo", "dg"]):
        seeds.setdefault((task.variant, task.spec.algo), []).append(task.seed)
    assert seeds == {("prompts/H10", "tpo"): list(range(40)), ("prompts/H10", "dg"): list(range(20)),
                     ("prompts/H7", "tpo"): list(range(20)), ("prompts/H7", "dg"): list(range(20))}
    assert {t.seed for t in plan(experiment, tmp_path, n_seeds=3, variants=["prompts/H10"])} == {0, 1, 2}
    assert {t.seed for t in plan(experiment, tmp_path, smoke=True, variants=["prompts/H7"])} == {0, 1}


def test_the_ablations_borrow_table_3s_runs_of_the_same_settings(tmp_path):
    """ablations' TPO, GRPO and GRPO (no KL) are terminal's prompt-matched runs (``cells_from``): equal
    specs at the full and the smoke size, planned into terminal's folder, and read from there by the
    report (seeds below the ablations' 20), marked as borrowed; its own methods stay its own."""
    ablations, terminal = get_experiment("ablations"), get_experiment("terminal")
    for smoke in (False, True):
        borrowed = borrowed_cells(ablations, smoke=smoke)
        horizons = (7,) if smoke else (7, 8, 10)
        assert set(borrowed) == {(f"H{H}", a) for H in horizons for a in ("tpo", "grpo", "grpo_no_kl")}
        assert all(cell == ("terminal", f"prompts/{variant}") for (variant, _), cell in borrowed.items())
    tasks = plan(ablations, tmp_path, n_seeds=1, variants=["H7"])
    owners = {t.spec.algo: (t.experiment, t.variant, Path(t.path).relative_to(tmp_path).parts[:3])
              for t in tasks}
    assert owners["tpo"] == ("terminal", "prompts/H7", ("terminal", "prompts", "H7"))
    assert owners["tpo_no_anchor"] == ("ablations", "H7", ("ablations", "H7", "tpo_no_anchor"))
    spec = terminal.build(2, True)["prompts/H7"]["tpo"]
    for seed in (0, 1, 25):  # seed 25: beyond the ablations' full 20
        save_seed(seed_path(tmp_path, "terminal", "prompts/H7", "tpo", seed),
                  {"update/error": np.full(2, seed)},
                  {"seed": seed, "fingerprint": "f", "spec": asdict(spec)})
    runs = load_runs(tmp_path, "ablations")
    assert runs["H7"]["tpo"].seeds == [0, 1]
    assert runs["H7"]["tpo"].shared_from == SharedFrom("prompts/H7", "terminal")
    assert runs["H7"]["tpo"].arrays["update/error"][:, 0].tolist() == [0, 1]
    assert set(runs) == {"H7"} and set(runs["H7"]) == {"tpo"}


def test_shown_cells_name_where_they_ran():
    """An interaction-matched cell shows its prompt-matched twin's grouped runs (same experiment); a borrowed
    cell names the experiment and variant it was read from."""
    twin = Runs([0], {"update/error": np.zeros((1, 2))})
    runs = {"prompts/H7": {"tpo": twin}, "interactions/H7": {}}
    share_grouped_runs(runs)
    shown = runs["interactions/H7"]["tpo"]
    assert shown.shared_from == SharedFrom("prompts/H7") and str(shown.shared_from) == "prompts/H7"
    assert report_shared(shown.shared_from) == " (= prompt-matched run)"
    borrowed = SharedFrom("prompts/H7", "terminal")
    assert str(borrowed) == "terminal prompts/H7" and report_shared(borrowed) == " (= `terminal prompts/H7`)"
    assert report_shared(None) == ""


def test_runner_trains_exactly_n_updates_with_learn_n_iterations(tmp_path, monkeypatch):
    spec = get_experiment("tabular_single").build(3, True)["K100"]["pg"]
    calls = []

    def spy(spec, seed, n_seeds=1, device="cpu"):
        model = build_model(spec, seed, n_seeds, device)
        learn, train = model.learn, model.train

        def recorded_learn(*args, **kwargs):
            calls.append((args, kwargs))
            return learn(*args, **kwargs)

        def counted_train(*args, **kwargs):
            calls.append("train")
            return train(*args, **kwargs)

        model.learn, model.train = recorded_learn, counted_train
        return model

    monkeypatch.setattr(jobs, "build_model", spy)
    path = tmp_path / "seed_0.npz"
    run_job((Task("tabular_single", "K100", 0, spec, str(path)),))
    (args, kwargs), *trained = calls
    assert args == () and kwargs["n_iterations"] == 3 and "total_timesteps" not in kwargs
    assert trained == ["train"] * 3
    assert load_seed(path)[0]["update/error"].shape == (3,)


def test_recorders_record_and_never_stop_training():
    spec = get_experiment("tabular_multi").build(1, True)["N100_K10"]["tpo"]
    spec = replace(spec, env_kwargs={"n_contexts": 3, "n_arms": 4})
    model = build_model(spec, seed=0)
    recorder = CurveRecorder()
    model.learn(n_iterations=5, callback=recorder, log_interval=0)
    assert recorder.updates_done == 5 and recorder.arrays()["update/error"].shape == (5,)


def test_a_row_holds_its_own_update_s_values_only():
    """What a mode logs after its update (the group softmax's effective size) lands in that update's row,
    not the next; a batch left untrained (no ``train/`` values logged) gets NaN, not the last update's."""
    from types import SimpleNamespace

    from stable_baselines3.common.logger import Logger

    logger = Logger(None, [])
    recorder = CurveRecorder()
    recorder.model = SimpleNamespace(logger=logger, n_seeds=1, member_rollout={})
    for error, trained in ((0.75, True), (0.5, False)):
        logger.record("rollout/task_error", error)
        recorder.on_rollout_end()
        if trained:
            logger.record("train/loss", 2.0)
            logger.record("rollout/effective_group_size", 3.0)
        recorder.on_rollout_start()
    arrays = recorder.arrays()
    assert arrays["update/error"].tolist() == [0.75, 0.5]
    assert arrays["update/train/loss"][0] == 2.0 and np.isnan(arrays["update/train/loss"][1])
    assert arrays["update/rollout/effective_group_size"][0] == 3.0
    assert np.isnan(arrays["update/rollout/effective_group_size"][1]) and not logger.name_to_value


def test_a_population_s_all_fail_is_left_out_where_its_update_logged_the_members_mean():
    """With several members the logger holds only the members' mean all-fail fraction: the row gets no
    ``all_fail`` then (not 1 - success), and one where the update logged none."""
    from types import SimpleNamespace

    from stable_baselines3.common.logger import Logger

    logger = Logger(None, [])
    recorder = CurveRecorder()
    recorder.model = SimpleNamespace(logger=logger, n_seeds=2,
                                     member_rollout={"task_error": [0.5, 0.25], "success_rate": [0.5, 0.75]})
    for logged in (True, False):
        recorder.on_rollout_end()
        if logged:
            logger.record("train/all_fail_frac", 0.4)
        recorder.on_rollout_start()
    all_fail = recorder.arrays(member=1)["update/all_fail"]
    assert np.isnan(all_fail[0]) and all_fail[1] == 0.25


def test_curve_buffer_grows_past_its_capacity_and_fills_missing_keys_with_nan(monkeypatch):
    monkeypatch.setattr(CurveBuffer, "INITIAL_ROWS", 2)
    buffer, rows = CurveBuffer(), []
    for t in range(7):  # "late" first appears at row 5, past two doublings of "error"'s column
        row = {"error": np.array([t, -t], dtype=np.float64)}
        if t >= 5:
            row["late"] = np.array([10.0 * t, 1.0])
        buffer.append(row, n_seeds=2)
        rows.append(row)
    arrays = buffer.arrays()
    assert len(buffer) == 7 and list(arrays) == ["error", "late"]
    assert arrays["error"].tolist() == [[t, -t] for t in range(7)]
    assert np.isnan(arrays["late"][:5]).all() and arrays["late"][5:].tolist() == [[50.0, 1.0], [60.0, 1.0]]
    buffer.append({"error": 0.5}, n_seeds=2)  # a scalar is every member's value
    assert buffer.arrays()["error"][7].tolist() == [0.5, 0.5] and np.isnan(buffer.arrays()["late"][7]).all()


# ------------------------------------------------------------------------------- hyperparameters


def test_token_run_kwargs_come_from_zoo_configs():
    run = get_experiment("vocab_sweep").build(10, False)["V2"]["tpo"]
    zoo_values = load_hyperparams([str(zoo.ZOO_CONFIGS)], "tpo", "TPO/TokenReversal-v0", verbose=0).values
    assert run.env_id == "TPO/TokenReversal-v0" and run.policy == zoo_values["policy"]
    for key in ("learning_rate", "n_epochs", "batch_size", "eta", "anchor"):
        assert run.kwargs[key] == zoo_values[key], key
    assert run.kwargs["group_mode"] == "token" and run.n_updates == 10


def test_a_zoo_config_change_reaches_the_experiments(tmp_path, monkeypatch):
    configs = tmp_path / "zoo_configs"
    shutil.copytree(zoo.ZOO_CONFIGS, configs)
    text = (configs / "tpo.yml").read_text()
    assert "  n_epochs: 4\n" in text
    (configs / "tpo.yml").write_text(text.replace("  n_epochs: 4\n", "  n_epochs: 3\n", 1))
    monkeypatch.setattr(zoo, "ZOO_CONFIGS", configs)
    assert get_experiment("vocab_sweep").build(10, False)["V2"]["tpo"].kwargs["n_epochs"] == 3
    assert get_experiment("epoch_sweep").build(10, False)["E8"]["tpo"].kwargs["n_epochs"] == 8  # swept


def test_no_zoo_only_key_reaches_a_constructor_and_ablations_hold():
    for experiment in EXPERIMENTS.values():
        for smoke in (False, True):
            for runs in experiment.build(7, smoke).values():
                for algo, spec in runs.items():
                    assert not set(spec.kwargs) & (ZOO_KEYS | {"policy"}), (experiment.name, algo)
                    assert spec.n_updates == 7
    tpo_1ep = get_experiment("diagnostics").build(3, True)["H8_K32"]["tpo_1ep"]
    assert tpo_1ep.kwargs["n_epochs"] == 1 and tpo_1ep.kwargs["batch_size"] == 32
    with pytest.raises(ValueError, match="n_epochs"):
        zoo.zoo_run("tpo_1ep", "TPO/TokenReversal-v0", 3, n_epochs=4)


def test_the_legend_names_every_method_of_the_used_panels_once(tmp_path):
    """A method drawn only on a later panel (``grpo_trl`` on one task of ``llm_study``) is in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.figures import save_panels

    fig, axes = plt.subplots(1, 3)
    axes[0].plot([0, 1], label="tpo")
    axes[1].plot([0, 1], label="tpo")
    axes[1].plot([1, 0], label="grpo_trl")
    save_panels(fig, axes, 2, "title", tmp_path / "f.png")
    assert [text.get_text() for text in axes[0].get_legend().get_texts()] == ["tpo", "grpo_trl"]
    assert (tmp_path / "f.png").stat().st_size > 0
