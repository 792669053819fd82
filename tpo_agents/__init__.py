"""SB3-style agents for TPO and its group-based peers (see ``tpo_agents.zoo.registry`` for the zoo names).

The classes load on first use (``from tpo_agents import TPO``), so that a module of the package
(``tpo_agents.files``, ``tpo_agents.losses``) imports without torch's and SB3's start-up where it
needs neither.

The name leaves ``agents`` to the OpenAI Agents SDK (``openai-agents``) in the same environment.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"CE": "tpo_agents.ce", "DG": "tpo_agents.dg", "GRPO": "tpo_agents.grpo", "PG": "tpo_agents.pg",
            "GroupPG": "tpo_agents.pg", "PPO": "tpo_agents.ppo", "TPO": "tpo_agents.tpo"}

__all__ = ["CE", "DG", "GRPO", "PG", "PPO", "TPO", "GroupPG"]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
