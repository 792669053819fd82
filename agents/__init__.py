"""SB3-style agents for TPO and its group-based peers (see ``tpo_agents.zoo.registry`` for the zoo names).

The classes load on first use (``from tpo_agents import TPO``), so that a module of the package
(``tpo_agents.files``, ``tpo_agents.losses``) imports without torch's and SB3's start-up where it
needs neither.

The import name is ``tpo_agents`` (the checkout's ``tpo_agents`` links to this ``agents/`` folder), which
leaves ``agents`` to the OpenAI Agents SDK (``openai-agents``) in the same environment. Where the folder
itself is importable as ``agents`` (a checkout's root on ``sys.path``), ``import agents`` gives the
``tpo_agents`` package itself: code written against the old name keeps working there, with one copy of
every class.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

if __name__ != "tpo_agents":  # imported by its folder name: ``agents`` is the tpo_agents package
    sys.modules[__name__] = importlib.import_module("tpo_agents")

_MODULES = {"CE": "tpo_agents.ce", "DG": "tpo_agents.dg", "GRPO": "tpo_agents.grpo", "PG": "tpo_agents.pg",
            "GroupPG": "tpo_agents.pg", "PPO": "tpo_agents.ppo", "TPO": "tpo_agents.tpo"}

__all__ = ["CE", "DG", "GRPO", "PG", "PPO", "TPO", "GroupPG"]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
