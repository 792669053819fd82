"""TPO's two settings, ``tpo_eta`` and ``tpo_logscore``, in verl's own policy-loss config.

``actor_rollout_ref.actor.policy_loss.tpo_eta`` and ``actor_rollout_ref.actor.policy_loss.tpo_logscore``.

verl 0.9's ``PolicyLossConfig`` has fixed fields, but verl builds the actor config with hydra's
``instantiate`` from the ``_target_`` of each node, so the policy-loss node may name a subclass:
:class:`TPOPolicyLossConfig` adds ``tpo_eta`` (eta > 0, default 1.0) and ``tpo_logscore`` (``mean``,
default, or ``sum``). The shipped config sets::

    actor_rollout_ref:
      actor:
        policy_loss:
          _target_: tpo_agents.integrations.verl.settings.TPOPolicyLossConfig
          loss_mode: tpo
          tpo_eta: 1.0
          tpo_logscore: mean

and a command line overrides them as ``actor_rollout_ref.actor.policy_loss.tpo_eta=0.5`` (with ``+``
before the key when the config file does not set it). They travel with the actor config to every worker,
so no environment variable is involved. A plain ``PolicyLossConfig`` (no such fields) means the defaults.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_ETA", "DEFAULT_LOGSCORE", "LOGSCORES", "TARGET", "cfg", "check_settings", "tpo_settings"]

DEFAULT_ETA = 1.0
DEFAULT_LOGSCORE = "mean"
LOGSCORES = ("mean", "sum")
#: The ``_target_`` of the policy-loss node that carries TPO's settings.
TARGET = "tpo_agents.integrations.verl.settings.TPOPolicyLossConfig"
_KEY = "actor_rollout_ref.actor.policy_loss"


def cfg(config: Any, name: str, default: Any = None) -> Any:
    """``config.name`` for a verl dataclass config, a DictConfig, a dict or a namespace."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def check_settings(eta: Any, logscore: Any) -> tuple[float, str]:
    """``(eta, logscore)`` checked: eta a finite number > 0, logscore ``mean`` or ``sum``; one-line
    ``ValueError`` naming the bad value and what is allowed otherwise."""
    if isinstance(eta, bool) or not isinstance(eta, int | float) or not math.isfinite(eta) or eta <= 0:
        raise ValueError(f"{_KEY}.tpo_eta={eta!r}: must be a finite number > 0 (default {DEFAULT_ETA})")
    if logscore not in LOGSCORES:
        raise ValueError(f"{_KEY}.tpo_logscore={logscore!r}: use 'mean' (default) or 'sum'")
    return float(eta), str(logscore)


def tpo_settings(actor_config: Any) -> tuple[float, str]:
    """``(eta, logscore)`` from verl's actor config (``policy_loss.tpo_eta`` / ``tpo_logscore``), checked;
    the defaults (1.0, ``mean``) when the policy-loss config does not carry them."""
    policy_loss = cfg(actor_config, "policy_loss", None) or {}
    return check_settings(cfg(policy_loss, "tpo_eta", DEFAULT_ETA), cfg(policy_loss, "tpo_logscore",
                                                                          DEFAULT_LOGSCORE))


if importlib.util.find_spec("verl") is not None:
    from verl.workers.config import PolicyLossConfig

    @dataclass
    class TPOPolicyLossConfig(PolicyLossConfig):
        """verl's ``PolicyLossConfig`` plus TPO's eta (``tpo_eta``) and log-score (``tpo_logscore``)."""

        tpo_eta: float = DEFAULT_ETA
        tpo_logscore: str = DEFAULT_LOGSCORE

        def __post_init__(self) -> None:
            parent = getattr(super(), "__post_init__", None)
            if parent is not None:
                parent()
            check_settings(self.tpo_eta, self.tpo_logscore)

    __all__.append("TPOPolicyLossConfig")
