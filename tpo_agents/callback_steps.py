"""How often ``learn`` calls a callback, and which callbacks that count calls it would never fire.

Env steps per update and per callback step, and the callbacks that count calls (``eval_freq``,
``save_freq``) which a ``learn(total_timesteps)`` never fires.

SB3 calls a callback's ``on_step`` once per step of all the envs the model steps at once, so a grouped
algorithm, which steps B contexts (token mode) or B x K episodes (sequence mode) together, calls it once
per B or B x K env steps: SB3's ``EvalCallback(eval_freq=500)`` counts those calls, not env steps.
"""

from __future__ import annotations

import warnings
from typing import Any

from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm


def steps_per_update(model: Any) -> int | None:
    """Env steps between two updates: a grouped algorithm's collection, an on-policy SB3 algorithm's
    ``n_steps * n_envs``; None for the others (off-policy: their ``log_interval`` counts episodes)."""
    mode = getattr(model, "mode", None)
    if mode is not None and getattr(model, "env", None) is not None and hasattr(model, "vector_env"):
        return int(mode.steps_per_collect(model.vector_env))
    if isinstance(model, OnPolicyAlgorithm):
        return int(model.n_steps * model.n_envs)
    return None


def steps_per_callback_step(model: Any) -> int:
    """Env steps (``num_timesteps``) between two calls of a callback's ``on_step``: one step of every env
    the model steps at once. A grouped algorithm steps its batched env (token mode: B prompts; sequence
    mode: B x K episodes; exact mode: every context), an SB3 algorithm its ``n_envs`` envs."""
    mode = getattr(model, "mode", None)
    return int(mode.n_envs) if mode is not None and hasattr(model, "vector_env") else int(model.n_envs)


def never_firing(model: Any, callback: Any, total_timesteps: int) -> list[str]:
    """A line for each callback in ``callback`` (one, a list or a ``CallbackList``) that counts ``on_step``
    calls (``eval_freq``, ``save_freq``: SB3's ``EvalCallback``, ``CheckpointCallback``) and that
    ``model.learn(total_timesteps)`` calls too few times to fire even once."""
    per_step = steps_per_callback_step(model)
    per_update = steps_per_update(model) or per_step
    n_calls = -(-int(total_timesteps) // per_update) * max(per_update // per_step, 1)
    lines = []
    for item in flat_callbacks(callback):
        for name in ("eval_freq", "save_freq"):
            freq = getattr(item, name, None)
            if isinstance(freq, int) and freq > n_calls:
                lines.append(f"{type(item).__name__}({name}={freq}) never fires: it counts callback steps, "
                             f"and {type(model).__name__} makes one per {per_step} env steps, so "
                             f"learn({total_timesteps}) makes {n_calls}; use {name} <= {n_calls}, or "
                             "tpo_agents.zoo.callbacks.EveryTimesteps(n_steps, callback) to count env steps")
    return lines


def flat_callbacks(callback: Any) -> list[Any]:
    """The callbacks ``learn`` calls at each step: ``callback`` itself, or the members of a list or a
    ``CallbackList`` (not the children of an ``EventCallback``, which run on its events)."""
    if callback is None:
        return []
    if isinstance(callback, list | tuple):
        return [item for member in callback for item in flat_callbacks(member)]
    if isinstance(callback, CallbackList):
        return flat_callbacks(callback.callbacks)
    return [callback]


def warn_never_firing(model: Any, callback: Any, total_timesteps: int, stacklevel: int = 2) -> None:
    """Warn (``UserWarning``) once for each callback of :func:`never_firing`."""
    for line in never_firing(model, callback, total_timesteps):
        warnings.warn(line, stacklevel=stacklevel)
