"""The base of every grouped algorithm below its learn loop: settings, collection mode, env, policy, load.

As SB3 splits ``base_class.py`` from ``on_policy_algorithm.py``: the settings and their checks, the choice
of the collection mode, the env the algorithm owns, building the policy (a population of ``n_seeds``
members: :mod:`tpo_agents.populations`), ``set_env``, ``load``, ``predict`` and what is saved.

``GroupBaseAlgorithm`` follows Stable-Baselines3's ``BaseAlgorithm`` contract. It owns its env: given an
env id (and kwargs), it builds the natively batched ``tpo_gym`` vector env of exactly the size its
collection mode needs (``tpo_agents.modes``), once. The learn loop is
:class:`tpo_agents.learn_loop.GroupAlgorithm`'s.
"""

from __future__ import annotations

import base64
import inspect
import io
import json
import os
import pickle
import re
import sys
import time
import zipfile
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.envs.registration import load_env_creator
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.monitor import ResultsWriter
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.utils import FloatSchedule, check_for_correct_spaces
from stable_baselines3.common.vec_env import VecEnv

import tpo_gym  # noqa: F401  (registers the TPO/ envs)
from tpo_agents import checks, fused_collection
from tpo_agents.modes import (
    DEFAULT_GROUP_SIZE,
    MODES,
    VIEWS,
    CollectionMode,
    EnvTraits,
    ExactView,
    GroupView,
    SampleView,
    canonical_mode_name,
    make_mode,
)
from tpo_agents.policies import GroupPolicy, MlpPolicy, TabularPolicy, TransformerPolicy
from tpo_agents.populations import make_population
from tpo_gym.sb3 import SB3VecEnv

OLD_IMPORT_NAME = "agents"
"""The package's import name in zips saved before it became ``tpo_agents``."""

MATCHES = ("prompts", "interactions")

_VEC_ONLY_KWARGS = ("num_envs", "vectorization_mode", "max_episode_steps", "render_mode")

EnvLike = str | gym.Env | VecEnv | gym.vector.VectorEnv


def model_zip_path(path: Any) -> Any:
    """``path`` as a model's ``load`` should open it: ``<path>.zip`` when ``path`` does not end in
    ``.zip``, is not a file, and ``<path>.zip`` is one (so ``TPO.load("logs/tpo/TPO-TokenReversal-v0_1/
    TPO-TokenReversal-v0")`` loads the zip, not the same-named folder of config files); else ``path``."""
    if isinstance(path, str | os.PathLike):
        text = os.fspath(path)
        if not text.endswith(".zip") and not os.path.isfile(text) and os.path.isfile(text + ".zip"):
            return text + ".zip"
    return path


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


class GroupBaseAlgorithm(BaseAlgorithm):
    """Settings, collection mode, owned env and policy of a grouped algorithm (TPO, GRPO, DG, PPO, PG,
    Group PG, CE): critic-free, it learns from groups of scored candidates.

    :param policy: ``"TransformerPolicy"`` (token tasks), ``"MlpPolicy"`` (MNIST), ``"TabularPolicy"``
        (bandits) or a policy class.
    :param env: a registered ``TPO/`` id, or a Gymnasium env / VecEnv made from one (its id and kwargs
        are read); the algorithm builds its own natively batched env of the size its mode needs.
    :param learning_rate: effective learning rate (float or schedule); 1e-3 is the paper's transformer rate.
    :param batch_size: B, contexts (prompts, images) per update.
    :param group_size: K, candidates per context (next tokens in token mode, episodes in sequence mode,
        completions in text mode; single mode with ``match="interactions"``: B*K contexts); default 8
        where the mode uses K, else 1 (single mode matched by prompts, exact mode).
    :param n_epochs: optimizer steps on each batch, with targets and old log-probs frozen.
    :param group_mode: ``token``, ``sequence``, ``single``, ``exact`` or ``text`` (see
        ``tpo_agents.modes``; ``population``, the former name of ``exact``, is accepted with a
        ``FutureWarning``); default: the env's natural mode for this algorithm (:meth:`natural_mode`:
        single on the k-armed bandit and MNIST, exact on the multi-context bandit where the
        algorithm has it, token on the dense-reward token tasks, sequence on terminal-reward ones,
        text on the text envs). An explicit value always wins.
    :param match: ``prompts`` or ``interactions``; interaction matching gives single-sample methods
        B*K contexts and the learning rate times sqrt(K) (paper Sec. 3.5).
    :param baseline: single mode: ``"batch_mean"`` (per-position batch mean), ``"expected"``
        (sum_k pi_k^2, the MNIST baseline) or a constant (0.5 in the tabular runs).
    :param kl_coef: weight of a per-token KL to the frozen reference model added to the loss (text
        mode: the paper's LLM runs use 1e-3); 0 adds nothing.
    :param skip_batches_without_signal: skip the update of a batch in which no group carries signal
        (equal scores in every group: every TPO target is p_old and every GRPO advantage 0; single mode:
        every advantage 0): no backward pass and no optimizer step, as DAPO's dynamic sampling drops such
        groups. False (the paper's reference code and TRL): the optimizer steps on the batch's exactly
        zero gradient, which moves the parameters only by the optimizer's momentum. Not with
        ``kl_coef`` (the KL to the reference model has a gradient there) nor with ``n_seeds > 1``.
    :param max_grad_norm: clip the gradient's global L2 norm to this value before each optimizer step
        (``g <- g min(1, c / ||g||)``, as TRL's trainers do with 1.0; ``train/grad_norm`` logs the norm
        before clipping); None (the paper's reference code): no clipping. Not with ``n_seeds > 1``.
    :param mode_kwargs: extra settings of the collection mode (text mode: ``sample_every``).
    :param env_kwargs: keyword arguments of the env when ``env`` is an id.
    :param monitor_dir: write one ``monitor.csv`` row per episode into this folder, a batch's rows once
        it is trained on.
    :param n_seeds: S independent learners trained together, one per seed ``seed, seed + 1, ...,
        seed + S - 1`` (a population: parameters stacked on a leading axis, one forward per step for
        all members, each member with its own optimizer state, env context stream and sampling
        generator, and its own gradient: member m learns exactly as a run with seed ``seed + m``).
        Tabular, MLP and transformer policies; ``rollout/`` and ``train/`` values are the members' means and
        :attr:`member_rollout` holds the per-member ``rollout/`` values of the last batch.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "TransformerPolicy": TransformerPolicy,
        "MlpPolicy": MlpPolicy,
        "TabularPolicy": TabularPolicy,
    }
    #: The algorithm's losses, ``(loss, stats)`` of a view: a subclass defines those it has (a method),
    #: the others stay None; :meth:`loss_views` lists the views it can train on.
    group_loss: ClassVar[Callable[[Any, GroupView], tuple[th.Tensor, dict]] | None] = None
    sample_loss: ClassVar[Callable[[Any, SampleView], tuple[th.Tensor, dict]] | None] = None
    exact_loss: ClassVar[Callable[[Any, ExactView], tuple[th.Tensor, dict]] | None] = None
    #: The collection modes in this algorithm's order of preference: without ``group_mode`` it takes
    #: the first supported one that is natural for the env (``CollectionMode.is_natural_for``).
    mode_preference: ClassVar[tuple[str, ...]] = ("text", "token", "sequence", "exact", "single")
    #: The mode of an algorithm built with neither ``group_mode`` nor an env (SB3's ``load`` builds one
    #: so, then restores the saved ``group_mode``); with an env, :meth:`natural_mode` decides.
    default_mode: ClassVar[str] = "token"
    #: Hyperparameters that may be SB3 schedules (``lin_0.2``); read with :meth:`scheduled`.
    schedules: ClassVar[tuple[str, ...]] = ()
    #: The algorithm builds its own env; the zoo's env pipeline (normalize, wrappers, n_envs) does not apply.
    owns_env: ClassVar[bool] = True
    #: Own hyperparameters added after zips were saved without them: such a zip still loads (with their
    #: defaults, set by the constructor that ``load`` calls), see :func:`identifying_hyperparameters`.
    later_hyperparameters: ClassVar[frozenset[str]] = frozenset()
    policy: Any
    mode: CollectionMode

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Show the shared hyperparameters on an algorithm whose ``__init__`` forwards ``**kwargs`` here
        (``TPO(policy, env, eta=1.0, anchor=True, **kwargs)``): its signature lists them as keyword-only
        arguments and its docstring gets their ``:param`` lines, so ``help(TPO)`` and API docs show them."""
        super().__init_subclass__(**kwargs)
        init = vars(cls).get("__init__")
        if init is None:
            return
        own = list(inspect.signature(init).parameters.values())
        if not own or own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
            return
        names = {p.name for p in own}
        shared = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                  for p in inspect.signature(GroupBaseAlgorithm.__init__).parameters.values()
                  if p.name not in names and not p.name.startswith("_")]
        init.__signature__ = inspect.signature(init).replace(parameters=own[:-1] + shared)
        if cls.__doc__ and ":param" in (GroupBaseAlgorithm.__doc__ or ""):
            params = GroupBaseAlgorithm.__doc__[GroupBaseAlgorithm.__doc__.index(":param"):].rstrip()
            cls.__doc__ = f"{cls.__doc__.rstrip()}\n\n    Shared hyperparameters:\n\n    {params}\n"

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: EnvLike | None,
        learning_rate: float | Any = 1e-3,
        batch_size: int = 100,
        group_size: int | None = None,
        n_epochs: int = 4,
        group_mode: str | None = None,
        match: str = "prompts",
        baseline: str | float = "batch_mean",
        kl_coef: float = 0.0,
        skip_batches_without_signal: bool = False,
        max_grad_norm: float | None = None,
        mode_kwargs: dict[str, Any] | None = None,
        env_kwargs: dict[str, Any] | None = None,
        monitor_dir: str | None = None,
        n_seeds: int = 1,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.match = match
        env_id, merged_kwargs = env_id_and_kwargs(env) if env is not None else (None, {})
        merged_kwargs = {**merged_kwargs, **(env_kwargs or {})}
        #: The probe env the natural mode was read from, reused by ``_setup_model`` (then None).
        self._probe: gym.Env | None = None
        group_mode = canonical_mode_name(group_mode, warn=True)  # a former name (population): exact
        if group_mode is None and env is not None:
            group_mode, self._probe = self._choose_mode(env_id, merged_kwargs, env)
        self.group_mode = group_mode if group_mode is not None else self.default_mode
        if group_size is None:
            mode_class = MODES.get(self.group_mode) if isinstance(self.group_mode, str) else None
            group_size = mode_class.default_group_size(match) if mode_class else DEFAULT_GROUP_SIZE
        self.group_size = group_size
        self.baseline = baseline
        self.kl_coef = kl_coef
        self.skip_batches_without_signal = skip_batches_without_signal
        self.max_grad_norm = max_grad_norm
        #: Batches collected in which no group carried signal (``train/batches_without_signal``).
        self.batches_without_signal = 0
        #: The class that saved a zip (``load`` refuses a zip of another class, see :func:`check_saved_by`).
        self.algorithm_class = type(self).__name__
        self.mode_kwargs = dict(mode_kwargs or {})
        self.n_seeds = n_seeds
        self._validate()  # before anything is built or printed
        super().__init__(
            policy=policy,
            env=None,
            learning_rate=learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            monitor_wrapper=False,
            seed=seed,
            supported_action_spaces=(spaces.Discrete,),
        )
        self.env_id: str | None = None
        self.env_kwargs: dict[str, Any] = {}
        self.monitor_dir = monitor_dir
        self._env_source: EnvLike | None = None
        self._monitor: _EpisodeMonitor | None = None
        #: The ``monitor.csv`` rows of the batch collected but not yet trained on (None: none).
        self._untrained_episodes: dict[str, np.ndarray] | None = None
        #: The last batch's ``rollout/`` values per member (``task_error`` ..., each ``[n_seeds]``).
        self.member_rollout: dict[str, np.ndarray] = {}
        #: The member of a population that ``predict`` uses (:meth:`set_predict_member`).
        self.predict_member = 0
        #: Whether the loss of the current update computes its ``train/`` diagnostics (set by ``train``).
        self.diagnostics = True
        #: Whether the current batch's ``rollout/`` values are computed (set by ``learn``: always on the
        #: generic path; with the engine for logged updates or when a callback asks).
        self.rollout_metrics = True
        #: Whether ``learn`` uses the fused collection of :mod:`tpo_agents.fused_collection` where one covers
        #: the policy and mode (False: always the generic mode path, the reference).
        self.use_engine = True
        if env is not None:
            self.env_id, self.env_kwargs = env_id, merged_kwargs
            self._env_source = env
        if _init_setup_model:
            self._setup_model()

    # ----------------------------------------------------------------------------------- setup
    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        """SB3's alias lookup, with ``"LLMPolicy"`` imported on first use (transformers is heavy)."""
        if policy_name == "LLMPolicy":
            from tpo_agents.policies.llm import LLMPolicy

            return LLMPolicy
        return super()._get_policy_from_name(policy_name)

    @classmethod
    def loss_views(cls) -> tuple[str, ...]:
        """The views of a batch this algorithm has a loss for (``group``, ``sample``, ``exact``)."""
        defined = {"group": cls.group_loss, "sample": cls.sample_loss, "exact": cls.exact_loss}
        return tuple(kind for kind in VIEWS if defined[kind] is not None)

    def loss_view(self) -> str:
        """The view this algorithm trains on in its ``group_mode``: the first of the mode's views (preferred
        first) that it has a loss for."""
        return next(kind for kind in MODES[self.group_mode].views if kind in self.loss_views())

    @classmethod
    def supported_modes(cls) -> tuple[str, ...]:
        """The collection modes that offer a view this algorithm has a loss for."""
        views = set(cls.loss_views())
        return tuple(name for name, mode in MODES.items() if views & set(mode.views))

    @classmethod
    def natural_mode(cls, env: EnvLike, env_kwargs: dict[str, Any] | None = None) -> str:
        """The collection mode this algorithm uses on ``env`` when ``group_mode`` is not given.

        The rule: among the modes of :attr:`mode_preference` that the algorithm supports and that
        collect from the env's class, the first whose ``is_natural_for`` holds for the env's
        :class:`~tpo_agents.modes.EnvTraits` (episode length, dense or terminal ``reward``, enumerable
        contexts); else the first that ``can_collect`` from it. So TPO and GRPO take ``single`` on
        the k-armed bandit and MNIST, ``exact`` on the multi-context bandit, ``token`` on the
        dense-reward token tasks, ``sequence`` on terminal-reward ones and ``text`` on the text envs;
        DG and PG ``single`` (``exact`` on the multi-context bandit), PPO ``single``, Group PG
        as TPO but ``single`` on the multi-context bandit, CE ``exact``.

        :param env: a registered id or an env made from one (its id and kwargs are read)
        :param env_kwargs: the env's keyword arguments (over those of ``env``), e.g. ``reward``
        :raises ValueError: no mode of the algorithm can train on the env (one line naming it)
        """
        env_id, given = env_id_and_kwargs(env)
        return cls._choose_mode(env_id, {**given, **(env_kwargs or {})}, env)[0]

    @classmethod
    def _choose_mode(
        cls, env_id: str, env_kwargs: dict[str, Any], source: EnvLike
    ) -> tuple[str, gym.Env | None]:
        """:meth:`natural_mode` and the probe env it read the traits from (None if it read none)."""
        name, supported = cls.__name__, cls.supported_modes()
        env_class = _env_class(env_id)
        candidates = [m for m in cls.mode_preference if m in supported and MODES[m].collects_from(env_class)]
        if not candidates:
            kinds = " or ".join(dict.fromkeys(MODES[m].env_description for m in supported))
            raise ValueError(f"{name} collects groups from {kinds}; {env_id!r} is not one: train other envs "
                             "with an SB3 algorithm (e.g. sb3_ppo).")
        traits = EnvTraits(lambda: _make_probe(env_id, env_kwargs, source))
        for fits in (lambda mode: mode.is_natural_for(traits), lambda mode: mode.can_collect(traits)):
            for mode in candidates:
                if fits(MODES[mode]):
                    return mode, traits.env
        needs = "; ".join(f"{m} mode needs {MODES[m].needs}" for m in candidates)
        given = f" with {env_kwargs}" if env_kwargs else ""
        raise ValueError(f"{name} has no collection mode for {env_id!r}{given}: {needs}")

    def _validate(self) -> None:
        """Check every hyperparameter's type and range (a :class:`~tpo_agents.checks.HyperparameterError`,
        a ``ValueError`` naming the value and what is allowed); a subclass adds its own after these."""
        name = type(self).__name__
        checks.check_choice("group_mode", self.group_mode, self.supported_modes(), f" for {name}")
        checks.check_choice("match", self.match, MATCHES)
        checks.check_schedulable("learning_rate", self.learning_rate)
        checks.check_integer("batch_size", self.batch_size)
        checks.check_integer("n_epochs", self.n_epochs)
        mode = MODES[self.group_mode]
        low = mode.min_group_size(self.loss_view())
        checks.check_integer("group_size", self.group_size, low, f" in {mode.name} mode" if low > 1 else "")
        if not (self.baseline in ("batch_mean", "expected") or checks.is_number(self.baseline)):
            allowed = "'batch_mean', 'expected' or a number"
            raise checks.HyperparameterError("baseline", self.baseline, allowed)
        checks.check_nonnegative("kl_coef", self.kl_coef)
        checks.check_integer("n_seeds", self.n_seeds)
        checks.check_bool("skip_batches_without_signal", self.skip_batches_without_signal)
        if self.skip_batches_without_signal and (self.kl_coef or self.n_seeds > 1):
            raise checks.HyperparameterError(
                "skip_batches_without_signal", True, "False with kl_coef > 0 or n_seeds > 1 (a population "
                "updates its members together; the reference KL has a gradient on any batch)")
        if self.max_grad_norm is not None:
            checks.check_positive("max_grad_norm", self.max_grad_norm)
            if self.n_seeds > 1:
                raise checks.HyperparameterError("max_grad_norm", self.max_grad_norm,
                                                 "None with n_seeds > 1 (one norm would mix the members)")

    def _setup_model(self) -> None:
        if self._env_source is not None:
            probe = self._probe_env(self._env_source)
            self.observation_space, self.action_space = probe.observation_space, probe.action_space
        self.mode = make_mode(
            self.group_mode,
            batch_size=self.batch_size,
            group_size=self.group_size,
            match=self.match,
            baseline=self.baseline,
            observation_space=self.observation_space,
            n_members=self.n_seeds,
            **self.mode_kwargs,
        )
        if self.kl_coef and not self.mode.has_reference_kl:
            raise ValueError(f"kl_coef={self.kl_coef!r} needs a mode with a reference model (text), "
                             f"not group_mode={self.group_mode!r}")
        self._view = self.loss_view()
        self.lr_schedule = _ScaledSchedule(FloatSchedule(self.learning_rate), self.mode.lr_scale)
        for name in self.schedules:
            setattr(self, name, FloatSchedule(getattr(self, name)))
        if self._env_source is not None:
            self._build_env()
        self.set_random_seed(self.seed)
        if self.n_seeds == 1:
            self.policy = self.policy_class(
                self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
            ).to(self.device)
        else:
            seed = self.seed if self.seed is not None else int(np.random.randint(2**31 - self.n_seeds))
            self.policy = make_population(self.policy_class, self.n_seeds, seed, self.device, (
                self.observation_space, self.action_space, self.lr_schedule), self.policy_kwargs)
            self.policy.set_predict_member(self.predict_member)

    def fused_collector(self) -> fused_collection.Collector | None:
        """The fused collection for this policy, mode and env (the one place that chooses it:
        :func:`tpo_agents.fused_collection.fused_collector`), or None: the generic path, ``collect``, which
        stays its reference (``tests/tpo_agents/test_fused_collection.py`` holds the two equal)."""
        return fused_collection.fused_collector(self)

    def _probe_env(self, source: EnvLike) -> gym.Env:
        """A single env of ``source`` (``source`` itself if it is one) to read the spaces from.

        Checks first that the registered env is a natively batched ``tpo_gym`` env, so that another
        env (CartPole, say) gets a clear error rather than a failure inside its constructor.
        """
        name, mode = type(self).__name__, MODES[self.group_mode]
        env_class = _env_class(self.env_id)
        if not mode.collects_from(env_class):
            fitting = [m for m in self.supported_modes() if MODES[m].collects_from(env_class)]
            hint = (
                f"for {self.env_id!r} use group_mode={fitting[0]!r}"
                if fitting
                else "train other envs with an SB3 algorithm (e.g. sb3_ppo)"
            )
            raise ValueError(
                f"{name} in {mode.name} mode collects groups from {mode.env_description}; "
                f"{self.env_id!r} is not one: {hint}."
            )
        probe = self._probe if self._probe is not None else _make_probe(self.env_id, self.env_kwargs, source)
        self._probe = None
        if not isinstance(probe.action_space, mode.action_space_types):
            raise ValueError(f"{name} in {mode.name} mode needs a {mode.action_space_types[0].__name__} "
                             f"action space, got {probe.action_space}")
        return probe

    def _build_env(self) -> None:
        """The natively batched env of the mode's size (``self.env``), with its monitor file."""
        members = {"n_members": self.n_seeds} if self.n_seeds > 1 else {}
        vector_env = gym.make_vec(
            self.env_id, num_envs=self.mode.n_envs * self.n_seeds, vectorization_mode="vector_entry_point",
            **members, **self.env_kwargs,
        )
        if not isinstance(vector_env.unwrapped, self.mode.vector_env_types):
            raise ValueError(f"{self.env_id!r} has no natively batched vector env")
        self.env = SB3VecEnv(vector_env)
        self.n_envs = self.env.num_envs
        self._monitor = _EpisodeMonitor(self.monitor_dir, self.env_id) if self.monitor_dir else None
        self._env_source = None

    def set_env(
        self,
        env: EnvLike,
        force_reset: bool = True,
        env_kwargs: dict[str, Any] | None = None,
        monitor_dir: str | None = None,
    ) -> None:
        """Point the algorithm at ``env`` (an id or an env made from one); it builds its own batched env."""
        self.env_id, given_kwargs = env_id_and_kwargs(env)
        self.env_kwargs = {**given_kwargs, **(env_kwargs or {})}
        self.monitor_dir = monitor_dir
        probe = self._probe_env(env)
        check_for_correct_spaces(probe, self.observation_space, self.action_space)
        self._build_env()
        if self.seed is not None:
            self.env.seed(self.seed)
        if force_reset:
            self._last_obs = None

    @classmethod
    def load(  # type: ignore[override]
        cls,
        path: str | os.PathLike,
        env: EnvLike | None = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        env_kwargs: dict[str, Any] | None = None,
        monitor_dir: str | None = None,
        **kwargs: Any,
    ) -> GroupBaseAlgorithm:
        """SB3's ``load``; with ``env`` (an id or an env), the algorithm then builds its batched env.

        ``path`` may omit ``.zip`` even where a folder of the same name exists (a run folder holds
        ``<Env>.zip`` next to ``<Env>/``): see :func:`model_zip_path`. A zip saved by another algorithm
        class is refused with a one-line ``ValueError`` naming both (:func:`check_saved_by`). A zip saved
        with a mode's former name (``group_mode="population"``) loads silently as the current one
        (``exact``, :func:`mode_under_current_name`); ``group_mode=`` a former name passed here is taken
        with a ``FutureWarning``, as by the constructor.
        """
        path = model_zip_path(path)
        data = saved_data(path)
        if data is not None:  # a zip that cannot be read is left to SB3's load, which says why
            check_saved_by(cls, path, data)
            custom_objects = {**objects_under_old_name(data), **mode_under_current_name(data),
                              **(custom_objects or {})}
        if custom_objects and "group_mode" in custom_objects:
            mode = canonical_mode_name(custom_objects["group_mode"])
            custom_objects = {**custom_objects, "group_mode": mode}
        if "group_mode" in kwargs:
            kwargs["group_mode"] = canonical_mode_name(kwargs["group_mode"], warn=True)
        model = super().load(
            path, env=None, device=device, custom_objects=custom_objects,
            print_system_info=print_system_info, force_reset=force_reset, **kwargs,
        )  # fmt: skip
        # Values changed at load are checked as the constructor checks them; custom_objects are not
        # (the RL Zoo's enjoy loads with learning_rate 0.0 to predict).
        if kwargs:
            model._validate()
        if env is not None:
            model.set_env(env, force_reset=force_reset, env_kwargs=env_kwargs, monitor_dir=monitor_dir)
        return model

    def save(self, path: str | os.PathLike | Any, exclude: Any = None, include: Any = None) -> None:
        """SB3's ``save``. A language-model policy saved to a path is saved as
        :func:`tpo_agents.policies.llm_checkpoint.save_llm` saves it: its weights as a ``save_pretrained``
        folder ``<name>.hf`` beside a small zip (no weights, no optimizer moments), which ``load`` and
        ``AutoModelForCausalLM.from_pretrained`` read; call ``save_llm(model, path, optimizer=True)`` to
        keep AdamW's state. Any other policy, or an open file, gets SB3's zip."""
        llm = sys.modules.get("tpo_agents.policies.llm")  # loaded whenever a policy is an LLMPolicy
        if (llm is not None and isinstance(self.policy, llm.LLMPolicy) and isinstance(path, str | os.PathLike)
                and not getattr(self.policy, "_weights_elsewhere", False)):
            from tpo_agents.policies.llm_checkpoint import save_llm

            save_llm(self, path)
            return
        super().save(path, exclude=exclude, include=include)

    def set_predict_member(self, member: int) -> None:
        """Make :meth:`predict` (and so SB3's ``evaluate_policy``, the zoo's ``enjoy``) act with member
        ``member`` of a population: the learner of seed ``seed + member``. The default is member 0;
        the choice is saved with the model. One member (``n_seeds=1``): only 0."""
        if isinstance(self.policy, GroupPolicy):
            self.policy.set_predict_member(member)
        elif member != 0:
            raise ValueError(f"member must be 0 for a model of one member, got {member!r}")
        self.predict_member = int(member)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        member: int | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict``, on one observation or a batch of any size. A population
        (``n_seeds > 1``) acts with one member: ``member`` if given, else :attr:`predict_member` (0
        unless :meth:`set_predict_member` chose another), with that member's own forward and, when
        sampling, its own generator; its actions equal ``model.policy.member_policy(m)``'s."""
        if member is None:
            return self.policy.predict(observation, state, episode_start, deterministic)
        if not isinstance(self.policy, GroupPolicy):
            if member != 0:
                raise ValueError(f"member must be 0 for a model of one member, got {member!r}")
            return self.policy.predict(observation, state, episode_start, deterministic)
        return self.policy.predict(observation, state, episode_start, deterministic, member=member)

    @property
    def vector_env(self) -> gym.vector.VectorEnv:
        """The Gymnasium vector env behind ``self.env``."""
        return self.env.vector_env

    def scheduled(self, name: str) -> float:
        """The current value of the scheduled hyperparameter ``name`` (e.g. ``clip_range``)."""
        return float(getattr(self, name)(self._current_progress_remaining))

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "lr_schedule", "mode", "_monitor", "_env_source", "_view",
                "_probe", "diagnostics", "use_engine", "_untrained_episodes"]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []


class _ScaledSchedule:
    """A picklable learning-rate schedule ``scale * base(progress)``."""

    def __init__(self, base: Any, scale: float) -> None:
        self.base, self.scale = base, scale

    def __call__(self, progress_remaining: float) -> float:
        return self.scale * self.base(progress_remaining)


class _EpisodeMonitor:
    """``<folder>/monitor.csv`` in SB3's format (``r, l, t`` and info keys), one row per episode trained on.

    The columns after ``r, l, t`` are those of the first batch (``is_success``, and ``token_error`` on
    the token tasks); the file is created at the first batch, ``t`` counts from the env's creation.
    """

    def __init__(self, folder: str, env_id: str) -> None:
        self.path = os.path.join(folder, "monitor.csv")
        self.env_id, self.t_start = env_id, time.time()
        self._writer: ResultsWriter | None = None

    def write(self, rows: dict[str, np.ndarray]) -> None:
        extra = [key for key in rows if key not in ("r", "l")]
        if self._writer is None:
            header = {"t_start": self.t_start, "env_id": self.env_id}
            self._writer = ResultsWriter(self.path, header=header, extra_keys=tuple(extra))
        elapsed = round(time.time() - self.t_start, 6)
        for i, reward in enumerate(rows["r"]):
            row = {"r": round(float(reward), 6), "l": int(rows["l"][i]), "t": elapsed}
            row.update({key: rows[key][i] for key in extra})
            self._writer.logger.writerow(row)
        self._writer.file_handler.flush()


def own_hyperparameters(algo_class: type) -> frozenset[str]:
    """The constructor arguments ``algo_class`` adds to :class:`GroupBaseAlgorithm`'s (TPO: ``eta``,
    ``anchor``), up its classes; its zip holds them, as SB3 saves every attribute."""
    base = set(inspect.signature(GroupBaseAlgorithm.__init__).parameters)
    names: set[str] = set()
    for klass in algo_class.__mro__:
        if klass is GroupBaseAlgorithm:
            break
        if "__init__" in vars(klass):
            params = inspect.signature(vars(klass)["__init__"]).parameters.values()
            names |= {p.name for p in params if p.kind is not p.VAR_KEYWORD}
    return frozenset(names - base)


def identifying_hyperparameters(algo_class: type) -> frozenset[str]:
    """The own hyperparameters every zip of ``algo_class`` holds: :func:`own_hyperparameters` less its
    ``later_hyperparameters``, which zips saved before they were added lack."""
    return own_hyperparameters(algo_class) - getattr(algo_class, "later_hyperparameters", frozenset())


def holds_own_hyperparameters(algo_class: type, held: frozenset[str]) -> bool:
    """Whether ``held``, the grouped algorithms' own hyperparameters a zip holds, are those of a zip of
    ``algo_class``: all its :func:`identifying_hyperparameters`, and none but its own."""
    return identifying_hyperparameters(algo_class) <= held <= own_hyperparameters(algo_class)


def saved_data(path: Any) -> dict[str, Any] | None:
    """The ``data`` (attributes, as JSON) of the SB3 zip at ``path`` (a path or an open binary file), or
    None where it cannot be read (SB3's ``load`` then says why)."""
    try:
        start = path.tell() if hasattr(path, "tell") else None
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
        if start is not None:
            path.seek(start)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return data if isinstance(data, dict) else None


class _RenamedModuleUnpickler(pickle.Unpickler):
    """Unpickles a reference to ``agents.<module>`` (the import name before ``tpo_agents``) as the same
    object of ``tpo_agents.<module>``."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == OLD_IMPORT_NAME:
            module = "tpo_agents" + module[len(OLD_IMPORT_NAME):]
        return super().find_class(module, name)


def objects_under_old_name(data: dict[str, Any]) -> dict[str, Any]:
    """The values of a zip's ``data`` pickled while the package was imported as ``agents`` (a zip's
    ``policy_class``), unpickled with their modules under ``tpo_agents``: ``load``'s ``custom_objects``, so
    that such zips load where ``agents`` is another package (the OpenAI Agents SDK) or none."""
    objects = {}
    for key, value in data.items():
        if not (isinstance(value, dict) and ":serialized:" in value):
            continue
        raw = base64.b64decode(value[":serialized:"].encode())
        if re.search(rb"(?<![\w.])" + OLD_IMPORT_NAME.encode() + rb"\.", raw):
            objects[key] = _RenamedModuleUnpickler(io.BytesIO(raw)).load()
    return objects


def mode_under_current_name(data: dict[str, Any]) -> dict[str, Any]:
    """``{"group_mode": <current name>}`` where a zip's ``data`` holds a mode's former name (a zip saved
    with ``group_mode="population"``, now ``exact``: :data:`tpo_agents.modes.OLD_MODE_NAMES`), else
    ``{}``: ``load``'s ``custom_objects``, so that such zips load as they did, without a warning."""
    saved = data.get("group_mode")
    current = canonical_mode_name(saved)
    return {"group_mode": current} if current != saved else {}


def saved_attributes(path: Any) -> frozenset[str] | None:
    """The attribute names in the ``data`` of the SB3 zip at ``path``, or None where it cannot be read."""
    data = saved_data(path)
    return None if data is None else frozenset(data)


def saved_by(attributes: frozenset[str]) -> tuple[frozenset[str], list[type]]:
    """Which grouped algorithm (``tpo_agents.__all__``) saved a zip holding ``attributes``: the algorithms'
    own hyperparameters it holds, and the classes that hold exactly those (DG and GroupPG, PG and CE
    hold the same, so a zip of one loads as the other)."""
    import tpo_agents

    classes = [getattr(tpo_agents, name) for name in tpo_agents.__all__]
    held = attributes & frozenset().union(*map(own_hyperparameters, classes))
    return held, [klass for klass in classes if holds_own_hyperparameters(klass, held)]


def check_saved_by(algo_class: type, path: Any, data: dict[str, Any]) -> None:
    """Refuse, with a one-line ``ValueError`` naming both classes, a zip that ``algo_class`` did not
    save: a zip of another grouped algorithm (its own hyperparameters differ: a TPO zip holds ``eta`` and
    ``anchor``, a GRPO zip ``beta``, ``clip_range`` and ``mask_zero_variance``) or of another library's
    algorithm (no ``group_mode``); a zip that records its class (``algorithm_class``) is refused by that
    name, which also tells apart the algorithms with the same hyperparameters (DG and GroupPG, PG and CE).
    ``data`` is the zip's :func:`saved_data`; ``path`` names it in the message."""
    attributes, name = frozenset(data), algo_class.__name__
    if "group_mode" not in attributes:
        raise ValueError(f"cannot load {path} as {name}: it was saved by an algorithm that is not a grouped "
                         "algorithm (it holds no group_mode): load it with its own class")
    saver = data.get("algorithm_class")
    if isinstance(saver, str) and saver != name:
        raise ValueError(f"cannot load {path} as {name}: it was saved by {saver}; load it with {saver}.load")
    held, classes = saved_by(attributes)
    if not holds_own_hyperparameters(algo_class, held):
        saver = " or ".join(klass.__name__ for klass in classes) or "another algorithm"
        holds = ", ".join(sorted(held)) or "none"
        wanted = ", ".join(sorted(identifying_hyperparameters(algo_class))) or "none"
        raise ValueError(f"cannot load {path} as {name}: it was saved by {saver} (it holds {holds} of the "
                         f"grouped algorithms' own hyperparameters; a {name} zip holds {wanted})")


def _env_class(env_id: str) -> Any:
    """The registered entry point of ``env_id`` (a class for the ``tpo_gym`` envs), not instantiated."""
    entry_point = gym.spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def _make_probe(env_id: str, env_kwargs: dict[str, Any], source: EnvLike) -> gym.Env:
    """One single env of ``env_id`` to read spaces and traits from: ``source`` itself if it is one."""
    if isinstance(source, gym.Env):
        return source
    try:
        return gym.make(env_id, **env_kwargs)
    except (TypeError, ValueError) as err:  # an unknown env kwarg, or a value out of range
        raise ValueError(f"cannot make {env_id} with {env_kwargs}: {err}") from err
