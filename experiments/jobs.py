"""One job of the multi-seed runner: what it is, how it trains, and how its seeds' files are written.

What it is (``Task``, ``Job``), how it trains (``train_job``: the agent built as the zoo builds it,
trained for exactly its number of updates while a recorder records) and how its seeds' files are
written (``write_results``, on the machine that launched it).

A run builds the agent exactly as the zoo does (``tpo_agents.zoo.registry``: the class of the zoo name plus
the keyword arguments that define an ablation, then the run's own keyword arguments), on the env made
by ``gymnasium.make(env_id, **env_kwargs)``, with ``seed=k`` (seeds torch, numpy and the env), and
trains it for exactly ``n_updates`` updates (``learn(n_iterations=...)``). A job of S consecutive seeds
k..k+S-1 of one run trains them as one model with ``seed=k, n_seeds=S`` (a population whose member m
learns exactly as the run with seed k+m).
"""

from __future__ import annotations

import platform
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from experiments.core import RunSpec, checkpoint_path, kept, save_seed

TRAIN_DIAGNOSTICS = ("update/train/", "update/all_fail")
"""Curves that need each seed's own ``train/`` values (a population's logger holds only their means)."""


@dataclass(frozen=True)
class Task:
    """One seed of one run, and the file it writes.

    ``per_seed``: the experiment's figure reads per-seed ``train/`` diagnostics (``TRAIN_DIAGNOSTICS``),
    so the seed trains alone. ``curves``: the curves its file keeps (``Experiment.curves``; None: all).
    ``device``: the PyTorch device it trains on (not part of the run's identity: a seed finished on one
    device is not rerun on another). ``checkpoint_every_s``: the job's state is saved after an update once
    this many seconds have passed since the last save (:mod:`experiments.checkpoints`), and a job started
    again resumes from it; None: no checkpoints (the job of this task's first seed decides).
    """

    experiment: str
    variant: str
    seed: int
    spec: RunSpec
    path: str
    per_seed: bool = False
    curves: tuple[str, ...] | None = None
    device: str = "cpu"
    checkpoint_every_s: float | None = None


Job = tuple[Task, ...]
"""Consecutive seeds of one run that one process trains as one model (``n_seeds = len(job)``)."""


def build_model(spec: RunSpec, seed: int, n_seeds: int = 1, device: str = "cpu") -> Any:
    """The agent of ``spec`` with ``seed`` (and ``n_seeds`` members: seeds ``seed .. seed + n_seeds - 1``),
    built by the zoo's registry (:func:`tpo_agents.zoo.registry.make_agent`: the class of the name plus the
    settings that define an ablation, a contradiction refused), a ``lin_<v>`` learning rate as the zoo's
    schedule."""
    import gymnasium as gym

    import tpo_gym  # noqa: F401  (registers the envs)
    from tpo_agents.zoo.hyperparams import with_schedules
    from tpo_agents.zoo.registry import make_agent

    env = gym.make(spec.env_id, **spec.env_kwargs)
    return make_agent(spec.algo, spec.policy, env, seed=seed, n_seeds=n_seeds, device=device,
                      **with_schedules(spec.kwargs))


BATCHINGS = ("alone", "shares", "whole")
"""How a run's seeds batch (:func:`batching`)."""


def batching(specs: list[RunSpec]) -> list[str]:
    """How each run's seeds batch (:data:`BATCHINGS`): ``"alone"`` where its policy has no populations
    (``supports_members``; a policy the algorithm loads by name on first use, ``LLMPolicy``, has none) or
    where the run skips batches without signal (``skip_batches_without_signal``: each seed's own batches),
    ``"whole"`` where a population costs little more than one member (``members_amortize``: the table,
    the MLP), ``"shares"`` where it costs about its members' sum (the transformer). Imports the agents."""
    from tpo_agents.zoo.registry import get_algo

    kinds = []
    for spec in specs:
        policy = get_algo(spec.algo).policy_aliases.get(spec.policy)
        if not getattr(policy, "supports_members", False) or spec.kwargs.get("skip_batches_without_signal"):
            kinds.append("alone")
        else:
            kinds.append("whole" if getattr(policy, "members_amortize", False) else "shares")
    return kinds


def describe(job: Job) -> str:
    """A job's seed file, or ``<folder>/seed_<a>..<b>.npz (n seeds, one model)``."""
    if len(job) == 1:
        return job[0].path
    return f"{Path(job[0].path).parent}/seed_{job[0].seed}..{job[-1].seed}.npz ({len(job)} seeds, one model)"


PROGRESS_AFTER_S = 60.0
"""A job prints its progress (:class:`ProgressLines`) once it has run this many seconds."""


class ProgressLines:
    """A job's progress for whoever watches a long run: ``<label>: update k/N, t s, about r s left`` as k
    passes each tenth of its N updates (10%, ..., 90%; every update but the last for N < 10) once the job
    has run ``after_s`` seconds, so a short job prints nothing; to ``stream`` (default stderr);
    r = t (N − k) / (k − k0), t the seconds since the updates stood at k0 = ``first`` (a resumed job's)."""

    def __init__(self, label: str, n_updates: int, after_s: float = PROGRESS_AFTER_S,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.perf_counter,
                 first: int = 0) -> None:
        self.label, self.n_updates, self.after_s, self.first = label, n_updates, after_s, first
        self.stream, self.clock = stream, clock
        self.start = clock()

    def __call__(self, done: int) -> None:
        elapsed = self.clock() - self.start
        tenth = 10 * done // self.n_updates
        if (elapsed < self.after_s or done >= self.n_updates or done <= self.first
                or tenth == 10 * (done - 1) // self.n_updates):
            return
        left = elapsed * (self.n_updates - done) / (done - self.first)
        print(f"{self.label}: update {done}/{self.n_updates}, {elapsed:,.0f} s, about {left:,.0f} s left",
              file=self.stream or sys.stderr, flush=True)


SeedResult = tuple[str, dict[str, np.ndarray], dict[str, Any]]
"""One trained seed: (its file's path, its curves, its meta), written by :func:`write_results`."""


def needs_train_diagnostics(curves: tuple[str, ...] | None) -> bool:
    """Whether a seed file keeping ``curves`` (None: all) needs every update's ``train/`` diagnostics."""
    return curves is None or any(c.startswith(TRAIN_DIAGNOSTICS) for c in curves)


def needs_rollout_metrics(curves: tuple[str, ...] | None) -> bool:
    """Whether a seed file keeping ``curves`` (None: all) may need every batch's ``rollout/`` values
    (they are recorded as ``update/`` curves)."""
    return curves is None or any(c.startswith("update/") for c in curves)


def train_job(job: Job, code: str | None = None) -> tuple[list[SeedResult], float]:
    """Train a job's seeds as one model (``seed`` its first seed, ``n_seeds`` its size) and record their
    curves; returns each seed's (path, curves, meta), unwritten, and the job's wall seconds.

    Each meta is a single run's plus ``n_seeds`` (the job's size) and ``batch_wall_s`` (the job's wall
    time); ``wall_s`` is the job's wall time over its seeds, so that per-seed figures stay comparable;
    ``cpu`` the CPU it ran on (:func:`tpo_agents.provenance.cpu_description`: CPU seconds compare only
    between equal values); ``cpu_s`` and ``batch_cpu_s`` the same of the process's CPU time (one thread:
    the job's cost whatever else shares the machine, or however long the job was suspended); ``code`` is
    the code commit to record (default: this checkout's, :func:`tpo_agents.provenance.code_version`). The
    curves are those the experiment's report reads (``Task.curves``).

    With ``Task.checkpoint_every_s`` the job saves its state as it trains and, where a checkpoint of the
    same run is there, resumes from it (:mod:`experiments.checkpoints`); the times then add up the
    processes' and the meta's ``resumed_at`` lists the updates done at each resume.
    """
    import torch

    from experiments.checkpoints import Checkpointer, load_checkpoint
    from experiments.recorders import RECORDERS
    from tpo_agents.allocator import keep_freed_memory
    from tpo_agents.provenance import code_version, cpu_description

    first, spec = job[0], job[0].spec
    if [t.seed for t in job] != list(range(first.seed, first.seed + len(job))) or any(
            t.spec != spec for t in job):
        raise ValueError(f"{describe(job)}: a job is consecutive seeds of one run")
    torch.set_num_threads(1)
    keep_freed_memory()  # the job's updates reuse their tensors' memory (fewer page faults)
    warnings.filterwarnings("ignore", category=UserWarning)
    code = code or code_version()
    start, cpu_start = time.perf_counter(), time.process_time()
    checkpoint = checkpoint_path(first.path, len(job))
    identity = {"fingerprint": spec.fingerprint(), "seeds": [t.seed for t in job], "code": code,
                "device": first.device}
    resumed = load_checkpoint(checkpoint, identity) if first.checkpoint_every_s is not None else None
    if resumed is None:
        model = build_model(spec, first.seed, len(job), first.device)
        recorder = RECORDERS[spec.recorder](**spec.recorder_kwargs)
        # a fast collector computes train/ diagnostics and rollout/ values only for a callback that asks
        recorder.wants_train_diagnostics = needs_train_diagnostics(first.curves)
        recorder.wants_rollout_metrics = (recorder.wants_rollout_metrics
                                          and needs_rollout_metrics(first.curves))
        wall_before, cpu_before, resumed_at = 0.0, 0.0, []
    else:
        model, recorder = resumed["model"], resumed["recorder"]
        wall_before, cpu_before = resumed["wall_s"], resumed["cpu_s"]
        resumed_at = [*resumed["resumed_at"], recorder.updates_done]
    done = recorder.updates_done
    recorder.progress = ProgressLines(describe(job), spec.n_updates, PROGRESS_AFTER_S, first=done)
    callbacks = [recorder]
    if first.checkpoint_every_s is not None:
        def state() -> dict[str, Any]:
            return {"identity": identity, "model": model, "recorder": recorder, "resumed_at": resumed_at,
                    "wall_s": wall_before + time.perf_counter() - start,
                    "cpu_s": cpu_before + time.process_time() - cpu_start}
        callbacks.append(Checkpointer(checkpoint, first.checkpoint_every_s, state))
    model.learn(n_iterations=spec.n_updates - done, callback=callbacks, log_interval=0,
                reset_num_timesteps=resumed is None)
    if recorder.updates_done != spec.n_updates:
        raise RuntimeError(f"{describe(job)}: ran {recorder.updates_done} updates, expected {spec.n_updates}")
    wall = wall_before + time.perf_counter() - start
    cpu = cpu_before + time.process_time() - cpu_start
    results, curves = [], recorder.member_arrays()
    for member, task in enumerate(job):
        meta = {"experiment": task.experiment, "variant": task.variant, "seed": task.seed,
                "spec": asdict(spec), "fingerprint": spec.fingerprint(), "wall_s": wall / len(job),
                "n_seeds": len(job), "batch_wall_s": wall, "cpu_s": cpu / len(job), "batch_cpu_s": cpu,
                "host": platform.node(), "cpu": cpu_description(), "device": first.device,
                "torch": str(torch.__version__), "python": platform.python_version(), "code": code}
        if resumed_at:
            meta["resumed_at"] = resumed_at
        results.append((task.path, kept(curves[member], task.curves), meta))
    return results, wall


def write_results(results: list[SeedResult]) -> list[str]:
    """Write each trained seed's file atomically (:func:`experiments.core.save_seed`), then delete the job's
    checkpoint (:func:`experiments.core.checkpoint_path`); returns the paths."""
    for path, arrays, meta in results:
        save_seed(Path(path), arrays, meta)
    if results:
        checkpoint_path(results[0][0], len(results)).unlink(missing_ok=True)
    return [path for path, _, _ in results]


def run_job(job: Job) -> tuple[list[str], float]:
    """:func:`train_job` and :func:`write_results` in this process; returns (paths, wall seconds)."""
    results, wall = train_job(job)
    return write_results(results), wall


Outcome = tuple[str, list[str], list[SeedResult], float, str | None]
"""A finished job as a launcher reports it: (``describe(job)``, its paths, its trained seeds (empty if it
failed), wall seconds, the error or None)."""


def train_safely(job: Job, code: str | None = None) -> Outcome:
    """:func:`train_job` that reports an exception instead of raising it (one bad job stops nothing
    else)."""
    paths = [task.path for task in job]
    try:
        results, wall = train_job(job, code)
    except Exception as error:  # noqa: BLE001  (reported by run_tasks)
        return describe(job), paths, [], 0.0, f"{type(error).__name__}: {error}"
    return describe(job), paths, results, wall, None
