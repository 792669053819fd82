"""Where the runner's jobs run: local processes or a Ray cluster, each job handed back to the driver.

A ``Launcher`` trains jobs somewhere and hands each finished one back to the driver
(``experiments.runner.run_tasks``), which writes its seed files.

* ``processes`` (:class:`ProcessLauncher`): ``n_jobs`` spawned processes on this machine (one torch
  thread each), or this process for 1.
* ``ray`` (:class:`experiments.ray_launcher.RayLauncher`): one Ray task per job on a Ray cluster (the
  ``ray`` extra); the results come back to the driver, so no shared filesystem is needed.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from typing import Any, Protocol

from experiments.core import RunSpec
from experiments.jobs import Job, Outcome, batching, train_safely

LAUNCHERS = ("processes", "ray")
"""The names of ``--launcher``."""


class Launcher(Protocol):
    """Runs jobs and yields each one's :data:`experiments.jobs.Outcome` as it finishes."""

    n_jobs: int
    """How many jobs run side by side (``plan_jobs`` gives every one a share of each run)."""

    def open(self, n_todo: int) -> None:
        """Start (processes, a cluster connection) for ``n_todo`` unfinished seeds."""

    def batchable(self, specs: list[RunSpec]) -> list[str]:
        """How each run's seeds batch (:func:`experiments.jobs.batching`), evaluated where the agents are
        imported."""

    def outcomes(self, jobs: list[Job]) -> Iterator[Outcome]:
        """Run ``jobs``; yield each finished job's outcome, in the order they finish."""

    def close(self) -> None:
        """Stop what ``open`` started."""

    def where(self) -> str:
        """Where the jobs run, for the log (``2 process(es)``, ``Ray at auto (8 CPUs)``)."""


def _start_worker() -> None:
    """A worker imports what a job needs as it starts (the agents' learn loop, the envs, the recorders:
    torch alone takes seconds), so that the workers import side by side while one of them checks which
    runs batch, and the parent never imports them."""
    import experiments.recorders  # noqa: F401
    import tpo_agents.learn_loop  # noqa: F401
    import tpo_agents.zoo.registry  # noqa: F401
    import tpo_gym  # noqa: F401


class ProcessLauncher:
    """``n_jobs`` spawned processes of this machine, or this process when ``n_jobs`` is 1 or a single
    seed is left; workers train, the parent writes."""

    def __init__(self, n_jobs: int = 1) -> None:
        if n_jobs < 1:
            raise ValueError(f"n_jobs must be at least 1, got {n_jobs}")
        self.n_jobs = n_jobs
        self._pool: Any = None

    def open(self, n_todo: int) -> None:
        if self.n_jobs > 1 and n_todo > 1:
            self._pool = mp.get_context("spawn").Pool(self.n_jobs, _start_worker)

    def batchable(self, specs: list[RunSpec]) -> list[str]:
        # in a worker: the parent never imports the agents
        return batching(specs) if self._pool is None else self._pool.apply(batching, (specs,))

    def outcomes(self, jobs: list[Job]) -> Iterator[Outcome]:
        yield from (self._pool.imap_unordered(train_safely, jobs) if self._pool else map(train_safely, jobs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def where(self) -> str:
        return f"{self.n_jobs} process(es)"


def make_launcher(name: str, n_jobs: int | None = None, address: str | None = None,
                  retries: int | None = None) -> Launcher:
    """The launcher called ``name`` (:data:`LAUNCHERS`): ``processes`` with ``n_jobs`` (default 1), or
    ``ray`` on the cluster at ``address`` (default: a new local one) with ``n_jobs`` jobs side by side
    (default: the cluster's CPUs) and ``retries`` per job."""
    if name == "processes":
        if address is not None or retries is not None:
            raise ValueError("--address and --retries need --launcher ray")
        return ProcessLauncher(n_jobs or 1)
    if name == "ray":
        from experiments.ray_launcher import RAY_RETRIES, RayLauncher

        return RayLauncher(address, n_jobs, RAY_RETRIES if retries is None else retries)
    raise ValueError(f"unknown launcher {name!r}; choose one of: {', '.join(LAUNCHERS)}")
