"""Watch a trained agent: run it for N steps and print each finished episode as the env renders it.

    python -m tpo_agents.enjoy --algo tpo --env TokenReversal -f logs/ -n 50
    python -m tpo_agents.enjoy --algo tpo --env MultiContextBandit -f logs/ --exp-id 2 --stochastic
    python -m tpo_agents.enjoy --algo sb3_ppo --model logs/ppo/CartPole-v1_1 --no-render   # an rl_zoo3 run

The RL Zoo's ``enjoy.py`` for text terminals. The model is found and loaded as
``python -m tpo_agents.evaluate`` finds it (``-f``/``--exp-id`` or ``--model <run folder>``, then
``--load-best``/``--load-checkpoint``/``--load-last-checkpoint``; or ``--model <zip>``) and its env
rebuilt with the run's env kwargs, with ``render_mode="ansi"`` where the env has it (the ``TPO/`` token
tasks, bandits and MNIST): each finished episode's final state is printed (the token tasks: prompt,
target and the agent's tokens, wrong ones in ``[brackets]``), with its return and task error, and a
summary at the end. An env without text rendering (CartPole) prints one line per episode. ``-n`` counts
steps, as in rl_zoo3.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from tpo_agents.zoo import evaluate as ev
from tpo_agents.zoo.callbacks import episode_task_error
from tpo_agents.zoo.hyperparams import ConfigError

#: Where :class:`FinalRender` puts the rendered last state of an episode in the step's info.
RENDER_KEY = "final_render"


class FinalRender(gym.Wrapper):
    """Put ``env.render()`` of an episode's last state into that step's info (before a VecEnv resets it)."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """``env.step``; on the last step of an episode, ``info[RENDER_KEY]`` holds the rendered state."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, RENDER_KEY: self.env.render()}
        return obs, reward, terminated, truncated, info


def build_parser() -> argparse.ArgumentParser:
    """Command line of ``python -m tpo_agents.enjoy``: rl_zoo3's ``enjoy.py`` flags (help: differences)."""
    lines = __doc__.splitlines()
    examples = "examples:\n" + "\n".join(line for line in lines if line.startswith("    python"))
    p = argparse.ArgumentParser(prog="python -m tpo_agents.enjoy", description=lines[0], epilog=examples,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--algo", type=str, default=None,
                   help=f"algorithm the model was trained with (default: the run's, else {ev.DEFAULT_ALGO})")
    p.add_argument("--env", type=str, default=None,
                   help=f"env id or short name (default: the run's, else {ev.DEFAULT_ENV})")
    p.add_argument("-f", "--folder", "--log-folder", dest="folder", type=str, default="logs",
                   help="log folder (default: logs; rl_zoo3's: rl-trained-agents; nothing is downloaded)")
    p.add_argument("--exp-id", type=int, default=0,
                   help="run number (0: latest; rl_zoo3's -1, no run sub-folder, is --model here)")
    p.add_argument("--model", type=str, default="",
                   help="a model .zip, or a run folder (its model chosen by --load-*), instead of "
                   "-f/--exp-id (not in rl_zoo3)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--load-best", action="store_true", help="load best_model.zip")
    which.add_argument("--load-checkpoint", type=int, help="load rl_model_<N>_steps.zip")
    which.add_argument("--load-last-checkpoint", action="store_true", help="load the latest checkpoint")
    p.add_argument("-n", "--n-timesteps", type=int, default=1000,
                   help="number of STEPS (default: 1000), as in rl_zoo3 (each steps all --n-envs envs); "
                   "python -m tpo_agents.evaluate -n counts episodes")
    p.add_argument("--n-envs", type=int, default=1, help="envs run side by side (default: 1)")
    acting = p.add_mutually_exclusive_group()
    acting.add_argument("--deterministic", action="store_true",
                        help="greedy actions (default, as rl_zoo3 and python -m tpo_agents.evaluate)")
    acting.add_argument("--stochastic", action="store_true", help="sampled actions")
    p.add_argument("--seed", type=int, default=0, help="seed of the env and of sampled actions (default: 0)")
    p.add_argument("--env-kwargs", type=str, nargs="+", action=ev.StoreDict, default={},
                   help="key:value env kwargs, on top of the run's")
    p.add_argument("--no-render", action="store_true", help="print only each episode's return and task error")
    p.add_argument("--device", type=str, default="auto", help="PyTorch device (default: auto)")
    p.add_argument("--num-threads", type=int, default=1,
                   help="torch threads (default: 1; 0 or less: torch's own, rl_zoo3's default -1)")
    p.add_argument("--verbose", type=int, default=1, help="0: the summary only; 1 (default): episodes too")
    p.add_argument("--gym-packages", type=str, nargs="+", default=[], help="modules to import (their envs)")
    p.add_argument("--custom-objects", action="store_true",
                   help="load with learning_rate 0 and constant lr_schedule / clip_range, for a zip whose "
                   "schedules do not unpickle (rl_zoo3 always does this on Python >= 3.8)")
    return p


def text_render_mode(env_id: str) -> str | None:
    """``"ansi"`` if the env's class declares that render mode, else ``None``."""
    from gymnasium.envs.registration import load_env_creator

    entry_point = gym.spec(env_id).entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    return "ansi" if "ansi" in getattr(creator, "metadata", {}).get("render_modes", []) else None


def make_watch_env(
    env_id: str, n_envs: int, seed: int, env_kwargs: dict[str, Any], render_mode: str | None
) -> Any:
    """A ``DummyVecEnv`` of monitored single envs (with ``render_mode``: rendering, :class:`FinalRender`)."""
    from stable_baselines3.common.env_util import make_vec_env

    kwargs = {**env_kwargs, "render_mode": render_mode}  # None too: make_vec_env's default is rgb_array
    try:
        return make_vec_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=kwargs,
                            wrapper_class=FinalRender if render_mode else None)  # fmt: skip
    except (TypeError, ValueError) as err:
        raise ConfigError(f"cannot make {env_id} with env_kwargs {env_kwargs}: {err}") from err


def episode_line(number: int, env_index: int, n_envs: int, info: dict[str, Any]) -> str:
    """``Episode 3: return 4.00, length 5, task error 0.2000`` (``(env i)`` with several envs)."""
    episode = info.get("episode", {})
    where = f" (env {env_index})" if n_envs > 1 else ""
    line = f"Episode {number}{where}: return {float(episode.get('r', np.nan)):.2f}"
    line += f", length {episode.get('l', '?')}"
    error = episode_task_error(info)
    return line + (f", task error {error:.4f}" if error is not None else "")


def watch(model: Any, env: Any, n_timesteps: int, deterministic: bool, verbose: int = 1) -> dict[str, Any]:
    """Run ``model`` for ``n_timesteps`` steps of the VecEnv ``env``; print each finished episode (and its
    rendered last state); return the episodes' returns, lengths and task errors."""
    returns: list[float] = []
    lengths: list[int] = []
    errors: list[float] = []
    successes: list[float] = []
    finished = 0
    obs, state = env.reset(), None
    episode_start = np.ones(env.num_envs, dtype=bool)
    for _ in range(n_timesteps):
        action, state = model.predict(obs, state=state, episode_start=episode_start,
                                      deterministic=deterministic)  # fmt: skip
        obs, _, dones, infos = env.step(action)
        episode_start = dones
        for index in np.flatnonzero(dones):
            info, finished = infos[index], finished + 1
            if "episode" in info:
                returns.append(float(info["episode"]["r"]))
                lengths.append(int(info["episode"]["l"]))
            error = episode_task_error(info)
            if error is not None:
                errors.append(error)
            if "is_success" in info:
                successes.append(float(info["is_success"]))
            if verbose > 0:
                print(episode_line(finished, int(index), env.num_envs, info))
                if info.get(RENDER_KEY):
                    print(info[RENDER_KEY] + "\n")
    result: dict[str, Any] = {"n_timesteps": n_timesteps, "deterministic": deterministic,
                              "n_episodes": finished, "returns": returns, "lengths": lengths}  # fmt: skip
    if returns:
        result.update(mean_return=float(np.mean(returns)), std_return=float(np.std(returns)),
                      mean_ep_length=float(np.mean(lengths)))  # fmt: skip
    if errors:
        result["task_error"] = float(np.mean(errors))
    if successes:
        result["success_rate"] = float(np.mean(successes))
    return result


def summary(result: dict[str, Any], chosen: ev.ChosenModel) -> str:
    """The closing lines: episodes, mean return, mean task error (and success rate, episode length)."""
    mode = "greedy" if result["deterministic"] else "sampled"
    head = f"{chosen.env_id} | {chosen.path}\n"
    n = result["n_episodes"]
    head += f"{n} episode{'s' * (n != 1)} in {result['n_timesteps']} steps ({mode})"
    if not result["n_episodes"]:
        return head + ": none finished (raise -n)"
    lines = [head + f": mean return {result['mean_return']:.4f} +/- {result['std_return']:.4f}"]
    if "task_error" in result:
        lines.append(f"mean task error {result['task_error']:.4f}")
    if "success_rate" in result:
        lines.append(f"success rate {result['success_rate']:.4f}")
    lines.append(f"mean episode length {result['mean_ep_length']:.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Watch the model chosen by ``argv``; print the episodes and the summary; return the statistics."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    args = build_parser().parse_args(argv)
    if args.n_timesteps < 1 or args.n_envs < 1:
        raise ConfigError(f"-n and --n-envs must be positive, got {args.n_timesteps} and {args.n_envs}")
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    custom = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    chosen = ev.choose_model(args, **({"custom_objects": custom} if args.custom_objects else {}))
    if ev.is_text_env(chosen.env_id):
        raise ConfigError(f"{chosen.env_id} is a text env: watch it with python -m tpo_agents.evaluate "
                          f"(greedy and pass@k scores), not tpo_agents.enjoy")  # fmt: skip
    render_mode = None if args.no_render else text_render_mode(chosen.env_id)
    if not args.no_render and render_mode is None:
        print(f"{chosen.env_id} has no text rendering (render_mode 'ansi'): printing each episode's return")
    set_random_seed(args.seed)
    env = make_watch_env(chosen.env_id, args.n_envs, args.seed, chosen.env_kwargs, render_mode)
    env = ev.with_run_stats(env, chosen)
    try:
        try:
            ev.check_for_correct_spaces(env, chosen.model.observation_space, chosen.model.action_space)
        except ValueError as err:
            raise ev.misfit(chosen, err) from err
        result = watch(chosen.model, env, args.n_timesteps, not args.stochastic, args.verbose)
    finally:
        env.close()
    result.update(model=chosen.path, env_id=chosen.env_id, env_kwargs=chosen.env_kwargs)
    print(summary(result, chosen))
    return result


def cli(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m tpo_agents.enjoy``: :func:`main` with user errors as one ``error:`` line."""
    try:
        main(argv)
    except ConfigError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    cli()
