"""Evaluate a saved model: the task's error (and reward, success rate) over N episodes.

    python -m tpo_agents.evaluate --algo tpo --env TokenReversal -f logs/ -n 1000
    python -m tpo_agents.evaluate --algo tpo --env TokenReversal --model path/to/model.zip --stochastic
    python -m tpo_agents.evaluate --algo tpo --env ReasoningGym -f logs/ -n 100 --pass-k 8

A text env (language models) is evaluated on its ``eval`` split: the first N items, the mean score
of greedy completions and pass@k, the fraction of items where one of k sampled completions succeeds.

The run folder is found as the zoo writes it (``<folder>/<algo>/<Env>_<N>``; ``--exp-id 0`` is the
latest run); the env is rebuilt with the run's ``env_kwargs`` (plus its ``eval_env_kwargs``, e.g.
MNIST's test split) from ``config.yml``/``args.yml``, then ``--env-kwargs`` on top. Actions are
greedy (``--deterministic``, the default: as rl_zoo3's ``enjoy``, ``python -m tpo_agents.enjoy`` and the
training run's own evaluations) unless ``--stochastic`` samples them (as the paper's token-task error,
that of the training batches, is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from stable_baselines3.common.utils import check_for_correct_spaces

from tpo_agents.saving import model_zip_path
from tpo_agents.zoo import registry
from tpo_agents.zoo.callbacks import episode_task_error
from tpo_agents.zoo.cli import StoreDict
from tpo_agents.zoo.envs import make_env, normalized
from tpo_agents.zoo.hyperparams import ConfigError, evaluated, merge_env_kwargs, one_line
from tpo_agents.zoo.run import resolve
from tpo_agents.zoo.run_files import read_run_yaml

#: The algorithm and env of ``python -m tpo_agents.evaluate`` without a run to take them from.
DEFAULT_ALGO, DEFAULT_ENV = "tpo", "TPO/TokenReversal-v0"


def evaluate(model: Any, env: Any, n_episodes: int = 100, deterministic: bool = True) -> dict[str, Any]:
    """Run ``n_episodes`` episodes of ``model`` on the VecEnv ``env`` (greedy actions unless not
    ``deterministic``); return the error and reward statistics.

    ``task_error`` is the mean over episodes of the final step's ``token_error`` (token tasks) or
    ``1 - is_success`` (bandits, MNIST).
    """
    from stable_baselines3.common.evaluation import evaluate_policy

    errors: list[float] = []
    successes: list[float] = []

    def collect(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        if locals_["done"]:
            info = locals_["info"]
            error = episode_task_error(info)
            if error is not None:
                errors.append(error)
            if "is_success" in info:
                successes.append(float(info["is_success"]))

    rewards, lengths = evaluate_policy(
        model, env, n_eval_episodes=n_episodes, deterministic=deterministic, return_episode_rewards=True,
        callback=collect, warn=False,
    )  # fmt: skip
    result: dict[str, Any] = {
        "n_episodes": len(rewards),
        "deterministic": deterministic,
        "mean_reward": float(np.mean(rewards)),
        "std_reward": float(np.std(rewards)),
        "mean_ep_length": float(np.mean(lengths)),
    }
    if errors:
        result.update(task_error=float(np.mean(errors)), task_error_std=float(np.std(errors)))
    if successes:
        result["success_rate"] = float(np.mean(successes))
    return result


def evaluate_text(
    policy: Any, env_id: str, env_kwargs: dict[str, Any], n_items: int = 100, k: int = 8, chunk: int = 8
) -> dict[str, Any]:
    """Greedy mean score, format rate and pass@k of a language-model policy on the test split's first items.

    pass@k = mean over items of 1[max_j score_j >= 0.99] for k sampled completions of each item.
    """
    import gymnasium as gym

    env = gym.make(env_id, **{**env_kwargs, "split": "test"}).unwrapped
    contexts = np.arange(min(n_items, env.task.num_items))
    greedy, formatted, best = [], [], []
    for start in range(0, len(contexts), chunk):
        ids = contexts[start : start + chunk]
        prompts = [str(prompt) for prompt in env.task.prompts_of(ids)]
        scores, _, format_ok = env.score_completions(ids, policy.generate(prompts, 1, greedy=True).texts)
        greedy.append(scores)
        formatted.append(format_ok)
        if k > 0:
            sampled = policy.generate(prompts, k).texts
            scores_k, _, _ = env.score_completions(np.repeat(ids, k), sampled)
            best.append(scores_k.reshape(len(ids), k).max(-1))
    result: dict[str, Any] = {
        "n_items": len(contexts),
        "mean_score_greedy": float(np.concatenate(greedy).mean()),
        "format_rate_greedy": float(np.concatenate(formatted).mean()),
    }
    if k > 0:
        result[f"pass@{k}"] = float((np.concatenate(best) >= 0.99).mean())
    return result


def is_text_env(env_id: str) -> bool:
    """True for the language-model envs (``tpo_gym.envs.text``)."""
    import gymnasium as gym

    return str(gym.spec(env_id).entry_point).startswith("tpo_gym.envs.text:")


def build_parser() -> argparse.ArgumentParser:
    """Command line of ``python -m tpo_agents.evaluate`` (names as the RL Zoo's ``enjoy.py``)."""
    p = argparse.ArgumentParser(prog="python -m tpo_agents.evaluate", description=__doc__.split("\n")[0])
    p.add_argument(
        "--algo", type=str, default=None,
        help=f"algorithm the model was trained with (default: the run's, else {DEFAULT_ALGO})",
    )  # fmt: skip
    p.add_argument(
        "--env", type=str, default=None, help=f"env id or short name (default: the run's, else {DEFAULT_ENV})"
    )
    p.add_argument(
        "-f", "--folder", "--log-folder", dest="folder", type=str, default="logs", help="log folder"
    )
    p.add_argument("--exp-id", type=int, default=0, help="run number (0: latest)")
    p.add_argument(
        "--model", type=str, default="",
        help="a model .zip (.zip may be left out), or a run folder (its model chosen by --load-*), instead "
        "of -f/--exp-id; a model in a run folder is evaluated on the run's env and env kwargs",
    )  # fmt: skip
    which = p.add_mutually_exclusive_group()
    which.add_argument("--load-best", action="store_true", help="load best_model.zip")
    which.add_argument("--load-checkpoint", type=int, help="load rl_model_<N>_steps.zip")
    which.add_argument("--load-last-checkpoint", action="store_true", help="load the latest checkpoint")
    p.add_argument(
        "-n", "--n-episodes", type=int, default=100,
        help="number of EPISODES to evaluate (text envs: eval items); unlike rl_zoo3's enjoy -n (and "
        "python -m tpo_agents.enjoy -n), which counts steps",
    )  # fmt: skip
    p.add_argument("--pass-k", type=int, default=8, help="text envs: k of pass@k (0: greedy only)")
    p.add_argument("--n-envs", type=int, default=1, help="envs evaluated in parallel")
    acting = p.add_mutually_exclusive_group()
    acting.add_argument("--deterministic", action="store_true", default=True,
                        help="greedy actions (default, as rl_zoo3's enjoy and the run's own evaluations)")
    acting.add_argument("--stochastic", dest="deterministic", action="store_false", default=True,
                        help="sampled actions (the paper's token-task error is that of sampled actions)")
    p.add_argument("--seed", type=int, default=0, help="seed of the evaluation env")
    p.add_argument("--device", type=str, default="auto", help="PyTorch device")
    p.add_argument("--num-threads", type=int, default=1, help="torch threads (0 or less: torch's default)")
    p.add_argument(
        "--env-kwargs", type=str, nargs="+", action=StoreDict, default={}, help="key:value env kwargs"
    )
    p.add_argument(
        "--gym-packages", type=str, nargs="+", default=[], help="modules to import (register envs)"
    )
    p.add_argument("--json", type=str, default="", help="also write the results to this JSON file")
    return p


def recorded_run(folder: str) -> tuple[str, dict[str, Any]] | None:
    """``(<Env>, args.yml)`` of the zoo run in ``folder`` (``<Env>/args.yml``, ours or rl_zoo3's), or None
    if it is not one."""
    if not os.path.isdir(folder):
        return None
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name, "args.yml")
        if os.path.isfile(path):
            return name, read_run_yaml(path)
    return None


def model_and_run(model: str) -> tuple[str, str | None, str | None]:
    """``--model`` as ``(zip, run folder, <Env>)``: a run folder gives its final ``<Env>.zip``, itself and
    its ``<Env>``; a zip inside a run folder (final model, ``best_model.zip``, checkpoints) gives that
    folder and no ``<Env>``; another zip ``(zip, None, None)``."""
    path = model_zip_path(model)
    run = recorded_run(path)
    if run is not None:
        return os.path.join(path, f"{run[0]}.zip"), path, run[0]
    folder = os.path.dirname(os.path.abspath(path))
    return path, folder if recorded_run(folder) is not None else None, None


def load_flag(args: argparse.Namespace) -> str:
    """The ``--load-*`` flag given (``""`` for none): which model of a run folder to take."""
    if args.load_best:
        return "--load-best"
    if args.load_checkpoint is not None:
        return f"--load-checkpoint {args.load_checkpoint}"
    return "--load-last-checkpoint" if args.load_last_checkpoint else ""


def checkpoint_steps(run: str) -> list[int]:
    """The step counts of the checkpoints ``rl_model_<N>_steps.zip`` in ``run``, in increasing order."""
    names = (re.fullmatch(r"rl_model_(\d+)_steps\.zip", name) for name in os.listdir(run))
    return sorted(int(match.group(1)) for match in names if match)


def model_in_run(args: argparse.Namespace, run: str, env_name: str) -> str:
    """The zip of ``run`` that ``--load-best``, ``--load-checkpoint N``, ``--load-last-checkpoint`` or
    none of them (the final ``<Env>.zip``) names; a missing one is a :class:`ConfigError` listing the
    run's models (:func:`missing_model`)."""
    steps = checkpoint_steps(run) if os.path.isdir(run) else []
    if args.load_best:
        name = "best_model.zip"
    elif args.load_checkpoint is not None:
        name = f"rl_model_{args.load_checkpoint}_steps.zip"
    elif args.load_last_checkpoint:
        name = f"rl_model_{steps[-1]}_steps.zip" if steps else "rl_model_<N>_steps.zip"
    else:
        name = f"{env_name}.zip"
    path = os.path.join(run, name)
    if not os.path.isfile(path):
        raise ConfigError(missing_model(run, name, env_name))
    return path


def missing_model(run: str, name: str, env_name: str) -> str:
    """``No <name> in <run>``, then the models the run does hold and the flag of each (the final model,
    ``best_model.zip``, the checkpoints), and the temporary files of saves cut short (ignored)."""
    if not os.path.isdir(run):
        return f"No model at {os.path.join(run, name)}: no run folder {run}"
    held = []
    if os.path.isfile(os.path.join(run, f"{env_name}.zip")):
        held.append(f"{env_name}.zip (the final model: no --load-* flag)")
    if os.path.isfile(os.path.join(run, "best_model.zip")):
        held.append("best_model.zip (--load-best)")
    steps = checkpoint_steps(run)
    if steps:
        held.append(f"checkpoints at {', '.join(map(str, steps))} steps (--load-checkpoint N, "
                    "--load-last-checkpoint)")
    line = f"No {name} in {run}: " + ("it holds " + "; ".join(held) if held else "it holds no model")
    partial = sorted(entry for entry in os.listdir(run) if entry.startswith(".tmp-"))
    if partial:
        line += f" ({', '.join(partial)}: a save cut short, ignored)"
    return line


def find_model(args: argparse.Namespace, algo: str, env_name: str) -> tuple[str, str | None]:
    """The model zip to load and its run folder (``None`` for a model outside a run folder)."""
    if args.model:
        path, run, recorded_name = model_and_run(args.model)
        if recorded_name is not None:  # a run folder: the --load-* flag picks its model
            return model_in_run(args, run, recorded_name), run
        if load_flag(args):
            raise ConfigError(f"{load_flag(args)} picks a model of a run folder, but --model names the zip "
                              f"{path}: pass --model <its run folder>, or drop {load_flag(args).split()[0]}")
        if not os.path.isfile(path):
            raise ConfigError(f"No model at {path}")
        return path, run
    from stable_baselines3.common.utils import get_latest_run_id

    log_path = os.path.join(args.folder, algo)
    run_id = args.exp_id if args.exp_id > 0 else get_latest_run_id(log_path, env_name)
    if run_id == 0:
        raise ConfigError(f"No run of {algo} on {env_name} in {log_path} (no folder {env_name}_<N>): "
                          f"train one, or pass -f <log folder> or --model <zip or run folder>")  # fmt: skip
    run = os.path.join(log_path, f"{env_name}_{run_id}")
    return model_in_run(args, run, env_name), run


def run_env_kwargs(run: str | None, env_name: str) -> dict[str, Any]:
    """The env kwargs a run trained with, plus its evaluation kwargs (from config.yml and args.yml)."""
    kwargs: dict[str, Any] = {}
    if run is None:
        return kwargs
    data = []
    for name in ("config.yml", "args.yml"):
        path = os.path.join(run, env_name, name)
        if os.path.isfile(path):
            data.append(read_run_yaml(path))
    for key in ("env_kwargs", "eval_env_kwargs"):
        for entry in data:
            kwargs.update(evaluated(entry.get(key) or {}))
    return kwargs


@dataclass
class ChosenModel:
    """The model a command line chose, loaded: its algorithm, env, zip, run folder and env kwargs."""

    algo: str
    env_id: str
    env_name: str
    path: str
    run: str | None
    env_kwargs: dict[str, Any]
    model: Any


def load_model(algo: str, algo_class: type, path: str, device: str, **kwargs: Any) -> Any:
    """``algo_class.load(path)``; a failure (a corrupt zip, another algorithm's) is a one-line ConfigError
    (``load``'s own when it names the zip: ``cannot load m.zip as GRPO: it was saved by TPO ...``)."""
    try:
        return algo_class.load(path, device=device, **kwargs)
    except Exception as err:  # one line, not a traceback
        said = one_line(err).partition(": ")[2]
        raise ConfigError(said if said.startswith(f"cannot load {path} ") else
                          f"cannot load {path} as {algo}: {one_line(err)}") from err


def choose_model(args: argparse.Namespace, **load_kwargs: Any) -> ChosenModel:
    """Resolve ``--algo``/``--env`` (from ``--model``'s run when not given), find the zip and load it."""
    run = model_and_run(args.model)[1] if args.model else None
    recorded = (recorded_run(run) or ("", {}))[1] if run else {}
    args.algo = args.algo or recorded.get("algo") or DEFAULT_ALGO  # a run's model: the run's algo and env
    args.env = args.env or recorded.get("env") or DEFAULT_ENV
    algo, env_id, algo_class = resolve(args)
    env_name = registry.env_file_name(env_id)
    path, run = find_model(args, algo, env_name)
    if recorded and recorded.get("env") != env_id:
        print(f"Not using the env kwargs of {run}: it trained on {recorded.get('env')}, not {env_id}")
    env_kwargs = merge_env_kwargs(env_id, run_env_kwargs(run, env_name), args.env_kwargs)
    model = load_model(algo, algo_class, path, args.device, **load_kwargs)
    return ChosenModel(algo, env_id, env_name, path, run, env_kwargs, model)


def with_run_stats(env: Any, chosen: ChosenModel) -> Any:
    """``env`` in the run's frozen ``VecNormalize`` statistics, if it trained with ``normalize`` (SB3)."""
    stats = os.path.join(chosen.run, chosen.env_name, "vecnormalize.pkl") if chosen.run else ""
    return normalized(env, {}, stats, training=False) if os.path.isfile(stats) else env


def misfit(chosen: ChosenModel, err: Exception) -> ConfigError:
    """The one-line error of a model that does not fit the env built for it (``err``: what failed)."""
    hint = "" if chosen.run else " (pass the env kwargs it was trained with: --env-kwargs key:value ...)"
    return ConfigError(f"{chosen.path} does not fit {chosen.env_id} with env_kwargs {chosen.env_kwargs}: "
                       f"{err}{hint}")  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Evaluate the model chosen by ``argv`` and print (and return) the results."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    args = build_parser().parse_args(argv)
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    chosen = choose_model(args)
    model, path, env_id, env_kwargs = chosen.model, chosen.path, chosen.env_id, chosen.env_kwargs
    set_random_seed(args.seed)  # sampled actions repeat for one seed
    if is_text_env(env_id):
        result = {"model": path, "env_id": env_id, "env_kwargs": env_kwargs}
        result.update(evaluate_text(model.policy, env_id, env_kwargs, args.n_episodes, args.pass_k))
        print(f"{env_id} | {path}\n{result['n_items']} eval items: greedy mean score "
              f"{result['mean_score_greedy']:.4f}, format rate {result['format_rate_greedy']:.4f}"
              + (f", pass@{args.pass_k} {result[f'pass@{args.pass_k}']:.4f}" if args.pass_k > 0 else ""))
        _write_json(args.json, result)
        return result
    try:
        env = make_env(env_id, args.n_envs, args.seed, env_kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"cannot make {env_id} with env_kwargs {env_kwargs}: {err}") from err
    env = with_run_stats(env, chosen)
    try:
        check_for_correct_spaces(env, model.observation_space, model.action_space)
        result = {"model": path, "env_id": env_id, "env_kwargs": env_kwargs}
        result.update(evaluate(model, env, args.n_episodes, args.deterministic))
    except ValueError as err:
        raise misfit(chosen, err) from err
    finally:
        env.close()
    print(report(result, path))
    _write_json(args.json, result)
    return result


def report(result: dict[str, Any], path: str) -> str:
    """The printed summary: the task error where the env defines one (``TPO/`` envs), the mean reward,
    the success rate where the env reports ``is_success``, and the mean episode length."""
    mode = "greedy" if result["deterministic"] else "sampled"
    reward = f"mean reward {result['mean_reward']:.4f} +/- {result['std_reward']:.4f}"
    lines = [f"{result['env_id']} | {path}"]
    if "task_error" in result:
        lines += [f"{result['n_episodes']} episodes ({mode}): task error {result['task_error']:.4f}", reward]
    else:
        lines.append(f"{result['n_episodes']} episodes ({mode}): {reward}")
    if "success_rate" in result:
        lines.append(f"success rate {result['success_rate']:.4f}")
    lines.append(f"mean episode length {result['mean_ep_length']:.1f}")
    return "\n".join(lines)


def cli(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m tpo_agents.evaluate``: :func:`main`, user errors as one ``error:`` line."""
    try:
        main(argv)
    except ConfigError as err:
        sys.exit(f"error: {err}")


def _write_json(path: str, result: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2, default=str)


if __name__ == "__main__":
    cli()
