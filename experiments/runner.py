"""Multi-seed runner: plan an experiment's seeds, skip the finished ones, run the rest as jobs, write them.

Plan the (variant, algorithm, seed) runs of an experiment, skip the finished ones, group the rest into
jobs, run the jobs with a launcher (``experiments.launchers``: local processes or a Ray cluster) and
write each seed's curves where the runner runs.

Seeds as a batch dimension: consecutive seeds k..k+S-1 of one run train as one model with ``seed=k,
n_seeds=S`` (``experiments.jobs``), at most ``members_per_process`` per job, where the run's policy has
populations (its class's ``supports_members``) and its experiment reads no per-seed ``train/``
diagnostics, which a population logs only as the members' means (``Task.per_seed``: the ``diagnostics``
experiment). Every other seed trains alone. A run whose population costs little more than one member
(``members_amortize``: tables, MLPs) stays in as few jobs as it can; others are shared out over the
processes (``plan_jobs``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from experiments.core import Experiment, RunSpec, is_finished, load_seed, seed_path
from experiments.definitions import borrowed_cells, get_experiment
from experiments.jobs import (  # noqa: F401  (re-exported: the runner's public names)
    BATCHINGS,
    TRAIN_DIAGNOSTICS,
    Job,
    Task,
    batching,
    build_model,
    describe,
    run_job,
    write_results,
)
from experiments.launchers import Launcher, ProcessLauncher

MEMBERS_PER_PROCESS = 100
"""The default cap on the seeds of one run that one process trains together."""


def plan(experiment: Experiment, out: str | Path, smoke: bool = False, n_seeds: int | None = None,
         updates: int | None = None, algorithms: Iterable[str] | None = None,
         variants: Iterable[str] | None = None, device: str = "cpu",
         checkpoint_every_s: float | None = None, seeds: Iterable[int] | None = None) -> list[Task]:
    """Every seed of every run of ``experiment`` (seed-major, so partial results cover every method),
    to train on ``device``, saving a job's state every ``checkpoint_every_s`` seconds (None: never;
    :mod:`experiments.checkpoints`): seeds ``0 .. n_seeds - 1``, by default each variant's full number
    (``Experiment.seeds_of``, per method; the smoke size's at ``smoke``), or exactly the seeds ``seeds``
    (so that several machines can share one run's seeds). A run that another experiment's
    cell holds with the same settings (:func:`~experiments.definitions.borrowed_cells`) is that
    experiment's task, its seed file in that experiment's folder."""
    size = experiment.smoke if smoke else experiment.full
    grid = experiment.build(updates or size.updates, smoke)
    wanted_algos = set(algorithms) if algorithms else None
    wanted_variants = set(variants) if variants else None
    _check_known("variant", wanted_variants, set(grid))
    _check_known("algorithm", wanted_algos, {a for runs in grid.values() for a in runs})
    chosen = sorted(set(seeds)) if seeds is not None else None
    if chosen is not None and (n_seeds is not None or not chosen or chosen[0] < 0):
        raise ValueError(f"seeds {chosen}: give one or more seeds >= 0, and not with n_seeds ({n_seeds})")
    borrowed = borrowed_cells(experiment, updates, smoke)
    tasks = []
    def count(variant: str, algo: str) -> int:
        return n_seeds or (size.seeds if smoke else experiment.seeds_of(variant, algo))

    every_seed = chosen if chosen is not None else range(
        max(count(variant, algo) for variant, runs in grid.items() for algo in runs))
    for seed in every_seed:
        for variant, runs in grid.items():
            if wanted_variants is not None and variant not in wanted_variants:
                continue
            for algo, spec in runs.items():
                in_run = chosen is not None or seed < count(variant, algo)
                if (wanted_algos is None or algo in wanted_algos) and in_run:
                    owner, cell = borrowed.get((variant, algo), (experiment.name, variant))
                    definition = get_experiment(owner)
                    tasks.append(Task(owner, cell, seed, spec, str(seed_path(out, owner, cell, algo, seed)),
                                      reads_train_diagnostics(definition), definition.curves, device,
                                      checkpoint_every_s))
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


def plan_jobs(tasks: list[Task], members_per_process: int = MEMBERS_PER_PROCESS,
              batchable: Callable[[list[RunSpec]], list[str]] = batching,
              n_jobs: int = 1) -> list[Job]:
    """The jobs (one process's work each) that run ``tasks``, seed-major like ``tasks``.

    The tasks of one run (experiment, variant, algorithm, spec fingerprint) train together when its
    policy has populations (``batchable``: :func:`experiments.jobs.batching`) and its experiment reads
    no per-seed ``train/`` diagnostics (``Task.per_seed``), as runs of consecutive seeds of at most
    ``members_per_process`` seeds (a seed missing from ``tasks``, e.g. a finished one, splits a run);
    every other task is a job of its own. How a run is cut depends on what a population costs:

    * ``"shares"`` (a population costs about its members' sum, the transformer): a run is cut into
      ``n_jobs`` shares at most, so that every process gets a share of every run;
    * ``"whole"`` (a population costs little more than one member, the table and the MLP): a run is
      kept whole (up to the cap), as cutting it would pay the per-update overhead once per share; only
      the last ``J mod n_jobs`` of these ``J`` jobs are cut into ``n_jobs`` shares, so that the processes
      get equally many whole jobs and a share of the rest.
    """
    groups: dict[tuple[str, ...], list[tuple[int, Task]]] = {}
    for index, task in enumerate(tasks):
        key = (task.experiment, task.variant, task.spec.algo, task.spec.fingerprint())
        groups.setdefault(key, []).append((index, task))
    candidates = [key for key, group in groups.items()
                  if members_per_process > 1 and len(group) > 1 and not group[0][1].per_seed]
    kinds = dict(zip(candidates, batchable([groups[key][0][1].spec for key in candidates]), strict=True)
                 ) if candidates else {}
    unknown = sorted(set(kinds.values()) - set(BATCHINGS))
    if unknown:
        raise ValueError(f"unknown batching {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(BATCHINGS)}")
    chunks, whole = [], []
    for key, group in groups.items():
        kind = kinds.get(key, "alone")
        if kind == "whole":
            whole += _consecutive(group, members_per_process)
        else:
            chunks += _consecutive(group, min(members_per_process, -(-len(group) // n_jobs))
                                   if kind == "shares" else 1)
    cut = len(whole) - len(whole) % n_jobs
    chunks += whole[:cut]
    for chunk in whole[cut:]:
        chunks += _consecutive(chunk, -(-len(chunk) // n_jobs))
    jobs = [(chunk[0][0], tuple(task for _, task in chunk)) for chunk in chunks]
    return [job for _, job in sorted(jobs, key=lambda item: (item[1][0].seed, item[0]))]


def _consecutive(group: list[tuple[int, Task]], cap: int) -> list[list[tuple[int, Task]]]:
    """One run's (position, task) pairs as runs of consecutive seeds of at most ``cap`` tasks."""
    chunks: list[list[tuple[int, Task]]] = []
    for item in sorted(group, key=lambda item: item[1].seed):
        last = chunks[-1] if chunks else None
        if last and len(last) < cap and item[1].seed == last[-1][1].seed + 1:
            last.append(item)
        else:
            chunks.append([item])
    return chunks


def unfinished(tasks: list[Task]) -> list[Task]:
    """The tasks without a finished seed file of the same spec."""
    return [t for t in tasks if not is_finished(Path(t.path), t.spec)]


WORK_SETTINGS = ("batch_size", "group_size", "group_mode", "n_epochs", "match", "skip_batches_without_signal")
"""The constructor settings that set what one update computes (sequences sampled and scored, epochs, an
update skipped): a run without recorded seeds of its own method costs as the runs that agree on these."""


def recorded_cpu_s(out: str | Path) -> list[tuple[dict[str, Any], float, str | None]]:
    """(spec, one-thread CPU seconds, CPU description) of every seed file under ``out`` whose meta records
    ``cpu_s``."""
    recorded = []
    for path in sorted(Path(out).glob("*/**/seed_*.npz")):
        meta = load_seed(path)[1]
        if meta.get("cpu_s") is not None:
            recorded.append((meta["spec"], float(meta["cpu_s"]), meta.get("cpu")))
    return recorded


def estimate_cpu_s(spec: RunSpec, recorded: list[tuple[dict[str, Any], float, str | None]],
                   cpu: str | None = None) -> float | None:
    """The expected one-thread CPU seconds of one seed of ``spec``, from the seeds of ``recorded``
    (:func:`recorded_cpu_s`) of the same env id, number of updates and :data:`WORK_SETTINGS`.

    With c(m, e) the mean cpu_s of method m's seeds at env kwargs e (H, V, reward), and e the spec's:
    c(m, e) if m has seeds at e; else, over the other settings e' where m has seeds, the mean of
    c(m, e') * r(e, e'), with r(e, e') the mean of c(n, e) / c(n, e') over the other methods n at both
    (a method's cost moved to the spec's setting as the other methods' costs move); else the mean cpu_s of
    all seeds at e; else None (nothing comparable recorded). With ``cpu`` (a
    :func:`~tpo_agents.provenance.cpu_description`; CPU models differ up to twofold) each step first
    takes the seeds that CPU ran, then every machine's.
    """
    comparable = [(other["algo"], json.dumps(other["env_kwargs"], sort_keys=True), cpu_s, machine)
                  for other, cpu_s, machine in recorded
                  if (other["env_id"], other["n_updates"]) == (spec.env_id, spec.n_updates)
                  and all(other["kwargs"].get(key) == spec.kwargs.get(key) for key in WORK_SETTINGS)]
    here = json.dumps(spec.env_kwargs, sort_keys=True)
    pools = ([[seed for seed in comparable if seed[3] == cpu]] if cpu is not None else []) + [comparable]
    for pool in pools:
        if (cost := _method_cost(spec.algo, here, pool)) is not None:
            return cost
    for pool in pools:
        if at_here := [cpu_s for _, setting, cpu_s, _ in pool if setting == here]:
            return sum(at_here) / len(at_here)
    return None


def _method_cost(algo: str, here: str, seeds: list[tuple[str, str, float, str | None]]) -> float | None:
    """:func:`estimate_cpu_s`'s c(m, e), else its moved estimate, else None, from ``seeds`` of
    (algo, setting, cpu_s, cpu)."""
    costs: dict[tuple[str, str], list[float]] = {}
    for other, setting, cpu_s, _ in seeds:
        costs.setdefault((other, setting), []).append(cpu_s)
    mean = {cell: sum(values) / len(values) for cell, values in costs.items()}
    if (algo, here) in mean:
        return mean[algo, here]
    moved = []
    for setting in [setting for method, setting in mean if method == algo]:
        ratios = [mean[other, here] / mean[other, there] for other, there in mean
                  if there == setting and other != algo and (other, here) in mean]
        if ratios:
            moved.append(mean[algo, setting] * sum(ratios) / len(ratios))
    return sum(moved) / len(moved) if moved else None


def run_tasks(tasks: list[Task], n_jobs: int = 1, log: Any = None,
              members_per_process: int = MEMBERS_PER_PROCESS, launcher: Launcher | None = None
              ) -> dict[str, Any]:
    """Run the unfinished tasks as the jobs of ``plan_jobs`` (up to ``members_per_process`` seeds of one
    run as one model) with ``launcher`` (default: ``n_jobs`` spawned processes, or this process for 1),
    writing each finished job's seed files here as it comes back; progress goes to ``log`` (default
    stdout).

    Returns ``{"skipped", "ran", "failed", "wall_s", "cpu_s"}`` (seeds, failed seeds' paths, and the sum
    of the jobs' wall times); a finished seed (same spec) is skipped.
    """
    todo = unfinished(tasks)
    log = log or sys.stdout
    launcher = launcher or ProcessLauncher(n_jobs)
    start, cpu, failed = time.perf_counter(), 0.0, []
    try:
        launcher.open(len(todo))
        jobs = plan_jobs(todo, members_per_process, launcher.batchable, launcher.n_jobs)
        print(f"{len(tasks) - len(todo)} of {len(tasks)} seeds already finished; running {len(todo)} as "
              f"{len(jobs)} job(s) of up to {members_per_process} seed(s) on {launcher.where()}",
              file=log, flush=True)
        for i, (label, paths, results, wall, error) in enumerate(launcher.outcomes(jobs), 1):
            cpu += wall
            if error is None:
                write_results(results)
            else:
                failed += paths
            status = f"FAILED {error}" if error else ""
            print(f"[{i}/{len(jobs)}] {wall:7.1f}s  {label} {status}", file=log, flush=True)
    finally:
        launcher.close()
    elapsed = time.perf_counter() - start
    return {"skipped": len(tasks) - len(todo), "ran": len(todo) - len(failed), "failed": failed,
            "wall_s": elapsed, "cpu_s": cpu}
