"""The base of every grouped algorithm below its learn loop: settings, collection mode, env, policy, load.

As SB3 splits ``base_class.py`` from ``on_policy_algorithm.py``: the settings and their checks, the choice
of the collection mode, the env the algorithm owns, building the policy (a population of ``n_seeds``
members: :mod:`tpo_agents.populations`), ``set_env``, ``load``, ``predict`` and what is saved. The
rules behind them have modules of their own: the mode's choice from the env :mod:`tpo_agents.mode_choice`,
the saved zips :mod:`tpo_agents.saving`, the ``monitor.csv`` rows :mod:`tpo_agents.monitor`.

``GroupBaseAlgorithm`` follows Stable-Baselines3's ``BaseAlgorithm`` contract. It owns its env: given an
env id (and kwargs), it builds the natively batched ``tpo_gym`` vector env of exactly the size its
collection mode needs (``tpo_agents.modes``), once. The learn loop is
:class:`tpo_agents.learn_loop.GroupAlgorithm`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.utils import FloatSchedule, check_for_correct_spaces

import tpo_agents.fast_collectors  # noqa: F401  (registers the fast collectors)
import tpo_gym  # noqa: F401  (registers the TPO/ envs)
from tpo_agents import checks
from tpo_agents.hyperparameters import ScaledSchedule, own_hyperparameters, show_shared
from tpo_agents.mode_choice import EnvLike, batched_env, choose_mode, env_id_and_kwargs, probe_env
from tpo_agents.modes import (
    DEFAULT_GROUP_SIZE,
    MODES,
    VIEWS,
    CollectionMode,
    ExactView,
    GroupView,
    ModeCollector,
    SampleView,
    canonical_mode_name,
    make_mode,
)
from tpo_agents.monitor import EpisodeMonitor
from tpo_agents.policies import MlpPolicy, TabularPolicy, TransformerPolicy
from tpo_agents.populations import make_population
from tpo_agents.saving import prepare_load
from tpo_gym.sb3 import SB3VecEnv

MATCHES = ("prompts", "interactions")


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
    group_loss: ClassVar[Callable[[Any, GroupView, bool], tuple[th.Tensor, dict]] | None] = None
    sample_loss: ClassVar[Callable[[Any, SampleView, bool], tuple[th.Tensor, dict]] | None] = None
    exact_loss: ClassVar[Callable[[Any, ExactView, bool], tuple[th.Tensor, dict]] | None] = None
    #: The collection modes in this algorithm's order of preference: without ``group_mode`` it takes
    #: the first supported one that is natural for the env (``CollectionMode.is_natural_for``).
    mode_preference: ClassVar[tuple[str, ...]] = (
        "text", "multiturn", "token", "sequence", "exact", "single")
    #: The mode of an algorithm built with neither ``group_mode`` nor an env (SB3's ``load`` builds one
    #: so, then restores the saved ``group_mode``); with an env, :meth:`natural_mode` decides.
    default_mode: ClassVar[str] = "token"
    #: Hyperparameters that may be SB3 schedules (``lin_0.2``); read with :meth:`scheduled`.
    schedules: ClassVar[tuple[str, ...]] = ()
    #: The algorithm builds its own env; the zoo's env pipeline (normalize, wrappers, n_envs) does not apply.
    owns_env: ClassVar[bool] = True
    #: Own hyperparameters added after zips were saved without them: such a zip still loads (with their
    #: defaults, set by the constructor that ``load`` calls), see :meth:`identifying_hyperparameters`.
    later_hyperparameters: ClassVar[frozenset[str]] = frozenset()
    policy: Any
    mode: CollectionMode

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Show the shared hyperparameters on a subclass (:func:`~tpo_agents.hyperparameters.show_shared`)."""
        super().__init_subclass__(**kwargs)
        show_shared(cls, GroupBaseAlgorithm)

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
            group_mode, self._probe = choose_mode(type(self), env_id, merged_kwargs, env)
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
        #: The class that saved a zip (``load`` refuses a zip of another class, see
        #: :func:`~tpo_agents.saving.check_saved_by`).
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
        self._monitor: EpisodeMonitor | None = None
        #: The ``monitor.csv`` rows of the batch collected but not yet trained on (None: none).
        self._untrained_episodes: dict[str, np.ndarray] | None = None
        #: The last batch's ``rollout/`` values per member (``task_error`` ..., each ``[n_seeds]``).
        self.member_rollout: dict[str, np.ndarray] = {}
        #: The member of a population that ``predict`` uses (:meth:`set_predict_member`).
        self.predict_member = 0
        #: Whether ``learn`` uses a fast collector (:mod:`tpo_agents.fast_collectors`) where one serves the
        #: env, policy and mode (False: always the generic collector, the reference).
        self.fast_collection = True
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
        """The collection mode this algorithm uses on ``env`` when ``group_mode`` is not given (the rule:
        :func:`~tpo_agents.mode_choice.choose_mode`).

        :param env: a registered id or an env made from one (its id and kwargs are read)
        :param env_kwargs: the env's keyword arguments (over those of ``env``), e.g. ``reward``
        :raises ValueError: no mode of the algorithm can train on the env (one line naming it)
        """
        env_id, given = env_id_and_kwargs(env)
        return choose_mode(cls, env_id, {**given, **(env_kwargs or {})}, env)[0]

    @classmethod
    def own_hyperparameters(cls) -> frozenset[str]:
        """The constructor arguments this class adds to :class:`GroupBaseAlgorithm`'s (TPO: ``eta``,
        ``anchor``), up its classes; its zip holds them, as SB3 saves every attribute."""
        return own_hyperparameters(cls, GroupBaseAlgorithm)

    @classmethod
    def identifying_hyperparameters(cls) -> frozenset[str]:
        """The own hyperparameters every zip of this class holds: :meth:`own_hyperparameters` less its
        ``later_hyperparameters``, which zips saved before they were added lack."""
        return cls.own_hyperparameters() - cls.later_hyperparameters

    @classmethod
    def holds_own_hyperparameters(cls, held: frozenset[str]) -> bool:
        """Whether ``held``, the grouped algorithms' own hyperparameters a zip holds, are those of a zip of
        this class: all its :meth:`identifying_hyperparameters`, and none but its own."""
        return cls.identifying_hyperparameters() <= held <= cls.own_hyperparameters()

    def _validate(self) -> None:
        """Check every hyperparameter's type and range (a :class:`~tpo_agents.checks.HyperparameterError`,
        a ``ValueError`` naming the value and what is allowed); a subclass adds its own after these."""
        checks.check_shared_hyperparameters(self, self.supported_modes(), MODES, MATCHES)

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
            n_seeds=self.n_seeds,
            **self.mode_kwargs,
        )
        if self.kl_coef and not self.mode.has_reference_kl:
            raise ValueError(f"kl_coef={self.kl_coef!r} needs a mode with a reference model (text), "
                             f"not group_mode={self.group_mode!r}")
        self._view = self.loss_view()
        self.lr_schedule = ScaledSchedule(FloatSchedule(self.learning_rate), self.mode.lr_scale)
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

    def collector(self, fast: bool | None = None) -> ModeCollector:
        """The collector of this env, policy and mode (:meth:`~tpo_agents.modes.CollectionMode.collector`): a
        registered fast one that serves them where ``fast`` (default :attr:`fast_collection`; never with a
        reference model, ``kl_coef``), else the generic one."""
        fast = self.fast_collection if fast is None else fast
        return self.mode.collector(self.vector_env, self.policy, fast=fast and not self.kl_coef)

    def _probe_env(self, source: EnvLike) -> gym.Env:
        """A single env of ``source`` to read the spaces from (:func:`~tpo_agents.mode_choice.probe_env`)."""
        probe = probe_env(type(self), self.group_mode, self.env_id, self.env_kwargs, source, self._probe)
        self._probe = None
        return probe

    def _build_env(self) -> None:
        """The natively batched env of the mode's size (``self.env``), with its monitor file."""
        self.env = SB3VecEnv(batched_env(self.env_id, self.mode, self.n_seeds, self.env_kwargs))
        self.n_envs = self.env.num_envs
        self._monitor = EpisodeMonitor(self.monitor_dir, self.env_id) if self.monitor_dir else None
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
        ``<Env>.zip`` next to ``<Env>/``): see :func:`~tpo_agents.saving.model_zip_path`. A zip saved
        by another algorithm class is refused with a one-line ``ValueError`` naming both
        (:func:`~tpo_agents.saving.check_saved_by`). A zip saved with a mode's former name
        (``group_mode="population"``) loads silently as the current one (``exact``,
        :func:`~tpo_agents.saving.mode_under_current_name`); ``group_mode=`` a former name passed here
        is taken with a ``FutureWarning``, as by the constructor.
        """
        path, custom_objects, kwargs = prepare_load(cls, path, custom_objects, kwargs)
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
        if (getattr(self.policy, "saves_as_pretrained", False) and isinstance(path, str | os.PathLike)
                and not getattr(self.policy, "_weights_elsewhere", False)):
            from tpo_agents.policies.llm_checkpoint import save_llm

            save_llm(self, path)
            return
        super().save(path, exclude=exclude, include=include)

    def set_predict_member(self, member: int) -> None:
        """Make :meth:`predict` (and so SB3's ``evaluate_policy``, the zoo's ``enjoy``) act with member
        ``member`` of a population: the learner of seed ``seed + member``. The default is member 0;
        the choice is saved with the model. One member (``n_seeds=1``): only 0."""
        if hasattr(self.policy, "set_predict_member"):  # a policy of members (GroupPolicy) checks the range
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
        members = hasattr(self.policy, "set_predict_member")  # a policy of members (GroupPolicy)
        if member not in (None, 0) and not members:
            raise ValueError(f"member must be 0 for a model of one member, got {member!r}")
        chosen = {"member": member} if member is not None and members else {}
        return self.policy.predict(observation, state, episode_start, deterministic, **chosen)

    @property
    def vector_env(self) -> gym.vector.VectorEnv:
        """The Gymnasium vector env behind ``self.env``."""
        return self.env.vector_env

    def scheduled(self, name: str) -> float:
        """The current value of the scheduled hyperparameter ``name`` (e.g. ``clip_range``)."""
        return float(getattr(self, name)(self._current_progress_remaining))

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "lr_schedule", "mode", "_monitor", "_env_source", "_view",
                "_probe", "fast_collection", "_untrained_episodes"]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []

