"""Seeds as a batch dimension: the runner trains consecutive seeds of one run as one population and
writes the same seed files as one process per seed (experiments/runner.py, experiments/recorders.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, replace

import numpy as np
import pytest
import torch as th

from experiments import launchers
from experiments.core import RunSpec, load_seed, save_seed, seed_path
from experiments.definitions import get_experiment
from experiments.run import main
from experiments.runner import (
    Task,
    batching,
    estimate_cpu_s,
    plan,
    plan_jobs,
    recorded_cpu_s,
    run_tasks,
    unfinished,
)

th.set_num_threads(1)
PER_SEED_ONLY = ("update/train/", "update/all_fail")


def _tasks(experiment: str, variant: str, spec: RunSpec, out, seeds: range) -> list[Task]:
    return [Task(experiment, variant, s, spec, str(seed_path(out, experiment, variant, spec.algo, s)))
            for s in seeds]


def _spec(experiment: str, variant: str, algo: str, updates: int, **recorder_kwargs) -> RunSpec:
    spec = get_experiment(experiment).build(updates, True)[variant][algo]
    return replace(spec, recorder_kwargs={**spec.recorder_kwargs, **recorder_kwargs})


@pytest.mark.parametrize("experiment, variant, algo, updates, recorder_kwargs", [
    ("tabular_single", "K100", "pg", 3, {}),
    ("tabular_multi", "N100_K10", "tpo", 3, {}),
    ("mnist", "B100", "tpo", 4, {"eval_every": 2}),
])
def test_batched_seed_files_equal_the_per_seed_runners(tmp_path, experiment, variant, algo, updates,
                                                       recorder_kwargs):
    spec = _spec(experiment, variant, algo, updates, **recorder_kwargs)
    alone, together = (_tasks(experiment, variant, spec, tmp_path / name, range(2, 5)) for name in "ab")
    assert run_tasks(alone, members_per_process=1)["ran"] == 3
    assert run_tasks(together, members_per_process=3)["ran"] == 3
    for single, batched in zip(alone, together, strict=True):
        (a, meta_a), (b, meta_b) = load_seed(single.path), load_seed(batched.path)
        assert set(a) - set(b) <= {k for k in a if k.startswith(PER_SEED_ONLY)}  # train/: single runs only
        assert set(b) <= set(a) and "update/error" in b
        for key in b:
            assert b[key].shape == a[key].shape, key
            np.testing.assert_allclose(b[key], a[key], rtol=0, atol=1e-6, err_msg=key)
        assert meta_a["n_seeds"] == 1 and meta_b["n_seeds"] == 3 and meta_b["seed"] == batched.seed
        assert meta_b["wall_s"] == pytest.approx(meta_b["batch_wall_s"] / 3)
        assert meta_b["cpu_s"] == pytest.approx(meta_b["batch_cpu_s"] / 3) and meta_b["cpu_s"] > 0
        assert meta_b["fingerprint"] == meta_a["fingerprint"]
    if experiment == "mnist":
        assert b["eval/x"].tolist() == [0, 2] and b["eval/mechanism_surplus"].shape == (2, 4)
    if algo == "pg":  # not grouped: all_fail = 1 - success rate, per member
        np.testing.assert_allclose(b["update/all_fail"], 1 - b["update/rollout/success_rate"], rtol=1e-6)


def test_plan_jobs_chunks_consecutive_seeds_by_the_cap_seed_major(tmp_path):
    tasks = plan(get_experiment("tabular_single"), tmp_path, smoke=True, n_seeds=5, algorithms=["tpo", "pg"])
    jobs = plan_jobs(tasks, members_per_process=2)
    assert [(job[0].spec.algo, [t.seed for t in job]) for job in jobs] == [
        ("pg", [0, 1]), ("tpo", [0, 1]), ("pg", [2, 3]), ("tpo", [2, 3]), ("pg", [4]), ("tpo", [4])]
    assert [len(job) for job in plan_jobs(tasks, members_per_process=1)] == [1] * 10
    assert [len(job) for job in plan_jobs(tasks, members_per_process=100)] == [5, 5]
    # two processes: whole runs of tables (a population costs about one member), one for each process
    assert [len(job) for job in plan_jobs(tasks, members_per_process=100, n_jobs=2)] == [5, 5]


def test_two_processes_share_out_a_run_of_the_transformer_and_the_odd_run_of_a_table(tmp_path):
    def kinds(kind):
        return lambda specs: [kind] * len(specs)

    tasks = plan(get_experiment("tabular_multi"), tmp_path, smoke=True, n_seeds=5)  # five runs
    runs = [(job[0].spec.algo, [t.seed for t in job]) for job in plan_jobs(tasks, 100, kinds("whole"), 2)]
    # four whole runs, two for each process; the last run (the CE oracle) cut into two shares, last
    assert runs == [("pg", [0, 1, 2, 3, 4]), ("dg", [0, 1, 2, 3, 4]), ("tpo", [0, 1, 2, 3, 4]),
                    ("grpo", [0, 1, 2, 3, 4]), ("ce", [0, 1, 2]), ("ce", [3, 4])]
    assert [len(job) for job in plan_jobs(tasks, 2, kinds("whole"), 2)] == [2] * 10 + [1] * 5
    assert [len(job) for job in plan_jobs(tasks, 100, kinds("whole"), 1)] == [5] * 5
    # a transformer's population costs its members' sum: every run is shared out over the processes
    assert [len(job) for job in plan_jobs(tasks, 100, kinds("shares"), 2)] == [3] * 5 + [2] * 5
    assert [len(job) for job in plan_jobs(tasks, 100, kinds("alone"), 2)] == [1] * 25
    with pytest.raises(ValueError, match="unknown batching 'together'; choose from alone, shares, whole"):
        plan_jobs(tasks, 100, kinds("together"), 2)
    token = get_experiment("vocab_sweep").build(1, True)["V2"]["tpo"]
    mnist = get_experiment("mnist").build(1, True)["B100"]["tpo"]
    assert batching([token, mnist, tasks[0].spec]) == ["shares", "whole", "whole"]


def test_finished_seeds_are_skipped_and_never_in_a_chunk(tmp_path):
    spec = _spec("tabular_single", "K100", "tpo", 2)
    tasks = _tasks("tabular_single", "K100", spec, tmp_path, range(4))
    assert run_tasks(tasks[1:2])["ran"] == 1
    stamp = os.stat(tasks[1].path).st_mtime_ns
    assert [[t.seed for t in job] for job in plan_jobs(unfinished(tasks), 4)] == [[0], [2, 3]]
    summary = run_tasks(tasks, members_per_process=4)
    assert summary["skipped"] == 1 and summary["ran"] == 3 and not summary["failed"]
    assert os.stat(tasks[1].path).st_mtime_ns == stamp
    assert [load_seed(t.path)[1]["n_seeds"] for t in tasks] == [1, 1, 2, 2]


def test_a_run_that_cannot_batch_runs_one_seed_per_process(tmp_path, monkeypatch):
    diagnostics = plan(get_experiment("diagnostics"), tmp_path, smoke=True, n_seeds=3, algorithms=["tpo"])
    assert all(t.per_seed for t in diagnostics)  # its figure reads per-seed train/ diagnostics
    assert [len(job) for job in plan_jobs(diagnostics, 100, lambda specs: ["whole"] * len(specs))] == [1] * 3
    llm = get_experiment("llm_cpu").build(1, True)
    tabular = get_experiment("tabular_multi").build(1, True)["N100_K10"]["ce"]
    assert batching([next(iter(next(iter(llm.values())).values())), tabular]) == ["alone", "whole"]
    terminal = get_experiment("terminal").build(1, True)  # a run skipping batches trains its seeds alone
    assert batching([terminal["prompts/H7"]["tpo"], terminal["skip/H7"]["tpo"]]) == ["shares", "alone"]

    monkeypatch.setattr(launchers, "batching", lambda specs: ["alone"] * len(specs))
    tasks = _tasks("tabular_single", "K100", _spec("tabular_single", "K100", "grpo", 2), tmp_path, range(2))
    assert run_tasks(tasks, members_per_process=100)["ran"] == 2
    assert [load_seed(t.path)[1]["n_seeds"] for t in tasks] == [1, 1]


def test_dry_run_shows_how_seeds_are_batched(tmp_path, capsys):
    assert main(["tabular_single", "--smoke", "--n-seeds", "3", "--algorithms", "tpo", "--dry-run",
                 "--members-per-process", "2", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "seed_0..1.npz (2 seeds, one model)" in text and "tpo/seed_2.npz" in text
    assert "resumes from" not in text and not list(tmp_path.iterdir())
    folder = tmp_path / "tabular_single" / "K100" / "tpo"
    folder.mkdir(parents=True)
    (folder / "seed_0..1.checkpoint.pt").write_bytes(b"")
    main(["tabular_single", "--smoke", "--n-seeds", "3", "--algorithms", "tpo", "--dry-run",
          "--members-per-process", "2", "--out", str(tmp_path)])
    lines = [line for line in capsys.readouterr().out.splitlines() if "resumes from" in line]
    assert len(lines) == 1 and "seed_0..1.npz" in lines[0] and "seed_0..1.checkpoint.pt" in lines[0]


@pytest.mark.slow
def test_the_parent_of_a_multi_process_run_never_imports_torch(tmp_path):
    """torch takes seconds to import: the parent of `--n-jobs 2` only plans, collects and writes, so neither
    its modules, planning every experiment (reading the zoo's configs) nor a finished job's results (plain
    Python and NumPy values) may pull it in."""
    blob = tmp_path / "results.pkl"
    train = ("import pickle, sys; from experiments.jobs import train_job; "
             "from experiments.runner import plan, plan_jobs; "
             "from experiments.definitions import get_experiment; "
             "tasks = plan(get_experiment('tabular_single'), sys.argv[2], True, 2, 2, ('pg',), None, 'cpu'); "
             "open(sys.argv[1], 'wb').write(pickle.dumps(train_job(plan_jobs(tasks, 2)[0])))")
    subprocess.run([sys.executable, "-c", train, str(blob), str(tmp_path)], check=True)
    parent = ("import pickle, sys; import experiments.run, benchmarks.speed, experiments.report; "
              "from experiments.definitions import EXPERIMENTS, get_experiment; "
              "from experiments.runner import plan; "
              "[plan(get_experiment(name), sys.argv[2], smoke) for name in EXPERIMENTS for smoke in (0, 1)]; "
              "pickle.loads(open(sys.argv[1], 'rb').read()); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", parent, str(blob), str(tmp_path)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-1] == "False"


def _recorded_seed(out, variant: str, spec: RunSpec, seed: int, cpu_s: float | None,
                   cpu: str | None = None) -> None:
    """A terminal seed file of ``spec`` whose meta records ``cpu_s`` (None: a file without it), and the
    CPU that ran it when ``cpu`` is given."""
    meta = {"seed": seed, "spec": asdict(spec), "fingerprint": spec.fingerprint()} | (
        {} if cpu is None else {"cpu": cpu})
    save_seed(seed_path(out, "terminal", variant, spec.algo, seed), {"update/error": np.ones(3)},
              meta | ({} if cpu_s is None else {"cpu_s": cpu_s}))


def test_a_seed_costs_as_its_method_else_its_method_elsewhere_scaled_else_all_at_its_env(tmp_path, capsys):
    grid = get_experiment("ablations").build(2000, False)
    tpo, grpo = grid["H7"]["tpo"], grid["H7"]["grpo"]
    skipping = replace(tpo, kwargs=tpo.kwargs | {"skip_batches_without_signal": True})
    for seed, cpu_s in enumerate([200.0, 300.0, None]):
        _recorded_seed(tmp_path, "prompts/H7", tpo, seed, cpu_s)
    _recorded_seed(tmp_path, "prompts/H7", grpo, 0, 400.0)
    _recorded_seed(tmp_path, "skip/H7", skipping, 0, 10.0)  # other work settings: never counted
    _recorded_seed(tmp_path, "prompts/H7", tpo.with_updates(20), 5, 1.0)  # other updates: never counted
    recorded = recorded_cpu_s(tmp_path)
    assert sorted(cpu_s for _, cpu_s, _ in recorded) == [1.0, 10.0, 200.0, 300.0, 400.0]
    assert estimate_cpu_s(tpo, recorded) == pytest.approx(250.0)  # its own method's seeds
    no_anchor = grid["H7"]["tpo_no_anchor"]
    assert estimate_cpu_s(no_anchor, recorded) == pytest.approx(300.0)  # (200 + 300 + 400) / 3
    assert estimate_cpu_s(skipping, recorded) == pytest.approx(10.0)
    assert estimate_cpu_s(grid["H8"]["tpo"], recorded) is None  # nothing recorded at H = 8
    assert main(["ablations", "--variants", "H7,H8", "--algorithms", "tpo_no_anchor", "--n-seeds", "2",
                 "--dry-run", "--members-per-process", "2", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "H7/tpo_no_anchor/seed_0..1.npz (2 seeds, one model)" in text and "CPU s per seed: ~300" in text
    assert "H8/tpo_no_anchor/seed_0..1.npz" in text and "CPU s per seed: no estimate" in text
    assert "estimated: 0.2 one-thread CPU-hours for 2 seed(s), 2 without an estimate" in text  # 2 x 300 s
    _recorded_seed(tmp_path, "prompts/H8", grid["H8"]["grpo"], 0, 800.0)  # GRPO costs 2x at H = 8 ...
    _recorded_seed(tmp_path, "prompts/H8", grid["H8"]["grpo_no_kl"], 0, 600.0)  # ... GRPO (no KL) 3x
    _recorded_seed(tmp_path, "prompts/H7", grid["H7"]["grpo_no_kl"], 0, 200.0)
    recorded = recorded_cpu_s(tmp_path)
    assert estimate_cpu_s(grid["H8"]["tpo"], recorded) == pytest.approx(250.0 * (2 + 3) / 2)
    assert estimate_cpu_s(grid["H8"]["grpo"], recorded) == pytest.approx(800.0)
    assert estimate_cpu_s(grid["H8"]["tpo_no_anchor"], recorded) == pytest.approx(700.0)  # no own seeds


def test_a_seed_costs_as_the_seeds_this_cpu_ran_where_there_are_some(tmp_path) -> None:
    """Each step of the estimate takes this CPU's seeds first: its own method's seeds here, moved to
    another H by this CPU's ratios, then every machine's; the mean of all methods last, this CPU's first."""
    grid = get_experiment("ablations").build(2000, False)
    seeds = [("H7", "tpo", 0, 100.0, "fast"), ("H7", "tpo", 1, 300.0, "slow"),
             ("H7", "grpo", 0, 200.0, "fast"), ("H8", "grpo", 0, 400.0, "fast"),
             ("H7", "grpo", 1, 400.0, "slow"), ("H8", "grpo", 1, 1200.0, "slow"),
             ("H7", "group_pg", 0, 500.0, "slow")]
    for variant, algo, seed, cpu_s, cpu in seeds:
        _recorded_seed(tmp_path, f"prompts/{variant}", grid[variant][algo], seed, cpu_s, cpu)
    recorded = recorded_cpu_s(tmp_path)
    assert [cpu for *_, cpu in recorded].count("fast") == 3
    tpo7, tpo8 = grid["H7"]["tpo"], grid["H8"]["tpo"]
    assert estimate_cpu_s(tpo7, recorded, "fast") == pytest.approx(100.0)
    assert estimate_cpu_s(tpo7, recorded, "slow") == pytest.approx(300.0)
    assert estimate_cpu_s(tpo7, recorded) == estimate_cpu_s(tpo7, recorded, "other") == pytest.approx(200.0)
    assert estimate_cpu_s(tpo8, recorded, "fast") == pytest.approx(100.0 * 400.0 / 200.0)
    assert estimate_cpu_s(tpo8, recorded, "slow") == pytest.approx(300.0 * 1200.0 / 400.0)
    # all machines: c(tpo, H7) = 200 moved by c(grpo, H8) / c(grpo, H7) = 800 / 300
    assert estimate_cpu_s(tpo8, recorded) == pytest.approx(200.0 * 800.0 / 300.0)
    pg7 = grid["H7"]["group_pg"]  # its own seeds on another CPU come before other methods' on this one
    assert estimate_cpu_s(pg7, recorded, "fast") == pytest.approx(500.0)
    no_anchor8 = grid["H8"]["tpo_no_anchor"]  # no seeds of its own: all methods at H = 8, this CPU's first
    assert estimate_cpu_s(no_anchor8, recorded, "fast") == pytest.approx(400.0)
    assert estimate_cpu_s(no_anchor8, recorded, "other") == pytest.approx(800.0)
