"""Stable-Baselines3 ``VecEnv`` adapter of the natively batched ``tpo_gym`` vector envs.

``SB3VecEnv`` wraps any Gymnasium vector env with ``SAME_STEP`` autoreset; ``make_sb3_vec_env`` builds
one for a registered id. This module imports stable-baselines3 (``import tpo_gym`` alone does not).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env import VecEnv

__all__ = ["SB3VecEnv", "make_sb3_vec_env"]


def _infos_to_list(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium dict-of-arrays infos (with ``_`` masks) -> one dict per sub-env."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        rows = _infos_to_list(value, n) if isinstance(value, dict) else value
        for i in np.flatnonzero(infos.get(f"_{key}", np.ones(n, dtype=bool))):
            out[i][key] = rows[i]
    return out


class SB3VecEnv(VecEnv):
    """SB3 ``VecEnv`` view of a Gymnasium vector env with ``SAME_STEP`` autoreset.

    Spaces are the single-env ones; ``step`` returns ``(obs, rewards float32, dones, infos)``
    with ``dones = terminated | truncated`` and a list of info dicts. For a done sub-env the
    info is the final step's info plus ``terminal_observation`` and ``TimeLimit.truncated``,
    and the next episode's reset info goes to ``reset_infos``. One generator serves the
    whole batch: ``seed(s)`` seeds the next ``reset``. ``set_options`` takes one dict for the
    batch (``group_size``, ``contexts``). ``get_attr``/``set_attr`` act on the vector env
    (one value per index); ``env_method`` calls the batched method once and splits an array
    result with leading axis ``num_envs`` per index. Wrap with ``VecMonitor`` for episode stats.
    """

    def __init__(self, vector_env: VectorEnv) -> None:
        mode = vector_env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"SB3VecEnv needs autoreset_mode AutoresetMode.SAME_STEP, got {mode!r}")
        self.vector_env = vector_env
        self._actions: np.ndarray | None = None
        super().__init__(vector_env.num_envs, vector_env.single_observation_space,
                         vector_env.single_action_space)

    @property
    def spec(self) -> Any:
        """The vector env's ``EnvSpec`` (VecMonitor writes its id in the monitor header)."""
        return self.vector_env.spec

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seed the batch generator at the next ``reset`` (``None``: continue the stream)."""
        self._seeds = [seed] * self.num_envs
        return list(self._seeds)

    def reset(self) -> np.ndarray:
        """Reset every sub-env with the pending seed and options (both used once)."""
        obs, infos = self.vector_env.reset(seed=self._seeds[0], options=self._batch_options())
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = _infos_to_list(infos, self.num_envs)
        return obs

    def _batch_options(self) -> dict[str, Any] | None:
        given = [options for options in self._options if options]
        if not given:
            return None
        if len(given) != self.num_envs or any(options is not given[0] for options in given):
            raise ValueError("SB3VecEnv takes one options dict for the whole batch: call "
                             "set_options(dict); per-env contexts go in options['contexts']")
        return given[0]

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, terminated, truncated, infos = self.vector_env.step(self._actions)
        dones = np.asarray(terminated) | np.asarray(truncated)
        final_obs, final_info = infos.get("final_obs"), infos.get("final_info", {})
        rest = {k: v for k, v in infos.items() if k.lstrip("_") not in ("final_obs", "final_info")}
        info_list = _infos_to_list(rest, self.num_envs)
        if dones.any():
            finals = _infos_to_list(final_info, self.num_envs)
            for i in np.flatnonzero(dones):
                self.reset_infos[i] = info_list[i]
                info_list[i] = {**finals[i], "terminal_observation": final_obs[i],
                                "TimeLimit.truncated": bool(truncated[i] and not terminated[i])}
        return obs, np.asarray(rewards, dtype=np.float32), dones, info_list

    def close(self) -> None:
        self.vector_env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        value = getattr(self.vector_env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.vector_env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        result = getattr(self.vector_env, method_name)(*method_args, **method_kwargs)
        split = isinstance(result, np.ndarray) and result.ndim >= 1 and len(result) == self.num_envs
        return [result[i] if split else result for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def score_candidates(self, candidates: Any) -> np.ndarray:
        """Batched candidate scoring, forwarded to the vector env ([n, K] -> float32 [n, K])."""
        return self.vector_env.score_candidates(candidates)


def make_sb3_vec_env(env_id: str, n_envs: int, seed: int | None = None, **kwargs: Any) -> VecEnv:
    """``SB3VecEnv`` over ``gymnasium.make_vec(env_id, n_envs, "vector_entry_point", **kwargs)``.

    ``seed`` (if given) seeds the first reset. Wrap the result with SB3's ``VecMonitor``.
    """
    vector_env = gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="vector_entry_point", **kwargs)
    venv = SB3VecEnv(vector_env)
    if seed is not None:
        venv.seed(seed)
    return venv
