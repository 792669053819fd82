"""Name -> algorithm class, as the zoo's ``ALGOS`` dict, and short env name -> registered env id.

Entries are ``"module:Class"`` strings imported on first use, so that listing the names
(e.g. for an error message) imports nothing heavy. ``ce`` is the supervised cross-entropy oracle of
the bandit and MNIST figures.

Stable-Baselines3 and sb3-contrib algorithms (:data:`EXTERNAL_ALGOS`) carry the RL Zoo's names, except
that SB3's actor-critic PPO is ``sb3_ppo``: ``ppo`` is the paper's critic-free PPO. They train on any
Gymnasium env whose spaces they accept; the grouped algorithms need the ``TPO/`` envs.

The paper's ablations are names of their own (``tpo_no_anchor``, ``grpo_no_kl``, ...): the class of
their parent algorithm plus the keyword arguments in :data:`ABLATIONS` that define them, so a YAML
file or an override cannot lose (or contradict) the defining setting.
"""

from __future__ import annotations

import difflib
import importlib
import re
from typing import Any

ALGOS: dict[str, str] = {
    "tpo": "tpo_agents.tpo:TPO",
    "grpo": "tpo_agents.grpo:GRPO",
    "dg": "tpo_agents.dg:DG",
    "ppo": "tpo_agents.ppo:PPO",
    "pg": "tpo_agents.pg:PG",
    "group_pg": "tpo_agents.pg:GroupPG",
    "ce": "tpo_agents.ce:CE",
    "tpo_no_anchor": "tpo_agents.tpo:TPO",
    "tpo_1ep": "tpo_agents.tpo:TPO",
    "grpo_no_kl": "tpo_agents.grpo:GRPO",
    "grpo_masked": "tpo_agents.grpo:GRPO",
    "sb3_ppo": "stable_baselines3:PPO",
    "a2c": "stable_baselines3:A2C",
    "dqn": "stable_baselines3:DQN",
    "qrdqn": "sb3_contrib:QRDQN",
    "trpo": "sb3_contrib:TRPO",
    "ars": "sb3_contrib:ARS",
    "ppo_lstm": "sb3_contrib:RecurrentPPO",
}

#: Keyword arguments that define an ablation (always applied; a source that contradicts them is an error).
ABLATIONS: dict[str, dict[str, Any]] = {
    "tpo_no_anchor": {"anchor": False},
    "tpo_1ep": {"n_epochs": 1},
    "grpo_no_kl": {"beta": 0.0},
    "grpo_masked": {"mask_zero_variance": True},
}

#: Stable-Baselines3 / sb3-contrib algorithms: the zoo builds their env pipeline, and they do not log
#: the paper's metrics (``rollout/task_error``) themselves.
EXTERNAL_ALGOS: frozenset[str] = frozenset({"sb3_ppo", "a2c", "dqn", "qrdqn", "trpo", "ars", "ppo_lstm"})

#: Namespace of the project's environments; short names resolve into it first.
ENV_NAMESPACE = "TPO"


def _unknown(kind: str, name: str, choices: list[str]) -> ValueError:
    """A ``ValueError`` that lists the choices and the nearest match of ``name``."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.4)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"Unknown {kind} {name!r}.{hint} Choose one of: {', '.join(choices)}")


def algo_key(name: str) -> str:
    """Return the registry key of ``name`` (case-insensitive); an unknown name lists the choices."""
    key = name.lower().replace("-", "_")
    if key not in ALGOS:
        raise _unknown("algorithm", name, sorted(ALGOS))
    return key


def get_algo(name: str) -> Any:
    """Return the algorithm class registered under ``name`` (case-insensitive)."""
    module_name, class_name = ALGOS[algo_key(name)].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def algo_module(name: str) -> str:
    """The module that defines algorithm ``name`` (e.g. ``"tpo_agents.tpo"``)."""
    return ALGOS[algo_key(name)].split(":")[0]


def ablation_kwargs(name: str) -> dict[str, Any]:
    """The constructor keyword arguments that define ``name`` as an ablation (empty otherwise)."""
    return dict(ABLATIONS.get(algo_key(name), {}))


def defining_settings(name: str, values: dict[str, Any],
                      origins: dict[str, str] | None = None) -> dict[str, Any]:
    """The settings that define ``name`` (:func:`ablation_kwargs`), after checking that ``values`` do not
    contradict them: a contradiction raises ``ValueError`` naming the value and, from ``origins``,
    where it was set."""
    defining = ablation_kwargs(name)
    for key, value in defining.items():
        if key in values and values[key] != value:
            where = (origins or {}).get(key, "the run")
            raise ValueError(f"{name!r} is defined by {key}={value!r}, "
                             f"but {where} sets {key}={values[key]!r}")
    return defining


def make_agent(name: str, policy: Any, env: Any, **kwargs: Any) -> Any:
    """The agent registered as ``name`` (its class plus the settings that define an ablation; a
    contradicting keyword argument raises ``ValueError``), built with ``policy``, ``env`` and ``kwargs``."""
    return get_algo(name)(policy, env, **{**kwargs, **defining_settings(name, kwargs)})


_VERSION = re.compile(r"-v(\d+)$")


def _split_id(env_id: str) -> tuple[str, str, int]:
    """``"TPO/TokenReversal-v0"`` -> ``("TPO", "TokenReversal", 0)`` (version -1 when absent)."""
    namespace, _, rest = env_id.rpartition("/")
    match = _VERSION.search(rest)
    if match is None:
        return namespace, rest, -1
    return namespace, rest[: match.start()], int(match.group(1))


def resolve_env_id(name: str) -> str:
    """Resolve a registered id, ``module:id``, ``TPO/Name`` or a short ``Name`` to a full env id.

    A short name is looked up case-insensitively, preferring the ``TPO`` namespace and the latest
    version. An unknown name raises ``ValueError`` with the ``TPO`` ids and the nearest match.
    """
    import gymnasium as gym

    if ":" in name:  # Gymnasium's "module:id" form: import the module, then resolve the id
        module, name = name.split(":", 1)
        importlib.import_module(module)
    registry = gym.envs.registry
    if name in registry:
        return name
    namespace, short, version = _split_id(name)
    candidates = []
    for env_id in registry:
        ns, sh, ver = _split_id(env_id)
        if sh.lower() == short.lower() and (not namespace or (ns or "").lower() == namespace.lower()):
            if version < 0 or ver == version:
                candidates.append((ns == ENV_NAMESPACE, not ns, ver, env_id))
    if candidates:
        return max(candidates)[-1]
    ours = sorted(env_id for env_id in registry if env_id.startswith(ENV_NAMESPACE + "/"))
    close = difflib.get_close_matches(name, list(registry), n=1, cutoff=0.5)
    if not close:  # compare short names too: "TokenReversl" ~ "TokenReversal"
        by_short = {_split_id(env_id)[1]: env_id for env_id in registry}
        close = [by_short[s] for s in difflib.get_close_matches(short, list(by_short), n=1, cutoff=0.6)]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listing = ", ".join(ours) if ours else "(none registered: is tpo_gym importable?)"
    raise ValueError(f"Unknown env {name!r}.{hint} {ENV_NAMESPACE} envs: {listing}")


def env_file_name(env_id: str) -> str:
    """The env id as a folder or file name, as the zoo writes it: ``/`` becomes ``-``."""
    return env_id.replace("/", "-")


#: Keyword arguments ``gymnasium.make`` takes for any env (besides the env constructor's own).
MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker", "autoreset", "render_mode"})


def env_kwarg_names(env_id: str) -> frozenset[str] | None:
    """The keyword arguments ``gymnasium.make(env_id, ...)`` accepts; ``None`` when any may be (``**kwargs``).

    Read from the signature of the registered entry point (a class's ``__init__`` or a function);
    an id that is not registered, or an entry point that cannot be inspected, gives ``None``.
    """
    signature = env_signature(env_id)
    return None if signature is None or signature[1] else signature[0]


def env_signature(env_id: str) -> tuple[frozenset[str], bool] | None:
    """The keyword arguments ``gymnasium.make(env_id, ...)`` names, and whether its entry point also takes
    any other (``**kwargs``: the text envs pass them to the dataset's config); None if it cannot be read."""
    import inspect

    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    try:
        entry_point = gym.spec(env_id).entry_point
        creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        params = inspect.signature(creator).parameters.values()
    except (gym.error.Error, ImportError, AttributeError, TypeError, ValueError):
        return None
    named = MAKE_KWARGS | {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return named, any(p.kind is p.VAR_KEYWORD for p in params)
