"""Speed benchmark: workloads of the paper's published JAX code, run with ours, whole process timed.

    python -m benchmarks.speed                       # every workload
    python -m benchmarks.speed token_reversal_smoke tpo_token_smoke --n-jobs 2
    python -m benchmarks.speed tabular_single_full --seeds 4 --members-per-process 100
    python -m benchmarks.speed tabular_multi_full --reference-python <venv>/bin/python --repeat 3

Each workload runs in a fresh subprocess (``python -m benchmarks.speed --inner NAME``: start-up,
imports and the seeds' processes included) through the multi-seed runner of ``experiments``, into a
fresh results folder, its seeds batched as there (up to ``--members-per-process`` consecutive seeds of
one run trained as one model per process). Printed per workload: wall seconds and the peak RSS of the
largest process, the ratio of our time to the paper's JAX code (github.com/JeanKaddour/tpo) beside the
target ratio, and the learning-curve summary (final error, steps to the threshold) beside that code's.

The ratio is against the reference's time **measured in the same invocation** when
``--reference-python`` names the interpreter of an environment where that code is installed (its CLI
runs the same workload in a fresh process, timed the same way), and against its **recorded** time
otherwise (:data:`REFERENCE_RECORDED`: whole processes on an idle 2-core x86_64 machine with AVX-512,
side by side with ours), labelled as such: times drift between machines and days. On a noisy machine
``--repeat N`` runs ours and the reference N times each, alternating, and compares the medians.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from experiments.core import Experiment, Grid, Size, check_device
from experiments.definitions import get_experiment
from experiments.definitions.tokens import token_run
from experiments.report import load_runs, summarize
from experiments.runner import MEMBERS_PER_PROCESS, plan, run_tasks

DENSE = ("ppo", "dg", "tpo", "grpo")


def _terminal_h5(updates: int, smoke: bool) -> Grid:
    """The paper code's transformer_rlvr smoke preset: reverse copy, terminal, H = 5, B = 256, K = 32."""
    return {"H5": {a: token_run(a, updates, reward="terminal", H=5, B=256, K=32) for a in DENSE}}


TERMINAL_H5 = Experiment(
    name="terminal_h5",
    paper="paper code's transformer_rlvr --smoke preset, first 10 episodes",
    full=Size(2, 10),
    smoke=Size(2, 10),
    build=_terminal_h5,
    threshold=0.05,
)


REFERENCE_RECORDED = "recorded 2026-12-01, idle 2-core AVX-512 machine, side by side with ours"
"""Where the recorded reference times of the workloads come from."""


@dataclass(frozen=True)
class Workload:
    """One workload: which runs, what the paper's JAX code measured for it (``reference_wall_s``,
    :data:`REFERENCE_RECORDED`; ``reference_args``: its CLI's arguments for the same work), and our
    speed target (``target_ratio``: at most this fraction of the reference's time; None: none)."""

    experiment: Experiment
    seeds: int
    updates: int
    algorithms: tuple[str, ...]
    variants: tuple[str, ...] | None
    reference_wall_s: float | None
    reference_rss_gb: float | None
    reference_results: dict[str, str] = field(default_factory=dict)
    description: str = ""
    target_ratio: float | None = None
    reference_args: tuple[str, ...] = ()


WORKLOADS: dict[str, Workload] = {
    "token_reversal_smoke": Workload(
        get_experiment("vocab_sweep"),
        2,
        50,
        DENSE,
        ("V2",),
        165.2,
        1.4,
        {
            "ppo": "final 0.4280, never < 1%",
            "dg": "final 0.3720, never",
            "tpo": "final 0.0100, 48",
            "grpo": "final 0.3960, never",
        },
        "reverse copy, bag-of-tokens, H=10, V=2, B=100, K=8; 2 seeds x 50 episodes x 4 algorithms",
        target_ratio=0.1,
        reference_args=("transformer", "--smoke"),
    ),
    "tpo_token_smoke": Workload(
        get_experiment("vocab_sweep"),
        2,
        50,
        ("tpo",),
        ("V2",),
        None,
        None,
        {"tpo": "final 0.0100, 48 (probe: 0.88 s per seed-episode, about 88 s of compute)"},
        "TPO-token alone, 2 seeds x 50 episodes",
    ),
    "terminal_h5": Workload(
        TERMINAL_H5,
        2,
        10,
        DENSE,
        None,
        237.1,
        3.0,
        {"ppo": "0.9492", "dg": "0.9492", "tpo": "0.9435", "grpo": "0.9729"},
        "terminal reward, H=5, B=256, K=32; 2 seeds x 10 episodes x 4 algorithms",
        target_ratio=0.1,
        reference_args=("transformer_rlvr", "--smoke", "--num-episodes", "10"),
    ),
    "mnist_full": Workload(
        get_experiment("mnist"),
        20,
        10_000,
        ("ce", "pg", "dg", "tpo"),
        None,
        206.0,
        None,
        {"ce": "2.66%", "pg": "6.10%", "dg": "3.12%", "tpo": "2.92% (5% at 1600)"},
        "MNIST bandit, 20 seeds x 10,000 steps x 4 algorithms",
        target_ratio=0.8,
        reference_args=("mnist",),
    ),
    "tabular_multi_full": Workload(
        get_experiment("tabular_multi"),
        100,
        1_000,
        ("pg", "dg", "tpo", "grpo", "ce"),
        None,
        8.2,
        None,
        description="multi-context bandit, 100 contexts x 10 arms, exact updates; 100 seeds x 1,000 steps "
        "x 5 algorithms",
        target_ratio=0.6,
        reference_args=("tabular_multi",),
    ),
    "tabular_single_full": Workload(
        get_experiment("tabular_single"),
        100,
        150,
        ("pg", "dg", "tpo", "grpo"),
        None,
        11.5,
        None,
        description="single-context bandit, 100 arms, B=100; 100 seeds x 150 steps x 4 algorithms",
        target_ratio=0.4,
        reference_args=("tabular_single",),
    ),
}


def run_inner(name: str, out: str, n_jobs: int, seeds: int | None, members_per_process: int,
              device: str = "cpu") -> int:
    """Run one workload's seeds on ``device`` (this is the timed subprocess)."""
    w = WORKLOADS[name]
    tasks = plan(w.experiment, out, False, seeds or w.seeds, w.updates, w.algorithms, w.variants, device)
    summary = run_tasks(tasks, n_jobs, members_per_process=members_per_process)
    peak_kb = max(
        resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    print(f"PEAK_RSS_KB {peak_kb}")
    return 1 if summary["failed"] else 0


def timed(cmd: list[str], what: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``cmd`` to its end; its result and wall seconds. A failure prints its output's tail and
    exits with one line naming ``what`` failed."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}")
    return proc, wall


def time_reference(name: str, python: str) -> float:
    """Wall seconds of the paper's JAX code on workload ``name``: its CLI (``python -m tpo.cli``) in a
    fresh process of the interpreter ``python``, without W&B, into a fresh folder."""
    w = WORKLOADS[name]
    with tempfile.TemporaryDirectory(prefix=f"reference-{name}-") as out:
        cmd = [python, "-m", "tpo.cli", *w.reference_args, "--no-wandb", "--save-dir", out]
        return timed(cmd, f"the reference's {name}")[1]


def alternating(repeat: int, *runs: Callable[[], float]) -> list[list[float]]:
    """Each of ``runs`` (a callable returning wall seconds) ``repeat`` times, alternating (ours, the
    reference's, ours, ...), so that a machine's drift over the minutes hits every one alike; each run's
    list of seconds."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    walls: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for run, times in zip(runs, walls, strict=True):
            times.append(run())
    return walls


def measure(name: str, n_jobs: int, seeds: int | None, members_per_process: int,
            reference_python: str | None = None, device: str = "cpu", repeat: int = 1) -> None:
    """Time one workload in a fresh process and print it beside the reference's time (measured now
    with ``reference_python``, else the recorded one) and the target ratio; with ``repeat`` > 1 both
    run that many times, alternating, and the medians are compared.

    With ``seeds`` below the workload's, the wall time is also extrapolated linearly to its seeds (only a
    rough guide where seeds are batched: a population's time need not grow linearly with its size).
    """
    w = WORKLOADS[name]
    seeds = seeds or w.seeds
    outcome: dict[str, Any] = {}

    def ours() -> float:
        with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as out:
            cmd = [sys.executable, "-m", "benchmarks.speed", "--inner", name, "--out", out]
            cmd += ["--n-jobs", str(n_jobs), "--seeds", str(seeds)]
            cmd += ["--members-per-process", str(members_per_process), "--device", device]
            proc, wall = timed(cmd, name)
            outcome["rows"] = summarize(w.experiment, load_runs(out, w.experiment.name))
            outcome["peak_kb"] = int(proc.stdout.rsplit("PEAK_RSS_KB", 1)[1].split()[0])
        return wall

    measured = reference_python is not None and bool(w.reference_args)
    runs = [ours] + ([lambda: time_reference(name, reference_python)] if measured else [])
    walls = alternating(repeat, *runs)
    wall = statistics.median(walls[0])
    wall_all = wall * w.seeds / seeds
    if measured:
        reference, source = statistics.median(walls[1]), "measured in this invocation"
    else:
        reference, source = w.reference_wall_s, REFERENCE_RECORDED
    ratio = f"{wall_all / reference:.2f}x" if reference else "n/a"
    ref = f"{reference:.1f} s, {source}" if reference else "n/a"
    rss = f"{w.reference_rss_gb:.1f} GB" if w.reference_rss_gb else "n/a"
    target = f"<= {w.target_ratio:g}x" if w.target_ratio else "n/a"
    met = "" if not (reference and w.target_ratio) else (" (met)" if wall_all <= w.target_ratio * reference
                                                          else " (missed)")
    print(f"\n## {name}: {w.description}")
    if repeat > 1:
        times = [", ".join(f"{t:.1f}" for t in run_walls) for run_walls in walls]
        print(f"{repeat} runs each, alternating; ours {times[0]} s"
              + (f"; reference {times[1]} s" if measured else "") + "; medians compared")
    if seeds != w.seeds:
        batched = " (seeds batched: only a rough guide)" if members_per_process > 1 else ""
        print(
            f"ran {seeds} of its {w.seeds} seeds in {wall:.1f} s; linear in seeds, all: {wall_all:.0f} s"
            + batched
        )
    print(
        f"wall {wall_all:.1f} s; ratio to the reference {ratio} (target {target}{met}; reference {ref}); "
        f"peak RSS of the largest process {outcome['peak_kb'] / 2**20:.2f} GB (reference {rss}); "
        f"n_jobs {n_jobs}, members per process {members_per_process}, device {device}"
    )
    print("| algo | final (mean +- s.e.) | steps to threshold | s per seed | reference |")
    print("|---|---|---|---|---|")
    for row in outcome["rows"]:
        steps = row.get("steps", "")
        print(
            f"| {row['algo']} | {row['final']:.4f} +- {row['final_se']:.4f} | {steps} | "
            f"{row['wall_s_per_seed']:.1f} | {w.reference_results.get(row['algo'], '')} |"
        )


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the benchmark(s)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", help=f"any of {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--n-jobs", type=int, default=2, help="processes (default 2, one per core)")
    parser.add_argument("--seeds", type=int, help="run fewer seeds than the workload's and extrapolate")
    parser.add_argument("--members-per-process", type=int, default=MEMBERS_PER_PROCESS,
                        help="at most this many seeds of one run train as one model per process "
                             f"(default {MEMBERS_PER_PROCESS}; 1: one seed per process)")
    parser.add_argument("--reference-python", metavar="PYTHON",
                        help="the interpreter of an environment with the paper's JAX code installed: time "
                             "its CLI on each workload in this invocation (default: its recorded times)")
    parser.add_argument("--device", default="cpu", help="PyTorch device of our runs (cpu, cuda, cuda:N)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each workload (and the reference) this many times, alternating, and "
                             "compare the medians (default 1): a noisy machine's figures")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        return run_inner(args.inner, args.out, args.n_jobs, args.seeds, args.members_per_process, args.device)
    unknown = [name for name in args.workloads if name not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    try:
        check_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    for name in args.workloads or list(WORKLOADS):
        measure(name, args.n_jobs, args.seeds, args.members_per_process, args.reference_python, args.device,
                args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
