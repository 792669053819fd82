"""The RL Zoo face of tpo-gym: command line, YAML hyperparameters, env building, callbacks, evaluation.

``train.py`` and ``python -m tpo_agents.evaluate`` are thin shims over :func:`tpo_agents.zoo.train.main` and
:func:`tpo_agents.zoo.evaluate.main`, and the installed command ``tpo-gym`` runs these and the others
(:mod:`tpo_agents.zoo.commands`); :func:`train` runs the zoo from Python with a list of arguments.
``main`` and ``train`` load on first use, so that a light module of the package (``hyperparams``,
``results``) imports without torch's and SB3's start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["main", "train"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'tpo_agents.zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module("tpo_agents.zoo.train"), name)
    globals()[name] = value  # the function, not the submodule ``tpo_agents.zoo.train`` bound by its import
    return value
