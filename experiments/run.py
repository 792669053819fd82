"""``python -m experiments.run <experiment> [--smoke] [--n-seeds N] [--n-jobs J] [--episodes N]
[--algorithms a,b] [--variants v,w] [--out results/]``: run the seeds of one experiment of the paper.

Per-seed curves go to ``<out>/<experiment>/<variant>/<algo>/seed_<k>.npz``; a seed already finished
with the same settings is not rerun, so an interrupted command resumes where it stopped. ``--smoke``
runs the small size (default out ``results/smoke``); ``--episodes`` sets the number of updates
(episodes on token tasks, steps on the bandits and MNIST). ``all`` runs every experiment in turn.
"""

from __future__ import annotations

import argparse
import sys

from experiments.definitions import EXPERIMENTS, get_experiment
from experiments.runner import plan, run_tasks


def default_out(smoke: bool) -> str:
    """``results/smoke`` for smoke runs, ``results`` otherwise."""
    return "results/smoke" if smoke else "results"


def _list(text: str | None) -> list[str] | None:
    return [item.strip() for item in text.split(",") if item.strip()] if text else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m experiments.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    parser.add_argument("--smoke", action="store_true", help="the few-minutes size")
    parser.add_argument("--n-seeds", type=int, help="seeds 0..N-1 (default: the experiment's)")
    parser.add_argument("--n-jobs", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--episodes", type=int, help="updates per run (episodes or steps)")
    parser.add_argument("--algorithms", help="comma-separated zoo names (default: the experiment's)")
    parser.add_argument("--variants", help="comma-separated variants (default: all)")
    parser.add_argument("--out", help="results folder (default results/, or results/smoke with --smoke)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the experiment(s); non-zero exit status if a seed failed."""
    args = parse_args(argv)
    out = args.out or default_out(args.smoke)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    failed = 0
    for name in names:
        experiment = get_experiment(name)
        try:
            tasks = plan(experiment, out, args.smoke, args.n_seeds, args.episodes,
                         _list(args.algorithms), _list(args.variants))
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"== {name} ({experiment.paper}): {len(tasks)} seeds -> {out}/{name}", flush=True)
        if args.dry_run:
            for task in tasks:
                print(f"  {task.path}  {task.spec.algo} {task.spec.env_id} {task.spec.env_kwargs} "
                      f"{task.spec.kwargs} updates={task.spec.n_updates}")
            continue
        summary = run_tasks(tasks, args.n_jobs)
        failed += len(summary["failed"])
        print(f"== {name}: ran {summary['ran']}, skipped {summary['skipped']}, failed "
              f"{len(summary['failed'])}; wall {summary['wall_s']:.1f}s, "
              f"sum of run times {summary['cpu_s']:.1f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
