"""Multi-seed runner: plan the (variant, algorithm, seed) runs of an experiment, skip the finished ones,
run the rest in ``n_jobs`` processes (spawn context, one torch thread each) and write each seed's curves.

A run builds the agent exactly as the zoo does (``agents.zoo.registry``: the class of the zoo name plus
the keyword arguments that define an ablation, then the run's own keyword arguments), on the env made
by ``gymnasium.make(env_id, **env_kwargs)``, with ``seed=k`` (seeds torch, numpy and the env), and
trains it for exactly ``n_updates`` updates (``learn(n_iterations=...)``) while a recorder records.

Seeds as a batch dimension: consecutive seeds k..k+S-1 of one run train as one model with ``seed=k,
n_seeds=S`` (a population whose member m learns exactly as the run with seed k+m), at most
``members_per_process`` per process, where the run's policy has populations (its class's
``supports_members``) and its experiment reads no per-seed ``train/`` diagnostics, which a population
logs only as the members' means (``Task.per_seed``: the ``diagnostics`` experiment). Every other seed
trains alone.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.core import Experiment, RunSpec, is_finished, save_seed, seed_path

MEMBERS_PER_PROCESS = 100
"""The default cap on the seeds of one run that one process trains together."""
TRAIN_DIAGNOSTICS = ("update/train/", "update/all_fail")
"""Curves that need each seed's own ``train/`` values (a population's logger holds only their means)."""


@dataclass(frozen=True)
class Task:
    """One seed of one run, and the file it writes.

    ``per_seed``: the experiment's figure reads per-seed ``train/`` diagnostics (``TRAIN_DIAGNOSTICS``),
    so the seed trains alone.
    """

    experiment: str
    variant: str
    seed: int
    spec: RunSpec
    path: str
    per_seed: bool = False


Job = tuple[Task, ...]
"""Consecutive seeds of one run that one process trains as one model (``n_seeds = len(job)``)."""


def plan(experiment: Experiment, out: str | Path, smoke: bool = False, n_seeds: int | None = None,
         updates: int | None = None, algorithms: Iterable[str] | None = None,
         variants: Iterable[str] | None = None) -> list[Task]:
    """Every seed of every run of ``experiment`` (seed-major, so partial results cover every method)."""
    size = experiment.smoke if smoke else experiment.full
    grid = experiment.build(updates or size.updates, smoke)
    wanted_algos = set(algorithms) if algorithms else None
    wanted_variants = set(variants) if variants else None
    _check_known("variant", wanted_variants, set(grid))
    _check_known("algorithm", wanted_algos, {a for runs in grid.values() for a in runs})
    per_seed = reads_train_diagnostics(experiment)
    tasks = []
    for seed in range(n_seeds or size.seeds):
        for variant, runs in grid.items():
            if wanted_variants is not None and variant not in wanted_variants:
                continue
            for algo, spec in runs.items():
                if wanted_algos is None or algo in wanted_algos:
                    path = seed_path(out, experiment.name, variant, algo, seed)
                    tasks.append(Task(experiment.name, variant, seed, spec, str(path), per_seed))
    return tasks


def reads_train_diagnostics(experiment: Experiment) -> bool:
    """Whether the experiment's figure draws per-seed ``train/`` diagnostics: only ``diagnostics`` (Figs.
    11, 12, 15: gradient norm, all-fail fraction, target masses); every other report reads ``rollout/``
    errors, the tabular misalignment or MNIST's test-set evaluations, which every member records."""
    return any(key.startswith(TRAIN_DIAGNOSTICS) for key in (experiment.metric, *experiment.panels))


def _check_known(kind: str, wanted: set[str] | None, known: set[str]) -> None:
    unknown = sorted((wanted or set()) - known)
    if unknown:
        raise ValueError(f"unknown {kind}(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}")


def build_model(spec: RunSpec, seed: int, n_seeds: int = 1) -> Any:
    """The agent of ``spec`` with ``seed`` (and ``n_seeds`` members: seeds ``seed .. seed + n_seeds - 1``),
    built by the zoo's registry (:func:`agents.zoo.registry.make_agent`: the class of the name plus the
    settings that define an ablation, a contradiction refused)."""
    import gymnasium as gym

    import tpo_gym  # noqa: F401  (registers the envs)
    from agents.zoo.registry import make_agent

    env = gym.make(spec.env_id, **spec.env_kwargs)
    return make_agent(spec.algo, spec.policy, env, seed=seed, n_seeds=n_seeds, device="cpu", **spec.kwargs)


def supports_members(specs: list[RunSpec]) -> list[bool]:
    """Whether each run's policy has populations (``supports_members``; a policy the algorithm loads by
    name on first use, ``LLMPolicy``, has none). Imports the agents."""
    from agents.zoo.registry import get_algo

    return [bool(getattr(get_algo(spec.algo).policy_aliases.get(spec.policy), "supports_members", False))
            for spec in specs]


def plan_jobs(tasks: list[Task], members_per_process: int = MEMBERS_PER_PROCESS,
              batchable: Callable[[list[RunSpec]], list[bool]] = supports_members,
              n_jobs: int = 1) -> list[Job]:
    """The jobs (one process's work each) that run ``tasks``, seed-major like ``tasks``.

    The tasks of one run (experiment, variant, algorithm, spec fingerprint) train together when its
    policy has populations (``batchable``) and its experiment reads no per-seed ``train/`` diagnostics
    (``Task.per_seed``): as runs of consecutive seeds of at most ``members_per_process`` seeds, and of
    at most a ``1 / n_jobs`` share of the run's seeds, so that every process gets a share of every run
    (a seed missing from ``tasks``, e.g. a finished one, splits a run). Every other task is a job of
    its own.
    """
    groups: dict[tuple[str, ...], list[tuple[int, Task]]] = {}
    for index, task in enumerate(tasks):
        key = (task.experiment, task.variant, task.spec.algo, task.spec.fingerprint())
        groups.setdefault(key, []).append((index, task))
    candidates = [key for key, group in groups.items()
                  if members_per_process > 1 and len(group) > 1 and not group[0][1].per_seed]
    flags = batchable([groups[key][0][1].spec for key in candidates]) if candidates else []
    batched = {key for key, flag in zip(candidates, flags, strict=True) if flag}
    jobs = [job for key, group in groups.items()
            for job in _consecutive(group, min(members_per_process, -(-len(group) // n_jobs))
                                    if key in batched else 1)]
    return [job for _, job in sorted(jobs, key=lambda item: (item[1][0].seed, item[0]))]


def _consecutive(group: list[tuple[int, Task]], cap: int) -> list[tuple[int, Job]]:
    """One run's (position, task) pairs as runs of consecutive seeds of at most ``cap`` tasks, each with
    the position of its first task."""
    chunks: list[list[tuple[int, Task]]] = []
    for item in sorted(group, key=lambda item: item[1].seed):
        last = chunks[-1] if chunks else None
        if last and len(last) < cap and item[1].seed == last[-1][1].seed + 1:
            last.append(item)
        else:
            chunks.append([item])
    return [(chunk[0][0], tuple(task for _, task in chunk)) for chunk in chunks]


def describe(job: Job) -> str:
    """A job's seed file, or ``<folder>/seed_<a>..<b>.npz (n seeds, one model)``."""
    if len(job) == 1:
        return job[0].path
    return f"{Path(job[0].path).parent}/seed_{job[0].seed}..{job[-1].seed}.npz ({len(job)} seeds, one model)"


def run_job(job: Job) -> tuple[list[str], float]:
    """Train a job's seeds as one model (``seed`` its first seed, ``n_seeds`` its size), record their
    curves and write each seed's file atomically; returns (paths, the job's wall seconds).

    Each file's meta is a single run's plus ``n_members`` and ``batch_wall_s`` (the job's wall time);
    ``wall_s`` is the job's wall time over its seeds, so that per-seed figures stay comparable.
    """
    import torch

    from agents.provenance import code_version
    from experiments.recorders import RECORDERS

    first, spec = job[0], job[0].spec
    if [t.seed for t in job] != list(range(first.seed, first.seed + len(job))) or any(
            t.spec != spec for t in job):
        raise ValueError(f"{describe(job)}: a job is consecutive seeds of one run")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    code = code_version()
    start = time.perf_counter()
    model = build_model(spec, first.seed, len(job))
    recorder = RECORDERS[spec.recorder](**spec.recorder_kwargs)
    model.learn(n_iterations=spec.n_updates, callback=recorder, log_interval=0)
    if recorder.updates_done != spec.n_updates:
        raise RuntimeError(f"{describe(job)}: ran {recorder.updates_done} updates, expected {spec.n_updates}")
    wall = time.perf_counter() - start
    for member, task in enumerate(job):
        meta = {"experiment": task.experiment, "variant": task.variant, "seed": task.seed,
                "spec": asdict(spec), "fingerprint": spec.fingerprint(), "wall_s": wall / len(job),
                "n_members": len(job), "batch_wall_s": wall,
                "torch": torch.__version__, "python": platform.python_version(), "code": code}
        save_seed(Path(task.path), recorder.arrays(member), meta)
    return [task.path for task in job], wall


def _run_safely(job: Job) -> tuple[str, list[str], float, str | None]:
    """``run_job`` that reports an exception instead of raising it (one bad job stops nothing else);
    returns (``describe(job)``, paths, wall seconds, error)."""
    try:
        return (describe(job), *run_job(job), None)
    except Exception as error:  # noqa: BLE001  (reported by run_tasks)
        return describe(job), [task.path for task in job], 0.0, f"{type(error).__name__}: {error}"


def _start_worker() -> None:
    """A worker imports the agents as it starts, so that the workers import them (torch alone takes
    seconds) side by side while one of them checks which runs batch, and the parent never imports them."""
    import agents.zoo.registry  # noqa: F401


def unfinished(tasks: list[Task]) -> list[Task]:
    """The tasks without a finished seed file of the same spec."""
    return [t for t in tasks if not is_finished(Path(t.path), t.spec)]


def run_tasks(tasks: list[Task], n_jobs: int = 1, log: Any = sys.stdout,
              members_per_process: int = MEMBERS_PER_PROCESS) -> dict[str, Any]:
    """Run the unfinished tasks as the jobs of ``plan_jobs`` (up to ``members_per_process`` seeds of one
    run as one model) in ``n_jobs`` spawned processes, or in this process for 1.

    Returns ``{"skipped", "ran", "failed", "wall_s", "cpu_s"}`` (seeds, failed seeds' paths, and the sum
    of the jobs' wall times); a finished seed (same spec) is skipped.
    """
    todo = unfinished(tasks)
    start, cpu, failed = time.perf_counter(), 0.0, []
    pool = mp.get_context("spawn").Pool(n_jobs, _start_worker) if n_jobs > 1 and len(todo) > 1 else None

    def batchable(specs: list[RunSpec]) -> list[bool]:  # in a worker: the parent never imports the agents
        return supports_members(specs) if pool is None else pool.apply(supports_members, (specs,))

    try:
        jobs = plan_jobs(todo, members_per_process, batchable, n_jobs)
        print(f"{len(tasks) - len(todo)} of {len(tasks)} seeds already finished; running {len(todo)} as "
              f"{len(jobs)} job(s) of up to {members_per_process} seed(s) in {n_jobs} process(es)",
              file=log, flush=True)
        results = pool.imap_unordered(_run_safely, jobs) if pool else map(_run_safely, jobs)
        for i, (label, paths, wall, error) in enumerate(results, 1):
            cpu += wall
            status = f"FAILED {error}" if error else ""
            print(f"[{i}/{len(jobs)}] {wall:7.1f}s  {label} {status}", file=log, flush=True)
            if error:
                failed += paths
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    elapsed = time.perf_counter() - start
    return {"skipped": len(tasks) - len(todo), "ran": len(todo) - len(failed), "failed": failed,
            "wall_s": elapsed, "cpu_s": cpu}
