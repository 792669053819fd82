"""The zoo: train any registered algorithm on any env from YAML hyperparameters, RL-Zoo style.

``python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/`` is a thin shim over
:func:`train`, which takes the same arguments as a list, so training can be called from Python:
``train(["--algo", "tpo", "--env", "TokenReversal", "-n", "2000"])``.

A run writes ``<log-folder>/<algo>/<Env>_<N>/`` with ``<Env>.zip`` (the final model, also saved on
Ctrl-C), ``monitor.csv``, ``evaluations.npz`` and ``best_model.zip`` (with ``--eval-freq``),
``rl_model_<steps>_steps.zip`` (with ``--save-freq``) and ``<Env>/{config.yml,args.yml,command.txt}``.
TensorBoard runs go to ``<tb>/<Env>/<ALGO>_<k>/``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.base import model_zip_path
from agents.checks import HyperparameterError
from agents.zoo import callbacks as cb
from agents.zoo import hyperparams as hp
from agents.zoo import optimize, registry, sb3_algos
from agents.zoo.envs import VEC_ENV_CLASSES, make_env, normalize_kwargs, normalized

#: The evaluation env's seed is the run's seed plus this offset (distinct prompt streams).
EVAL_SEED_OFFSET = 2**16
#: ``-tb`` default, resolved to ``<log-folder>/tensorboard``.
DEFAULT_TB = "<log-folder>/tensorboard"
#: With ``--log-interval -1``, the training table is printed about this many times per run.
MAX_TABLES = 50


class StoreDict(argparse.Action):
    """``key:value`` pairs into a dict, each value evaluated as Python (strings may stay bare)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        pairs = {}
        for item in values:
            key, sep, value = item.partition(":")
            if not sep:
                parser.error(f"{option_string} expects key:value pairs, got {item!r}")
            pairs[key] = hp.parse_value(value)
        setattr(namespace, self.dest, pairs)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``--help`` with each flag's default and the epilog's line breaks kept."""


def epilog() -> str:
    """The end of ``--help``: examples, the algorithms and the ``TPO/`` envs."""
    import tpo_gym

    envs = textwrap.fill(", ".join(tpo_gym.ENV_IDS + tpo_gym.TEXT_ENV_IDS), 100, subsequent_indent="  ")
    algos = textwrap.fill(", ".join(registry.ALGOS), 100, subsequent_indent="  ")
    return (
        "examples:\n"
        "  python train.py --algo tpo --env TokenReversal         # zoo_configs/tpo.yml: Table 1, V = 2\n"
        "  python train.py --algo grpo --env TokenReversal -n 100000 --env-kwargs vocab_size:4\n"
        "  python train.py --algo tpo --env TokenReversal -params eta:0.5 group_mode:sequence --seed 0\n"
        "  python train.py --algo sb3_ppo --env CartPole-v1 -n 50000 -tb ''  # no TensorBoard\n"
        "  python -m agents.evaluate --algo tpo --env TokenReversal -f logs/ # the latest run's task error\n"
        f"\nalgorithms:\n  {algos}\n"
        f"\nenvs (short names work: TokenReversal; SB3's algorithms take any Gymnasium id):\n  {envs}\n"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line, with the RL Zoo's flag names, aliases and defaults."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], prog="train.py", formatter_class=HelpFormatter, epilog=epilog()
    )
    p.add_argument("--algo", type=str, default="tpo", help=f"algorithm, one of: {', '.join(registry.ALGOS)}")
    p.add_argument(
        "--env", type=str, default="TPO/TokenReversal-v0", help="env id or short name (TokenReversal)"
    )
    p.add_argument(
        "-n", "--n-timesteps", type=int, default=-1, help="overrides the YAML n_timesteps when > 0"
    )
    p.add_argument("--seed", type=int, default=-1, help="random seed; -1 draws one (recorded in args.yml)")
    p.add_argument(
        "-tb", "--tensorboard-log", type=str, default=DEFAULT_TB,
        help="TensorBoard root folder ('' turns TensorBoard off)",
    )  # fmt: skip
    p.add_argument("-f", "--log-folder", type=str, default="logs", help="root of the run folders")
    p.add_argument("--eval-freq", type=int, default=25000, help="evaluate every N env steps (<= 0: never)")
    p.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation")
    p.add_argument("--n-eval-envs", type=int, default=1, help="envs of the evaluation VecEnv")
    p.add_argument("--save-freq", type=int, default=-1, help="checkpoint every N env steps (<= 0: never)")
    p.add_argument(
        "-params", "--hyperparams", type=str, nargs="+", default=[],
        help="YAML directory (<dir>/<algo>.yml), YAML file, and/or key:value overrides",
    )  # fmt: skip
    p.add_argument("-conf", "--conf-file", type=str, nargs="+", default=[], help="YAML file or directory")
    p.add_argument("--device", type=str, default="auto", help="PyTorch device (auto, cpu, cuda)")
    p.add_argument("--vec-env", type=str, default="dummy", choices=list(VEC_ENV_CLASSES), help="VecEnv type")
    p.add_argument(
        "-P", "--progress", action=argparse.BooleanOptionalAction, default=True,
        help="progress bar (shown with --verbose 1)",
    )  # fmt: skip
    p.add_argument("--verbose", type=int, default=1, help="0: silent, 1: info")
    p.add_argument(
        "--env-kwargs", type=str, nargs="+", action=StoreDict, default={}, help="key:value env kwargs"
    )
    p.add_argument(
        "--eval-env-kwargs", type=str, nargs="+", action=StoreDict, default={}, help="eval env kwargs"
    )
    p.add_argument(
        "--gym-packages", type=str, nargs="+", default=[], help="modules to import (register envs)"
    )
    p.add_argument("-i", "--trained-agent", type=str, default="", help="continue training from this .zip")
    p.add_argument(
        "--num-threads", type=int, default=1,
        help="torch threads (the models are small: extra threads only add synchronisation; "
        "0 or less keeps torch's default)",
    )  # fmt: skip
    p.add_argument(
        "--log-interval", type=int, default=-1,
        help=f"print the training table every N updates (TensorBoard gets every update); -1: about "
        f"{MAX_TABLES} tables per run; 0: never; off-policy SB3 algorithms: their log_interval (episodes)",
    )  # fmt: skip
    optimize.add_arguments(p)
    return p


@dataclass
class TrainResult:
    """What :func:`train` returns: the trained model and where the run was written."""

    model: Any
    save_path: str
    env_id: str
    algo: str
    seed: int
    n_timesteps: int
    hyperparams: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False


def import_algo(algo: str) -> type:
    """The class of ``algo``; a missing module of a registered algorithm is a :class:`ConfigError`."""
    try:
        return registry.get_algo(algo)
    except ModuleNotFoundError as err:
        module = registry.algo_module(algo)
        if err.name is not None and module.startswith(err.name):
            raise hp.ConfigError(f"Algorithm {algo!r} is registered but {module} is not written yet") from err
        raise


def git_commit() -> str:
    """The project's git commit (``"unknown"`` outside a checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )  # fmt: skip
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_folder(log_folder: str, algo: str, env_name: str) -> str:
    """``<log_folder>/<algo>/<env_name>_<N>`` with N one above the latest run (not created here)."""
    from stable_baselines3.common.utils import get_latest_run_id

    log_path = os.path.join(log_folder, algo)
    return os.path.join(log_path, f"{env_name}_{get_latest_run_id(log_path, env_name) + 1}")


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
    save_path: str = ""
    #: Where each hyperparameter came from (a file, ``--hyperparams override``, ``-n``, ...).
    origins: dict[str, str] = field(default_factory=dict)

    @property
    def env_name(self) -> str:
        """The env id as a folder name (``TPO-TokenReversal-v0``)."""
        return registry.env_file_name(self.env_id)


def configure(argv: list[str]) -> RunSetup:
    """Parse ``argv``, seed, and merge the hyperparameters (YAML dir < file < overrides < flags)."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    args = build_parser().parse_args(argv)
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    algo, env_id, algo_cls = resolve(args)
    if getattr(algo_cls, "owns_env", False):  # a grouped algorithm needs the TPO/ envs' capabilities
        sb3_algos.check_grouped_env(algo, env_id)
    if args.seed < 0:
        args.seed = int(np.random.randint(2**32 - 1, dtype="int64"))
    set_random_seed(args.seed)
    hyper = hp.load_hyperparams(args.hyperparams + args.conf_file, algo, env_id, args.verbose)
    for key, value in registry.ablation_kwargs(algo).items():  # an ablation's defining setting
        if key in hyper.values and hyper.values[key] != value:
            found = f"{hyper.origins[key]} sets {key}={hyper.values[key]!r}"
            raise hp.ConfigError(f"{algo!r} is defined by {key}={value!r}, but {found}")
        hyper.update({key: value}, f"the definition of {algo!r}")
    hp.check_keys(hyper, algo_cls, algo)
    hp.check_env_pipeline(hyper, algo_cls, algo)
    check_flags(args)
    if getattr(algo_cls, "owns_env", False) and args.vec_env != "dummy":
        raise hp.ConfigError(
            f"--vec-env {args.vec_env} cannot be used with {algo!r}: it steps its own batched env"
        )
    values = hyper.values
    if args.n_timesteps <= 0 and values.get("n_timesteps") is None:
        raise hp.ConfigError(f"No n_timesteps for {algo}-{env_id}: set it in the YAML file or pass -n")
    record_flags(hyper, args)  # config.yml and the printed values show what runs
    hp.check_values(hyper, algo_cls)
    n_timesteps = int(float(hp.as_number(values["n_timesteps"])))
    env_kwargs = {**hp.evaluated(values.get("env_kwargs") or {}), **args.env_kwargs}
    eval_env_kwargs = {**env_kwargs, **hp.evaluated(values.get("eval_env_kwargs") or {})}
    eval_env_kwargs.update(args.eval_env_kwargs)
    if not getattr(algo_cls, "owns_env", False):  # SB3's algorithms: the env's spaces, before any file
        sb3_algos.check_env(algo, env_id, env_kwargs)
    if args.verbose:
        print(f"Hyperparameters: {dict(sorted(values.items()))}")
    return RunSetup(
        args, algo, env_id, algo_cls, values, n_timesteps, env_kwargs, eval_env_kwargs, origins=hyper.origins
    )


def check_flags(args: argparse.Namespace) -> None:
    """Check the flags' ranges (one-line :class:`ConfigError`) and resolve ``-tb``'s default."""
    if args.tensorboard_log == DEFAULT_TB:
        args.tensorboard_log = os.path.join(args.log_folder, "tensorboard")
    if args.eval_freq > 0 and args.eval_episodes < 1:
        raise hp.ConfigError(f"--eval-episodes {args.eval_episodes}: must be an integer >= 1")
    if args.eval_freq > 0 and args.n_eval_envs < 1:
        raise hp.ConfigError(f"--n-eval-envs {args.n_eval_envs}: must be an integer >= 1")
    if args.log_interval < -1:
        raise hp.ConfigError(f"--log-interval {args.log_interval}: must be -1 (auto), 0 (never) or N >= 1")


def record_flags(hyper: hp.Hyperparams, args: argparse.Namespace) -> None:
    """Put ``-n``, ``--env-kwargs`` and ``--eval-env-kwargs`` into the hyperparameters (merged with the
    YAML env kwargs), so that ``config.yml`` and the printed values are what runs."""
    values = hyper.values
    if args.n_timesteps > 0:
        hyper.update({"n_timesteps": args.n_timesteps}, "-n")
    for key, given in (("env_kwargs", args.env_kwargs), ("eval_env_kwargs", args.eval_env_kwargs)):
        if given:
            merged = {**(hp.evaluated(values.get(key)) or {}), **given}
            hyper.update({key: merged}, f"--{key.replace('_', '-')}")


def write_run_files(setup: RunSetup, argv: list[str]) -> None:
    """Create the run folder and write ``config.yml``, ``args.yml`` and ``command.txt`` into it."""
    params_path = os.path.join(setup.save_path, setup.env_name)
    os.makedirs(params_path, exist_ok=True)
    hp.write_yaml(os.path.join(params_path, "config.yml"), setup.values)
    run_args = {
        **vars(setup.args), "algo": setup.algo, "env": setup.env_id, "n_timesteps": setup.n_timesteps,
        "env_kwargs": setup.env_kwargs, "eval_env_kwargs": setup.eval_env_kwargs,
    }  # fmt: skip  (what ran: -n or the YAML n_timesteps, the merged env kwargs)
    hp.write_yaml(os.path.join(params_path, "args.yml"), run_args)
    with open(os.path.join(params_path, "command.txt"), "w") as f:
        f.write(shlex.join(["train.py", *argv]) + "\n")


def load_error(err: BaseException) -> str:
    """A one-line description of why a model zip could not be loaded."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def owns_env(setup: RunSetup) -> bool:
    """True for an algorithm that builds its own env from the id (the grouped algorithms)."""
    return bool(getattr(setup.algo_cls, "owns_env", False))


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
    args, values = setup.args, setup.values
    options = env_options(setup)
    env = None
    if not owns_env(setup):
        n_envs = sb3_algos.train_n_envs(setup.algo, int(values.get("n_envs", 1)))
        env = make_env(setup.env_id, n_envs, args.seed, setup.env_kwargs, setup.save_path, **options)
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
    if owns_env(setup):
        env = setup.env_id
        common.update(env_kwargs=setup.env_kwargs, monitor_dir=setup.save_path)
    try:
        return _new_or_loaded(setup, env, kwargs, common)
    except hp.ConfigError:
        raise
    except HyperparameterError as err:
        raise hp.value_error(err, setup.origins) from err
    except (ValueError, AssertionError, TypeError) as err:
        raise hp.ConfigError(f"{setup.algo}: {err}") from err


def tensorboard_dir(setup: RunSetup) -> str | None:
    """``<tb>/<Env>`` (the model's ``tensorboard_log``), or None when ``-tb ''`` turns TensorBoard off."""
    tb = setup.args.tensorboard_log
    return os.path.join(tb, setup.env_name) if tb else None


def _new_or_loaded(setup: RunSetup, env: Any, kwargs: dict[str, Any], common: dict[str, Any]) -> Any:
    args = setup.args
    if not args.trained_agent:
        return setup.algo_cls(env=env, **common, **kwargs)
    path = model_zip_path(args.trained_agent)
    if not (path.endswith(".zip") and os.path.isfile(path)):
        raise hp.ConfigError(f"--trained-agent must be an existing .zip file, got {args.trained_agent!r}")
    kwargs = {k: v for k, v in kwargs.items() if k not in ("policy", "policy_kwargs")}
    try:
        model = setup.algo_cls.load(path, env=env, **common, **kwargs)
    except HyperparameterError:
        raise
    except Exception as err:  # a corrupt or foreign zip: one line, not a traceback
        raise hp.ConfigError(f"cannot load --trained-agent {path}: {load_error(err)}") from err
    print(f"Continuing from {args.trained_agent} at {model.num_timesteps} timesteps")
    return model


def build_callbacks(setup: RunSetup, eval_env: Any) -> list[Any]:
    """HParams, task error (algorithms that lack it), YAML callbacks, progress bar, checkpoints, eval."""
    args, save_path = setup.args, setup.save_path
    run = {"algo": setup.algo, "env_id": setup.env_id, "seed": args.seed, "n_timesteps": setup.n_timesteps}
    callbacks: list[Any] = [
        cb.HParamCallback({**run, "git": git_commit(), **setup.values, "env_kwargs": setup.env_kwargs})
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


def steps_per_update(model: Any) -> int | None:
    """Env steps between two updates: a grouped algorithm's collection, an on-policy SB3 algorithm's
    ``n_steps * n_envs``; None for the others (off-policy: their ``log_interval`` counts episodes)."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    mode = getattr(model, "mode", None)
    if mode is not None and getattr(model, "env", None) is not None and hasattr(model, "vector_env"):
        return int(mode.steps_per_collect(model.vector_env))
    if isinstance(model, OnPolicyAlgorithm):
        return int(model.n_steps * model.n_envs)
    return None


def default_log_interval(n_timesteps: int, steps: int) -> int:
    """Updates between two printed tables so that a run prints about :data:`MAX_TABLES` of them."""
    n_updates = -(-n_timesteps // max(steps, 1))
    return max(1, -(-n_updates // MAX_TABLES))


def set_up_logger(setup: RunSetup, model: Any, learn_kwargs: dict[str, Any]) -> cb.EveryNthDump | None:
    """Give ``model`` SB3's logger (TensorBoard in ``<tb>/<Env>/<ALGO>_<k>``, as SB3 names it) with the
    stdout table printed every ``--log-interval`` updates (-1: :func:`default_log_interval`; 0: never),
    while TensorBoard gets every update. Returns the table's output (None: no table is filtered)."""
    from stable_baselines3.common.logger import HumanOutputFormat
    from stable_baselines3.common.utils import configure_logger

    args = setup.args
    steps = steps_per_update(model)
    if steps is None:  # an off-policy SB3 algorithm: its own logger and log_interval (episodes)
        if args.log_interval > 0:
            learn_kwargs["log_interval"] = args.log_interval
        return None
    tb = tensorboard_dir(setup)
    try:
        logger = configure_logger(
            args.verbose, tb, learn_kwargs["tb_log_name"], learn_kwargs["reset_num_timesteps"]
        )
    except OSError as err:
        raise hp.ConfigError(f"cannot write TensorBoard logs to {tb}: {err.strerror or err}") from err
    interval = args.log_interval if args.log_interval >= 0 else default_log_interval(setup.n_timesteps, steps)
    learn_kwargs["log_interval"] = 1
    table = None
    for i, output in enumerate(logger.output_formats):
        if isinstance(output, HumanOutputFormat) and output.file is sys.stdout:
            table = logger.output_formats[i] = cb.EveryNthDump(output, interval)
    model.set_logger(logger)
    return table


def announce(setup: RunSetup) -> None:
    """Print where the run goes, and the command that shows its TensorBoard logs."""
    if setup.args.verbose:
        print(f"Run folder: {setup.save_path}")
        if setup.args.tensorboard_log:
            print(f"TensorBoard: tensorboard --logdir {shlex.quote(setup.args.tensorboard_log)}")



def close_run(model: Any, env: Any, eval_env: Any, workers: Any) -> None:
    """Close what a run opened: the model's logger (TensorBoard files), its envs and ARS's workers."""
    if model is not None and getattr(model, "_logger", None) is not None:
        model.logger.close()
    for venv in (env, eval_env, getattr(model, "env", None)):
        if venv is not None:
            venv.close()
    if workers is not None and not workers.closed:
        workers.close()

def train(argv: list[str] | None = None) -> TrainResult | optimize.OptimizeResult:
    """Run the zoo with command-line arguments ``argv`` (``sys.argv[1:]`` when ``None``).

    With ``-optimize`` it runs a hyperparameter search instead (:mod:`agents.zoo.optimize`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    setup = configure(argv)
    if setup.args.optimize_hyperparameters:
        return optimize.hyperparameter_optimization(setup, argv)
    args = setup.args
    setup.save_path = run_folder(args.log_folder, setup.algo, setup.env_name)
    params_path = os.path.join(setup.save_path, setup.env_name)
    model = build_model(setup, None) if owns_env(setup) else None  # its errors come before any file
    norm = normalize_kwargs(hp.evaluated(setup.values.get("normalize")), setup.values.get("gamma"))
    agent_dir = os.path.dirname(os.path.abspath(args.trained_agent))
    stats = os.path.join(agent_dir, setup.env_name, "vecnormalize.pkl") if args.trained_agent else None
    env = eval_env = table = None
    interrupted = False
    workers: Any = None
    try:
        with new_run_folder(setup.save_path):  # a failed start removes it again (and frees its number)
            write_run_files(setup, argv)
            env, eval_env = build_envs(setup, norm, stats)
            if model is None:
                model = build_model(setup, env)
            learn_kwargs: dict[str, Any] = dict(
                total_timesteps=setup.n_timesteps,
                callback=build_callbacks(setup, eval_env),
                tb_log_name=setup.algo.upper(),
                reset_num_timesteps=not args.trained_agent,
            )
            table = set_up_logger(setup, model, learn_kwargs)
        announce(setup)
        workers = sb3_algos.async_eval(
            setup.algo, int(setup.values.get("n_envs", 1)),
            lambda: normalized(make_env(setup.env_id, 1, args.seed, setup.env_kwargs, None,
                                        **env_options(setup)), norm, stats, training=True),
            model.policy,
        )  # fmt: skip
        if workers is not None:  # ARS with n_envs > 1 (RL Zoo): candidates evaluated in worker processes
            learn_kwargs["async_eval"] = workers
        try:
            model.learn(**learn_kwargs)
        except KeyboardInterrupt:
            interrupted = True
            print("Interrupted: saving the model")
        if table is not None:
            table.flush_last()
        path = cb.atomic_save(model, os.path.join(setup.save_path, f"{setup.env_name}.zip"))
        if args.verbose:
            print(f"Saving to {path}")
        if model.get_vec_normalize_env() is not None:
            model.get_vec_normalize_env().save(os.path.join(params_path, "vecnormalize.pkl"))
    finally:
        close_run(model, env, eval_env, workers)
    return TrainResult(
        model,
        setup.save_path,
        setup.env_id,
        setup.algo,
        args.seed,
        setup.n_timesteps,
        setup.values,
        interrupted,
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``train.py``: :func:`train` with configuration errors as a one-line message."""
    try:
        train(argv)
    except hp.ConfigError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
