"""Collection modes: how an algorithm gathers groups and which views of them its loss reads.

==============  ==============================================  =============  ============================
mode            batch                                           views          natural for (an env with)
==============  ==============================================  =============  ============================
``token``       K next-token candidates at every prefix         group          several steps, dense reward
``sequence``    K whole episodes per shared context             group          several steps
``single``      one sampled episode per context                 sample, group  any episodes
``exact``       every action of every context, scored exactly   exact, group   one step, several contexts
``text``        K completions per prompt of a language model    group, sample  text prompts (a text env)
``multiturn``   K whole conversations per task (env replies     group, sample  a multi-turn text env
                in the context, never in a loss)
==============  ==============================================  =============  ============================

Views are listed preferred first; "natural for" is ``CollectionMode.is_natural_for``.
An algorithm built without ``group_mode`` takes the first mode of its ``mode_preference`` (text,
multiturn, token, sequence, exact, single; Group PG: single before exact) that it supports and that
is natural for the env (:meth:`tpo_agents.learn_loop.GroupAlgorithm.natural_mode`).
A new mode is one more :class:`CollectionMode` subclass registered in :data:`MODES`.

A mode's former name (:data:`OLD_MODE_NAMES`: ``exact`` was ``population``) is still accepted wherever
a mode is named: :func:`canonical_mode_name` turns it into the current one.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from tpo_agents.modes.base import (
    DEFAULT_GROUP_SIZE,
    VIEWS,
    CollectionMode,
    Collector,
    CompletionTokens,
    EnvTraits,
    ExactView,
    FastCollector,
    GroupView,
    ModeCollector,
    SampleView,
    View,
)
from tpo_agents.modes.exact import ExactMode
from tpo_agents.modes.multiturn import MultiTurnMode
from tpo_agents.modes.sequence import SequenceMode
from tpo_agents.modes.single import SingleMode
from tpo_agents.modes.text import TextMode
from tpo_agents.modes.token import TokenMode

MODES: dict[str, type[CollectionMode]] = {
    mode.name: mode for mode in (TokenMode, SequenceMode, SingleMode, ExactMode, TextMode, MultiTurnMode)
}

OLD_MODE_NAMES: dict[str, str] = {"population": "exact"}
"""Former mode names -> current ones: ``group_mode="population"`` (in code, a zoo YAML, a ``-params``
override or a saved zip) is the ``exact`` mode. Not in :data:`MODES`, so no error message lists them."""


def canonical_mode_name(name: Any, warn: bool = False) -> Any:
    """``name`` under its current name: a former name (:data:`OLD_MODE_NAMES`) becomes the current one,
    with one ``FutureWarning`` if ``warn`` (what a user wrote, not what a saved zip holds), pointing at
    the first caller outside this package; anything else (a current name, an unknown one, None) is
    returned as it is, for the caller's own check."""
    if not isinstance(name, str) or name not in OLD_MODE_NAMES:
        return name
    new = OLD_MODE_NAMES[name]
    if warn:
        warnings.warn(f'group_mode="{name}" is now "{new}"; the old name will be removed',
                      FutureWarning, stacklevel=_caller_outside_package())
    return new


def _caller_outside_package() -> int:
    """The ``stacklevel`` (of a warning issued by the caller of this function) of the first frame whose
    code lies outside this package: the user's line, however many of the package's calls lie between."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.realpath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def make_mode(name: str, **settings: Any) -> CollectionMode:
    """The mode called ``name`` (or a former name of it, :data:`OLD_MODE_NAMES`) with the algorithm's
    settings (see :class:`CollectionMode`)."""
    name = canonical_mode_name(name)
    if name not in MODES:
        raise ValueError(f"unknown group_mode {name!r}; choose one of {list(MODES)}")
    return MODES[name](**settings)


__all__ = [
    "DEFAULT_GROUP_SIZE",
    "MODES",
    "OLD_MODE_NAMES",
    "VIEWS",
    "Collector",
    "CollectionMode",
    "CompletionTokens",
    "EnvTraits",
    "ExactMode",
    "ExactView",
    "FastCollector",
    "GroupView",
    "ModeCollector",
    "MultiTurnMode",
    "SampleView",
    "SequenceMode",
    "SingleMode",
    "TextMode",
    "TokenMode",
    "View",
    "canonical_mode_name",
    "make_mode",
]
