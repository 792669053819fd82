"""Export a text env's splits as verl's RL parquet files (``train.parquet``, ``test.parquet``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .reward import SPLITS

__all__ = ["dataset_rows", "export_dataset"]


def _env_kwargs(env_id: str, env_kwargs: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    import gymnasium as gym

    import tpo_gym

    short = env_id.removeprefix("TPO/").removesuffix("-v0")
    full_id = env_id if env_id in tpo_gym.TEXT_ENV_IDS else f"TPO/{short}-v0"
    if full_id not in tpo_gym.TEXT_ENV_IDS:
        raise ValueError(f"--env {env_id!r} is not a text env: use one of {', '.join(tpo_gym.TEXT_ENV_IDS)}")
    kwargs = {**gym.spec(full_id).kwargs, **(env_kwargs or {})}
    if "split" in kwargs:
        raise ValueError(f"env kwarg split={kwargs['split']!r}: the exporter writes both splits (train and "
                         f"test)")
    try:
        json.dumps(kwargs)
    except TypeError as err:
        raise ValueError(f"env kwargs {kwargs!r} must be JSON values (numbers, strings, lists, dicts): "
                         f"{err}") from None
    return full_id, kwargs


def dataset_rows(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, system_prompt: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """verl's RL rows of a text env's splits: ``{"train": [...], "test": [...]}`` (the env's own splits).

    Each row: ``data_source`` (``tpo_gym/<dataset>``), ``prompt`` (chat messages: an optional system
    message, then the env's prompt as the user message), ``ability`` (``reasoning``),
    ``reward_model`` ``{"style": "rule", "ground_truth": str | None}`` and ``extra_info``
    ``{"split", "index" (item of the split), "env_id", "env_kwargs" (JSON of the env's kwargs),
    "reward"}``, all that :func:`compute_score` needs to rebuild the item.
    """
    from tpo_gym.envs.text import ReasoningGymTask

    full_id, kwargs = _env_kwargs(env_id, env_kwargs)
    kwargs_json = json.dumps(kwargs, sort_keys=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    for split, env_split in SPLITS.items():
        task = ReasoningGymTask(split=env_split, **kwargs)
        prefix = [{"role": "system", "content": system_prompt}] if system_prompt else []
        rows[split] = [
            {
                "data_source": f"tpo_gym/{task.name}",
                "prompt": [*prefix, {"role": "user", "content": task.prompt(i)}],
                "ability": "reasoning",
                "reward_model": {"style": "rule", "ground_truth": _ground_truth(task.entry(i))},
                "extra_info": {"split": split, "index": i, "env_id": full_id, "env_kwargs": kwargs_json,
                               "reward": task.reward},
            }
            for i in range(task.num_items)
        ]
    return rows


def _ground_truth(entry: Mapping[str, Any]) -> str | None:
    return None if entry["answer"] is None else str(entry["answer"])


def export_dataset(
    env_id: str, out_dir: str | os.PathLike[str], env_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> dict[str, Path]:
    """Write :func:`dataset_rows` as ``out_dir/train.parquet`` and ``out_dir/test.parquet`` (pyarrow,
    installed with verl); returns ``{"train": path, "test": path}``."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ModuleNotFoundError("writing parquet needs pyarrow: pip install 'tpo-gym[verl]' or "
                                  "pyarrow") from err
    rows = dataset_rows(env_id, env_kwargs, system_prompt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, split_rows in rows.items():
        paths[split] = out / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(split_rows), paths[split])
    return paths
