"""Plot zoo runs: learning curves over seeds (mean +- standard error) and a table of final scores.

    python -m agents.zoo.plots -f logs/ -a tpo grpo sb3_ppo -e TokenReversal -y task_error -x updates
    python -m agents.zoo.plots -f logs/ -a a2c dqn -e CartPole-v1 Acrobot-v1 -y reward --table scores.md

The RL Zoo's ``plot_train`` and ``all_plots`` in one command: every run ``<Env>_<N>`` of an (algo, env)
pair is one seed; each env gets a panel with one curve per algorithm (the mean over seeds, with a
band of one standard error), all in one PNG. The data are the training episodes (``--source monitor``,
smoothed over ``--window`` points) or the evaluations (``--source eval``). The table gives, per
algorithm and env, the final task error and reward (the mean of the last ``--window`` points of each
seed), mean +- standard error over seeds, and the number of seeds. Nothing is shown on screen unless
``--show`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.zoo import results
from agents.zoo.results import ResultsError, Run

#: Default smoothing: 100 episodes (the RL Zoo's plot_train), one point for updates and evaluations.
DEFAULT_WINDOW = {"episode": 100, "update": 1, "eval": 1}
X_LABELS = {"timesteps": "Timesteps", "episodes": "Episodes", "updates": "Updates"}
Y_LABELS = {"task_error": "Task error", "reward": "Episode reward", "success": "Success rate"}


@dataclass
class Group:
    """The runs (seeds) of one algorithm on one env, and their curves."""

    algo: str
    env_id: str
    runs: list[Run]
    curves: list[results.Curve] = field(default_factory=list)


def build_parser() -> argparse.ArgumentParser:
    """The command line, with the RL Zoo's plotting flag names."""
    p = argparse.ArgumentParser(prog="python -m agents.zoo.plots", description=__doc__.split("\n")[0])
    p.add_argument("-f", "--log-folder", "--exp-folder", dest="log_folder", default="logs", help="log folder")
    p.add_argument("-a", "--algos", "--algo", dest="algos", nargs="+", help="algorithms (default: all found)")
    p.add_argument("-e", "--envs", "--env", dest="envs", nargs="+",
                   help="envs: ids or short names (default: all)")
    p.add_argument("-x", "--x-axis", choices=results.X_AXES, default="timesteps", help="x axis")
    p.add_argument("-y", "--y-axis", choices=results.Y_AXES, default="task_error", help="y axis")
    p.add_argument("--source", choices=results.SOURCES, default="monitor",
                   help="monitor: training episodes (*monitor.csv); eval: evaluations.npz")  # fmt: skip
    p.add_argument("-w", "--window", "--episode-window", dest="window", type=int, default=None,
                   help="moving-average window (default: 100 episodes, 1 update or evaluation)")  # fmt: skip
    p.add_argument("-max", "--max-timesteps", type=int, default=None, help="drop data after N timesteps")
    p.add_argument("--y-scale", choices=("log", "linear"), default=None,
                   help="y scale (default: log for the task error, linear otherwise)")  # fmt: skip
    p.add_argument("-o", "--output", default=None, help="PNG file (default: <log-folder>/plots/<y>-<x>.png)")
    p.add_argument("--table", default=None, help="also write the score table (markdown) to this file")
    p.add_argument("--figsize", nargs=2, type=float, default=None, help="width height in inches")
    p.add_argument("--show", action="store_true", help="also show the figure in a window")
    return p


def default_window(x_axis: str, source: str) -> int:
    """The smoothing window for these axes: episodes 100, updates and evaluations 1."""
    return DEFAULT_WINDOW["eval" if source == "eval" else "update" if x_axis == "updates" else "episode"]


def group_runs(runs: list[Run]) -> list[Group]:
    """The runs grouped by (algo, env), sorted by env then algo."""
    groups: dict[tuple[str, str], Group] = {}
    for run in runs:
        groups.setdefault((run.env_id, run.algo), Group(run.algo, run.env_id, [])).runs.append(run)
    return [groups[key] for key in sorted(groups)]


def load_curves(groups: list[Group], args: argparse.Namespace) -> list[Group]:
    """The groups with their smoothed curves (one per seed) for the chosen axes.

    A run without these data (CartPole has no task error; population mode no monitor rows) is left
    out with a printed note; if no run is left, the first reason is the error.
    """
    kept, left_out = [], []
    for group in groups:
        runs, reasons = [], []
        for run in group.runs:
            try:
                x, y = results.series(run, args.x_axis, args.y_axis, args.source, args.max_timesteps)
            except ResultsError as err:
                reasons.append(str(err).removeprefix(f"{run.path}: "))
                continue
            runs.append(run)
            group.curves.append(results.smooth(x, y, args.window))
        if reasons:
            runs_in = f"{len(reasons)} run{'s' * (len(reasons) > 1)} in {os.path.dirname(group.runs[0].path)}"
            left_out.append(f"{group.algo} on {group.env_id} ({runs_in}): {reasons[0]}")
        if runs:
            group.runs = runs
            kept.append(group)
    if not kept:
        raise ResultsError(left_out[0] + (f" (and {len(left_out) - 1} more)" if len(left_out) > 1 else ""))
    for note in left_out:
        print(f"Left out {note}")
    return kept


def score_rows(groups: list[Group], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per (algo, env): seeds, final timesteps (smallest over seeds), and the final task error and reward
    (mean and standard error over seeds of the mean of each seed's last ``window`` points; None where
    the env defines no task error)."""
    rows = []
    for group in groups:
        row: dict[str, Any] = {"algo": group.algo, "env": group.env_id, "seeds": len(group.runs)}
        ends = [results.series(run, "timesteps", "reward", args.source, args.max_timesteps)[0][-1]
                for run in group.runs]  # fmt: skip
        row["timesteps"] = int(min(ends))
        for y_axis in ("task_error", "reward"):
            try:
                finals = [results.final_value(results.series(run, args.x_axis if args.source == "monitor"
                                                             else "timesteps", y_axis, args.source,
                                                             args.max_timesteps)[1], args.window)
                          for run in group.runs]  # fmt: skip
            except ResultsError:
                row[y_axis] = None
                continue
            mean, se = results.seed_mean_se(finals)
            row[y_axis] = (float(mean), float(se))
        rows.append(row)
    return rows


def _cell(value: tuple[float, float] | None, digits: int) -> str:
    if value is None:
        return "n/a"
    mean, se = value
    return f"{mean:.{digits}f}" if np.isnan(se) else f"{mean:.{digits}f} ± {se:.{digits}f}"


def score_table(rows: list[dict[str, Any]], window: int, unit: str) -> str:
    """The markdown table of :func:`score_rows`; ``unit`` names the points averaged (episodes, ...)."""
    lines = [
        "| algo | env | seeds | timesteps | final task error | final reward |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row['algo']} | {row['env']} | {row['seeds']} | {row['timesteps']} | "
                     f"{_cell(row['task_error'], 4)} | {_cell(row['reward'], 2)} |")  # fmt: skip
    lines.append("")
    lines.append(f"Final: the mean of each seed's last {window} {unit}; mean ± one standard error over seeds "
                 "(no ± for one seed); timesteps: where the shortest seed's data end.")
    return "\n".join(lines)


def plot(groups: list[Group], args: argparse.Namespace) -> Any:
    """One panel per env, one curve per algorithm (mean over seeds, band of one standard error).

    On a log scale, zeros (a task error of exactly 0) are drawn at a floor, half the smallest positive
    value of the panel, marked by a dotted line labelled 0.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    envs = sorted({group.env_id for group in groups})
    algos = sorted({group.algo for group in groups})
    ncols = min(len(envs), 3)
    nrows = -(-len(envs) // ncols)
    figsize = args.figsize or (4.8 * ncols, 3.6 * nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False)
    colors = {algo: plt.get_cmap("tab10")(i % 10) for i, algo in enumerate(algos)}
    log = (args.y_scale or ("log" if args.y_axis == "task_error" else "linear")) == "log"
    for ax, env in zip(axes.flat, envs, strict=False):
        plotted = [group for group in groups if group.env_id == env]
        positive = [c.y[c.y > 0].min() for g in plotted for c in g.curves if (c.y > 0).any()]
        floor = 0.5 * min(positive) if positive else 1e-3
        for group in plotted:
            x, mean, se = results.aggregate(group.curves)
            low, high = mean - np.nan_to_num(se), mean + np.nan_to_num(se)
            if log:
                mean, low, high = (np.maximum(v, floor) for v in (mean, low, high))
            label = f"{group.algo} ({len(group.runs)} seed{'s' * (len(group.runs) > 1)})"
            marker = "o" if len(x) == 1 else None
            ax.plot(x, mean, color=colors[group.algo], label=label, linewidth=1.8, marker=marker)
            ax.fill_between(x, low, high, color=colors[group.algo], alpha=0.2, linewidth=0)
        if log:
            ax.set_yscale("log")
            ax.axhline(floor, color="grey", linestyle=":", linewidth=0.8)
            ax.annotate("0", (0, floor), xycoords=("axes fraction", "data"), xytext=(-12, -3),
                        textcoords="offset points", color="grey", fontsize="small")  # fmt: skip
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_title(env)
        ax.set_xlabel(X_LABELS[args.x_axis])
        ax.set_ylabel(f"{Y_LABELS[args.y_axis]} ({'evaluation' if args.source == 'eval' else 'training'})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(envs):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Plot the runs chosen by ``argv``; print the table and where the PNG went; return both."""
    args = build_parser().parse_args(argv)
    import matplotlib

    if not args.show:
        matplotlib.use("Agg")  # headless: write the PNG, open no window
    if args.window is None:
        args.window = default_window(args.x_axis, args.source)
    groups = group_runs(results.find_runs(args.log_folder, args.algos, args.envs))
    groups = load_curves(groups, args)
    fig = plot(groups, args)
    output = args.output or os.path.join(args.log_folder, "plots", f"{args.y_axis}-{args.x_axis}.png")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=120)
    rows = score_rows(groups, args)
    unit = "evaluations" if args.source == "eval" else "updates" if args.x_axis == "updates" else "episodes"
    table = score_table(rows, args.window, unit)
    print(table)
    print(f"Figure: {output}")
    if args.table:
        with open(args.table, "w") as f:
            f.write(table + "\n")
        print(f"Table: {args.table}")
    if args.show:
        import matplotlib.pyplot as plt

        plt.show()
    else:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return {"figure": output, "table": table, "rows": rows}


if __name__ == "__main__":
    try:
        main()
    except ResultsError as err:
        sys.exit(f"error: {err}")
