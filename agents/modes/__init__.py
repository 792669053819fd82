"""Collection modes: how an algorithm gathers groups and which views of them its loss reads.

==============  ==============================================  =====================
mode            batch                                           views (preferred first)
==============  ==============================================  =====================
``token``       K next-token candidates at every prefix         group
``sequence``    K whole episodes per shared context             group
``single``      one sampled episode per context                 sample, group
``population``  every action of every context, scored exactly   exact, group
``text``        K completions per prompt of a language model    group, sample
==============  ==============================================  =====================

A new mode is one more :class:`CollectionMode` subclass registered in :data:`MODES`.
"""

from __future__ import annotations

from typing import Any

from agents.modes.base import VIEWS, CollectionMode, ExactView, GroupView, SampleView, View
from agents.modes.population import PopulationMode
from agents.modes.sequence import SequenceMode
from agents.modes.single import SingleMode
from agents.modes.text import TextMode
from agents.modes.token import TokenMode

MODES: dict[str, type[CollectionMode]] = {
    mode.name: mode for mode in (TokenMode, SequenceMode, SingleMode, PopulationMode, TextMode)
}


def make_mode(name: str, **settings: Any) -> CollectionMode:
    """The mode called ``name`` with the algorithm's settings (see :class:`CollectionMode`)."""
    if name not in MODES:
        raise ValueError(f"unknown group_mode {name!r}; choose one of {list(MODES)}")
    return MODES[name](**settings)


__all__ = [
    "MODES",
    "VIEWS",
    "CollectionMode",
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
