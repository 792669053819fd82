"""Environment building for the zoo: the training and evaluation VecEnvs with their monitors.

``TPO/`` envs are built natively batched (``tpo_gym.sb3.make_sb3_vec_env``) and wrapped in
``VecMonitor``; any other Gymnasium env (or a ``TPO/`` env with an ``env_wrapper``) goes through
SB3's ``make_vec_env``, one ``Monitor`` per sub-env, as the RL Zoo does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

from tpo_agents.zoo.registry import ENV_NAMESPACE

VEC_ENV_CLASSES: dict[str, type[VecEnv]] = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}


def default_info_keywords(env_id: str) -> tuple[str, ...]:
    """Info keys for ``monitor.csv``: ``is_success`` on ``TPO/`` envs, plus ``token_error`` on token tasks."""
    if not env_id.startswith(ENV_NAMESPACE + "/"):
        return ()
    return ("is_success", "token_error") if env_id.split("/", 1)[1].startswith("Token") else ("is_success",)


def _native_factory() -> Callable[..., VecEnv] | None:
    """``tpo_gym.sb3.make_sb3_vec_env`` if the installed ``tpo_gym`` has it."""
    try:
        from tpo_gym.sb3 import make_sb3_vec_env
    except ImportError:
        return None
    return make_sb3_vec_env


def make_env(
    env_id: str,
    n_envs: int,
    seed: int | None,
    env_kwargs: dict[str, Any],
    monitor_dir: str | None = None,
    vec_env: str = "dummy",
    monitor_kwargs: dict[str, Any] | None = None,
    env_wrapper: Callable[[Any], Any] | None = None,
    vec_env_wrapper: Callable[[VecEnv], VecEnv] | None = None,
    frame_stack: int | None = None,
) -> VecEnv:
    """Build a monitored VecEnv of ``n_envs`` copies of ``env_id`` (monitor files in ``monitor_dir``)."""
    monitor_kwargs = dict(monitor_kwargs or {})
    monitor_kwargs.setdefault("info_keywords", default_info_keywords(env_id))
    native = _native_factory() if env_id.startswith(ENV_NAMESPACE + "/") and env_wrapper is None else None
    if native is not None:
        if vec_env != "dummy":
            print(f"{env_id} is natively batched: --vec-env {vec_env} is not used")
        venv = native(env_id, n_envs, seed=seed, **env_kwargs)
        filename = os.path.join(monitor_dir, "monitor.csv") if monitor_dir else None
        venv = VecMonitor(venv, filename=filename, info_keywords=tuple(monitor_kwargs["info_keywords"]))
    else:
        venv = make_vec_env(
            env_id,
            n_envs=n_envs,
            seed=seed,
            env_kwargs=env_kwargs,
            monitor_dir=monitor_dir,
            wrapper_class=env_wrapper,
            vec_env_cls=VEC_ENV_CLASSES[vec_env],
            monitor_kwargs=monitor_kwargs,
        )
    if vec_env_wrapper is not None:
        venv = vec_env_wrapper(venv)
    if frame_stack:
        venv = VecFrameStack(venv, int(frame_stack))
    return venv


def normalize_kwargs(normalize: Any, gamma: float | None) -> dict[str, Any] | None:
    """The ``VecNormalize`` keyword arguments of a YAML ``normalize`` value (``None``: no normalization)."""
    if not normalize:
        return None
    kwargs = dict(normalize) if isinstance(normalize, dict) else {}
    if gamma is not None:
        kwargs.setdefault("gamma", gamma)
    return kwargs


def normalized(venv: VecEnv, kwargs: dict[str, Any] | None, stats: str | None, training: bool) -> VecEnv:
    """Wrap ``venv`` in ``VecNormalize`` (loading ``stats`` if that file exists); eval envs stay frozen."""
    if kwargs is None:
        return venv
    if stats is not None and os.path.isfile(stats):
        venv = VecNormalize.load(stats, venv)
    elif training:
        venv = VecNormalize(venv, **kwargs)
    else:
        venv = VecNormalize(venv, **{**kwargs, "norm_reward": False})
    venv.training = training
    if not training:
        venv.norm_reward = False
    return venv
