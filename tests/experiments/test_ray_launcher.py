"""The Ray launcher (experiments/ray_launcher.py) on a real local Ray cluster of 2 CPUs: the smoke sweep
gives the same seed files as the process pool, the files are written by the driver, a failed or
preempted job is retried, a job that keeps failing is reported, and finished seeds are never rerun.
Skipped where Ray is not installed (the ``ray`` extra), except the one-line errors."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch as th

from experiments.core import load_seed
from experiments.definitions import get_experiment
from experiments.jobs import train_job
from experiments.launchers import make_launcher
from experiments.run import main
from experiments.runner import plan, run_tasks

pytestmark = pytest.mark.slow  # the whole module (see pyproject: markers)

th.set_num_threads(1)
TIMINGS = {"wall_s", "batch_wall_s", "cpu_s", "batch_cpu_s"}


def test_the_launcher_starts_a_local_cluster_that_runs_the_shipped_checkout(tmp_path):
    """Without Ray initialised, the launcher starts it with this checkout as the job's working_dir (so a
    remote node runs the driver's code), records the driver's code commit, and shuts it down."""
    ray = pytest.importorskip("ray")
    from experiments.ray_launcher import PROJECT, RayLauncher
    from tpo_agents.provenance import code_version

    assert not ray.is_initialized()
    seen = tmp_path / "imported_from"

    def where_is_the_code(job, code):
        import experiments

        seen.write_text(experiments.__file__)
        return train_job(job, code)

    tasks = _tasks(tmp_path / "out", n_seeds=1)
    assert run_tasks(tasks, launcher=RayLauncher(n_jobs=1, retries=0, work=where_is_the_code))["ran"] == 1
    assert not ray.is_initialized()
    shipped = Path(seen.read_text())
    assert shipped.name == "__init__.py" and not shipped.is_relative_to(PROJECT)
    assert "working_dir" in str(shipped)
    assert load_seed(Path(tasks[0].path))[1]["code"] == code_version()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 CPUs for this module; the launcher finds Ray initialised and uses it."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _files(root: Path) -> dict[str, tuple[dict[str, np.ndarray], dict]]:
    return {str(p.relative_to(root)): load_seed(p) for p in sorted(root.glob("**/seed_*.npz"))}


@pytest.mark.parametrize("experiment", ["tabular_single", "tabular_multi"])
def test_ray_smoke_sweep_writes_the_files_of_the_process_pool(ray_cluster, tmp_path, capsys, experiment):
    pool, cluster = tmp_path / "pool", tmp_path / "ray"
    assert main([experiment, "--smoke", "--n-jobs", "2", "--out", str(pool)]) == 0
    assert main([experiment, "--smoke", "--n-jobs", "2", "--launcher", "ray", "--out", str(cluster)]) == 0
    assert "on Ray at a local cluster (2 CPUs, 2 jobs side by side)" in capsys.readouterr().out
    a, b = _files(pool), _files(cluster)
    cells = sum(len(runs) for runs in get_experiment(experiment).build(1, True).values())
    assert len(a) == get_experiment(experiment).smoke.seeds * cells and set(a) == set(b)
    for name, ((arrays_a, meta_a), (arrays_b, meta_b)) in ((n, (a[n], b[n])) for n in a):
        assert set(arrays_a) == set(arrays_b), name
        for key in arrays_a:
            np.testing.assert_array_equal(arrays_a[key], arrays_b[key], err_msg=f"{name} {key}")
        assert {k: v for k, v in meta_a.items() if k not in TIMINGS} == {
            k: v for k, v in meta_b.items() if k not in TIMINGS}, name
    # finished seeds are never rerun, on either launcher
    stamps = {p: p.stat().st_mtime_ns for p in cluster.glob("**/seed_*.npz")}
    assert main([experiment, "--smoke", "--launcher", "ray", "--out", str(cluster)]) == 0
    assert "ran 0, skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in cluster.glob("**/seed_*.npz")} == stamps


def _tasks(out: Path, n_seeds: int = 2):
    return plan(get_experiment("tabular_single"), out, smoke=True, n_seeds=n_seeds, updates=3,
                algorithms=["tpo"])


def test_a_preempted_or_failing_job_is_retried_and_its_files_come_from_the_driver(ray_cluster, tmp_path):
    from experiments.ray_launcher import RayLauncher

    attempts = tmp_path / "attempts"
    attempts.mkdir()
    driver = os.getpid()

    def flaky(job, code):
        """First attempt: the worker process dies (a preempted node); second: an exception; then trains."""
        assert os.getpid() != driver
        attempts.joinpath(f"{len(list(attempts.iterdir()))}").touch()
        if len(list(attempts.iterdir())) == 1:
            os._exit(1)
        if len(list(attempts.iterdir())) == 2:
            raise RuntimeError("lost its node")
        return train_job(job, code)

    tasks = _tasks(tmp_path / "out", n_seeds=1)
    summary = run_tasks(tasks, launcher=RayLauncher(n_jobs=1, retries=2, work=flaky))
    assert summary["ran"] == 1 and not summary["failed"] and len(list(attempts.iterdir())) == 3
    arrays, meta = load_seed(Path(tasks[0].path))
    assert arrays["update/error"].shape == (3,) and meta["seed"] == 0


def test_a_job_that_keeps_failing_is_reported_and_the_others_are_written(ray_cluster, tmp_path, capsys):
    from experiments.ray_launcher import RayLauncher

    def fails_on_seed_1(job, code):
        if job[0].seed == 1:
            raise ValueError("bad seed")
        return train_job(job, code)

    tasks = _tasks(tmp_path)
    summary = run_tasks(tasks, members_per_process=1,
                        launcher=RayLauncher(n_jobs=2, retries=1, work=fails_on_seed_1))
    assert summary["ran"] == 1 and summary["failed"] == [tasks[1].path]
    assert "FAILED ValueError: bad seed" in capsys.readouterr().out
    assert Path(tasks[0].path).exists() and not Path(tasks[1].path).exists()


def test_ray_options_need_the_ray_launcher_and_a_missing_ray_is_one_line(tmp_path, capsys, monkeypatch):
    assert main(["tabular_single", "--smoke", "--address", "auto", "--out", str(tmp_path)]) == 2
    assert "error: --address and --retries need --launcher ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    assert main(["tabular_single", "--smoke", "--launcher", "ray", "--out", str(tmp_path)]) == 2
    assert 'error: --launcher ray needs Ray: pip install "tpo-gym[ray]"' in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bad_ray_settings_are_refused_in_one_line(tmp_path, capsys):
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="retries must be at least 0, got -1"):
        make_launcher("ray", retries=-1)
    assert main(["tabular_single", "--smoke", "--launcher", "ray", "--retries", "-1",
                 "--out", str(tmp_path)]) == 2
    assert "error: retries must be at least 0, got -1" in capsys.readouterr().err
