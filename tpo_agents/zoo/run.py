"""One zoo run, from the parsed command line to the saved model; the one place a run is assembled.

The steps of rl_zoo3's ``ExperimentManager``, as small functions that ``train.py``, the Optuna objective
(:mod:`tpo_agents.zoo.optimize`) and the experiments share:

1. :func:`configure`: resolve the algorithm and env, seed, merge the hyperparameters (YAML dir < file <
   ``key:value`` overrides < flags) and check them and the flags, so that bad input is a one-line
   :class:`~tpo_agents.zoo.hyperparams.ConfigError` before anything is written;
2. :func:`assemble`: the training and evaluation envs, the model (new or ``--trained-agent``) and, for
   ARS with ``n_envs > 1``, its evaluation workers; :meth:`RunParts.close` closes them;
3. :func:`train_run`: the run folder (``<log-folder>/<algo>/<Env>_<N>[_<uuid>]/``), its files, the
   callbacks and the logger, ``learn``, the final save and the close.

A grouped algorithm (the ``TPO/`` algorithms, ``owns_env``) builds its natively batched env from the
env id itself; an SB3 algorithm gets the zoo's VecEnv pipeline. :class:`RunSetup` says which once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import shutil
import sys
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpo_agents import callback_steps
from tpo_agents.checks import HyperparameterError
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.provenance import code_version
from tpo_agents.saving import model_zip_path, saved_attributes, saved_by
from tpo_agents.zoo import callbacks as cb
from tpo_agents.zoo import hyperparams as hp
from tpo_agents.zoo import registry, sb3_algos, studies, tracking
from tpo_agents.zoo.envs import make_env, normalize_kwargs, normalized
from tpo_agents.zoo.run_files import read_run_yaml

#: The evaluation env's seed is the run's seed plus this offset (distinct prompt streams).
EVAL_SEED_OFFSET = 2**16
#: ``-tb`` default, resolved to ``<log-folder>/tensorboard``.
DEFAULT_TB = "<log-folder>/tensorboard"
#: With ``--log-interval -1``, the training table is printed about this many times per run.
MAX_TABLES = 50
#: ``--eval-episodes`` of a training run's evaluations (``-optimize``: ``optimize.SEARCH_EVAL_EPISODES``).
EVAL_EPISODES = 5


@dataclass
class TrainResult:
    """What :func:`train_run` returns: the trained model and where the run was written."""

    model: Any
    save_path: str
    env_id: str
    algo: str
    seed: int
    n_timesteps: int
    hyperparams: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False


@dataclass
class RunSetup:
    """Everything resolved before the model is built: names, merged hyperparameters, folders."""

    args: argparse.Namespace
    algo: str
    env_id: str
    algo_cls: type
    values: dict[str, Any]
    n_timesteps: int
    env_kwargs: dict[str, Any]
    eval_env_kwargs: dict[str, Any]
    save_path: str | None = ""
    #: Where each hyperparameter came from (a file, ``--hyperparams override``, ``-n``, ...).
    origins: dict[str, str] = field(default_factory=dict)
    #: The TensorBoard run folder it logs to (:func:`tensorboard_run`; None: TensorBoard off).
    tensorboard_run: str | None = None

    @property
    def env_name(self) -> str:
        """The env id as a folder name (``TPO-TokenReversal-v0``)."""
        return registry.env_file_name(self.env_id)

    @property
    def owns_env(self) -> bool:
        """True for an algorithm that builds its own env from the id (the grouped algorithms)."""
        return owns_env(self.algo_cls)

    @property
    def n_envs(self) -> int:
        """The YAML's ``n_envs`` (1 when unset)."""
        return int(self.values.get("n_envs", 1))


def owns_env(algo_cls: type) -> bool:
    """True for an algorithm class that builds its own natively batched env (``owns_env``)."""
    return bool(getattr(algo_cls, "owns_env", False))


def import_algo(algo: str) -> type:
    """The class of ``algo``; a missing module of a registered algorithm is a :class:`ConfigError`."""
    try:
        return registry.get_algo(algo)
    except ModuleNotFoundError as err:
        module = registry.algo_module(algo)
        if err.name is not None and module.startswith(err.name):
            raise hp.ConfigError(f"Algorithm {algo!r} is registered but {module} is not written yet") from err
        raise


def resolve(args: argparse.Namespace) -> tuple[str, str, type]:
    """Import env packages; resolve the algo key, the full env id (printed) and the algorithm class."""
    import tpo_gym  # noqa: F401  (registers the TPO/ envs)

    for package in args.gym_packages:
        importlib.import_module(package)
    try:
        algo = registry.algo_key(args.algo)
        env_id = registry.resolve_env_id(args.env)
    except ValueError as err:
        raise hp.ConfigError(str(err)) from err
    print(f"Env: {env_id}  (algo: {algo})")
    return algo, env_id, import_algo(algo)


def configure(args: argparse.Namespace) -> RunSetup:
    """Resolve, seed and merge the hyperparameters of the parsed command line ``args``; check the flags,
    the keys, the values and the env (spaces of the training and evaluation env kwargs, ``-i``'s
    algorithm) before anything is written. ``--trial-id``'s values come above the ``key:value``
    overrides and below the flags."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    check_flags(args)
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    algo, env_id, algo_cls = resolve(args)
    if args.seed < 0:
        args.seed = int(np.random.randint(2**32 - 1, dtype="int64"))
    set_random_seed(args.seed)
    if args.track:
        tracking.prepare(args, algo, env_id)
    sources = args.hyperparams + args.conf_file + ([args.yaml_file] if args.yaml_file else [])
    hyper = hp.load_hyperparams(sources, algo, env_id, args.verbose)
    if args.trial_id is not None:
        study = args.study_name or studies.default_study_name(algo, registry.env_file_name(env_id))
        drawn = studies.trial_values(args.storage, study, args.trial_id, algo, env_id)
        hyper.update(drawn, f"trial {args.trial_id} of study {study!r}")
    try:
        defining = registry.defining_settings(algo, hyper.values, hyper.origins)
    except ValueError as err:
        raise hp.ConfigError(str(err)) from err
    hyper.update(defining, f"the definition of {algo!r}")
    record_flags(hyper, args)  # config.yml and the printed values show what runs
    if hyper.values.get("n_timesteps") is None:
        raise hp.ConfigError(f"No n_timesteps for {algo}-{env_id}: set it in the YAML file or pass -n")
    check_hyperparams(hyper, algo_cls, algo)
    values = hyper.values
    n_timesteps = int(float(hp.as_number(values["n_timesteps"])))
    env_kwargs = dict(hp.evaluated(values.get("env_kwargs") or {}))  # --env-kwargs included (record_flags)
    eval_only = hp.evaluated(values.get("eval_env_kwargs") or {})
    eval_env_kwargs = hp.merge_env_kwargs(env_id, env_kwargs, eval_only)
    setup = RunSetup(args, algo, env_id, algo_cls, values, n_timesteps, env_kwargs, eval_env_kwargs,
                     origins=hyper.origins)
    check_env(setup)
    check_trained_agent(setup)
    if args.verbose:
        print(f"Hyperparameters: {dict(sorted(values.items()))}")
    return setup


def check_hyperparams(hyper: hp.Hyperparams, algo_cls: type, algo: str) -> None:
    """The checks every run's hyperparameters pass (a training run's and each Optuna trial's): known
    keys, the constructor's required ones (``policy``), no env-pipeline keys for an algorithm that builds
    its own env, types and ranges."""
    hp.check_keys(hyper, algo_cls, algo)
    hp.check_required(hyper, algo_cls, algo)
    hp.check_env_pipeline(hyper, algo_cls, algo)
    hp.check_values(hyper, algo_cls)


def check_flags(args: argparse.Namespace) -> None:
    """Check the flags' ranges (one-line :class:`ConfigError`) and resolve the defaults of ``-tb`` and
    ``--eval-episodes``."""
    if args.tensorboard_log == DEFAULT_TB:
        args.tensorboard_log = os.path.join(args.log_folder, "tensorboard")
    if args.eval_episodes is None:
        args.eval_episodes = EVAL_EPISODES
    if args.n_timesteps <= 0 and args.n_timesteps != -1:
        raise hp.ConfigError(f"-n {args.n_timesteps}: must be an integer >= 1, or -1 (the YAML's value)")
    if args.eval_freq > 0 and args.eval_episodes < 1:
        raise hp.ConfigError(f"--eval-episodes {args.eval_episodes}: must be an integer >= 1")
    if args.eval_freq > 0 and args.n_eval_envs < 1:
        raise hp.ConfigError(f"--n-eval-envs {args.n_eval_envs}: must be an integer >= 1")
    if args.log_interval < -1:
        raise hp.ConfigError(f"--log-interval {args.log_interval}: must be -1 (auto), 0 (never) or N >= 1")


def record_flags(hyper: hp.Hyperparams, args: argparse.Namespace) -> None:
    """Put ``-n``, ``--env-kwargs`` and ``--eval-env-kwargs`` into the hyperparameters (merged with the
    YAML env kwargs: :meth:`~tpo_agents.zoo.hyperparams.Hyperparams.update`), so that ``config.yml`` and the
    printed values are what runs."""
    if args.n_timesteps > 0:
        hyper.update({"n_timesteps": args.n_timesteps}, "-n")
    for key, given in (("env_kwargs", args.env_kwargs), ("eval_env_kwargs", args.eval_env_kwargs)):
        if given:
            hyper.update({key: given}, f"--{key.replace('_', '-')}")


def check_env(setup: RunSetup) -> None:
    """The env fits the algorithm and the evaluation env fits the model, before any file is written.

    A grouped algorithm needs a ``TPO/`` env and steps its own batched env (``--vec-env dummy``); an SB3
    algorithm needs spaces it accepts. The evaluation env (``--eval-env-kwargs``) must have the
    training env's spaces: the model is evaluated on it.
    """
    args = setup.args
    if setup.owns_env:
        sb3_algos.check_grouped_env(setup.algo, setup.env_id)
        if args.vec_env != "dummy":
            raise hp.ConfigError(
                f"--vec-env {args.vec_env} cannot be used with {setup.algo!r}: it steps its own batched env"
            )
    else:
        sb3_algos.check_env(setup.algo, setup.env_id, setup.env_kwargs)
    if args.eval_freq > 0 and setup.eval_env_kwargs != setup.env_kwargs:
        sb3_algos.check_same_spaces(setup.env_id, setup.env_kwargs, setup.eval_env_kwargs)


def check_trained_agent(setup: RunSetup) -> None:
    """``--trained-agent`` is an existing zip of the run's algorithm: the algorithm recorded in this
    zoo's run folder beside it (``<Env>/args.yml`` next to ``<Env>/command.txt``; rl_zoo3's folders use
    other names, e.g. ``ppo`` for ``sb3_ppo``, and are left to the algorithm's ``load``) or, for a zip
    without one, the grouped algorithm whose hyperparameters the zip holds."""
    given = setup.args.trained_agent
    if not given:
        return
    path = model_zip_path(given)
    if not (path.endswith(".zip") and os.path.isfile(path)):
        raise hp.ConfigError(f"--trained-agent must be an existing .zip file, got {given!r}")
    trained = source_run_args(setup).get("algo")
    if trained is not None and str(trained).lower() != setup.algo:
        raise hp.ConfigError(f"--trained-agent {given} was trained with --algo {trained}, not {setup.algo}: "
                             f"pass --algo {trained}")
    if trained is None and setup.owns_env:
        check_bare_zip(setup, given, path)


def source_run_args(setup: RunSetup) -> dict[str, Any]:
    """The ``args.yml`` of the run folder that holds the ``--trained-agent`` zip where this zoo wrote it
    (``<Env>/args.yml`` next to ``<Env>/command.txt``), else ``{}`` (a bare zip, rl_zoo3's folders)."""
    folder = os.path.dirname(os.path.abspath(model_zip_path(setup.args.trained_agent)))
    params_path = os.path.join(folder, setup.env_name)
    args_file = os.path.join(params_path, "args.yml")
    ours = os.path.isfile(os.path.join(params_path, "command.txt")) and os.path.isfile(args_file)
    return read_run_yaml(args_file) if ours else {}


def check_bare_zip(setup: RunSetup, given: str, path: str) -> None:
    """A zip outside a run folder holds the grouped algorithm's own hyperparameters (TPO: ``eta``,
    ``anchor``: :func:`tpo_agents.saving.check_saved_by`); else a one-line error naming the algorithms
    whose zips hold what it holds."""
    attributes = saved_attributes(path)
    if attributes is None:
        raise hp.ConfigError(f"cannot load --trained-agent {path}: it is not a readable model zip")
    held, classes = saved_by(attributes)
    if not setup.algo_cls.holds_own_hyperparameters(held):
        grouped = [name for name in registry.ALGOS if name not in registry.EXTERNAL_ALGOS]
        algos = [name for name in grouped if registry.get_algo(name) in classes]
        by = f"by one of {', '.join(algos)}" if algos else "by another algorithm"
        raise hp.ConfigError(f"--trained-agent {given} holds {', '.join(sorted(held)) or 'none'} of the "
                             f"grouped algorithms' own hyperparameters: trained {by}, not {setup.algo}")


def run_folder(log_folder: str, algo: str, env_name: str, unique: bool = False) -> str:
    """``<log_folder>/<algo>/<env_name>_<N>`` with N one above the latest run (not created here);
    ``_<uuid4>`` appended with ``unique`` (``-uuid``), so that concurrent runs never share a folder."""
    from stable_baselines3.common.utils import get_latest_run_id

    log_path = os.path.join(log_folder, algo)
    suffix = f"_{uuid.uuid4()}" if unique else ""
    return os.path.join(log_path, f"{env_name}_{get_latest_run_id(log_path, env_name) + 1}{suffix}")


def write_run_files(setup: RunSetup, argv: list[str], model: Any) -> None:
    """Write ``config.yml``, ``args.yml`` (with :func:`resume_args` of ``model``) and ``command.txt`` into
    ``<run>/<Env>/``."""
    params_path = os.path.join(setup.save_path, setup.env_name)
    os.makedirs(params_path, exist_ok=True)
    hp.write_yaml(os.path.join(params_path, "config.yml"), setup.values)
    hp.write_yaml(os.path.join(params_path, "args.yml"), {**run_args(setup), **resume_args(setup, model)})
    with open(os.path.join(params_path, "command.txt"), "w") as f:
        f.write(shlex.join(["train.py", *argv]) + "\n")


def run_args(setup: RunSetup) -> dict[str, Any]:
    """The flags of the run as they ran (``args.yml``; the Weights & Biases config): ``-n`` or the YAML
    ``n_timesteps``, the merged env kwargs, the resolved algorithm and env id."""
    return {
        **vars(setup.args), "algo": setup.algo, "env": setup.env_id, "n_timesteps": setup.n_timesteps,
        "env_kwargs": setup.env_kwargs, "eval_env_kwargs": setup.eval_env_kwargs,
    }  # fmt: skip


def resume_args(setup: RunSetup, model: Any) -> dict[str, Any]:
    """Where a run logs and where a ``--trained-agent`` run resumed from, for ``args.yml``:
    ``tensorboard_run``, the absolute TensorBoard run folder (None with ``-tb ''``; a later ``-i`` of this
    run's zips continues it), ``resumed_from``, the absolute folder of the zip (its run folder), and
    ``resumed_at``, the step count ``model`` was loaded with (both None for a new run). The plots continue
    that run's seed from this step."""
    tb_run = setup.tensorboard_run and os.path.abspath(setup.tensorboard_run)
    if not setup.args.trained_agent:
        return {"tensorboard_run": tb_run, "resumed_from": None, "resumed_at": None}
    folder = os.path.dirname(os.path.abspath(model_zip_path(setup.args.trained_agent)))
    return {"tensorboard_run": tb_run, "resumed_from": folder, "resumed_at": int(model.num_timesteps)}


def env_options(setup: RunSetup) -> dict[str, Any]:
    """The :func:`make_env` options of the run's YAML (wrappers, frame stack, monitor) and ``--vec-env``."""
    values = setup.values
    return dict(
        vec_env=setup.args.vec_env,
        monitor_kwargs=hp.evaluated(values.get("monitor_kwargs")),
        env_wrapper=hp.wrapper_factory(values.get("env_wrapper")),
        vec_env_wrapper=hp.wrapper_factory(values.get("vec_env_wrapper")),
        frame_stack=values.get("frame_stack"),
    )


def build_envs(setup: RunSetup, norm: dict[str, Any] | None, stats: str | None) -> tuple[Any, Any]:
    """The training VecEnv (monitored into the run folder; None for an algorithm that builds its own)
    and the evaluation VecEnv (or None)."""
    args = setup.args
    options = env_options(setup)
    env = None
    if not setup.owns_env:
        n_envs = sb3_algos.train_n_envs(setup.algo, setup.n_envs)
        env = make_env(setup.env_id, n_envs, args.seed, setup.env_kwargs, setup.save_path or None, **options)
        env = normalized(env, norm, stats, training=True)
    if args.eval_freq <= 0:
        return env, None
    eval_seed = args.seed + EVAL_SEED_OFFSET
    eval_env = make_env(setup.env_id, args.n_eval_envs, eval_seed, setup.eval_env_kwargs, None, **options)
    return env, normalized(eval_env, norm, stats, training=False)


def build_model(setup: RunSetup, env: Any) -> Any:
    """A new model, or the ``--trained-agent`` zip loaded with the YAML values (but not its policy).

    An algorithm that owns its env gets the env id, its kwargs and the run folder for ``monitor.csv``.
    The constructor's errors (bad values, bad env kwargs; SB3's assertions) become a one-line
    :class:`ConfigError`; a bad value names where it came from.
    """
    args = setup.args
    kwargs = hp.algo_kwargs(setup.values)
    common = dict(
        tensorboard_log=tensorboard_dir(setup), seed=args.seed, verbose=args.verbose, device=args.device
    )
    if setup.owns_env:
        env = setup.env_id
        common.update(env_kwargs=setup.env_kwargs, monitor_dir=setup.save_path or None)
    try:
        return _new_or_loaded(setup, env, kwargs, common)
    except hp.ConfigError:
        raise
    except HyperparameterError as err:
        raise hp.value_error(err, hp.Hyperparams(setup.values, setup.origins)) from err
    except (ValueError, AssertionError, TypeError, RuntimeError) as err:
        raise build_error(setup, err) from err


def build_error(setup: RunSetup, err: Exception) -> hp.ConfigError:
    """The one-line error of a model the constructor could not build; a failure inside the policy's
    network (``policy_kwargs:"dict(d_model=-1)"``: torch's negative dimension) names ``policy_kwargs``,
    as written, and where it was set."""
    if fails_in_policy(err) and "policy_kwargs" in setup.values:
        written, origin = setup.values["policy_kwargs"], setup.origins.get("policy_kwargs")
        return hp.ConfigError(f"{setup.algo}: policy_kwargs={written!r} (in {origin}) does not build the "
                              f"policy: {hp.one_line(err)}")
    first = str(err).strip().splitlines()
    return hp.ConfigError(f"{setup.algo}: {first[0] if first else type(err).__name__}")


def fails_in_policy(err: Exception) -> bool:
    """Whether ``err`` comes from building the policy: raised inside a torch module (the policy or its
    network) or by the policy class's call (``TransformerSoftmaxPolicy.__init__() got an unexpected
    keyword argument``)."""
    import traceback

    import torch

    frames = [frame for frame, _ in traceback.walk_tb(err.__traceback__)]
    if any(isinstance(frame.f_locals.get("self"), torch.nn.Module) for frame in frames):
        return True
    policy_class = getattr(frames[-1].f_locals.get("self"), "policy_class", None) if frames else None
    return isinstance(policy_class, type) and str(err).startswith(f"{policy_class.__name__}.")


def tensorboard_dir(setup: RunSetup) -> str | None:
    """``<tb>/<Env>`` (the model's ``tensorboard_log``), or None when ``-tb ''`` turns TensorBoard off."""
    tb = setup.args.tensorboard_log
    return os.path.join(tb, setup.env_name) if tb else None


def tensorboard_run(setup: RunSetup) -> str | None:
    """The TensorBoard run folder of ``setup`` (None with ``-tb ''``). A ``--trained-agent`` run continues
    the TensorBoard run of the zip's run folder (its ``args.yml``'s ``tensorboard_run``) when that folder
    is in this run's ``<tb>/<Env>``; any other run starts ``<tb>/<Env>/<ALGO>_<k>``, k one above the
    latest (SB3's names)."""
    from stable_baselines3.common.utils import get_latest_run_id

    tb = tensorboard_dir(setup)
    if tb is None:
        return None
    source = source_run_args(setup).get("tensorboard_run") if setup.args.trained_agent else None
    if isinstance(source, str) and os.path.dirname(source) == os.path.abspath(tb) and os.path.isdir(source):
        return os.path.join(tb, os.path.basename(source))
    name = setup.algo.upper()
    return os.path.join(tb, f"{name}_{get_latest_run_id(tb, name) + 1}")


def _new_or_loaded(setup: RunSetup, env: Any, kwargs: dict[str, Any], common: dict[str, Any]) -> Any:
    args = setup.args
    if not args.trained_agent:
        return setup.algo_cls(env=env, **common, **kwargs)
    path = model_zip_path(args.trained_agent)
    kwargs = {k: v for k, v in kwargs.items() if k not in ("policy", "policy_kwargs")}
    try:
        model = setup.algo_cls.load(path, env=env, **common, **kwargs)
    except HyperparameterError:
        raise
    except Exception as err:  # a corrupt or foreign zip: one line, not a traceback
        raise hp.ConfigError(f"cannot load --trained-agent {path}: {hp.one_line(err)}") from err
    print(f"Continuing from {args.trained_agent} at {model.num_timesteps} timesteps")
    return model


@dataclass
class RunParts:
    """What a run opens: the training env (None for a grouped algorithm), the evaluation env, the
    model and ARS's evaluation workers (None unless ARS with ``n_envs > 1``)."""

    env: Any
    eval_env: Any
    model: Any = None
    workers: Any = None

    def learn_kwargs(self, total_timesteps: int, callbacks: list[Any]) -> dict[str, Any]:
        """The keyword arguments of ``model.learn`` (with ARS's workers where there are some)."""
        kwargs: dict[str, Any] = dict(total_timesteps=total_timesteps, callback=callbacks)
        if self.workers is not None:
            kwargs["async_eval"] = self.workers
        return kwargs

    def close(self) -> None:
        """Close the model's logger (TensorBoard files), the envs and ARS's workers."""
        model = self.model
        if model is not None and getattr(model, "_logger", None) is not None:
            model.logger.close()
        for venv in (self.env, self.eval_env, getattr(model, "env", None)):
            if venv is not None:
                venv.close()
        if self.workers is not None and not self.workers.closed:
            self.workers.close()


def assemble(setup: RunSetup, stats: str | None = None, model: Any = None) -> RunParts:
    """Open the envs (normalised with the YAML's ``normalize`` and ``stats``), build or load the model
    (unless ``model`` is given) and start ARS's workers; closes what it opened if a step fails."""
    values = setup.values
    norm = normalize_kwargs(hp.evaluated(values.get("normalize")), values.get("gamma"))
    parts = RunParts(*build_envs(setup, norm, stats), model)
    try:
        if parts.model is None:
            parts.model = build_model(setup, parts.env)
        check_model_spaces(parts)

        def make_one() -> Any:  # one worker's env, as the training env
            one = make_env(setup.env_id, 1, setup.args.seed, setup.env_kwargs, None, **env_options(setup))
            return normalized(one, norm, stats, training=True)

        parts.workers = sb3_algos.async_eval(setup.algo, setup.n_envs, make_one, parts.model.policy)
    except BaseException:
        parts.close()
        raise
    return parts


def check_model_spaces(parts: RunParts) -> None:
    """The evaluation env has the model's spaces (e.g. a ``--trained-agent`` of another vocabulary)."""
    from stable_baselines3.common.utils import check_for_correct_spaces

    if parts.eval_env is None:
        return
    model = parts.model
    try:
        check_for_correct_spaces(parts.eval_env, model.observation_space, model.action_space)
    except ValueError as err:
        first = str(err).splitlines()[0]
        raise hp.ConfigError(f"the evaluation env does not fit the model: {first}") from err


def build_callbacks(setup: RunSetup, eval_env: Any) -> list[Any]:
    """HParams, task error (algorithms that lack it), YAML callbacks, progress bar, checkpoints, eval."""
    args, save_path = setup.args, setup.save_path
    run = {"algo": setup.algo, "env_id": setup.env_id, "seed": args.seed, "n_timesteps": setup.n_timesteps}
    callbacks: list[Any] = [
        cb.HParamCallback({**run, "git": code_version(), **setup.values, "env_kwargs": setup.env_kwargs})
    ]
    if setup.algo in registry.EXTERNAL_ALGOS:
        callbacks.append(cb.TaskErrorCallback())
    callbacks += hp.instantiate(setup.values.get("callback"))
    if args.progress and args.verbose:
        from tqdm import TqdmExperimentalWarning

        warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)  # SB3 uses tqdm.rich
        callbacks.append(cb.ProgressBar())
    if args.save_freq > 0:
        checkpoint = cb.AtomicCheckpoint(save_path, verbose=args.verbose)
        callbacks.append(cb.EveryTimesteps(args.save_freq, checkpoint))
    if eval_env is not None:
        evaluation = cb.TaskEvalCallback(
            eval_env,
            callback_on_new_best=cb.SaveBest(save_path),
            n_eval_episodes=args.eval_episodes,
            eval_freq=1,
            log_path=save_path,
            best_model_save_path=None,
            verbose=args.verbose,
        )
        callbacks.append(cb.EveryTimesteps(args.eval_freq, evaluation))
    return callbacks


@contextmanager
def new_run_folder(path: str) -> Iterator[None]:
    """Create the run folder ``path`` for the block that starts a run; if the block fails (or is
    interrupted), remove the folder again, with the parents created for it: a failed start leaves
    nothing behind and does not use up a run number. A folder that already existed is never removed."""
    created: list[str] = []  # folders made here, outermost first
    head = os.path.abspath(path)
    while not os.path.exists(head):
        created.insert(0, head)
        head = os.path.dirname(head)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise hp.ConfigError(f"cannot create the run folder {path}: {err.strerror or err}") from err
    try:
        yield
    except BaseException as err:
        for folder in reversed(created):
            if folder == created[-1]:
                shutil.rmtree(folder, ignore_errors=True)
            elif os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
        if isinstance(err, OSError):  # e.g. a read-only log folder
            raise hp.ConfigError(f"cannot start the run in {path}: {err}") from err
        raise


def default_log_interval(n_timesteps: int, steps: int) -> int:
    """Updates between two printed tables so that a run prints about :data:`MAX_TABLES` of them."""
    n_updates = -(-n_timesteps // max(steps, 1))
    return max(1, -(-n_updates // MAX_TABLES))


def run_logger(setup: RunSetup, resumed_at: int | None) -> Any:
    """SB3's logger of the run: the stdout table (``--verbose 1``) and TensorBoard in
    ``setup.tensorboard_run``. A run resumed at step ``resumed_at`` marks a restart there
    (:func:`restart_tensorboard_at`), so that the TensorBoard run it continues
    shows the source's points up to that step and then its own."""
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.utils import configure_logger

    folder = setup.tensorboard_run
    if folder is None:
        return configure_logger(setup.args.verbose)
    try:
        logger = configure(folder, ["stdout", "tensorboard"] if setup.args.verbose else ["tensorboard"])
    except OSError as err:
        raise hp.ConfigError(f"cannot write TensorBoard logs to {folder}: {err.strerror or err}") from err
    if resumed_at is not None:
        restart_tensorboard_at(logger, resumed_at + 1)
    return logger


def restart_tensorboard_at(logger: Any, step: int) -> None:
    """Write a restart at ``step`` into ``logger``'s TensorBoard run (``SummaryWriter(purge_step=step)``'s
    event): TensorBoard drops the points that run logged at ``step`` or later before it, such as the
    source run's after the checkpoint a run resumed from."""
    from stable_baselines3.common.logger import TensorBoardOutputFormat
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    restart = Event(step=step, session_log=SessionLog(status=SessionLog.START))
    for output in logger.output_formats:
        if isinstance(output, TensorBoardOutputFormat):
            output.writer.file_writer.add_event(restart)


def set_up_logger(setup: RunSetup, model: Any, learn_kwargs: dict[str, Any]) -> cb.EveryNthDump | None:
    """Give ``model`` the :func:`run_logger` with the stdout table printed every ``--log-interval``
    updates (-1: :func:`default_log_interval`; 0: never), while TensorBoard gets every update. Returns the
    table's output (None: no table is filtered: an off-policy SB3 algorithm keeps its ``log_interval``,
    in episodes)."""
    from stable_baselines3.common.logger import HumanOutputFormat

    args = setup.args
    logger = run_logger(setup, model.num_timesteps if args.trained_agent else None)
    model.set_logger(logger)
    steps = callback_steps.steps_per_update(model)
    if steps is None:
        if args.log_interval > 0:
            learn_kwargs["log_interval"] = args.log_interval
        return None
    interval = args.log_interval if args.log_interval >= 0 else default_log_interval(setup.n_timesteps, steps)
    learn_kwargs["log_interval"] = 1
    table = None
    for i, output in enumerate(logger.output_formats):
        if isinstance(output, HumanOutputFormat) and output.file is sys.stdout:
            table = logger.output_formats[i] = cb.EveryNthDump(output, interval)
    return table


def announce(setup: RunSetup) -> None:
    """Print where the run goes, and the command that shows its TensorBoard logs."""
    if setup.args.verbose:
        print(f"Run folder: {setup.save_path}")
        if setup.args.tensorboard_log:
            print(f"TensorBoard: tensorboard --logdir {shlex.quote(setup.args.tensorboard_log)}")


def train_run(setup: RunSetup, argv: list[str]) -> TrainResult:
    """Train ``setup`` once: the run folder and its files, envs, model, callbacks, logger, ``learn``
    (Ctrl-C stops it and still saves), the final ``<Env>.zip`` (and ``vecnormalize.pkl``), then close.

    A grouped algorithm's model is built before any file, so that its errors leave nothing behind; a
    start that fails later removes the folder again. ``--track`` mirrors the run to Weights & Biases.
    """
    args = setup.args
    setup.save_path = run_folder(args.log_folder, setup.algo, setup.env_name, unique=args.uuid)
    params_path = os.path.join(setup.save_path, setup.env_name)
    model = build_model(setup, None) if setup.owns_env else None  # its errors come before any file
    agent_dir = os.path.dirname(os.path.abspath(args.trained_agent))
    stats = os.path.join(agent_dir, setup.env_name, "vecnormalize.pkl") if args.trained_agent else None
    parts: RunParts | None = None
    table = None
    interrupted = False
    trained = cb.TrainedSteps()  # Ctrl-C saves the model at the steps it trained on
    tracked = tracking.start(args, run_args(setup)) if args.track else None
    try:
        with new_run_folder(setup.save_path):  # a failed start removes it again (and frees its number)
            parts = assemble(setup, stats, model)
            setup.tensorboard_run = tensorboard_run(setup)
            write_run_files(setup, argv, parts.model)
            callbacks = [trained, *build_callbacks(setup, parts.eval_env)]
            if not isinstance(parts.model, GroupAlgorithm):  # whose learn() warns itself
                callback_steps.warn_never_firing(parts.model, callbacks, setup.n_timesteps)
            learn_kwargs = parts.learn_kwargs(setup.n_timesteps, callbacks)
            learn_kwargs.update(reset_num_timesteps=not args.trained_agent)
            table = set_up_logger(setup, parts.model, learn_kwargs)
        announce(setup)
        model = parts.model
        try:
            model.learn(**learn_kwargs)
        except KeyboardInterrupt:
            interrupted = True
            print(trained.rewind())
        if table is not None:
            table.flush_last()
        path = cb.atomic_save(model, os.path.join(setup.save_path, f"{setup.env_name}.zip"))
        if args.verbose:
            print(f"Saving to {path}")
        if model.get_vec_normalize_env() is not None:
            model.get_vec_normalize_env().save(os.path.join(params_path, "vecnormalize.pkl"))
    finally:
        if parts is not None:
            parts.close()
        if tracked is not None:
            tracked.finish()
    return TrainResult(model, setup.save_path, setup.env_id, setup.algo, args.seed, setup.n_timesteps,
                       setup.values, interrupted)
