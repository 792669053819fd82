"""What the zoo does for the Stable-Baselines3 / sb3-contrib algorithms, and which env each kind accepts.

- The spaces each SB3 algorithm takes (:data:`ACTION_SPACES`, :data:`OBSERVATION_SPACES`, as their
  constructors declare them), checked before a run starts: a mismatch is a one-line
  :class:`~tpo_agents.zoo.hyperparams.ConfigError` that names the algorithms that fit.
- A grouped algorithm (``tpo``, ``grpo``, ...) needs an env with the grouped capabilities
  (``score_candidates`` and shared-context resets: the ``TPO/`` envs); on any other env it is a
  one-line error naming the SB3 algorithms to use instead.
- ARS as the RL Zoo runs it: one training env, and ``n_envs > 1`` means that many ``AsyncEval``
  worker processes evaluating the candidate policies.
- :class:`MlpLstmPolicy`: sb3-contrib's LSTM policy for ``MultiDiscrete`` observations (the token tasks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

from tpo_agents.zoo import registry
from tpo_agents.zoo.hyperparams import ConfigError

_ACTOR_CRITIC = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: Action spaces each SB3 algorithm accepts (``supported_action_spaces`` of its constructor).
ACTION_SPACES: dict[str, tuple[type[spaces.Space], ...]] = {
    "sb3_ppo": _ACTOR_CRITIC,
    "a2c": _ACTOR_CRITIC,
    "trpo": _ACTOR_CRITIC,
    "ppo_lstm": _ACTOR_CRITIC,
    "ars": (spaces.Box, spaces.Discrete),
    "dqn": (spaces.Discrete,),
    "qrdqn": (spaces.Discrete,),
}
_FLAT = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: Observation spaces each SB3 algorithm accepts (``Dict`` with its ``MultiInput`` policy; ARS has none).
OBSERVATION_SPACES: dict[str, tuple[type[spaces.Space], ...]] = {
    algo: _FLAT if algo == "ars" else (*_FLAT, spaces.Dict) for algo in ACTION_SPACES
}


def sb3_algos() -> list[str]:
    """The registered SB3 / sb3-contrib algorithm names, sorted."""
    return sorted(registry.EXTERNAL_ALGOS)


def grouped_algos(env_id: str | None = None) -> list[str]:
    """The registered grouped (paper) algorithms, in registry order; with ``env_id``, those that have a
    collection mode for that env (``ce``, exact mode only, has none for the text envs)."""
    names = [name for name in registry.ALGOS if name not in registry.EXTERNAL_ALGOS]
    if env_id is None:
        return names
    from tpo_agents.modes import MODES

    env_class = _env_class(env_id)
    modes = {name: registry.get_algo(name).supported_modes() for name in names}
    return [name for name in names if any(issubclass(env_class, MODES[m].env_types) for m in modes[name])]


def _env_class(env_id: str) -> Any:
    """The registered entry point of ``env_id``, loaded (a class, or a factory function)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry_point = gym.spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def describe(space: spaces.Space) -> str:
    """A space on one line: ``Box(-2.0, 2.0, (1,), float32)``, or only its type when that is long or spans
    lines (a ``Text`` space's charset, MNIST's 784 bounds)."""
    text = str(space)
    return text if "\n" not in text and len(text) <= 80 else type(space).__name__


def accepts(algo: str, observation_space: spaces.Space, action_space: spaces.Space) -> bool:
    """True if SB3 algorithm ``algo`` can train on an env with these spaces."""
    return isinstance(observation_space, OBSERVATION_SPACES[algo]) and isinstance(
        action_space, ACTION_SPACES[algo]
    )


def is_grouped_env(env_id: str) -> bool:
    """True if ``env_id`` is a natively batched ``tpo_gym`` env with the grouped capabilities."""
    from tpo_agents.modes import MODES

    env_class = _env_class(env_id)
    env_types = tuple(env_type for mode in MODES.values() for env_type in mode.env_types)
    return isinstance(env_class, type) and issubclass(env_class, env_types)


def probe_spaces(env_id: str, env_kwargs: dict[str, Any]) -> tuple[spaces.Space, spaces.Space]:
    """The observation and action spaces of ``gymnasium.make(env_id, **env_kwargs)``.

    An env that cannot be made with these kwargs is a :class:`ConfigError` naming the kwargs.
    """
    import gymnasium as gym

    try:
        env = gym.make(env_id, **env_kwargs)
    except (TypeError, ValueError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"cannot make {env_id} with env_kwargs {env_kwargs}: {message}") from err
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def fitting_algos(env_id: str, env_kwargs: dict[str, Any] | None = None) -> list[str]:
    """The SB3 algorithms whose spaces fit ``env_id`` (all of them if the env cannot be made)."""
    try:
        observation_space, action_space = probe_spaces(env_id, env_kwargs or {})
    except ConfigError:
        return sb3_algos()
    return [algo for algo in sb3_algos() if accepts(algo, observation_space, action_space)]


def check_grouped_env(algo: str, env_id: str) -> None:
    """Refuse a grouped algorithm on an env without the grouped capabilities, naming the SB3 algorithms."""
    if is_grouped_env(env_id):
        return
    fitting = fitting_algos(env_id)
    instead = (
        f"train it with an SB3 algorithm: {', '.join(fitting)}"
        if fitting
        else "no algorithm of the zoo takes its spaces"
    )
    raise ConfigError(
        f"{algo!r} learns from groups of candidates and needs an env with the grouped capabilities "
        f"(score_candidates and shared-context resets: the TPO/ token, bandit, MNIST and text envs); "
        f"{env_id!r} is not one: {instead}"
    )


def check_env(algo: str, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Refuse SB3 algorithm ``algo`` on an env whose spaces it does not take (or that cannot be made)."""
    observation_space, action_space = probe_spaces(env_id, env_kwargs)
    if accepts(algo, observation_space, action_space):
        return
    fitting = [name for name in sb3_algos() if accepts(name, observation_space, action_space)]
    if fitting:
        instead = f"use one of: {', '.join(fitting)}"
    elif is_grouped_env(env_id):
        instead = f"train it with a grouped algorithm: {', '.join(grouped_algos(env_id))}"
    else:
        instead = "no algorithm of the zoo takes these spaces"
    takes = ", ".join(space.__name__ for space in ACTION_SPACES[algo])
    raise ConfigError(
        f"{algo!r} takes {takes} actions and {', '.join(s.__name__ for s in OBSERVATION_SPACES[algo])} "
        f"observations; {env_id!r} has action space {describe(action_space)} and observation space "
        f"{describe(observation_space)}: {instead}"
    )


def check_same_spaces(env_id: str, env_kwargs: dict[str, Any], eval_env_kwargs: dict[str, Any]) -> None:
    """Refuse evaluation env kwargs whose env has other spaces than the training env's (the model is
    evaluated on it), naming the kwargs and both spaces."""
    train = probe_spaces(env_id, env_kwargs)
    evaluation = probe_spaces(env_id, eval_env_kwargs)
    for kind, trained, evaluated in zip(("observation", "action"), train, evaluation, strict=True):
        if trained != evaluated:
            raise ConfigError(
                f"--eval-env-kwargs {eval_env_kwargs}: the evaluation env's {kind} space is "
                f"{describe(evaluated)}, the model's {describe(trained)} (with {env_kwargs}); evaluate "
                f"on an env of the same spaces"
            )


def train_n_envs(algo: str, n_envs: int) -> int:
    """Envs of the training VecEnv: ``n_envs``, but 1 for ARS (its ``n_envs`` are evaluation workers)."""
    return 1 if algo == "ars" else n_envs


def async_eval(algo: str, n_envs: int, make_one: Callable[[], Any], policy: Any) -> Any:
    """ARS's ``AsyncEval`` with ``n_envs`` worker processes, each on ``make_one()``; None otherwise.

    As in the RL Zoo, ARS with ``n_envs > 1`` evaluates its candidate policies in parallel processes
    (each with its own single-env VecEnv); with ``n_envs = 1`` it evaluates them in turn on its env.
    """
    if algo != "ars" or n_envs <= 1:
        return None
    from sb3_contrib.common.vec_env import AsyncEval

    return AsyncEval([make_one for _ in range(n_envs)], policy)


class MlpLstmPolicy(RecurrentActorCriticPolicy):
    """sb3-contrib's ``MlpLstmPolicy`` that also takes ``MultiDiscrete`` observations (the token tasks).

    SB3 sizes the flattened one-hot features of a ``MultiDiscrete`` space as ``sum(nvec)``, a numpy
    integer, which ``torch.nn.LSTM`` refuses (``input_size should be of type int``); this policy makes
    the size a Python ``int``. Use it as ``policy: tpo_agents.zoo.sb3_algos.MlpLstmPolicy``.
    """

    def make_features_extractor(self) -> Any:
        """The features extractor, with its ``features_dim`` as a Python ``int``."""
        extractor = super().make_features_extractor()
        extractor._features_dim = int(extractor.features_dim)
        return extractor
