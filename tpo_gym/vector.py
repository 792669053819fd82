"""Natively batched env core, shared by every ``tpo_gym`` task.

One numpy object, a :class:`BatchedTask`, holds ``n`` episodes of a fixed-length task that run in
lockstep (every episode of a task has the same number of steps, so a batch that is reset together
also ends together). Two thin Gymnasium front ends sit on top of it:

* :class:`BatchedTaskEnv`: a plain ``gymnasium.Env``, the ``n = 1`` case;
* :class:`BatchedTaskVectorEnv`: a ``gymnasium.vector.VectorEnv`` over ``n`` sub-envs, with
  same-step autoreset.

Both draw contexts from one ``np.random.Generator`` seeded by ``reset(seed=...)`` with the same
calls and shapes, so for one seed a single env and a vector env with ``num_envs=1`` produce
identical transitions. ``tpo_gym.sb3.SB3VecEnv`` adapts any same-step vector env to SB3's ``VecEnv``
API (a module of its own, so that ``import tpo_gym`` does not import stable-baselines3 or torch).

The two capabilities a grouped learner needs:

* ``score_candidates(candidates)``: the reward each candidate action would get at the current
  state, without changing the state;
* shared contexts: ``reset(options={"context": c})`` (single env), and
  ``reset(options={"group_size": G})`` / ``reset(options={"contexts": cs})`` (vector env).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

__all__ = ["BatchedTask", "BatchedTaskEnv", "BatchedTaskVectorEnv"]


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` naming the allowed range ``[low, high]``."""
    allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not ok or value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    return int(value)


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise ``ValueError`` listing them."""
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; allowed values: {', '.join(allowed)}")
    return value


def check_int_array(name: str, value: Any, n_values: int, ndim: int) -> np.ndarray:
    """Return ``value`` as a fresh int64 array of ``ndim`` dims with entries in ``[0, n_values)``."""
    array = np.asarray(value)
    if array.ndim != ndim or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{name} must be an integer array with {ndim} dims, got shape {array.shape} "
                         f"and dtype {array.dtype}")
    if array.size and (array.min() < 0 or array.max() >= n_values):
        raise ValueError(f"{name} must lie in [0, {n_values - 1}], got values in "
                         f"[{array.min()}, {array.max()}]")
    return array.astype(np.int64)


class RenderModeError(ValueError, TypeError):
    """An unsupported ``render_mode``: a ``ValueError``, and a ``TypeError`` too, because SB3's
    ``make_vec_env`` asks for ``render_mode="rgb_array"`` and retries without it on a ``TypeError``
    (what an env that takes no ``render_mode`` raises)."""


def check_render_mode(render_mode: str | None, modes: list[str] | tuple[str, ...]) -> str | None:
    """Return ``render_mode`` if it is ``None`` or one of ``modes``, else raise a one-line
    :class:`RenderModeError` (a ``ValueError``) naming the allowed modes."""
    if render_mode is not None and render_mode not in modes:
        allowed = ", ".join(modes)
        raise RenderModeError(f"unknown render_mode {render_mode!r}; allowed values: {allowed} or None")
    return render_mode


def reset_context(options: dict[str, Any] | None, rng: np.random.Generator, n_contexts: int,
                  sample: Callable[[np.random.Generator, int], np.ndarray] | None = None) -> int:
    """The context a single env's ``reset`` starts on: ``options["context"]``, checked to lie in
    ``0 .. n_contexts - 1``, else one drawn from ``rng`` by ``sample(rng, 1)`` (default: uniformly,
    :func:`uniform_ints`); other option keys are refused (:func:`_check_options`)."""
    options = _check_options(options, ("context",))
    if options.get("context") is None:
        return int((sample or (lambda rng, n: uniform_ints(rng, n_contexts, n)))(rng, 1)[0])
    return check_int("options['context']", options["context"], 0, n_contexts - 1)


def uniform_ints(rng: np.random.Generator, high: int, size: int | tuple[int, ...]) -> np.ndarray:
    """``size`` integers drawn uniformly from ``0 .. high - 1`` (int64): ``rng.integers(0, high, size,
    dtype=np.int64)`` with its bounds given as NumPy integers, which draws the same values from the same
    stream and skips the checks NumPy makes of Python-int bounds (~12 us of a ~30 us call: a
    population's context draws make 20-40 calls per update)."""
    return rng.integers(np.int64(0), np.int64(high), size=size, dtype=np.int64)


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``."""
    view = array.view()
    view.flags.writeable = False
    return view


class BatchedTask(ABC):
    """Numpy state of ``n`` lockstep episodes of one fixed-length task.

    A subclass sets ``horizon`` (steps per episode), the single-episode ``observation_space`` and
    ``action_space`` (a ``Discrete``), and implements the batch dynamics in ``_start``,
    ``_observe``, ``_advance``, ``_final_info`` and ``_score``. A context (a bandit context index,
    a token prompt) fixes everything random about an episode, so replaying a context replays the
    episode for the same actions.
    """

    horizon: int
    observation_space: spaces.Space
    action_space: spaces.Discrete

    def __init__(self) -> None:
        self.contexts: np.ndarray | None = None
        self.step_index = 0

    @abstractmethod
    def sample_contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` fresh contexts (leading axis ``n``) from ``rng``."""

    @abstractmethod
    def check_contexts(self, contexts: Any) -> np.ndarray:
        """Validate a batch of contexts (leading axis = batch) and return a fresh int64 array."""

    @abstractmethod
    def _start(self, contexts: np.ndarray) -> dict[str, np.ndarray]:
        """Begin one episode per context; return extra reset info (arrays with leading axis n)."""

    @abstractmethod
    def _observe(self) -> np.ndarray:
        """A fresh ``[n, *obs_shape]`` array of the current observations."""

    @abstractmethod
    def _advance(self, actions: np.ndarray) -> np.ndarray:
        """Apply ``actions`` [n] at step ``step_index`` and return the rewards [n]."""

    @abstractmethod
    def _final_info(self) -> dict[str, np.ndarray]:
        """The info of the last step of the episode (arrays with leading axis n)."""

    @abstractmethod
    def _score(self, candidates: np.ndarray) -> np.ndarray:
        """Rewards [n, K] that the candidate actions [n, K] would get at the current step."""

    def render_text(self, index: int) -> str:
        """Plain ASCII picture of episode ``index`` (its context, the actions so far, the rewards)."""
        raise NotImplementedError(f"{type(self).__name__} has no text rendering")

    @property
    def num_envs(self) -> int:
        """Number of episodes in the batch (0 before the first ``begin``)."""
        return 0 if self.contexts is None else len(self.contexts)

    def begin(self, contexts: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Start one episode per context; return ``(obs [n, ...], info)`` with ``info["context"]``."""
        contexts = self.check_contexts(contexts)
        self.contexts, self.step_index = contexts, 0
        info = {"context": contexts.copy(), **self._start(contexts)}
        return self._observe(), info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, bool, dict[str, np.ndarray]]:
        """Take one action per episode: ``(obs, rewards float32 [n], terminated, info)``.

        ``terminated`` is one bool for the whole batch (``step_index == horizon``); ``info`` is
        empty except on the last step, where it is ``_final_info()``.
        """
        self._check_running()
        actions = self._check_actions("actions", actions, (self.num_envs,))
        rewards = self._advance(actions).astype(np.float32)
        self.step_index += 1
        done = self.step_index == self.horizon
        return self._observe(), rewards, done, self._final_info() if done else {}

    def score_candidates(self, candidates: Any) -> np.ndarray:
        """Per-step rewards float32 [n, K] of candidate actions [n, K] at the current state.

        Nothing changes: the state stays that of the behaviour actions actually taken.
        """
        self._check_running()
        candidates = np.asarray(candidates)
        if candidates.ndim != 2 or candidates.shape[1] < 1:
            raise ValueError(f"candidates must have shape [n={self.num_envs}, K>=1], got {candidates.shape}")
        candidates = self._check_actions("candidates", candidates, (self.num_envs, candidates.shape[1]))
        return self._score(candidates).astype(np.float32)

    def _check_running(self) -> None:
        if self.contexts is None:
            raise RuntimeError("call reset() before step() or score_candidates()")
        if self.step_index >= self.horizon:
            raise RuntimeError(f"the episode ended after {self.horizon} steps; call reset()")

    def _check_actions(self, name: str, actions: Any, shape: tuple[int, ...]) -> np.ndarray:
        actions = np.asarray(actions)
        if actions.shape != shape:
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(actions.shape)}")
        return check_int_array(name, actions, int(self.action_space.n), len(shape))


def _first(value: np.ndarray) -> Any:
    """Row 0 of a batch: a Python scalar for 0-d rows, else a copy of the row."""
    row = value[0]
    return row.item() if np.ndim(row) == 0 else np.array(row)


class BatchedTaskEnv(gym.Env):
    """A single Gymnasium env: the ``n = 1`` case of a :class:`BatchedTask`.

    ``reset(options={"context": c})`` replays context ``c`` instead of drawing one; ``reset``
    info holds ``context``. ``score_candidates([K]) -> float32 [K]`` scores candidate actions at
    the current state. Behind ``gymnasium.make`` wrappers, call ``env.unwrapped.score_candidates``.
    ``render_mode="ansi"`` (where ``metadata["render_modes"]`` lists it): ``render()`` returns the
    task's :meth:`BatchedTask.render_text` of the current episode (``None`` before the first reset).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, task: BatchedTask, render_mode: str | None = None) -> None:
        self.task = task
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])

    def render(self) -> Any:
        """The current episode as text (``render_mode="ansi"``); ``None`` without it or before a reset."""
        if self.render_mode != "ansi" or self.task.contexts is None:
            return None
        return self.task.render_text(0)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode on a fresh context, or on ``options["context"]``."""
        super().reset(seed=seed)
        options = _check_options(options, ("context",))
        if options.get("context") is None:
            contexts = self.task.sample_contexts(self.np_random, 1)
        else:
            contexts = np.asarray(options["context"])[None]
        obs, info = self.task.begin(contexts)
        return _first(obs), {key: _first(value) for key, value in info.items()}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One step: ``(obs, reward, terminated, False, info)``."""
        obs, rewards, done, info = self.task.step(np.asarray(action).reshape(1))
        return _first(obs), float(rewards[0]), bool(done), False, {k: _first(v) for k, v in info.items()}

    def score_candidates(self, candidates: Any) -> np.ndarray:
        """Rewards float32 [K] that each candidate action [K] would get now (no state change)."""
        return self.task.score_candidates(np.asarray(candidates)[None])[0]


def _check_options(options: dict[str, Any] | None, allowed: tuple[str, ...]) -> dict[str, Any]:
    options = dict(options or {})
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; allowed options: {', '.join(allowed)}")
    return options


def _with_masks(info: dict[str, np.ndarray], n: int) -> dict[str, Any]:
    """Gymnasium's dict-of-arrays info: every key gets a ``_key`` bool mask (all True here)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        out[key], out[f"_{key}"] = value, np.ones(n, dtype=bool)
    return out


class GroupedVectorEnv(VectorEnv):
    """Group resets shared by the natively batched vector envs (a task with contexts, ``SAME_STEP``).

    ``reset(options={"group_size": G})`` makes each block of ``G`` consecutive sub-envs share one
    freshly drawn context (``num_envs % G == 0``); ``reset(options={"contexts": cs})`` sets the
    contexts explicitly (``num_envs / G`` of them, each repeated ``G`` times). The group size of a
    reset (default: ``default_group_size``) also applies to the autoresets that follow it. A subclass
    sets ``task`` (with ``sample_contexts(rng, n)`` and ``check_contexts(cs)``), ``num_envs`` and
    ``default_group_size``, and starts the episodes of the repeated contexts in :meth:`_start`.

    Members: with ``n_seeds = S`` the sub-envs are S equal blocks (member-major), each drawing its
    contexts from its own generator; ``reset(seed=s)`` seeds member m with ``s + m``, so member m
    replays exactly the contexts of an env of ``num_envs / S`` sub-envs reset with seed ``s + m``
    (the independent seeds of a population of learners, ``tpo_agents``' ``n_seeds``).
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    task: Any
    default_group_size: int
    group_size: int
    n_seeds: int = 1
    _member_rngs: list[np.random.Generator] | None = None

    def _set_members(self, n_seeds: Any) -> None:
        self.n_seeds = check_int("n_seeds", n_seeds, 1)
        if self.num_envs % self.n_seeds:
            raise ValueError(f"num_envs={self.num_envs} must be divisible by n_seeds={self.n_seeds}")

    def _check_group_size(self, group_size: Any) -> int:
        group_size = check_int("group_size", group_size, 1)
        if self.num_envs % (group_size * self.n_seeds):
            members = f" x n_seeds={self.n_seeds}" if self.n_seeds > 1 else ""
            raise ValueError(
                f"num_envs={self.num_envs} must be divisible by group_size={group_size}{members}"
            )
        return group_size

    def _member_generators(self, seed: int | None) -> list[np.random.Generator]:
        """One context generator per member: ``np_random`` itself for one member, else seeds s + m."""
        if self.n_seeds == 1:
            return [self.np_random]
        if seed is None and self._member_rngs is not None:
            return self._member_rngs
        if seed is None:
            seed = int(self.np_random.integers(2**62))
        return [np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed + m)))
                for m in range(self.n_seeds)]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Start new episodes; options ``group_size`` and ``contexts`` as in the class docstring."""
        super().reset(seed=seed)
        self._member_rngs = self._member_generators(seed)
        options = _check_options(options, ("group_size", "contexts"))
        self.group_size = self._check_group_size(options.get("group_size", self.default_group_size))
        obs, info = self._begin(options.get("contexts"))
        return obs, _with_masks(info, self.num_envs)

    def draw_contexts(self) -> np.ndarray:
        """The contexts of the next groups, member-major, drawn from each member's stream as a reset (or
        an autoreset) draws them: ``num_envs / group_size / n_seeds`` per member. Starts nothing."""
        per_member = self.num_envs // self.group_size // self.n_seeds
        rngs = self._member_rngs if self.n_seeds > 1 else [self.np_random]
        drawn = [self.task.sample_contexts(rng, per_member) for rng in rngs]
        return drawn[0] if len(drawn) == 1 else np.concatenate(drawn)

    def _begin(self, contexts: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n_groups = self.num_envs // self.group_size
        if contexts is None:
            contexts = self.draw_contexts()
        contexts = self.task.check_contexts(contexts)
        if len(contexts) != n_groups:
            raise ValueError(f"expected {n_groups} contexts (num_envs={self.num_envs} / "
                             f"group_size={self.group_size}), got {len(contexts)}")
        return self._start(np.repeat(contexts, self.group_size, axis=0))

    @abstractmethod
    def _start(self, contexts: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Begin one episode per sub-env on ``contexts`` (leading axis ``num_envs``): ``(obs, info)``."""


class BatchedTaskVectorEnv(GroupedVectorEnv):
    """A Gymnasium ``VectorEnv`` over one :class:`BatchedTask` of ``num_envs`` lockstep episodes.

    Autoreset is ``SAME_STEP``: the step that ends the episodes returns the first observation of
    the next ones, with ``infos["final_obs"]`` (a stacked ``[n, *obs_shape]`` array) and
    ``infos["final_info"]`` (dict of arrays), each with its ``_`` mask. Infos are Gymnasium's
    dict of arrays. Rewards are float32.

    Groups: the resets of :class:`GroupedVectorEnv` (``options={"group_size": G}`` or
    ``{"contexts": cs}``; default group size: the ``group_size`` constructor argument); members:
    ``n_seeds`` blocks with their own context streams (see :class:`GroupedVectorEnv`).
    ``score_candidates([n, K]) -> float32 [n, K]``.
    """

    def __init__(self, task: BatchedTask, num_envs: int, group_size: int = 1,
                 max_episode_steps: int | None = None, n_seeds: int = 1) -> None:
        self.task = task
        self.num_envs = check_int("num_envs", num_envs, 1)
        self._set_members(n_seeds)
        if max_episode_steps is not None and max_episode_steps < task.horizon:
            raise ValueError(f"episodes have a fixed length of {task.horizon} steps; max_episode_steps "
                             f"must be None or >= {task.horizon}, got {max_episode_steps!r}")
        self.default_group_size = self._check_group_size(group_size)
        self.group_size = self.default_group_size
        self.render_mode = None
        self.single_observation_space = task.observation_space
        self.single_action_space = task.action_space
        self.observation_space = batch_space(task.observation_space, self.num_envs)
        self.action_space = batch_space(task.action_space, self.num_envs)

    @property
    def contexts(self) -> np.ndarray:
        """Read-only current contexts, one per sub-env (leading axis ``num_envs``)."""
        return readonly(self.task.contexts)

    @property
    def step_index(self) -> int:
        """Steps taken in the current episodes (all sub-envs are in lockstep)."""
        return self.task.step_index

    def _start(self, contexts: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.task.begin(contexts)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env; returns ``(obs, rewards, terminated, truncated, infos)``."""
        obs, rewards, done, info = self.task.step(actions)
        n = self.num_envs
        terminated, truncated = np.full(n, done), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        if done:
            final_obs, final_info = obs, _with_masks(info, n)
            obs, reset_info = self._begin()
            infos = _with_masks(reset_info, n)
            infos.update(_with_masks({"final_obs": final_obs, "final_info": final_info}, n))
        return obs, rewards, terminated, truncated, infos

    def score_candidates(self, candidates: Any) -> np.ndarray:
        """Rewards float32 [n, K] that candidate actions [n, K] would get now (no state change)."""
        return self.task.score_candidates(candidates)
