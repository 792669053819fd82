"""Collection modes: how an algorithm gathers groups and which views of them its loss reads.

==============  ==============================================  =============  ============================
mode            batch                                           views          natural for (an env with)
==============  ==============================================  =============  ============================
``token``       K next-token candidates at every prefix         group          several steps, dense reward
``sequence``    K whole episodes per shared context             group          several steps
``single``      one sampled episode per context                 sample, group  any episodes
``population``  every action of every context, scored exactly   exact, group   one step, several contexts
``text``        K completions per prompt of a language model    group, sample  text prompts (a text env)
==============  ==============================================  =============  ============================

Views are listed preferred first; "natural for" is ``CollectionMode.is_natural_for``.
An algorithm built without ``group_mode`` takes the first mode of its ``mode_preference`` (text,
token, sequence, population, single; Group PG: single before population) that it supports and that
is natural for the env (:meth:`tpo_agents.learn_loop.GroupAlgorithm.natural_mode`).
A new mode is one more :class:`CollectionMode` subclass registered in :data:`MODES`.
"""

from __future__ import annotations

from typing import Any

from tpo_agents.modes.base import (
    DEFAULT_GROUP_SIZE,
    VIEWS,
    CollectionMode,
    EnvTraits,
    ExactView,
    GroupView,
    SampleView,
    View,
)
from tpo_agents.modes.population import PopulationMode
from tpo_agents.modes.sequence import SequenceMode
from tpo_agents.modes.single import SingleMode
from tpo_agents.modes.text import TextMode
from tpo_agents.modes.token import TokenMode

MODES: dict[str, type[CollectionMode]] = {
    mode.name: mode for mode in (TokenMode, SequenceMode, SingleMode, PopulationMode, TextMode)
}


def make_mode(name: str, **settings: Any) -> CollectionMode:
    """The mode called ``name`` with the algorithm's settings (see :class:`CollectionMode`)."""
    if name not in MODES:
        raise ValueError(f"unknown group_mode {name!r}; choose one of {list(MODES)}")
    return MODES[name](**settings)


__all__ = [
    "DEFAULT_GROUP_SIZE",
    "MODES",
    "VIEWS",
    "CollectionMode",
    "EnvTraits",
    "ExactView",
    "GroupView",
    "PopulationMode",
    "SampleView",
    "SequenceMode",
    "SingleMode",
    "TextMode",
    "TokenMode",
    "View",
    "make_mode",
]
