"""SB3-style agents for TPO and its group-based peers (see ``agents.zoo.registry`` for the zoo names).

The classes load on first use (``from agents import TPO``), so that a module of the package
(``agents.files``, ``agents.losses``) imports without torch's and SB3's start-up where it needs neither.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"CE": "agents.ce", "DG": "agents.dg", "GRPO": "agents.grpo", "PG": "agents.pg",
            "GroupPG": "agents.pg", "PPO": "agents.ppo", "TPO": "agents.tpo"}

__all__ = ["CE", "DG", "GRPO", "PG", "PPO", "TPO", "GroupPG"]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
