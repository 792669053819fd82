"""TPO as a verl plugin (verl 0.9.x): the ``"tpo"`` estimator and loss, checks, rewards, data export, tools.

The advantage estimator and policy loss ``"tpo"``, a config validator, reward functions (reasoning-gym
items, multi-turn episodes), a parquet exporter for the text and multi-turn envs, and the multi-turn envs
as tools of verl's ``ToolAgentLoop``.

Target Policy Optimization (arXiv 2604.06159, Sec. 2) in verl's notation. For a prompt x, verl's
rollout draws K = ``actor_rollout_ref.rollout.n`` completions y_1..y_K with scores s_i (the sum of the
row's ``token_level_rewards``); the estimator writes u = standardize(s) within each ``uid`` group on the
response tokens, and the loss is :func:`tpo_agents.losses.completion_tpo_loss` on each micro-batch's
contiguous groups, the same function TRL's :class:`~tpo_agents.integrations.trl.TargetPOTrainer` and the
text mode call.

Modules, one job each:

* :mod:`.loss`: the estimator and the loss, with their normalisation over micro-batches and ranks;
* :mod:`.settings`: eta and the log-score in verl's own config (``policy_loss.tpo_eta``,
  ``policy_loss.tpo_logscore`` through the ``_target_`` :class:`~.settings.TPOPolicyLossConfig`);
* :mod:`.checks`: the config validator (row layout, batch sizes, settings);
* :mod:`.reward`: ``compute_score`` for exported text-env rows, ``episode_score`` for multi-turn rows;
* :mod:`.data`: the parquet exporter (and a multi-turn env's ``tools.yaml``);
* :mod:`.tools`: ``EnvTool``, one tool of a multi-turn env for verl's ``ToolAgentLoop`` (imports verl);
* :mod:`.cli`: ``python -m tpo_agents.integrations.verl check|export``.

Loading. ``pip install -e ".[verl]"`` registers this package under the ``verl.plugins`` entry point,
which verl imports on ``import verl`` in every process (``VERL_USE_EXTERNAL_PLUGINS``, default
``auto``); ``VERL_USE_EXTERNAL_MODULES=tpo_agents.integrations.verl`` also works. verl logs a failing
plugin only at debug level: ``get_policy_loss_fn("tpo")`` then reports an unknown loss mode. Without
verl installed the pure functions still work.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .checks import NAME, VERL_DEFAULTS, check_config, config_errors, load_config
from .cli import main
from .data import dataset_rows, environment_rows, export_dataset, tools_config
from .loss import compute_tpo_advantage, compute_tpo_policy_loss, contiguous_groups, row_advantages
from .reward import compute_score, episode_score
from .settings import TARGET, tpo_settings

__all__ = [
    "NAME",
    "TARGET",
    "VERL_DEFAULTS",
    "check_config",
    "compute_score",
    "compute_tpo_advantage",
    "compute_tpo_policy_loss",
    "config_errors",
    "contiguous_groups",
    "dataset_rows",
    "environment_rows",
    "episode_score",
    "export_dataset",
    "load_config",
    "main",
    "register",
    "row_advantages",
    "tools_config",
    "tpo_settings",
]


def _is_ours(fn: Any, ours: Any) -> bool:
    name = (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None))
    return name == (ours.__module__, ours.__qualname__)


def register() -> bool:
    """Register ``"tpo"`` in verl's advantage-estimator and policy-loss registries.

    Returns False when verl is not installed; idempotent (a second import does not clash). Called when
    this package is imported, which verl's ``verl.plugins`` entry point does.
    """
    if importlib.util.find_spec("verl") is None:
        return False
    from verl.trainer.ppo import core_algos

    for registry, decorator, fn in (
        (core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.register_adv_est, compute_tpo_advantage),
        (core_algos.POLICY_LOSS_REGISTRY, core_algos.register_policy_loss, compute_tpo_policy_loss),
    ):
        current = registry.get(NAME)
        if current is not None and not _is_ours(current, fn):
            raise ValueError(f"verl already has a {NAME!r} entry from {current.__module__}."
                             f"{current.__qualname__}; uninstall that plugin or list the plugins to load in "
                             f"VERL_USE_EXTERNAL_PLUGINS")
        if current is None:
            decorator(NAME)(fn)
    return True


register()
