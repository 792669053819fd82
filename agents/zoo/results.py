"""Read zoo run folders: find the runs, turn what they wrote into curves, and score their ends.

A run is a folder ``<log-folder>/<algo>/<Env>_<N>/`` as ``train.py`` writes it; every run of an
(algo, env) pair counts as one seed, as in the RL Zoo's ``all_plots``. Two sources:

- ``monitor``: the training episodes, one row each, in ``*monitor.csv`` (SB3's ``Monitor`` /
  ``VecMonitor``, or the grouped algorithms' own writer, whose rows carry ``is_success`` and, on the
  token tasks, ``token_error``). The grouped algorithms write one batch of rows per update, all with
  the same ``t``, which is how ``updates`` are counted. Population mode writes no rows.
- ``eval``: the evaluations in ``evaluations.npz`` (``results``, ``task_errors``, ``successes``).

The task error of an episode is its ``token_error`` (token tasks) or ``1 - is_success`` (bandits, MNIST),
as ``rollout/task_error`` and ``python -m agents.evaluate`` define it; an env without either (CartPole)
has none.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.zoo import registry
from agents.zoo.run_files import RunFileError, read_run_yaml

X_AXES = ("timesteps", "episodes", "updates")
Y_AXES = ("task_error", "reward", "success")
SOURCES = ("monitor", "eval")
#: A run folder's name: ``<Env>_<N>``, with ``_<uuid4>`` after it for a ``-uuid`` run.
_RUN = re.compile(r"^(?P<env>.+)_(?P<n>\d+)(?:_[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})?$")


class ResultsError(ValueError):
    """A one-line problem with the requested runs: the message says where it looked and what it found."""


@dataclass(frozen=True)
class Run:
    """One run folder: its algorithm, env (folder name and id) and run number."""

    algo: str
    env_name: str
    env_id: str
    number: int
    path: str

    @property
    def grouped(self) -> bool:
        """True for a run of a grouped (paper) algorithm, whose monitor rows come one batch per update."""
        return self.algo in registry.ALGOS and self.algo not in registry.EXTERNAL_ALGOS


@dataclass
class Curve:
    """A curve of one run: ``x`` (timesteps, episodes or updates) and the smoothed ``y``."""

    x: np.ndarray
    y: np.ndarray


def _env_id(path: str, env_name: str) -> str:
    """The env id recorded in the run's ``args.yml`` (ours or rl_zoo3's; the folder name if there is none)."""
    args = os.path.join(path, env_name, "args.yml")
    if os.path.isfile(args):
        try:
            recorded = read_run_yaml(args)
        except RunFileError as err:
            raise ResultsError(str(err)) from err
        if isinstance(recorded.get("env"), str):
            return recorded["env"]
    return env_name


def list_runs(log_folder: str) -> list[Run]:
    """Every run folder ``<algo>/<Env>_<N>[_<uuid>]`` under ``log_folder`` with a model, monitor or
    evaluations."""
    if not os.path.isdir(log_folder):
        raise ResultsError(f"log folder {log_folder!r} does not exist")
    runs = []
    for algo in sorted(os.listdir(log_folder)):
        algo_path = os.path.join(log_folder, algo)
        if not os.path.isdir(algo_path):
            continue
        for name in sorted(os.listdir(algo_path)):
            match, path = _RUN.match(name), os.path.join(algo_path, name)
            if match is None or not os.path.isdir(path):
                continue
            env_name = match.group("env")
            written = glob.glob(os.path.join(path, "*monitor.csv")) + glob.glob(os.path.join(path, "*.zip"))
            if written or os.path.isfile(os.path.join(path, "evaluations.npz")):
                runs.append(Run(algo, env_name, _env_id(path, env_name), int(match.group("n")), path))
    return runs


def _env_folder_name(name: str) -> str:
    """An env given as an id, a short name or a folder name, as its folder name (``TPO-TokenReversal-v0``)."""
    try:
        import tpo_gym  # noqa: F401  (registers the TPO/ envs, so short names resolve)

        return registry.env_file_name(registry.resolve_env_id(name))
    except (ValueError, ImportError):
        return registry.env_file_name(name)


def _found(runs: list[Run]) -> str:
    """``a2c: CartPole-v1 (2 runs); tpo: TPO/TokenReversal-v0 (1 run)``."""
    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        counts[(run.algo, run.env_id)] = counts.get((run.algo, run.env_id), 0) + 1
    parts = [f"{algo}: {env} ({n} run{'s' * (n > 1)})" for (algo, env), n in sorted(counts.items())]
    return "; ".join(parts) if parts else "no runs"


def find_runs(log_folder: str, algos: list[str] | None = None, envs: list[str] | None = None) -> list[Run]:
    """The runs of ``algos`` (folder names, case-insensitive) on ``envs`` (ids, short or folder names).

    ``None`` selects everything found. Nothing found is a :class:`ResultsError` that says where it
    looked and what is there.
    """
    runs = list_runs(log_folder)
    if algos:
        wanted = {algo.lower() for algo in algos}
        missing = sorted(wanted - {run.algo.lower() for run in runs})
        if missing:
            raise ResultsError(
                f"no runs of {', '.join(missing)} in {os.path.join(log_folder, '<algo>', '<Env>_<N>')}; "
                f"found: {_found(runs)}"
            )
        runs = [run for run in runs if run.algo.lower() in wanted]
    if envs:
        names = {_env_folder_name(env): env for env in envs}
        missing = [env for name, env in names.items() if name not in {run.env_name for run in runs}]
        if missing:
            algos_found = "{" + ",".join(sorted({run.algo for run in runs})) + "}"
            where = os.path.join(log_folder, algos_found) if runs else log_folder
            raise ResultsError(f"no runs of {', '.join(missing)} in {where}; found: {_found(runs)}")
        runs = [run for run in runs if run.env_name in names]
    if not runs:
        raise ResultsError(f"no run folders ({os.path.join('<algo>', '<Env>_<N>')}) in {log_folder}")
    return runs


def read_monitor(path: str) -> Any:
    """The run's monitor rows as a ``pandas.DataFrame`` (all ``*monitor.csv`` files, by time, stable).

    Columns ``r, l, t`` plus the info keys; ``t`` counts from the earliest file's start.
    """
    import pandas

    files = sorted(glob.glob(os.path.join(path, "*monitor.csv")))
    if not files:
        raise ResultsError(f"{path}: no monitor.csv (population mode writes no training episodes: "
                           f"use --source eval)")  # fmt: skip
    frames, starts = [], []
    for name in files:
        with open(name) as f:
            header = json.loads(f.readline().lstrip("#"))
            frame = pandas.read_csv(f, index_col=None)
        frame["t"] = frame["t"] + header["t_start"]
        frames.append(frame)
        starts.append(header["t_start"])
    data = pandas.concat(frames).sort_values("t", kind="stable").reset_index(drop=True)
    data["t"] -= min(starts)
    return data


def task_errors(data: Any) -> np.ndarray | None:
    """Per-row task error: ``token_error``, else ``1 - is_success``; None if the rows have neither."""
    if "token_error" in data:
        return data["token_error"].to_numpy(dtype=float)
    if "is_success" in data:
        return 1.0 - data["is_success"].astype(float).to_numpy()
    return None


def _monitor_series(run: Run, x_axis: str, y_axis: str, max_timesteps: int | None) -> tuple[np.ndarray, ...]:
    """Unsmoothed ``(x, y)`` of a run's monitor rows (one point per episode, or per update)."""
    data = read_monitor(run.path)
    timesteps = np.cumsum(data["l"].to_numpy(dtype=float))
    if max_timesteps is not None:
        data, timesteps = data[timesteps <= max_timesteps], timesteps[timesteps <= max_timesteps]
    columns = ", ".join(str(c) for c in data.columns)
    if y_axis == "reward":
        y = data["r"].to_numpy(dtype=float)
    elif y_axis == "success":
        if "is_success" not in data:
            raise ResultsError(f"{run.path}: no is_success in its monitor rows ({columns}); use -y reward")
        y = data["is_success"].astype(float).to_numpy()
    else:
        errors = task_errors(data)
        if errors is None:
            raise ResultsError(
                f"{run.path}: {run.env_id} defines no task error (monitor columns: {columns}); use -y reward"
            )
        y = errors
    if x_axis == "episodes":
        return np.arange(1, len(y) + 1, dtype=float), y
    if x_axis == "timesteps":
        return timesteps, y
    if not run.grouped:
        raise ResultsError(
            f"{run.path}: -x updates needs runs of the grouped algorithms (their monitor rows come one batch "
            f"per update); {run.algo} writes one row per episode: use -x timesteps or -x episodes"
        )
    batch = np.concatenate([[0], np.cumsum(np.diff(data["t"].to_numpy()) != 0)]) if len(y) else np.zeros(0)
    n_updates = int(batch[-1]) + 1 if len(batch) else 0
    counts = np.bincount(batch.astype(int), minlength=n_updates)
    return np.arange(1, n_updates + 1, dtype=float), np.bincount(batch.astype(int), weights=y) / counts


def _eval_series(run: Run, x_axis: str, y_axis: str, max_timesteps: int | None) -> tuple[np.ndarray, ...]:
    """Unsmoothed ``(timesteps, y)`` of a run's evaluations (the mean over each evaluation's episodes)."""
    path = os.path.join(run.path, "evaluations.npz")
    if not os.path.isfile(path):
        raise ResultsError(f"{run.path}: no evaluations.npz (train with --eval-freq > 0, or use --source "
                           f"monitor)")  # fmt: skip
    if x_axis != "timesteps":
        raise ResultsError(f"--source eval has only -x timesteps, not -x {x_axis}")
    with np.load(path) as data:
        key = {"reward": "results", "task_error": "task_errors", "success": "successes"}[y_axis]
        if key not in data:
            raise ResultsError(f"{path} has no {key!r} (it has {', '.join(data.files)}); use -y reward")
        x, y = data["timesteps"].astype(float), np.asarray(data[key], dtype=float).reshape(len(data[key]), -1)
    keep = x <= max_timesteps if max_timesteps is not None else np.ones(len(x), dtype=bool)
    return x[keep], y[keep].mean(axis=1)


def series(
    run: Run, x_axis: str, y_axis: str, source: str = "monitor", max_timesteps: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The unsmoothed points ``(x, y)`` of ``run`` for the chosen axes and source."""
    for name, value, allowed in (("x-axis", x_axis, X_AXES), ("y-axis", y_axis, Y_AXES),
                                 ("source", source, SOURCES)):  # fmt: skip
        if value not in allowed:
            raise ResultsError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
    read = _monitor_series if source == "monitor" else _eval_series
    x, y = read(run, x_axis, y_axis, max_timesteps)
    if len(x) == 0:
        raise ResultsError(f"{run.path}: no {source} data" + (f" up to {max_timesteps} timesteps"
                                                             if max_timesteps is not None else ""))
    return x, y


def smooth(x: np.ndarray, y: np.ndarray, window: int) -> Curve:
    """The moving average of ``y`` over ``window`` points, at each window's last ``x`` (``window_func``).

    A series shorter than ``window`` is averaged over all its points so far (the window shrinks).
    """
    if window < 1:
        raise ResultsError(f"--window must be a positive number of points, got {window}")
    window = min(window, len(y))
    sums = np.cumsum(np.concatenate([[0.0], y]))
    return Curve(x[window - 1 :], (sums[window:] - sums[:-window]) / window)


def final_value(y: np.ndarray, window: int) -> float:
    """The end of a run: the mean of its last ``window`` points."""
    return float(np.mean(y[-max(1, min(window, len(y))) :]))


def seed_mean_se(values: list[float] | np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seed mean and standard error of ``values`` over ``axis`` (the seeds), the one definition the zoo's
    plots and the paper's reports share: ``se = std / sqrt(n)`` with the population std (divisor n, as
    the paper's figures: ``sqrt(mean((x - mean x)^2)) / sqrt(n)``); nan where there is one seed, which
    has no spread to report."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[axis]
    mean = values.mean(axis=axis)
    se = values.std(axis=axis) / np.sqrt(n) if n > 1 else np.full(np.shape(mean), np.nan)
    return mean, se


def aggregate(curves: list[Curve], n_points: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Curves of several seeds on one grid over the x range they share: ``(x, mean, standard error)``."""
    start, stop = max(c.x[0] for c in curves), min(c.x[-1] for c in curves)
    if stop <= start:  # no shared range (one point each, or disjoint): the last shared-or-final point
        grid = np.array([stop])
    else:
        grid = np.linspace(start, stop, n_points)
    values = np.stack([np.interp(grid, c.x, c.y) for c in curves])
    mean, se = seed_mean_se(values)
    return grid, mean, se
