"""The runner's jobs on a Ray cluster (``pip install "tpo-gym[ray]"``).

``python -m experiments.run <experiment> --launcher ray [--address ADDRESS]``.

Each job (consecutive seeds of one run, ``experiments.runner.plan_jobs``) is one Ray task of one CPU
that trains and returns the seeds' curves and meta to the driver, which writes the seed files as each
job comes back: the workers need no shared filesystem, and an interrupted driver keeps every job that
came back. A job whose worker raised, died or lost its node (preemption) is run again, up to
``retries`` times (Ray's ``max_retries`` with ``retry_exceptions``); a finished seed is never rerun
(the runner skips it before planning).

The cluster runs the driver's checkout: ``open`` ships the project folder (``agents`` with the zoo's
configs, ``tpo_gym``, ``experiments``; not ``results/`` or ``.git``) as the job's ``working_dir``, and each
seed file records the driver's code commit. The nodes need the dependencies only (torch, numpy,
gymnasium, stable-baselines3: ``pip install -e .`` or the package's requirements).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from experiments.core import RunSpec
from experiments.jobs import Job, Outcome, SeedResult, batching, describe, train_job

RAY_RETRIES = 3
"""How often a failed or lost job is run again before it counts as failed."""
PROJECT = Path(__file__).resolve().parent.parent
"""The checkout whose code the cluster runs."""
NOT_SHIPPED = [".git", "results", "results_*", "runs", "logs", "build", "dist", "*.egg-info", ".venv*",
               "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "docs"]
"""What ``working_dir`` leaves out: outputs, caches, the history and the docs."""
Work = Callable[[Job, "str | None"], "tuple[list[SeedResult], float]"]


def _ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise ImportError('--launcher ray needs Ray: pip install "tpo-gym[ray]" '
                          '(or pip install "ray[default]")') from error
    return ray


class RayLauncher:
    """Jobs as Ray tasks on the cluster at ``address`` (``ray.init``'s: None finds ``RAY_ADDRESS`` or
    the cluster ``ray start`` started on this machine, else starts a local one of this machine's CPUs;
    ``auto`` the same but never starts one; ``ray://host:10001`` a remote head), or on Ray as already
    initialised in this process.

    :param n_jobs: jobs side by side, the share ``plan_jobs`` splits each run into (default: the
        cluster's CPUs)
    :param retries: runs of a failed or lost job after its first (``max_retries``, exceptions included)
    :param ship_code: send this checkout as the job's ``working_dir`` (when this launcher starts Ray)
    :param work: what a task runs, ``(job, code) -> (seeds, wall seconds)`` (default ``train_job``)
    """

    def __init__(self, address: str | None = None, n_jobs: int | None = None, retries: int = RAY_RETRIES,
                 ship_code: bool = True, work: Work = train_job) -> None:
        if retries < 0:
            raise ValueError(f"retries must be at least 0, got {retries}")
        if n_jobs is not None and n_jobs < 1:
            raise ValueError(f"n_jobs must be at least 1, got {n_jobs}")
        _ray()  # a missing Ray fails here, before any planning
        self.address, self.retries, self.ship_code, self.work = address, retries, ship_code, work
        self._n_jobs = n_jobs
        self.n_jobs = n_jobs or 1
        self._started = False
        self._code: str | None = None

    def open(self, n_todo: int) -> None:
        ray = _ray()
        from tpo_agents.provenance import code_version

        if not ray.is_initialized():
            runtime_env = ({"working_dir": str(PROJECT), "excludes": NOT_SHIPPED}
                           if self.ship_code and (PROJECT / "pyproject.toml").exists() else None)
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False)
            self._started = True
        self._code = code_version()
        self.n_jobs = self._n_jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=True)(self.work)

    def batchable(self, specs: list[RunSpec]) -> list[str]:
        return batching(specs)

    def outcomes(self, jobs: list[Job]) -> Iterator[Outcome]:
        ray = _ray()
        pending = {self._remote.remote(job, self._code): job for job in jobs}
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ref)
            paths = [task.path for task in job]
            try:
                results, wall = ray.get(ref)
            except ray.exceptions.RayError as error:  # after its retries: raised, died or lost
                cause = getattr(error, "cause", None) or error
                message = str(cause).strip().splitlines()[-1] if str(cause).strip() else ""
                yield describe(job), paths, [], 0.0, f"{type(cause).__name__}: {message}"
                continue
            yield describe(job), paths, results, wall, None

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False

    def where(self) -> str:
        ray = _ray()
        cpus = int(ray.cluster_resources().get("CPU", 0)) if ray.is_initialized() else 0
        return f"Ray at {self.address or 'a local cluster'} ({cpus} CPUs, {self.n_jobs} jobs side by side)"
