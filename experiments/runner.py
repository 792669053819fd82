"""Multi-seed runner: plan the (variant, algorithm, seed) runs of an experiment, skip the finished ones,
run the rest in ``n_jobs`` processes (spawn context, one torch thread each) and write each seed's curves.

A run builds the agent exactly as the zoo does (``agents.zoo.registry``: the class of the zoo name plus
the keyword arguments that define an ablation, then the run's own keyword arguments), on the env made
by ``gymnasium.make(env_id, **env_kwargs)``, with ``seed=k`` (seeds torch, numpy and the env), and
trains it for exactly ``n_updates`` updates (``learn(n_iterations=...)``) while a recorder records.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.core import Experiment, RunSpec, is_finished, save_seed, seed_path


@dataclass(frozen=True)
class Task:
    """One seed of one run, and the file it writes."""

    experiment: str
    variant: str
    seed: int
    spec: RunSpec
    path: str


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
    tasks = []
    for seed in range(n_seeds or size.seeds):
        for variant, runs in grid.items():
            if wanted_variants is not None and variant not in wanted_variants:
                continue
            for algo, spec in runs.items():
                if wanted_algos is None or algo in wanted_algos:
                    path = seed_path(out, experiment.name, variant, algo, seed)
                    tasks.append(Task(experiment.name, variant, seed, spec, str(path)))
    return tasks


def _check_known(kind: str, wanted: set[str] | None, known: set[str]) -> None:
    unknown = sorted((wanted or set()) - known)
    if unknown:
        raise ValueError(f"unknown {kind}(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}")


def build_model(spec: RunSpec, seed: int) -> Any:
    """The agent of ``spec`` with ``seed``, built like the zoo builds it (registry name + ablation kwargs)."""
    import gymnasium as gym

    import tpo_gym  # noqa: F401  (registers the envs)
    from agents.zoo.registry import ablation_kwargs, get_algo

    kwargs = {**ablation_kwargs(spec.algo), **spec.kwargs}
    env = gym.make(spec.env_id, **spec.env_kwargs)
    return get_algo(spec.algo)(spec.policy, env, seed=seed, device="cpu", **kwargs)


@functools.cache
def code_version() -> str:
    """The git commit of the working tree, with "+dirty" if ``agents/`` or ``tpo_gym/`` have edits.

    Cached: the value when this process first ran a seed, i.e. when it imported the agents.
    """
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "agents", "tpo_gym"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def run_task(task: Task) -> tuple[str, float]:
    """Train one seed, record its curves and write them atomically; returns (path, wall seconds)."""
    import torch

    from experiments.recorders import RECORDERS

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    code = code_version()
    start = time.perf_counter()
    spec = task.spec
    model = build_model(spec, task.seed)
    recorder = RECORDERS[spec.recorder](**spec.recorder_kwargs)
    model.learn(n_iterations=spec.n_updates, callback=recorder, log_interval=0)
    if recorder.updates_done != spec.n_updates:
        raise RuntimeError(f"{task.path}: ran {recorder.updates_done} updates, expected {spec.n_updates}")
    wall = time.perf_counter() - start
    meta = {"experiment": task.experiment, "variant": task.variant, "seed": task.seed,
            "spec": asdict(spec), "fingerprint": spec.fingerprint(), "wall_s": wall,
            "torch": torch.__version__, "python": platform.python_version(), "code": code}
    save_seed(Path(task.path), recorder.arrays(), meta)
    return task.path, wall


def _run_safely(task: Task) -> tuple[str, float, str | None]:
    """``run_task`` that reports an exception instead of raising it (one bad seed stops nothing else)."""
    try:
        return (*run_task(task), None)
    except Exception as error:  # noqa: BLE001  (reported by run_tasks)
        return task.path, 0.0, f"{type(error).__name__}: {error}"


def run_tasks(tasks: list[Task], n_jobs: int = 1, log: Any = sys.stdout) -> dict[str, Any]:
    """Run the unfinished tasks (``n_jobs`` spawned processes, or in this process for 1).

    Returns ``{"skipped", "ran", "failed", "wall_s", "cpu_s"}``; a finished seed (same spec) is skipped.
    """
    todo = [t for t in tasks if not is_finished(Path(t.path), t.spec)]
    print(f"{len(tasks) - len(todo)} of {len(tasks)} seeds already finished; running {len(todo)} "
          f"with {n_jobs} job(s)", file=log, flush=True)
    start, cpu, failed = time.perf_counter(), 0.0, []
    pool = mp.get_context("spawn").Pool(n_jobs) if n_jobs > 1 and len(todo) > 1 else None
    results = pool.imap_unordered(_run_safely, todo) if pool else map(_run_safely, todo)
    try:
        for i, (path, wall, error) in enumerate(results, 1):
            cpu += wall
            status = f"FAILED {error}" if error else ""
            print(f"[{i}/{len(todo)}] {wall:7.1f}s  {path} {status}", file=log, flush=True)
            if error:
                failed.append(path)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    elapsed = time.perf_counter() - start
    return {"skipped": len(tasks) - len(todo), "ran": len(todo) - len(failed), "failed": failed,
            "wall_s": elapsed, "cpu_s": cpu}
