"""Plot zoo runs: learning curves over seeds (mean +- standard error) and a table of final scores.

    python -m tpo_agents.zoo.plots -f logs/ -a tpo grpo sb3_ppo -e TokenReversal -y task_error -x updates
    python -m tpo_agents.zoo.plots -f logs/ -a a2c dqn -e CartPole-v1 Acrobot-v1 -y reward --table scores.md

The RL Zoo's ``plot_train`` and ``all_plots`` in one command: every run ``<Env>_<N>`` of an (algo, env)
pair is one seed (a run resumed with ``-i`` continues the seed it was resumed from); each env gets a
panel with one curve per algorithm (the mean over seeds, with a band of one standard error), all in one
PNG. The data are the training episodes (``--source monitor``, smoothed over ``--window`` points) or the
evaluations (``--source eval``). Each env's comparison has one horizon, where its shortest run ends: the
panel's curves stop there, and the table gives, per algorithm and env, the task error and reward there
(each seed's smoothed curve at the horizon, mean +- standard error over seeds), the horizon and the
number of seeds. One line flags an env whose runs end at different x, or share no x range. Nothing is
shown on screen unless ``--show`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpo_agents.zoo import results
from tpo_agents.zoo.results import ResultsError, Run

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
    #: The x where the figure's curve ends and the table's values are taken.
    horizon: float = float("nan")


def build_parser() -> argparse.ArgumentParser:
    """The command line, with the RL Zoo's plotting flag names."""
    p = argparse.ArgumentParser(prog="python -m tpo_agents.zoo.plots", description=__doc__.split("\n")[0])
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

    A run without these data (CartPole has no task error; exact mode no monitor rows) is left
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


def _x(value: float) -> str:
    """An x value as the table and the notes print it: an integer where it is one."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _ends(group: Group) -> list[tuple[float, float, Run]]:
    """``(start, end, run)`` of each seed's curve in ``group``."""
    return [(float(c.x[0]), float(c.x[-1]), run) for run, c in zip(group.runs, group.curves, strict=True)]


def overlapping(groups: list[Group], unit: str) -> list[Group]:
    """The groups whose seeds share an x range; each other group is left out with a printed note (its
    seeds have no mean); if none is left, that note is the error."""
    kept, notes = [], []
    for group in groups:
        start, end = results.shared_range(group.curves)
        if start <= end:
            kept.append(group)
            continue
        _, end, first = min(_ends(group), key=lambda e: e[1])
        start, _, last = max(_ends(group), key=lambda e: e[0])
        notes.append(f"{group.algo} on {group.env_id}: its seeds share no {unit} range ({first.name} ends at "
                     f"{_x(end)}, {last.name} starts at {_x(start)}), so they have no mean")  # fmt: skip
    if not kept:
        raise ResultsError(notes[0] + (f" (and {len(notes) - 1} more)" if len(notes) > 1 else ""))
    for note in notes:
        print(f"Left out {note}")
    return kept


def set_horizons(groups: list[Group], unit: str) -> list[str]:
    """Set each group's horizon, one per env: where the env's shortest run ends. Returns one line per env
    whose runs end at different x (compared at the horizon) or share no range (then each algorithm is
    taken at its own end, and the line says so)."""
    notes = []
    for env in sorted({group.env_id for group in groups}):
        panel = [group for group in groups if group.env_id == env]
        ends = [(end, run) for group in panel for _, end, run in _ends(group)]
        horizon, shortest = min(ends, key=lambda e: e[0])
        late = [group for group in panel if results.shared_range(group.curves)[0] > horizon]
        for group in panel:
            group.horizon = results.shared_range(group.curves)[1] if late else horizon
        if late:
            start = results.shared_range(late[0].curves)[0]
            notes.append(f"No shared range on {env}: {late[0].algo} starts at {_x(start)} {unit}, after "
                         f"{shortest.name} ends at {_x(horizon)}; each algorithm is taken at its own end, "
                         f"not compared")  # fmt: skip
            continue
        longest, last = max(ends, key=lambda e: e[0])
        if longest > horizon:
            notes.append(f"Unequal lengths on {env}: the runs end between {_x(horizon)} {unit} "
                         f"({shortest.name}) and {_x(longest)} ({last.name}); the figure and the table stop "
                         f"at {_x(horizon)}")  # fmt: skip
    return notes


def score_rows(groups: list[Group], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per (algo, env): seeds, the horizon, and the task error and reward there (mean and standard error
    over seeds of each seed's smoothed curve at the horizon, as the figure draws it; None where the runs
    record no task error)."""
    rows = []
    for group in groups:
        row: dict[str, Any] = {"algo": group.algo, "env": group.env_id, "seeds": len(group.runs),
                               "horizon": group.horizon}  # fmt: skip
        for y_axis in ("task_error", "reward"):
            try:
                curves = group.curves if y_axis == args.y_axis else [
                    results.smooth(*results.series(run, args.x_axis, y_axis, args.source, args.max_timesteps),
                                   args.window) for run in group.runs]  # fmt: skip
            except ResultsError:
                row[y_axis] = None
                continue
            row[y_axis] = results.value_at(curves, group.horizon)
        rows.append(row)
    return rows


def _cell(value: tuple[float, float] | None, digits: int) -> str:
    if value is None:
        return "n/a"
    mean, se = value
    return f"{mean:.{digits}f}" if np.isnan(se) else f"{mean:.{digits}f} ± {se:.{digits}f}"


def score_table(rows: list[dict[str, Any]], window: int, unit: str, x_axis: str, notes: list[str]) -> str:
    """The markdown table of :func:`score_rows`, its definition and the ``notes`` of :func:`set_horizons`;
    ``unit`` names the points averaged (episodes, ...), ``x_axis`` the horizon's."""
    lines = [
        f"| algo | env | seeds | horizon ({x_axis}) | task error | reward |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row['algo']} | {row['env']} | {row['seeds']} | {_x(row['horizon'])} | "
                     f"{_cell(row['task_error'], 4)} | {_cell(row['reward'], 2)} |")  # fmt: skip
    smoothing = f"the mean of its last {window} {unit}" if window > 1 else "unsmoothed"
    lines.append("")
    lines.append(f"At the horizon, where the env's shortest run ends (the right edge of its panel): each "
                 f"seed's curve there ({smoothing}), then mean ± one standard error over seeds (no ± for one "
                 f"seed).")  # fmt: skip
    return "\n".join(lines + notes)


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
            x, mean, se = results.aggregate(group.curves, stop=group.horizon)
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
    """Plot the runs chosen by ``argv``; print the table (with the horizon notes) and where the PNG went;
    return them."""
    args = build_parser().parse_args(argv)
    import matplotlib

    if not args.show:
        matplotlib.use("Agg")  # headless: write the PNG, open no window
    if args.window is None:
        args.window = default_window(args.x_axis, args.source)
    groups = group_runs(results.find_runs(args.log_folder, args.algos, args.envs))
    groups = overlapping(load_curves(groups, args), args.x_axis)
    notes = set_horizons(groups, args.x_axis)
    fig = plot(groups, args)
    output = args.output or os.path.join(args.log_folder, "plots", f"{args.y_axis}-{args.x_axis}.png")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=120)
    rows = score_rows(groups, args)
    unit = "evaluations" if args.source == "eval" else "updates" if args.x_axis == "updates" else "episodes"
    table = score_table(rows, args.window, unit, args.x_axis, notes)
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
    return {"figure": output, "table": table, "rows": rows, "notes": notes}


def cli(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m tpo_agents.zoo.plots``: :func:`main`, a run-folder error as one ``error:``
    line."""
    try:
        main(argv)
    except ResultsError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    cli()
