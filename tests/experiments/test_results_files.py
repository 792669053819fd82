"""The per-seed results files (experiments/core.py, experiments/jobs.py): the committed layout under
results/paper, compressed float32 curves of only what the report reads, the run's settings and code
commit in the meta, older uncompressed float64 files still read and still count as finished."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch as th

from experiments.core import RESULTS, SMOKE_RESULTS, is_finished, kept, load_seed, save_seed, seed_path
from experiments.definitions import EXPERIMENTS, get_experiment
from experiments.docs_tables import seed_files
from experiments.jobs import ProgressLines, needs_rollout_metrics, needs_train_diagnostics, train_job
from experiments.report import load_runs, summarize
from experiments.run import default_out, main
from experiments.runner import plan, plan_jobs, run_tasks
from tpo_agents.modes.base import CollectionMode
from tpo_agents.provenance import cpu_description

th.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


def test_default_folders_are_the_committed_results_and_the_smoke_folder():
    assert default_out(False) == RESULTS == "results/paper" and default_out(True) == SMOKE_RESULTS
    path = Path("results/paper/vocab_sweep/V4/tpo/seed_3.npz")
    assert seed_path(RESULTS, "vocab_sweep", "V4", "tpo", 3) == path


def test_gitignore_keeps_results_paper_and_ignores_other_output_folders():
    probe = ["results/paper/tabular_multi/N100_K10/tpo/seed_0.npz",
             "results/superseded/terminal/prompts/H10/grpo/seed_0.npz", "results/smoke/x/seed_0.npz",
             "results/other/seed_0.npz", "results_gpu/x/seed_0.npz"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *probe], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert ignored == probe[2:]


def test_each_experiment_keeps_its_metric_panels_and_what_its_report_reads():
    assert get_experiment("tabular_multi").curves == ("update/error", "update/misalignment")
    assert get_experiment("mnist").curves == ("eval/error", "eval/mechanism_", "eval/x")
    assert get_experiment("diagnostics").curves[0] == "update/error"
    assert all(e.metric in e.curves for e in EXPERIMENTS.values())
    arrays = {"update/error": 1, "update/batch_error": 2, "eval/mechanism_gain": 3, "eval/x": 4, "eval/y": 5}
    assert set(kept(arrays, get_experiment("mnist").curves)) == {"eval/mechanism_gain", "eval/x"}
    assert kept(arrays, None) == arrays


def test_only_a_file_that_keeps_train_diagnostics_asks_the_engine_for_them():
    assert not needs_train_diagnostics(get_experiment("tabular_multi").curves)
    assert not needs_train_diagnostics(get_experiment("vocab_sweep").curves)
    assert needs_train_diagnostics(get_experiment("diagnostics").curves) and needs_train_diagnostics(None)


def test_only_a_file_that_keeps_update_curves_asks_the_engine_for_rollout_values(tmp_path, monkeypatch):
    assert not needs_rollout_metrics(get_experiment("mnist").curves)  # test-set evaluations only
    assert needs_rollout_metrics(get_experiment("vocab_sweep").curves) and needs_rollout_metrics(None)
    calls = []
    monkeypatch.setattr(CollectionMode, "log_rollout", lambda self, logger, batch: calls.append(batch))
    tasks = plan(get_experiment("mnist"), str(tmp_path), True, 2, None, ("tpo",), None, "cpu")
    results, _ = train_job(plan_jobs(tasks, 2)[0])
    assert not calls  # the engine computed no batch's rollout/ values
    kept_keys = set(results[1][1])
    assert {"eval/error", "eval/x"} <= kept_keys and all(key.startswith("eval/") for key in kept_keys)


def test_progress_lines_at_each_tenth_once_the_job_has_run_a_while():
    out, now = io.StringIO(), [0.0]
    progress = ProgressLines("seed_0.npz", 100, after_s=60.0, stream=out, clock=lambda: now[0])
    for done in range(1, 101):
        now[0] = 3.0 * done  # 3 s per update
        progress(done)
    lines = out.getvalue().splitlines()
    assert lines[0] == "seed_0.npz: update 20/100, 60 s, about 240 s left"  # update 10 came before 60 s
    assert [line.split()[2] for line in lines] == [f"{k}/100," for k in range(20, 100, 10)]
    short, now[0] = io.StringIO(), 0.0
    few = ProgressLines("x", 4, after_s=0.0, stream=short, clock=lambda: now[0])
    now[0] = 8.0
    for done in range(1, 5):
        few(done)
    assert short.getvalue().splitlines() == ["x: update 1/4, 8 s, about 24 s left",
                                             "x: update 2/4, 8 s, about 8 s left",
                                             "x: update 3/4, 8 s, about 3 s left"]  # never the last


def test_a_job_prints_its_progress(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("experiments.jobs.PROGRESS_AFTER_S", 0.0)
    tasks = plan(get_experiment("tabular_multi"), str(tmp_path), True, 1, 20, ("tpo",), None, "cpu")
    train_job(plan_jobs(tasks, 1)[0])
    lines = capsys.readouterr().err.splitlines()
    done = [line.split(": update ")[1].split(",")[0] for line in lines]
    assert done == [f"{k}/20" for k in range(2, 20, 2)]
    assert all(line.startswith(tasks[0].path) for line in lines)


def test_save_writes_compressed_float32_and_keeps_integers(tmp_path):
    path = tmp_path / "a" / "seed_0.npz"
    error = np.concatenate([np.linspace(1, 0, 100), np.zeros(4900)])  # a curve that reaches 0 and stays
    save_seed(path, {"update/error": error, "eval/counts": np.arange(4)}, {"seed": 0, "code": "abc1234"})
    arrays, meta = load_seed(path)
    assert arrays["update/error"].dtype == np.float32 and arrays["eval/counts"].dtype == np.int64
    np.testing.assert_array_equal(arrays["update/error"], error.astype(np.float32))
    assert meta == {"seed": 0, "code": "abc1234"}
    with zipfile.ZipFile(path) as archive:
        assert all(info.compress_type == zipfile.ZIP_DEFLATED for info in archive.infolist())
    assert path.stat().st_size < error.astype(np.float32).nbytes / 4


def test_an_older_uncompressed_float64_file_still_reads_and_counts_as_finished(tmp_path):
    spec = get_experiment("tabular_single").build(3, True)["K100"]["tpo"]
    path = seed_path(tmp_path, "tabular_single", "K100", "tpo", 0)
    path.parent.mkdir(parents=True)
    meta = {"experiment": "tabular_single", "variant": "K100", "seed": 0, "fingerprint": spec.fingerprint(),
            "spec": {"n_updates": 3, "kwargs": {}, "algo": "tpo"}, "wall_s": 1.0}
    old = {"update/error": np.array([0.9, 0.5, 0.25]), "update/train/loss": np.array([1.0, 2.0, 3.0])}
    np.savez(path, meta=np.array(json.dumps(meta)), **old)  # the format written before
    arrays, read = load_seed(path)
    assert arrays["update/error"].dtype == np.float64 and read["fingerprint"] == spec.fingerprint()
    assert is_finished(path, spec)
    tasks = plan(get_experiment("tabular_single"), tmp_path, smoke=True, n_seeds=1, updates=3,
                 algorithms=["tpo"])
    assert run_tasks(tasks)["skipped"] == 1  # never rerun
    assert load_runs(tmp_path, "tabular_single")["K100"]["tpo"].arrays["update/error"].shape == (1, 3)


def test_a_run_writes_only_the_reported_curves_with_its_settings_and_code(tmp_path, capsys):
    assert main(["tabular_multi", "--smoke", "--n-seeds", "2", "--episodes", "3", "--algorithms", "tpo",
                 "--out", str(tmp_path)]) == 0
    arrays, meta = load_seed(seed_path(tmp_path, "tabular_multi", "N100_K10", "tpo", 1))
    assert set(arrays) == {"update/error", "update/misalignment"}
    assert all(a.dtype == np.float32 and a.shape == (3,) for a in arrays.values())
    assert meta["spec"]["n_updates"] == 3 and meta["spec"]["algo"] == "tpo" and meta["code"]
    assert meta["n_seeds"] == 2 and meta["host"] and meta["cpu"] == cpu_description()
    rows = summarize(get_experiment("tabular_multi"), load_runs(tmp_path, "tabular_multi"))
    assert rows[0]["seeds"] == 2 and rows[0]["updates"] == 3


@pytest.mark.parametrize("experiment", ["tabular_single", "tabular_multi", "mnist", "vocab_sweep", "terminal",
                                        "ablations", "eta_sweep"])
def test_the_committed_results_regenerate_their_tables(experiment):
    """results/paper's committed seed files (those git tracks: a run still writing seeds changes nothing)
    are runs of the full size, each cell at most the full number of seeds (``Experiment.seeds_of``: a cell
    still filling holds fewer, and at least one cell is complete), and the documented summary
    (docs/figures/<experiment>.json) is what they give."""
    files = [f.path for f in seed_files(ROOT / RESULTS, tracked_only=True)]  # borrowed cells: another's files
    runs = load_runs(ROOT / RESULTS, experiment, files)
    if not runs:
        pytest.skip(f"no committed results for {experiment}")
    definition = get_experiment(experiment)
    full = definition.full
    rows = summarize(definition, runs)
    assert {r["updates"] for r in rows} == {full.updates}
    assert all(r["seeds"] <= definition.seeds_of(r["variant"], r["algo"]) for r in rows)
    assert any(r["seeds"] == definition.seeds_of(r["variant"], r["algo"]) for r in rows)
    documented = json.loads((ROOT / "docs" / "figures" / f"{experiment}.json").read_text())["rows"]
    labels = ("variant", "algo", "seeds", "steps", "steps_ci")
    assert ([{k: r.get(k) for k in labels} for r in documented]
            == [{k: r.get(k) for k in labels} for r in rows])
    for doc, row in zip(documented, rows, strict=True):  # float32 means: equal up to the CPU's kernels
        assert [doc["final"], *doc["final_ci"]] == pytest.approx([row["final"], *row["final_ci"]], rel=1e-5)


def test_a_cell_named_apart_from_its_algorithm_keeps_its_name(tmp_path):
    """``grpo_trl`` is GRPO with other settings: tables name the cell, not the algorithm."""
    for folder in ("grpo", "grpo_trl"):
        spec = {"algo": "grpo", "kwargs": {"group_mode": "text"}}
        save_seed(seed_path(tmp_path, "llm_study", "exact/gcd_60", folder, 0), {"update/error": np.zeros(2)},
                  {"seed": 0, "fingerprint": folder, "spec": spec})
    runs = load_runs(tmp_path, "llm_study")["exact/gcd_60"]
    assert (runs["grpo"].label, runs["grpo_trl"].label) == ("grpo", "grpo_trl")
