"""Run the seeds of one experiment of the paper, one file per seed, resuming where a run stopped.

``python -m experiments.run <experiment> [--smoke] [--n-seeds N | --seeds 3,7-9] [--n-jobs J]
[--members-per-process N] [--episodes N] [--algorithms a,b] [--variants v,w] [--out results/paper]
[--launcher processes|ray] [--address A] [--retries R] [--checkpoint-every MINUTES]``.

Per-seed curves go to ``<out>/<experiment>/<variant>/<algo>/seed_<k>.npz`` (default out
``results/paper``, the committed results behind docs/results.md); a seed already finished with the same
settings is not rerun, so an interrupted command resumes where it stopped, and a sweep accumulates over
as many commands (and machines) as it needs. ``--smoke`` runs the small size (default out
``results/smoke``); ``--episodes`` sets the number of updates
(episodes on token tasks, steps on the bandits and MNIST). ``--seeds`` runs only the seeds it names
(so that two cores or machines can share the seeds of one run). ``all`` runs every experiment in turn.
``--members-per-process`` caps the consecutive seeds of one run that one process trains together as one
model (``experiments.runner``: where the policy has populations and the experiment reads no per-seed
``train/`` diagnostics); ``--dry-run`` lists the jobs, one process each, with the estimated CPU seconds
per seed and CPU-hours in all (``experiments.runner.estimate_cpu_s``: from the ``cpu_s`` that the seed
files under ``--out`` record for the same env, updates and work settings, this CPU's where they suffice).
``--launcher ray`` sends each job to a Ray cluster (``--address``, default a new local one;
``experiments.ray_launcher``), retrying a failed or lost job ``--retries`` times; the files are written
here either way. With the processes launcher a job saves its whole state every ``--checkpoint-every``
minutes (default 15; 0: never) beside its first seed file (``seed_<k>.checkpoint.pt``), and the same
command run again resumes a stopped job from there, as if it had never stopped
(``experiments.checkpoints``); the checkpoint goes once the seed files are written.
"""

from __future__ import annotations

import argparse
import sys

from experiments.core import RESULTS, SMOKE_RESULTS, check_device, checkpoint_path
from experiments.definitions import EXPERIMENTS, get_experiment
from experiments.launchers import LAUNCHERS, make_launcher
from experiments.runner import (
    MEMBERS_PER_PROCESS,
    Task,
    describe,
    estimate_cpu_s,
    plan,
    plan_jobs,
    recorded_cpu_s,
    run_tasks,
    unfinished,
)
from tpo_agents.provenance import cpu_description


def default_out(smoke: bool) -> str:
    """``results/smoke`` for smoke runs, ``results/paper`` otherwise."""
    return SMOKE_RESULTS if smoke else RESULTS


def _positive(text: str) -> int:
    """An integer >= 1 (argparse type)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seed_list(text: str) -> list[int]:
    """The seeds of ``--seeds``: comma-separated seeds and ranges, ``3,7-9`` = [3, 7, 8, 9] (argparse
    type; a seed is an integer >= 0, a range LOW-HIGH has LOW <= HIGH)."""
    seeds: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        low, dash, high = item.partition("-")
        high = high if dash else low
        if not (low.isdigit() and high.isdigit()) or int(low) > int(high):
            raise argparse.ArgumentTypeError(
                f"{item!r} in {text!r}: give seeds >= 0 and ranges LOW-HIGH with LOW <= HIGH, as in 3,7-9")
        seeds.update(range(int(low), int(high) + 1))
    return sorted(seeds)


def _list(text: str | None) -> list[str] | None:
    return [item.strip() for item in text.split(",") if item.strip()] if text else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m experiments.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    parser.add_argument("--smoke", action="store_true", help="the few-minutes size")
    which_seeds = parser.add_mutually_exclusive_group()
    which_seeds.add_argument("--n-seeds", type=int, help="seeds 0..N-1 (default: the experiment's)")
    which_seeds.add_argument("--seeds", type=seed_list,
                             help="only these seeds, comma-separated seeds and ranges (3,7-9)")
    parser.add_argument("--n-jobs", type=_positive,
                        help="jobs side by side: processes (default 1), or with --launcher ray the share "
                             "each run is split into (default: the cluster's CPUs)")
    parser.add_argument("--members-per-process", type=_positive, default=MEMBERS_PER_PROCESS,
                        help="at most this many consecutive seeds of one run train together as one "
                             "model in one process, where its policy has populations (supports_members) "
                             "and the experiment reads no per-seed train/ diagnostics "
                             f"(default {MEMBERS_PER_PROCESS}; 1: one seed per process)")
    parser.add_argument("--episodes", type=int, help="updates per run (episodes or steps)")
    parser.add_argument("--algorithms", help="comma-separated zoo names (default: the experiment's)")
    parser.add_argument("--variants", help="comma-separated variants (default: all)")
    parser.add_argument("--out", help=f"results folder (default {RESULTS}, or {SMOKE_RESULTS} with --smoke)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the jobs (batched seeds) with their estimated CPU cost, and exit")
    parser.add_argument("--device", default="cpu",
                        help="PyTorch device of every job: cpu (default), cuda or cuda:N; several jobs "
                             "(--n-jobs) share one GPU side by side")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="processes",
                        help="where the jobs run: processes of this machine (default) or a Ray cluster")
    parser.add_argument("--address", help="the Ray cluster (auto, HOST:6379 or ray://HOST:10001; default: "
                                          "RAY_ADDRESS, the one `ray start` started here, else a new local "
                                          "cluster); --launcher ray only")
    parser.add_argument("--retries", type=int, help="runs of a failed or lost Ray job after its first "
                                                    "(default 3); --launcher ray only")
    parser.add_argument("--checkpoint-every", type=_minutes, metavar="MINUTES",
                        help=f"save a job's state this often and resume a stopped job from it (default "
                             f"{CHECKPOINT_EVERY_MIN:g}; 0: never); --launcher processes only")
    return parser.parse_args(argv)


CHECKPOINT_EVERY_MIN = 15.0
"""Minutes between a job's checkpoints by default (the processes launcher)."""


def _minutes(text: str) -> float:
    """A number of minutes >= 0 (argparse type)."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of minutes >= 0, got {text}")
    return value


def checkpoint_every_s(launcher: str, minutes: float | None) -> float | None:
    """Seconds between a job's checkpoints (None: none): ``minutes`` (default :data:`CHECKPOINT_EVERY_MIN`)
    with the processes launcher; none with Ray, whose jobs run on other machines' disks (a
    ``ValueError`` where minutes > 0 are asked for)."""
    if launcher != "processes":
        if minutes:
            raise ValueError(f"--checkpoint-every {minutes:g}: --launcher {launcher} keeps no checkpoints (a "
                             "lost job reruns from its start); use --launcher processes, or leave it out")
        return None
    minutes = CHECKPOINT_EVERY_MIN if minutes is None else minutes
    return minutes * 60 if minutes > 0 else None


def main(argv: list[str] | None = None) -> int:
    """Run the experiment(s); non-zero exit status if a seed failed."""
    args = parse_args(argv)
    out = args.out or default_out(args.smoke)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    try:
        check_device(args.device)
        every_s = checkpoint_every_s(args.launcher, args.checkpoint_every)
        launcher = make_launcher(args.launcher, args.n_jobs, args.address, args.retries)
    except (ValueError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        experiment = get_experiment(name)
        try:
            tasks = plan(experiment, out, args.smoke, args.n_seeds, args.episodes,
                         _list(args.algorithms), _list(args.variants), args.device, every_s, args.seeds)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"== {name} ({experiment.paper}): {len(tasks)} seeds -> {out}/{name}", flush=True)
        if args.dry_run:
            _print_jobs(tasks, args.members_per_process, args.n_jobs or 1, out)
            continue
        summary = run_tasks(tasks, members_per_process=args.members_per_process, launcher=launcher)
        failed += len(summary["failed"])
        print(f"== {name}: ran {summary['ran']}, skipped {summary['skipped']}, failed "
              f"{len(summary['failed'])}; wall {summary['wall_s']:.1f}s, "
              f"sum of run times {summary['cpu_s']:.1f}s", flush=True)
    return 1 if failed else 0


def _print_jobs(tasks: list[Task], members_per_process: int, n_jobs: int, out: str) -> None:
    """The jobs that would run the unfinished ``tasks`` in ``n_jobs`` processes, one line each, with their
    estimated one-thread CPU-hours from the seeds recorded under ``out`` (:func:`estimate_cpu_s`) and the
    checkpoint a job would resume from."""
    todo = unfinished(tasks)
    jobs = plan_jobs(todo, members_per_process, n_jobs=n_jobs)
    print(f"  {len(tasks) - len(todo)} seeds finished; {len(todo)} to run as {len(jobs)} job(s), "
          "one process each:")
    recorded = recorded_cpu_s(out) if jobs else []
    hours, unknown = 0.0, 0
    for job in jobs:
        spec = job[0].spec
        per_seed = estimate_cpu_s(spec, recorded, cpu_description())
        if per_seed is None:
            unknown += len(job)
        else:
            hours += len(job) * per_seed / 3600
        cost = "CPU s per seed: no estimate" if per_seed is None else f"CPU s per seed: ~{per_seed:.0f}"
        checkpoint = checkpoint_path(job[0].path, len(job))
        resumes = f"  (resumes from {checkpoint.name} if it is of this run)" if checkpoint.exists() else ""
        print(f"  {describe(job)}  {spec.algo} {spec.env_id} {spec.env_kwargs} {spec.kwargs} "
              f"updates={spec.n_updates}  {cost}{resumes}")
    if jobs:
        print(f"  estimated: {hours:.1f} one-thread CPU-hours for {len(todo) - unknown} seed(s), {unknown} "
              f"without an estimate (per seed: the mean cpu_s under {out} of the same method, env, updates "
              "and work settings; else of the method at another H or V, scaled as the other methods' costs "
              f"scale; else of every method; each from the seeds run on this CPU, {cpu_description()}, "
              "where there are some, else from every machine's)")


if __name__ == "__main__":
    sys.exit(main())
