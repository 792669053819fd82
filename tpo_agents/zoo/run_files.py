"""Read the YAML files of a run folder (``<run>/<Env>/config.yml`` and ``args.yml``), ours or the RL Zoo's.

Our ``train.py`` writes plain YAML. rl_zoo3 writes ``yaml.dump(OrderedDict(...))``, which carries the
tag ``!!python/object/apply:collections.OrderedDict`` over a list of ``[key, value]`` pairs, and
``yaml.safe_load`` refuses it. :class:`RunFileLoader` is ``yaml.SafeLoader`` plus that one tag (and
``!!python/tuple``), built as plain data: it constructs no other Python object.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from tpo_agents.zoo.hyperparams import ConfigError

ORDERED_DICT_TAG = "tag:yaml.org,2002:python/object/apply:collections.OrderedDict"
TUPLE_TAG = "tag:yaml.org,2002:python/tuple"


class RunFileError(ConfigError):
    """A run file that cannot be read: the message names the file and the problem, on one line."""


class RunFileLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads rl_zoo3's ``OrderedDict`` tag (as a ``dict``) and tuples."""


def _ordered_dict(loader: RunFileLoader, node: yaml.Node) -> dict[Any, Any]:
    """rl_zoo3's ``OrderedDict`` as a dict: ``[[[k, v], ...]]`` (or ``{args: .., dictitems: ..}``)."""
    if isinstance(node, yaml.SequenceNode):
        args, items = loader.construct_sequence(node, deep=True), {}
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
        args, items = value.get("args") or [], value.get("dictitems") or {}
    else:
        raise yaml.constructor.ConstructorError(None, None, "an OrderedDict needs a list of pairs",
                                                node.start_mark)  # fmt: skip
    pairs = args[0] if args else []
    if isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs):
        return {**dict(pairs), **dict(items)}
    raise yaml.constructor.ConstructorError(None, None, "an OrderedDict needs a list of [key, value] pairs",
                                            node.start_mark)  # fmt: skip


def _tuple(loader: RunFileLoader, node: yaml.Node) -> tuple[Any, ...]:
    return tuple(loader.construct_sequence(node, deep=True))


RunFileLoader.add_constructor(ORDERED_DICT_TAG, _ordered_dict)
RunFileLoader.add_constructor(TUPLE_TAG, _tuple)


def read_run_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping in the run file ``path`` (``{}`` if empty); a bad file raises :class:`RunFileError`."""
    try:
        with open(path) as f:
            data = yaml.load(f, Loader=RunFileLoader)  # noqa: S506  (RunFileLoader is a SafeLoader)
    except yaml.YAMLError as err:
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise RunFileError(f"cannot read {path}{where}: {problem}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunFileError(f"{path} must hold a mapping of names to values, got a {type(data).__name__}")
    return data
