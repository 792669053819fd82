"""Saved models: the SB3 zip's path and data, zips of the package's former names, and which class saved one.

A zip records its algorithm's attributes as JSON (``data``): :func:`saved_data` reads them. Zips saved
while the package was imported as ``agents`` load through :func:`objects_under_old_name`, zips saved with
a mode's former name through :func:`mode_under_current_name`. :func:`check_saved_by` refuses a zip that
another class saved, telling the grouped algorithms apart by the classes of :data:`ALGORITHMS`.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import os
import pickle
import re
import zipfile
from typing import Any

from tpo_agents.modes import canonical_mode_name

OLD_IMPORT_NAME = "agents"
"""The package's import name in zips saved before it became ``tpo_agents``."""

#: The grouped algorithms whose zips :func:`saved_by` tells apart, as ``"module:Class"``. Imported on
#: first use: each class's module imports this one (through its base class ``load``).
ALGORITHMS: tuple[str, ...] = (
    "tpo_agents.ce:CE",
    "tpo_agents.dg:DG",
    "tpo_agents.grpo:GRPO",
    "tpo_agents.pg:PG",
    "tpo_agents.ppo:PPO",
    "tpo_agents.tpo:TPO",
    "tpo_agents.pg:GroupPG",
)


def algorithm_classes() -> list[type]:
    """The classes of :data:`ALGORITHMS`, in its order."""
    classes = []
    for entry in ALGORITHMS:
        module, name = entry.split(":")
        classes.append(getattr(importlib.import_module(module), name))
    return classes


def model_zip_path(path: Any) -> Any:
    """``path`` as a model's ``load`` should open it: ``<path>.zip`` when ``path`` does not end in
    ``.zip``, is not a file, and ``<path>.zip`` is one (so ``TPO.load("logs/tpo/TPO-TokenReversal-v0_1/
    TPO-TokenReversal-v0")`` loads the zip, not the same-named folder of config files); else ``path``."""
    if isinstance(path, str | os.PathLike):
        text = os.fspath(path)
        if not text.endswith(".zip") and not os.path.isfile(text) and os.path.isfile(text + ".zip"):
            return text + ".zip"
    return path


def saved_data(path: Any) -> dict[str, Any] | None:
    """The ``data`` (attributes, as JSON) of the SB3 zip at ``path`` (a path or an open binary file), or
    None where it cannot be read (SB3's ``load`` then says why)."""
    try:
        start = path.tell() if hasattr(path, "tell") else None
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
        if start is not None:
            path.seek(start)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return data if isinstance(data, dict) else None


class _RenamedModuleUnpickler(pickle.Unpickler):
    """Unpickles a reference to ``agents.<module>`` (the import name before ``tpo_agents``) as the same
    object of ``tpo_agents.<module>``."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == OLD_IMPORT_NAME:
            module = "tpo_agents" + module[len(OLD_IMPORT_NAME):]
        return super().find_class(module, name)


def objects_under_old_name(data: dict[str, Any]) -> dict[str, Any]:
    """The values of a zip's ``data`` pickled while the package was imported as ``agents`` (a zip's
    ``policy_class``), unpickled with their modules under ``tpo_agents``: ``load``'s ``custom_objects``, so
    that such zips load where ``agents`` is another package (the OpenAI Agents SDK) or none."""
    objects = {}
    for key, value in data.items():
        if not (isinstance(value, dict) and ":serialized:" in value):
            continue
        raw = base64.b64decode(value[":serialized:"].encode())
        if re.search(rb"(?<![\w.])" + OLD_IMPORT_NAME.encode() + rb"\.", raw):
            objects[key] = _RenamedModuleUnpickler(io.BytesIO(raw)).load()
    return objects


def mode_under_current_name(data: dict[str, Any]) -> dict[str, Any]:
    """``{"group_mode": <current name>}`` where a zip's ``data`` holds a mode's former name (a zip saved
    with ``group_mode="population"``, now ``exact``: :data:`tpo_agents.modes.OLD_MODE_NAMES`), else
    ``{}``: ``load``'s ``custom_objects``, so that such zips load as they did, without a warning."""
    saved = data.get("group_mode")
    current = canonical_mode_name(saved)
    return {"group_mode": current} if current != saved else {}


def saved_attributes(path: Any) -> frozenset[str] | None:
    """The attribute names in the ``data`` of the SB3 zip at ``path``, or None where it cannot be read."""
    data = saved_data(path)
    return None if data is None else frozenset(data)


def saved_by(attributes: frozenset[str]) -> tuple[frozenset[str], list[type]]:
    """Which grouped algorithm (:data:`ALGORITHMS`) saved a zip holding ``attributes``: the algorithms'
    own hyperparameters it holds, and the classes that hold exactly those (DG and GroupPG, PG and CE
    hold the same, so a zip of one loads as the other)."""
    classes: list[Any] = algorithm_classes()
    held = attributes & frozenset().union(*(klass.own_hyperparameters() for klass in classes))
    return held, [klass for klass in classes if klass.holds_own_hyperparameters(held)]


def check_saved_by(algo_class: Any, path: Any, data: dict[str, Any]) -> None:
    """Refuse, with a one-line ``ValueError`` naming both classes, a zip that ``algo_class`` did not
    save: a zip of another grouped algorithm (its own hyperparameters differ: a TPO zip holds ``eta`` and
    ``anchor``, a GRPO zip ``beta``, ``clip_range`` and ``mask_zero_variance``) or of another library's
    algorithm (no ``group_mode``); a zip that records its class (``algorithm_class``) is refused by that
    name, which also tells apart the algorithms with the same hyperparameters (DG and GroupPG, PG and CE).
    ``data`` is the zip's :func:`saved_data`; ``path`` names it in the message."""
    attributes, name = frozenset(data), algo_class.__name__
    if "group_mode" not in attributes:
        raise ValueError(f"cannot load {path} as {name}: it was saved by an algorithm that is not a grouped "
                         "algorithm (it holds no group_mode): load it with its own class")
    saver = data.get("algorithm_class")
    if isinstance(saver, str) and saver != name:
        raise ValueError(f"cannot load {path} as {name}: it was saved by {saver}; load it with {saver}.load")
    held, classes = saved_by(attributes)
    if not algo_class.holds_own_hyperparameters(held):
        saver = " or ".join(klass.__name__ for klass in classes) or "another algorithm"
        holds = ", ".join(sorted(held)) or "none"
        wanted = ", ".join(sorted(algo_class.identifying_hyperparameters())) or "none"
        raise ValueError(f"cannot load {path} as {name}: it was saved by {saver} (it holds {holds} of the "
                         f"grouped algorithms' own hyperparameters; a {name} zip holds {wanted})")


def prepare_load(algo_class: type, path: Any, custom_objects: dict[str, Any] | None,
                 kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any] | None, dict[str, Any]]:
    """``load``'s path, ``custom_objects`` and keyword arguments for SB3's ``load``: the zip's path
    (:func:`model_zip_path`), the zip checked to be ``algo_class``'s (:func:`check_saved_by`; a zip that
    cannot be read is left to SB3, which says why), the objects of former names
    (:func:`objects_under_old_name`, :func:`mode_under_current_name`), and a former mode name given
    as ``group_mode`` taken as the current one (with a ``FutureWarning`` when passed as a keyword)."""
    path = model_zip_path(path)
    data = saved_data(path)
    if data is not None:
        check_saved_by(algo_class, path, data)
        former = {**objects_under_old_name(data), **mode_under_current_name(data)}
        custom_objects = {**former, **(custom_objects or {})}
    if custom_objects and "group_mode" in custom_objects:
        custom_objects = {**custom_objects, "group_mode": canonical_mode_name(custom_objects["group_mode"])}
    if "group_mode" in kwargs:
        kwargs = {**kwargs, "group_mode": canonical_mode_name(kwargs["group_mode"], warn=True)}
    return path, custom_objects, kwargs
