"""Read zoo run folders: find the runs, turn what they wrote into curves, and score them at one horizon.

A run is a folder ``<log-folder>/<algo>/<Env>_<N>/`` as ``train.py`` (or rl_zoo3) writes it; every run
of an (algo, env) pair counts as one seed, as in the RL Zoo's ``all_plots``, except a run resumed from
another (``-i``/``--trained-agent``): it continues that run's seed from the step it resumed at. Our
``args.yml`` records the source run folder and that step (``resumed_from``, ``resumed_at``); for
rl_zoo3's folders they come from ``trained_agent`` and the step count its zip holds. Two sources:

- ``monitor``: the training episodes, one row each, in ``*monitor.csv`` (SB3's ``Monitor`` /
  ``VecMonitor``, or the grouped algorithms' own writer, whose rows carry ``is_success`` and, on the
  token tasks, ``token_error``). The grouped algorithms write one batch of rows per update, all with
  the same ``t``, which is how ``updates`` are counted. Exact mode writes no rows. A resumed run's
  monitor file counts from 0: its rows are placed after the step it resumed at.
- ``eval``: the evaluations in ``evaluations.npz`` (``results``, ``task_errors``, ``successes``), at the
  model's step count: this zoo keeps it on ``-i``, rl_zoo3 restarts it at 0 (placed after the resume).

The task error of an episode is its ``token_error`` (token tasks) or ``1 - is_success`` (bandits, MNIST),
as ``rollout/task_error`` and ``python -m tpo_agents.evaluate`` define it; an env without either (CartPole)
has none, and rl_zoo3's monitor files record neither.
"""

from __future__ import annotations

import glob
import json
import os
import re
import zipfile
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tpo_agents.zoo import registry
from tpo_agents.zoo.run_files import RunFileError, read_run_yaml

X_AXES = ("timesteps", "episodes", "updates")
Y_AXES = ("task_error", "reward", "success")
SOURCES = ("monitor", "eval")
#: A run folder's name: ``<Env>_<N>``, with ``_<uuid4>`` after it for a ``-uuid`` run.
_RUN = re.compile(r"^(?P<env>.+)_(?P<n>\d+)(?:_[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})?$")


class ResultsError(ValueError):
    """A one-line problem with the requested runs: the message says where it looked and what it found."""


@dataclass(frozen=True)
class Run:
    """One run folder: its algorithm, env (folder name and id), run number, who wrote it, and where it was
    resumed from (``-i``): the source run folder, the step count it resumed at, and that run itself
    (``previous``) where it is among the runs read, so that the run continues its seed's curve."""

    algo: str
    env_name: str
    env_id: str
    number: int
    path: str
    rl_zoo3: bool = False
    resumed_from: str | None = None
    resumed_at: int | None = None
    previous: Run | None = None

    @property
    def grouped(self) -> bool:
        """True for a run of a grouped (paper) algorithm, whose monitor rows come one batch per update."""
        return self.algo in registry.ALGOS and self.algo not in registry.EXTERNAL_ALGOS

    @property
    def name(self) -> str:
        """``<algo>/<Env>_<N>``: the run as notes name it."""
        return f"{self.algo}/{os.path.basename(self.path)}"

    def chain(self) -> list[Run]:
        """The runs of this seed in order: the first, then each run resumed from the one before."""
        runs = [self]
        while runs[0].previous is not None:
            runs.insert(0, runs[0].previous)
        return runs


@dataclass
class Curve:
    """A curve of one run: ``x`` (timesteps, episodes or updates) and the smoothed ``y``."""

    x: np.ndarray
    y: np.ndarray


def _recorded_args(path: str, env_name: str) -> dict[str, Any]:
    """The run's ``<Env>/args.yml`` (ours or rl_zoo3's), ``{}`` where there is none."""
    args = os.path.join(path, env_name, "args.yml")
    if not os.path.isfile(args):
        return {}
    try:
        return read_run_yaml(args)
    except RunFileError as err:
        raise ResultsError(str(err)) from err


def zip_timesteps(path: str) -> int | None:
    """The step count a model zip holds (``num_timesteps`` in its ``data``), None if it cannot be read."""
    try:
        with zipfile.ZipFile(path) as archive:
            return int(json.loads(archive.read("data"))["num_timesteps"])
    except (OSError, KeyError, TypeError, ValueError, zipfile.BadZipFile):
        return None


def _resume(recorded: dict[str, Any], args_file: str) -> tuple[str | None, int | None]:
    """``(source run folder, step count)`` of a run resumed with ``-i``, ``(None, None)`` for a new run.

    Our ``args.yml`` records both (``resumed_from``, ``resumed_at``); rl_zoo3's (and older runs') hold only
    ``trained_agent``, the zip as given: its folder, and the step count the zip holds (None if it is gone).
    """
    if recorded.get("resumed_from"):
        step = recorded.get("resumed_at")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ResultsError(f"{args_file}: resumed_at must be the step count the run resumed at, "
                               f"got {step!r}")
        return str(recorded["resumed_from"]), step
    trained = recorded.get("trained_agent")
    if not trained:
        return None, None
    return os.path.dirname(os.path.abspath(str(trained))), zip_timesteps(str(trained))


def _read_run(algo: str, name: str, path: str, env_name: str) -> Run:
    """The :class:`Run` of the folder ``path``: env id, writer and resume from its ``args.yml``."""
    recorded = _recorded_args(path, env_name)
    env_id = recorded["env"] if isinstance(recorded.get("env"), str) else env_name
    number = int(_RUN.match(name).group("n"))
    rl_zoo3 = bool(recorded) and not os.path.isfile(os.path.join(path, env_name, "command.txt"))
    resume = _resume(recorded, os.path.join(path, env_name, "args.yml"))
    return Run(algo, env_name, env_id, number, path, rl_zoo3, *resume)


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
            written = glob.glob(os.path.join(path, "*monitor.csv")) + glob.glob(os.path.join(path, "*.zip"))
            if written or os.path.isfile(os.path.join(path, "evaluations.npz")):
                runs.append(_read_run(algo, name, path, match.group("env")))
    return runs


def _source(run: Run, runs: list[Run]) -> Run | None:
    """The run of ``runs`` that ``run`` was resumed from (same algo and env), None if it is not there.

    Matched by path, or, where the recorded folder no longer exists (a moved log folder), by its
    ``<algo>/<Env>_<N>`` name.
    """
    if run.resumed_from is None:
        return None
    real = os.path.realpath(run.resumed_from)
    moved = not os.path.isdir(run.resumed_from)
    name = "/".join(os.path.normpath(run.resumed_from).split(os.sep)[-2:])
    for other in runs:
        if other is not run and (other.algo, other.env_id) == (run.algo, run.env_id) and (
            os.path.realpath(other.path) == real or (moved and other.name == name)
        ):
            return other
    return None


def seeds(runs: list[Run]) -> list[Run]:
    """The seeds of ``runs``: each run that no other run continues, linked (``previous``) to the runs it
    continues. A run resumed from another is not a seed of its own (a run continued twice starts two)."""
    sources = {id(run): _source(run, runs) for run in runs}
    continued = {id(source) for source in sources.values() if source is not None}

    def linked(run: Run, seen: frozenset[int]) -> Run:
        source = sources[id(run)]
        if source is None or id(source) in seen:
            return run
        return replace(run, previous=linked(source, seen | {id(run)}))

    return [linked(run, frozenset()) for run in runs if id(run) not in continued]


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
    """The seeds (:func:`seeds`) of ``algos`` (folder names, case-insensitive) on ``envs`` (ids, short or
    folder names).

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
    return seeds(runs)


def read_monitor(path: str) -> Any:
    """The run's monitor rows as a ``pandas.DataFrame`` (all ``*monitor.csv`` files, by time, stable).

    Columns ``r, l, t`` plus the info keys; ``t`` counts from the earliest file's start.
    """
    import pandas

    files = sorted(glob.glob(os.path.join(path, "*monitor.csv")))
    if not files:
        raise ResultsError(f"{path}: no monitor.csv (exact mode writes no training episodes: "
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


def _monitor_y(run: Run, data: Any, y_axis: str) -> np.ndarray:
    """The ``y_axis`` value of each monitor row: return, success, or task error."""
    columns = ", ".join(str(c) for c in data.columns)
    if y_axis == "reward":
        return data["r"].to_numpy(dtype=float)
    if y_axis == "success":
        if "is_success" not in data:
            raise ResultsError(f"{run.path}: no is_success in its monitor rows ({columns}); use -y reward")
        return data["is_success"].astype(float).to_numpy()
    errors = task_errors(data)
    if errors is not None:
        return errors
    if run.rl_zoo3:
        raise ResultsError(f"{run.path}: rl_zoo3's monitor file has no task_error column (no token_error or "
                           f"is_success; monitor columns: {columns}); use -y reward")  # fmt: skip
    raise ResultsError(f"{run.path}: {run.env_id} defines no task error (monitor columns: {columns}); "
                       f"use -y reward")


def _monitor_points(run: Run, x_axis: str, y_axis: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unsmoothed ``(x, y, steps)`` of a run's own monitor rows, one point per episode or per update:
    ``x`` counts from the run's own start, ``steps`` are its timesteps (the sum of the episode lengths)."""
    data = read_monitor(run.path)
    steps = np.cumsum(data["l"].to_numpy(dtype=float))
    y = _monitor_y(run, data, y_axis)
    if x_axis == "episodes":
        return np.arange(1, len(y) + 1, dtype=float), y, steps
    if x_axis == "timesteps":
        return steps, y, steps
    if not run.grouped:
        raise ResultsError(
            f"{run.path}: -x updates needs runs of the grouped algorithms (their monitor rows come one batch "
            f"per update); {run.algo} writes one row per episode: use -x timesteps or -x episodes"
        )
    if not len(y):
        return np.zeros(0), np.zeros(0), np.zeros(0)
    batch = np.concatenate([[0], np.cumsum(np.diff(data["t"].to_numpy()) != 0)]).astype(int)
    last_rows = np.append(np.flatnonzero(np.diff(batch)), len(batch) - 1)
    updates = np.arange(1, len(last_rows) + 1, dtype=float)
    return updates, np.bincount(batch, weights=y) / np.bincount(batch), steps[last_rows]


def _eval_points(run: Run, x_axis: str, y_axis: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unsmoothed ``(timesteps, y, timesteps)`` of a run's evaluations (the mean over each evaluation's
    episodes), at the step counts ``evaluations.npz`` records."""
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
    return x, y.mean(axis=1), x


def resume_step(run: Run) -> int:
    """The step count a resumed run continued from; a :class:`ResultsError` where it is unknown."""
    if run.resumed_at is None:
        raise ResultsError(f"{run.path}: resumed from {run.resumed_from} (args.yml's trained_agent), whose "
                           f"step count is not recorded and whose zip is not found")  # fmt: skip
    return run.resumed_at


def step_offset(run: Run, source: str) -> int:
    """What to add to the timesteps a run recorded to place them on its seed's step count: the step it
    resumed at for a resumed run's monitor rows (a new monitor file counts from 0) and for rl_zoo3's
    evaluations (rl_zoo3 restarts the step counter on ``-i``); 0 otherwise (a new run, and this zoo's
    evaluations, which keep the loaded step counter)."""
    if run.resumed_from is None:
        return 0
    return resume_step(run) if source == "monitor" or run.rl_zoo3 else 0


def _seed_points(run: Run, x_axis: str, y_axis: str, source: str) -> tuple[np.ndarray, ...]:
    """Unsmoothed ``(x, y, steps)`` of the seed that ``run`` ends: each run of its :meth:`Run.chain` up to
    the step the next resumed at, then the next; ``steps`` on the seed's step count, ``x`` too for
    ``-x timesteps`` and counted on over the runs for episodes and updates."""
    read = _monitor_points if source == "monitor" else _eval_points
    chain = run.chain()
    if chain[0].resumed_from is not None and x_axis != "timesteps":
        raise ResultsError(f"{chain[0].path}: resumed from {chain[0].resumed_from} at {chain[0].resumed_at} "
                           f"timesteps, a run not among those read, so its {x_axis} before are unknown; use "
                           f"-x timesteps")  # fmt: skip
    parts: list[tuple[np.ndarray, ...]] = []
    for part, following in zip(chain, [*chain[1:], None], strict=True):
        x, y, steps = read(part, x_axis, y_axis)
        steps = steps + step_offset(part, source)
        if following is not None:
            keep = steps <= resume_step(following)
            x, y, steps = x[keep], y[keep], steps[keep]
        count = sum(len(p[0]) for p in parts)
        parts.append((steps if x_axis == "timesteps" else x + count, y, steps))
    x, y, steps = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return x, y, steps


def series(
    run: Run, x_axis: str, y_axis: str, source: str = "monitor", max_timesteps: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The unsmoothed points ``(x, y)`` of the seed that ``run`` ends (a resumed run continues the runs it
    was resumed from) for the chosen axes and source, up to ``max_timesteps``."""
    for name, value, allowed in (("x-axis", x_axis, X_AXES), ("y-axis", y_axis, Y_AXES),
                                 ("source", source, SOURCES)):  # fmt: skip
        if value not in allowed:
            raise ResultsError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
    x, y, steps = _seed_points(run, x_axis, y_axis, source)
    if max_timesteps is not None:
        x, y = x[steps <= max_timesteps], y[steps <= max_timesteps]
    if len(x) == 0:
        raise ResultsError(f"{run.path}: no {source} data" + (f" up to {max_timesteps} timesteps"
                                                             if max_timesteps is not None else ""))
    return x, y


def smooth(x: np.ndarray, y: np.ndarray, window: int) -> Curve:
    """The moving average of ``y`` over the last ``window`` points, at every ``x``: the first ``window - 1``
    points average all the points so far (the RL Zoo's ``window_func`` drops them), so that each seed's
    curve starts at its first point and the seeds of runs that start together share a range."""
    if window < 1:
        raise ResultsError(f"--window must be a positive number of points, got {window}")
    sums = np.cumsum(np.concatenate([[0.0], y]))
    ends = np.arange(1, len(y) + 1)
    counts = np.minimum(ends, window)
    return Curve(x, (sums[ends] - sums[ends - counts]) / counts)


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


def shared_range(curves: list[Curve]) -> tuple[float, float]:
    """``(start, end)`` of the x range every one of ``curves`` covers: the latest start and the earliest
    end (``start > end`` where some do not overlap)."""
    return max(float(c.x[0]) for c in curves), min(float(c.x[-1]) for c in curves)


def value_at(curves: list[Curve], x: float) -> tuple[float, float]:
    """Seed mean and standard error of ``curves`` at ``x`` (each interpolated there): the point the
    figure draws at ``x``."""
    mean, se = seed_mean_se([np.interp(x, c.x, c.y) for c in curves])
    return float(mean), float(se)


def aggregate(curves: list[Curve], n_points: int = 200, stop: float | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Curves of several seeds on one grid from the x where they all start to ``stop`` (default: where
    the first ends): ``(x, mean, standard error)``; one point where that range is a single x."""
    start, end = shared_range(curves)
    stop = end if stop is None else stop
    if not start <= stop <= end:
        raise ResultsError(f"the curves all cover x from {start:g} to {end:g}, which does not hold {stop:g}")
    grid = np.array([stop]) if stop == start else np.linspace(start, stop, n_points)
    values = np.stack([np.interp(grid, c.x, c.y) for c in curves])
    mean, se = seed_mean_se(values)
    return grid, mean, se
