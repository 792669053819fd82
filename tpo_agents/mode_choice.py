"""The choice of a grouped algorithm's collection mode from its env: the env's id and kwargs, traits, probe.

Without ``group_mode``, an algorithm takes the first mode of its ``mode_preference`` that it supports,
that collects from the env's class and whose ``is_natural_for`` holds for the env's
:class:`~tpo_agents.modes.EnvTraits` (else the first that ``can_collect`` from it):
:func:`choose_mode`, behind :meth:`tpo_agents.base_class.GroupBaseAlgorithm.natural_mode`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator
from stable_baselines3.common.vec_env import VecEnv

from tpo_agents.modes import MODES, EnvTraits

_VEC_ONLY_KWARGS = ("num_envs", "vectorization_mode", "max_episode_steps", "render_mode")

EnvLike = str | gym.Env | VecEnv | gym.vector.VectorEnv


def env_id_and_kwargs(env: EnvLike) -> tuple[str, dict[str, Any]]:
    """The registered id and make() kwargs of an env given as an id, a Gymnasium env or a VecEnv."""
    if isinstance(env, str):
        return env, {}
    spec = env.get_attr("spec", indices=[0])[0] if isinstance(env, VecEnv) else getattr(env, "spec", None)
    if spec is None:
        raise ValueError(
            f"cannot tell which env {env!r} is: pass a registered id such as 'TPO/TokenReversal-v0' "
            "or an env made by gymnasium.make / gymnasium.make_vec / tpo_gym.sb3.make_sb3_vec_env"
        )
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k not in _VEC_ONLY_KWARGS}
    return spec.id, kwargs


def env_class(env_id: str) -> Any:
    """The registered entry point of ``env_id`` (a class for the ``tpo_gym`` envs), not instantiated."""
    entry_point = gym.spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def make_probe(env_id: str, env_kwargs: dict[str, Any], source: EnvLike) -> gym.Env:
    """One single env of ``env_id`` to read spaces and traits from: ``source`` itself if it is one."""
    if isinstance(source, gym.Env):
        return source
    try:
        return gym.make(env_id, **env_kwargs)
    except (TypeError, ValueError) as err:  # an unknown env kwarg, or a value out of range
        raise ValueError(f"cannot make {env_id} with {env_kwargs}: {err}") from err


def choose_mode(
    algo_class: Any, env_id: str, env_kwargs: dict[str, Any], source: EnvLike
) -> tuple[str, gym.Env | None]:
    """The natural mode of ``algo_class`` (a grouped algorithm class) on ``env_id``
    (:meth:`~tpo_agents.base_class.GroupBaseAlgorithm.natural_mode`) and the probe env it read the traits
    from (None if it read none).

    The rule: among the modes of ``mode_preference`` that the algorithm supports and that collect from the
    env's class, the first whose ``is_natural_for`` holds for the env's :class:`~tpo_agents.modes.EnvTraits`
    (episode length, dense or terminal ``reward``, enumerable contexts); else the first that
    ``can_collect`` from it. So TPO and GRPO take ``single`` on the k-armed bandit and MNIST, ``exact`` on
    the multi-context bandit, ``token`` on the dense-reward token tasks, ``sequence`` on terminal-reward
    ones and ``text`` on the text envs; DG and PG ``single`` (``exact`` on the multi-context bandit), PPO
    ``single``, Group PG as TPO but ``single`` on the multi-context bandit, CE ``exact``."""
    name, supported = algo_class.__name__, algo_class.supported_modes()
    klass = env_class(env_id)
    candidates = [m for m in algo_class.mode_preference if m in supported and MODES[m].collects_from(klass)]
    if not candidates:
        kinds = " or ".join(dict.fromkeys(MODES[m].env_description for m in supported))
        raise ValueError(f"{name} collects groups from {kinds}; {env_id!r} is not one: train other envs "
                         "with an SB3 algorithm (e.g. sb3_ppo).")
    traits = EnvTraits(lambda: make_probe(env_id, env_kwargs, source))
    for fits in (lambda mode: mode.is_natural_for(traits), lambda mode: mode.can_collect(traits)):
        for mode in candidates:
            if fits(MODES[mode]):
                return mode, traits.env
    needs = "; ".join(f"{m} mode needs {MODES[m].needs}" for m in candidates)
    given = f" with {env_kwargs}" if env_kwargs else ""
    raise ValueError(f"{name} has no collection mode for {env_id!r}{given}: {needs}")


def probe_env(algo_class: Any, mode_name: str, env_id: str, env_kwargs: dict[str, Any], source: EnvLike,
              probe: gym.Env | None = None) -> gym.Env:
    """A single env of ``source`` (``probe`` if one was made already) to read the spaces from, once the
    registered env is known to be one the mode collects from (another env, CartPole say, gets a clear
    error rather than a failure inside its constructor) and its action space one the mode takes."""
    name, mode = algo_class.__name__, MODES[mode_name]
    klass = env_class(env_id)
    if not mode.collects_from(klass):
        fitting = [m for m in algo_class.supported_modes() if MODES[m].collects_from(klass)]
        hint = (f"for {env_id!r} use group_mode={fitting[0]!r}" if fitting
                else "train other envs with an SB3 algorithm (e.g. sb3_ppo)")
        raise ValueError(f"{name} in {mode.name} mode collects groups from {mode.env_description}; "
                         f"{env_id!r} is not one: {hint}.")
    probe = probe if probe is not None else make_probe(env_id, env_kwargs, source)
    if not isinstance(probe.action_space, mode.action_space_types):
        raise ValueError(f"{name} in {mode.name} mode needs a {mode.action_space_types[0].__name__} "
                         f"action space, got {probe.action_space}")
    return probe


def batched_env(env_id: str, mode: Any, n_seeds: int, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
    """The natively batched vector env of ``env_id`` with the sub-envs ``mode`` steps, for each of
    ``n_seeds`` members."""
    members = {"n_seeds": n_seeds} if n_seeds > 1 else {}
    vector_env = gym.make_vec(env_id, num_envs=mode.n_envs * n_seeds, vectorization_mode="vector_entry_point",
                              **members, **env_kwargs)
    if not mode.collects_from_vector(type(vector_env.unwrapped)):
        raise ValueError(f"{env_id!r} has no natively batched vector env")
    return vector_env
