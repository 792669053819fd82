"""Hyperparameter search with Optuna, RL Zoo style: ``train.py --algo tpo --env TokenReversal -optimize``.

Each trial is an ordinary zoo run without files: the entry's hyperparameters (YAML < files <
``key:value`` overrides < flags, exactly as :func:`tpo_agents.zoo.run.configure` merges them) plus the
values the algorithm's sampler (:mod:`tpo_agents.zoo.samplers`) draws, checked and built by the zoo's own
run builder (:func:`tpo_agents.zoo.run.check_hyperparams`, :func:`tpo_agents.zoo.run.assemble`). It trains for
``n_timesteps`` with ``--n-evaluations`` evaluations (``--eval-episodes`` episodes on
``--n-eval-envs`` envs): the intermediate ones are reported to the trial, whose pruner may stop it,
and the last one, on the final policy, is the trial's value.

**Objective** (``--optimize-metric``): on ``TPO/`` envs (``auto``) the mean task error of the
evaluation episodes (the final ``token_error`` on token tasks, ``1 - is_success`` on the bandits and
MNIST), **minimised**; on other envs the mean evaluation reward, **maximised**. Both are recorded for
every trial. A study keeps the metric it was created with; a run that asks for another one is refused.

**Scaling**: ``--storage`` (``sqlite:///study.db``, any SQLAlchemy URL, or a journal file path such as
``logs/study.log``) with ``--study-name`` lets processes on one or several machines share one study;
each runs ``--n-trials`` trials (or until the study holds ``--max-total-trials``).

**Report**: ``<log-folder>/<algo>/report_<Env>_<n_trials>-trials-<n_timesteps>-<sampler>-<pruner>_<time>/``
with ``best.yml`` (an entry ``<env id>: {...}`` for ``zoo_configs/<algo>.yml`` or ``--hyperparams``),
``trials.csv``, ``optimization_history.png`` and ``param_importances.png`` (PED-ANOVA importances,
which need no scikit-learn).
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import difflib
import logging
import os
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from tpo_agents.modes import canonical_mode_name
from tpo_agents.zoo import callbacks as cb
from tpo_agents.zoo import hyperparams as hp
from tpo_agents.zoo import registry
from tpo_agents.zoo.run import RunSetup, assemble, check_hyperparams
from tpo_agents.zoo.samplers import SAMPLERS, SamplerContext
from tpo_agents.zoo.studies import default_study_name, open_storage

if TYPE_CHECKING:
    import optuna

SAMPLER_NAMES = ("tpe", "random", "cmaes")
PRUNER_NAMES = ("median", "halving", "none")
METRICS = ("auto", "task_error", "reward")
#: Direction of each metric's objective.
DIRECTIONS = {"task_error": "minimize", "reward": "maximize"}
#: Without ``--n-evaluations``: one evaluation per this many env steps (at least one), as the RL Zoo.
STEPS_PER_EVALUATION = 100_000
#: ``--eval-episodes`` of a search: each trial's value is the mean over this many evaluation episodes, so
#: that its noise stays below the differences between trials (docs/zoo.md, "Evaluation size").
SEARCH_EVAL_EPISODES = 100
#: The ``error`` recorded for a trial that Ctrl-C stopped.
INTERRUPTED = "interrupted (Ctrl-C)"
#: Errors a diverging trial raises (NaN logits, invalid distributions): the trial is pruned, as in the zoo.
DIVERGENCE_ERRORS = (ValueError, AssertionError, FloatingPointError)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the RL Zoo's search flags (``-optimize``, ``--n-trials``, ``--sampler``, ...) to ``parser``."""
    group = parser.add_argument_group("hyperparameter search (Optuna)")
    group.add_argument(
        "-optimize", "--optimize-hyperparameters", action="store_true", default=False,
        help="search hyperparameters with Optuna instead of training once",
    )  # fmt: skip
    group.add_argument("--n-trials", type=int, default=500, help="trials run by this process")
    group.add_argument(
        "--max-total-trials", type=int, default=None,
        help="stop once the (shared) study holds this many trials; takes precedence over --n-trials",
    )  # fmt: skip
    group.add_argument("--n-jobs", type=int, default=1, help="parallel trials in this process (threads)")
    group.add_argument("--sampler", type=str, default="tpe", help=f"one of: {', '.join(SAMPLER_NAMES)}")
    group.add_argument("--pruner", type=str, default="median", help=f"one of: {', '.join(PRUNER_NAMES)}")
    group.add_argument(
        "--n-startup-trials",
        type=int,
        default=10,
        help="trials drawn at random before the sampler (and pruner) start",
    )
    group.add_argument(
        "--n-evaluations", type=int, default=None,
        help=f"evaluations per trial; None: one per {STEPS_PER_EVALUATION} steps, at least 1",
    )  # fmt: skip
    group.add_argument(
        "--storage", type=str, default=None,
        help="a database URL (sqlite:///study.db) or a journal file path (study.log); None: in memory",
    )  # fmt: skip
    group.add_argument(
        "--study-name",
        type=str,
        default=None,
        help="study name (None: <algo>_<Env>); share it to join a study",
    )
    group.add_argument(
        "--optimize-metric", type=str, default="auto",
        help="task_error (minimised), reward (maximised) or auto: task_error on TPO/ envs, else reward",
    )  # fmt: skip
    group.add_argument("--no-optim-plots", action="store_true", default=False, help="do not write the PNGs")
    group.add_argument(
        "--optimization-log-path", type=str, default=None,
        help="with -optimize: write each trial's evaluations.npz and best_model.zip to <path>/trial_<n>/",
    )  # fmt: skip
    group.add_argument(
        "--trial-id", type=int, default=None,
        help="without -optimize: train once with the hyperparameters that trial N of --study-name "
        "in --storage drew",
    )  # fmt: skip


@dataclass
class SearchOptions:
    """The validated search flags and what follows from them."""

    sampler: str
    pruner: str
    metric: str
    n_trials: int
    max_total_trials: int | None
    n_jobs: int
    n_startup_trials: int
    n_evaluations: int
    storage: str | None
    study_name: str
    fixed: frozenset[str]
    #: ``--optimization-log-path``: each trial's evaluations and best model go to ``<log_path>/trial_<n>``.
    log_path: str | None = None

    @property
    def direction(self) -> str:
        """``minimize`` for the task error, ``maximize`` for the reward."""
        return DIRECTIONS[self.metric]


@dataclass
class OptimizeResult:
    """What a search returns (from :func:`tpo_agents.zoo.train.train` with ``-optimize``)."""

    study: Any
    report_path: str
    metric: str
    direction: str
    best_value: float | None = None
    best_trial: int | None = None
    best_hyperparams: dict[str, Any] = dataclasses.field(default_factory=dict)
    interrupted: bool = False


def _choice(kind: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` lower-cased if it is one of ``choices``; else a one-line error with the nearest match."""
    key = value.lower()
    if key in choices:
        return key
    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise hp.ConfigError(f"Unknown {kind} {value!r}.{hint} Choose one of: {', '.join(choices)}")


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that contradict ``-optimize`` before the run is configured (nothing is read yet), and
    give ``--eval-episodes`` the search's default (:data:`SEARCH_EVAL_EPISODES`)."""
    if not args.optimize_hyperparameters:
        return
    if args.eval_episodes is None:
        args.eval_episodes = SEARCH_EVAL_EPISODES
    if args.trained_agent:
        raise hp.ConfigError(
            "--trained-agent cannot be combined with -optimize: every trial trains a new model"
        )
    if args.trial_id is not None:
        raise hp.ConfigError(f"--trial-id {args.trial_id} trains once with a trial's hyperparameters: "
                             "drop -optimize")


def check_options(setup: RunSetup) -> SearchOptions:
    """Validate the search flags of ``setup.args`` (a :class:`ConfigError` per bad flag, before any file)."""
    args = setup.args
    sampler = _choice("sampler", args.sampler, SAMPLER_NAMES)
    pruner = _choice("pruner", args.pruner, PRUNER_NAMES)
    metric = _choice("--optimize-metric", args.optimize_metric, METRICS)
    if metric == "auto":
        metric = "task_error" if setup.env_id.startswith(registry.ENV_NAMESPACE + "/") else "reward"
    for flag, value, least in (
        ("--n-trials", args.n_trials, 1),
        ("--n-startup-trials", args.n_startup_trials, 0),
        ("--max-total-trials", args.max_total_trials, 1),
        ("--n-evaluations", args.n_evaluations, 1),
        ("--eval-episodes", args.eval_episodes, 1),
        ("--n-eval-envs", args.n_eval_envs, 1),
    ):
        if value is not None and value < least:
            raise hp.ConfigError(f"{flag} must be at least {least}, got {value}")
    if args.n_jobs == 0 or args.n_jobs < -1:
        raise hp.ConfigError(
            f"--n-jobs must be a positive number of threads or -1 (all CPUs), got {args.n_jobs}"
        )
    if setup.algo not in SAMPLERS:
        raise hp.ConfigError(
            f"No hyperparameter sampler for algorithm {setup.algo!r}; "
            f"samplers exist for: {', '.join(SAMPLERS)}"
        )
    if sampler == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError as err:
            raise hp.ConfigError("--sampler cmaes needs the cmaes package: pip install cmaes") from err
    n_evaluations = args.n_evaluations or max(1, setup.n_timesteps // STEPS_PER_EVALUATION)
    overrides = hp.split_sources(args.hyperparams + args.conf_file)[2]
    fixed = frozenset(overrides) | frozenset(registry.ablation_kwargs(setup.algo))
    return SearchOptions(
        sampler=sampler,
        pruner=pruner,
        metric=metric,
        n_trials=args.n_trials,
        max_total_trials=args.max_total_trials,
        n_jobs=args.n_jobs,
        n_startup_trials=args.n_startup_trials,
        n_evaluations=n_evaluations,
        storage=args.storage or None,
        study_name=args.study_name or default_study_name(setup.algo, setup.env_name),
        fixed=fixed,
        log_path=args.optimization_log_path or None,
    )


def make_sampler(options: SearchOptions, seed: int) -> Any:
    """The Optuna sampler: TPE (multivariate, as the zoo), random, or CMA-ES (categoricals at random)."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if options.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if options.sampler == "cmaes":
            return optuna.samplers.CmaEsSampler(
                n_startup_trials=options.n_startup_trials, seed=seed, warn_independent_sampling=False
            )
        return optuna.samplers.TPESampler(
            n_startup_trials=options.n_startup_trials, seed=seed, multivariate=True
        )


def make_pruner(options: SearchOptions) -> Any:
    """The Optuna pruner, with the RL Zoo's settings."""
    import optuna

    if options.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=4, min_early_stopping_rate=0
        )
    if options.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=options.n_startup_trials, n_warmup_steps=options.n_evaluations // 3
        )
    return optuna.pruners.NopPruner()


def open_study(setup: RunSetup, options: SearchOptions, argv: list[str]) -> Any:
    """Create or join the study; a joined study made for another algo, env, metric or budget is refused."""
    import optuna

    storage = open_storage(options.storage)
    study = optuna.create_study(
        sampler=make_sampler(options, setup.args.seed),
        pruner=make_pruner(options),
        storage=storage,
        study_name=options.study_name,
        load_if_exists=True,
        direction=options.direction,
    )
    # what a run that joins the study must agree on
    expected = {
        "algo": setup.algo,
        "env_id": setup.env_id,
        "metric": options.metric,
        "n_timesteps": setup.n_timesteps,
    }
    attrs = study.user_attrs
    clashes = [
        f"{key}={attrs[key]!r} (here {value!r})"
        for key, value in expected.items()
        if attrs.get(key, value) != value
    ]
    if clashes:
        where = f" in {options.storage}" if options.storage else ""
        raise hp.ConfigError(
            f"Study {options.study_name!r}{where} was made with {', '.join(clashes)}: "
            "pass another --study-name or the same settings"
        )
    for key, value in expected.items():
        if key not in attrs:
            study.set_user_attr(key, value)
    if "command" not in attrs:
        study.set_user_attr("command", shlex.join(["train.py", *argv]))
    return study


class TrialEvalCallback(cb.TaskEvalCallback):
    """Evaluate ``n_evaluations - 1`` times during training and report each value to the trial.

    An evaluation is due each ``n_timesteps // n_evaluations`` env steps; it runs at the start of the
    next rollout (after the update, so the grouped algorithms are evaluated on their updated policy),
    or at the next step for an algorithm without rollouts. When the trial's pruner says so, training
    stops. :meth:`evaluate` after ``learn`` gives the final value. Values are the ``metric``'s:
    the mean task error of the evaluation episodes or their mean reward.
    """

    def __init__(
        self,
        eval_env: Any,
        trial: optuna.Trial,
        n_timesteps: int,
        n_evaluations: int,
        metric: str,
        n_eval_episodes: int = 5,
        log_path: str | None = None,
    ) -> None:
        super().__init__(eval_env, n_eval_episodes=n_eval_episodes, eval_freq=1, log_path=log_path,
                         best_model_save_path=log_path, verbose=0)
        self.trial, self.metric = trial, metric
        self.n_timesteps = int(n_timesteps)
        self.interval = max(self.n_timesteps // n_evaluations, 1)
        self.next_evaluation = self.interval
        self.n_reports = 0
        self.is_pruned = False
        self.last_task_error: float | None = None
        self._has_rollouts = False

    def _on_rollout_start(self) -> None:
        self._has_rollouts = True
        self._evaluate_if_due()

    def _on_step(self) -> bool:
        if not self._has_rollouts:
            self._evaluate_if_due()
        return not self.is_pruned

    def _evaluate_if_due(self) -> None:
        steps = self.model.num_timesteps
        if self.is_pruned or steps < self.next_evaluation or steps >= self.n_timesteps:
            return
        self.next_evaluation = (steps // self.interval + 1) * self.interval
        self.evaluate()
        self.is_pruned = self.trial.should_prune()

    def evaluate(self) -> float:
        """Evaluate the model now, report the metric's value to the trial and return it."""
        self.num_timesteps = self.model.num_timesteps
        cb.TaskEvalCallback._on_step(self)
        self.last_task_error = float(np.mean(self._errors)) if self._errors else None
        if self.metric == "task_error":
            if self.last_task_error is None:
                raise hp.ConfigError(
                    "The evaluation episodes report no task error (token_error or is_success): "
                    "use --optimize-metric reward"
                )
            value = self.last_task_error
        else:
            value = float(self.last_mean_reward)
        self.n_reports += 1
        self.trial.report(value, self.n_reports)
        return value


class Objective:
    """One trial: draw hyperparameters, build the run as the zoo does, train, evaluate."""

    def __init__(self, setup: RunSetup, options: SearchOptions) -> None:
        self.setup, self.options = setup, options
        self.sampler = SAMPLERS[setup.algo]
        values = setup.values
        group_mode = None
        if setup.owns_env:
            try:
                natural = setup.algo_cls.natural_mode(setup.env_id, setup.env_kwargs)
            except ValueError as err:  # env kwargs the env does not take: one line, as a training run's
                raise hp.ConfigError(f"{setup.algo}: {hp.one_line(err)}") from err
            # a former mode name (``population``) as the current one (``exact``): the constructor warns
            group_mode = canonical_mode_name(values.get("group_mode")) or natural
        self.context = SamplerContext(
            algo=setup.algo,
            base=dict(values),
            fixed=options.fixed,
            group_mode=group_mode,
            n_envs=int(values.get("n_envs", 1)),
        )

    def trial_setup(self, sampled: dict[str, Any]) -> RunSetup:
        """A trial's run: the search's setup with the drawn values, quiet, without TensorBoard or files."""
        setup = self.setup
        hyper = hp.Hyperparams(dict(setup.values), dict(setup.origins))
        hyper.update(sampled, f"the {setup.algo} sampler")
        check_hyperparams(hyper, setup.algo_cls, setup.algo)
        args = copy.copy(setup.args)
        args.verbose = setup.args.verbose if setup.args.verbose >= 2 else 0
        args.tensorboard_log = ""
        args.save_freq = -1
        args.eval_freq = max(setup.n_timesteps // self.options.n_evaluations, 1)
        # save_path None: make_env and the grouped algorithms then write no monitor file.
        return dataclasses.replace(setup, args=args, values=hyper.values, save_path=None)

    def trial_log_path(self, trial: optuna.Trial) -> str | None:
        """``<--optimization-log-path>/trial_<n>`` (``evaluations.npz``, ``best_model.zip``), or None."""
        root = self.options.log_path
        return os.path.join(root, f"trial_{trial.number}") if root else None

    def __call__(self, trial: optuna.Trial) -> float:
        import optuna

        sampled = self.sampler(trial, self.context)
        trial.set_user_attr("hyperparams", sampled)
        trial.set_user_attr("entry", hp.sanitized(best_entry(self.setup, sampled)))
        trial.set_user_attr("seed", self.setup.args.seed)
        run = self.trial_setup(sampled)
        parts = assemble(run)
        model = parts.model
        try:
            evaluation = TrialEvalCallback(
                parts.eval_env,
                trial,
                run.n_timesteps,
                self.options.n_evaluations,
                self.options.metric,
                n_eval_episodes=run.args.eval_episodes,
                log_path=self.trial_log_path(trial),
            )
            callbacks = [*hp.instantiate(run.values.get("callback")), evaluation]
            model.learn(**parts.learn_kwargs(run.n_timesteps, callbacks))
            value = None if evaluation.is_pruned else evaluation.evaluate()
        except KeyboardInterrupt:
            trial.set_user_attr("error", INTERRUPTED)
            raise
        except hp.ConfigError:
            raise
        except DIVERGENCE_ERRORS as err:
            trial.set_user_attr("error", hp.one_line(err))
            raise optuna.TrialPruned(hp.one_line(err)) from err
        finally:
            parts.close()
        trial.set_user_attr("mean_reward", float(evaluation.last_mean_reward))
        if evaluation.last_task_error is not None:
            trial.set_user_attr("task_error", evaluation.last_task_error)
        trial.set_user_attr("num_timesteps", int(model.num_timesteps))
        if value is None:
            raise optuna.TrialPruned(f"pruned after {evaluation.n_reports} evaluations")
        return value


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_logger(metric: str, progress: bool = False) -> Callable[[Any, Any], None]:
    """An Optuna callback printing one line per finished trial: state, value, time, drawn values, best.

    With ``progress`` the line goes through ``tqdm.write``, above Optuna's progress bar.
    """
    from tqdm.auto import tqdm

    write = tqdm.write if progress else print

    def log(study: Any, trial: Any) -> None:
        seconds = trial.duration.total_seconds() if trial.duration is not None else float("nan")
        value = f"{metric}={_fmt(trial.value)}" if trial.value is not None else ""
        reward = trial.user_attrs.get("mean_reward")
        reward_text = f"reward={_fmt(reward)}" if reward is not None and metric != "reward" else ""
        params = " ".join(f"{k}={_fmt(v)}" for k, v in trial.user_attrs.get("hyperparams", {}).items())
        error = trial.user_attrs.get("error")
        try:
            best = f"best: trial {study.best_trial.number} ({_fmt(study.best_value)})"
        except ValueError:
            best = "best: none yet"
        parts = [
            f"Trial {trial.number:>3} {trial.state.name.lower():<8}",
            value,
            reward_text,
            f"{seconds:.1f}s",
            params,
        ]
        parts += [f"[{error}]" if error else "", f"| {best}"]
        write("  ".join(part for part in parts if part))

    return log


def report_folder(setup: RunSetup, options: SearchOptions) -> str:
    """``<log-folder>/<algo>/report_<Env>_<n>-trials-<steps>-<sampler>-<pruner>_<time>`` (a new name)."""
    name = (
        f"report_{setup.env_name}_{options.n_trials}-trials-{setup.n_timesteps}"
        f"-{options.sampler}-{options.pruner}_{int(time.time())}"
    )
    path = os.path.join(setup.args.log_folder, setup.algo, name)
    candidate, k = path, 1
    while os.path.exists(candidate):
        candidate, k = f"{path}-{k}", k + 1
    return candidate


def best_entry(setup: RunSetup, hyperparams: dict[str, Any]) -> dict[str, Any]:
    """A trial's zoo entry: the search's hyperparameters, env kwargs and budget, and the drawn values."""
    entry = {
        key: value for key, value in setup.values.items() if key not in ("env_kwargs", "eval_env_kwargs")
    }
    entry["n_timesteps"] = setup.n_timesteps
    entry.update(hyperparams)
    if setup.env_kwargs:
        entry["env_kwargs"] = dict(setup.env_kwargs)
    eval_only = {k: v for k, v in setup.eval_env_kwargs.items() if setup.env_kwargs.get(k, object()) != v}
    if eval_only:
        entry["eval_env_kwargs"] = eval_only
    return entry


def write_best_yaml(path: str, setup: RunSetup, options: SearchOptions, study: Any) -> dict[str, Any]:
    """Write ``best.yml``: the best trial as ``<env id>: {...}``, with a comment saying where it came from.

    The entry is the one the trial ran (recorded with the trial, so a trial of another process sharing
    the study gives its own entry), else this run's entry with the trial's drawn values.
    """
    best = study.best_trial
    entry = best.user_attrs.get("entry") or best_entry(setup, best.user_attrs.get("hyperparams", {}))
    header = [
        f"# Best of {len(study.trials)} trials of study {study.study_name!r}: trial {best.number}, "
        f"{options.metric} = {best.value:.6g} ({options.direction})",
        f"# Study created by: {study.user_attrs.get('command', '')}",
        f"# Paste the entry into zoo_configs/{setup.algo}.yml, or train it with:",
        f"#   python train.py --algo {setup.algo} --env {setup.env_id} --hyperparams {path}",
    ]
    with open(path, "w") as f:
        f.write("\n".join(header) + "\n")
        yaml.safe_dump({setup.env_id: hp.sanitized(entry)}, f, sort_keys=True, default_flow_style=False)
    return entry


def write_trials_csv(path: str, study: Any) -> None:
    """One row per trial: number, state, value, reward and task error, time, drawn parameters and values."""
    trials = study.get_trials(deepcopy=False)
    raw = sorted({name for t in trials for name in t.params})
    drawn = sorted({name for t in trials for name in t.user_attrs.get("hyperparams", {})})
    extra = ("mean_reward", "task_error", "num_timesteps", "seed", "error")
    header = ["number", "state", "value", *extra, "duration_s", "datetime_start"]
    header += [f"params_{name}" for name in raw] + [f"hyperparams_{name}" for name in drawn]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for t in trials:
            values = t.user_attrs.get("hyperparams", {})
            row = [t.number, t.state.name, t.value, *(t.user_attrs.get(key) for key in extra)]
            row += [t.duration.total_seconds() if t.duration is not None else None, t.datetime_start]
            row += [t.params.get(name) for name in raw] + [values.get(name) for name in drawn]
            writer.writerow(["" if v is None else v for v in row])


def write_plots(folder: str, study: Any, metric: str, verbose: int) -> list[str]:
    """``optimization_history.png`` and ``param_importances.png`` (PED-ANOVA) with matplotlib; the paths.

    A plot that the study cannot support yet (no complete trial; importances need two) is skipped
    with a note. The Agg backend is selected unless pyplot is already in use.
    """
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as optuna_plots

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    plots = {
        "optimization_history.png": (
            1,
            lambda: optuna_plots.plot_optimization_history(study, target_name=metric),
        ),
        "param_importances.png": (
            2,
            lambda: optuna_plots.plot_param_importances(
                study, evaluator=PedAnovaImportanceEvaluator(), target_name=f"importance for {metric}"
            ),
        ),
    }
    written = []
    for name, (needed, plot) in plots.items():
        if len(complete) < needed:
            if verbose:
                print(f"{name} skipped: it needs {needed} complete trial(s), the study has {len(complete)}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                axes = plot()
            except (ValueError, RuntimeError) as err:
                if verbose:
                    print(f"{name} skipped: {hp.one_line(err)}")
                continue
        path = os.path.join(folder, name)
        axes.figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(axes.figure)
        written.append(path)
    return written


def run_trials(study: Any, objective: Objective, options: SearchOptions, setup: RunSetup) -> bool:
    """Run this process's trials; True if interrupted (Ctrl-C), in which case the report is still written."""
    import optuna
    from optuna.trial import TrialState

    verbose = setup.args.verbose
    # The progress bar (-P, shown with --verbose 1) counts this process's trials: not with --max-total-trials.
    progress = bool(setup.args.progress) and verbose > 0 and options.max_total_trials is None
    callbacks: list[Any] = [trial_logger(options.metric, progress)] if verbose else []
    n_trials: int | None = options.n_trials
    if options.max_total_trials is not None:
        counted = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        if len(study.get_trials(deepcopy=False, states=counted)) >= options.max_total_trials:
            print(f"The study already holds {options.max_total_trials} trials (--max-total-trials)")
            return False
        callbacks.append(optuna.study.MaxTrialsCallback(options.max_total_trials, states=counted))
        n_trials = None
    try:
        with QuietInterrupt.installed():
            study.optimize(
                objective,
                n_trials=n_trials,
                n_jobs=options.n_jobs,
                callbacks=callbacks,
                show_progress_bar=progress,
            )
    except KeyboardInterrupt:
        stopped = [t.number for t in study.get_trials(deepcopy=False)
                   if t.user_attrs.get("error") == INTERRUPTED]
        print(f"Interrupted{f' (trial {stopped[-1]} stopped, recorded as failed)' if stopped else ''}: "
              "writing the report of the trials so far")
        return True
    return False


class QuietInterrupt(logging.Filter):
    """Drop Optuna's report of a trial that Ctrl-C stopped (a warning with its traceback, then its value):
    the search says it in one line. Installed on the handlers of Optuna's logger while trials run."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the records of a trial stopped by ``KeyboardInterrupt``."""
        if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
            self.interrupted = True
            return False
        return not (self.interrupted and "failed with value" in record.getMessage())

    @classmethod
    @contextmanager
    def installed(cls) -> Iterator[None]:
        """Filter the handlers of the ``optuna`` logger within the block."""
        handlers, quiet = logging.getLogger("optuna").handlers, cls()
        for handler in handlers:
            handler.addFilter(quiet)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(quiet)


def hyperparameter_optimization(setup: RunSetup, argv: list[str]) -> OptimizeResult:
    """Search ``setup``'s hyperparameters (the ``-optimize`` mode of :func:`tpo_agents.zoo.train.train`)."""
    import optuna

    options = check_options(setup)
    args = setup.args
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # trials get one line each (trial_logger)
    try:
        study = open_study(setup, options, argv)
        if args.verbose:
            where = f" in {options.storage}" if options.storage else " (in memory)"
            fixed = sorted(options.fixed - hp.ZOO_KEYS)
            held = f"; held fixed: {', '.join(fixed)}" if fixed else ""
            interval = max(setup.n_timesteps // options.n_evaluations, 1)
            print(
                f"Optimizing hyperparameters: study {options.study_name!r}{where}, "
                f"sampler {options.sampler}, pruner {options.pruner}, "
                f"{options.n_trials} trials x {setup.n_timesteps} steps, {options.n_evaluations} evaluations "
                f"(every {interval} steps, {args.eval_episodes} episodes); "
                f"objective: {options.metric} ({options.direction}){held}"
            )
        interrupted = run_trials(study, Objective(setup, options), options, setup)
    finally:
        optuna.logging.set_verbosity(level)
    return write_report(setup, options, study, interrupted)


def write_report(
    setup: RunSetup, options: SearchOptions, study: Any, interrupted: bool = False
) -> OptimizeResult:
    """Write the report folder (``best.yml``, ``trials.csv``, the PNGs) and say what is in it."""
    from optuna.trial import TrialState

    args = setup.args
    folder = report_folder(setup, options)
    os.makedirs(folder, exist_ok=True)
    write_trials_csv(os.path.join(folder, "trials.csv"), study)
    result = OptimizeResult(study, folder, options.metric, options.direction, interrupted=interrupted)
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        entry = write_best_yaml(os.path.join(folder, "best.yml"), setup, options, study)
        best = study.best_trial
        result.best_value, result.best_trial = float(best.value), best.number
        result.best_hyperparams = dict(best.user_attrs.get("hyperparams", {}))
        if args.verbose:
            drawn = ", ".join(f"{k}={_fmt(v)}" for k, v in result.best_hyperparams.items())
            print(
                f"Best trial {best.number}: {options.metric}={_fmt(best.value)} ({drawn}); "
                f"{len(entry)} keys in best.yml"
            )
    elif args.verbose:
        print("No trial completed: no best.yml")
    if not args.no_optim_plots:
        write_plots(folder, study, options.metric, args.verbose)
    if args.verbose:
        counts = {
            state.name.lower(): len(study.get_trials(deepcopy=False, states=(state,))) for state in TrialState
        }
        summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
        print(f"Study {options.study_name!r}: {len(study.trials)} trials ({summary}). Report: {folder}")
    return result
