"""Export an env's tasks as verl's RL parquet files (``train.parquet``, ``test.parquet``): a text env's
splits, or a multi-turn env's tasks with the tool config that plays them (``tools.yaml``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .checks import ENV_TOOL
from .reward import SPLITS

__all__ = ["dataset_rows", "environment_rows", "export_dataset", "tools_config"]

TASKS = 256
"""Tasks per split of an exported multi-turn env (``--tasks``)."""


def _env_ids() -> tuple[str, ...]:
    """The env ids the exporter takes: the text envs and the multi-turn envs with a tool set."""
    import tpo_gym
    from tpo_agents.integrations.env_tools import TOOL_SETS

    return (*tpo_gym.TEXT_ENV_IDS, *TOOL_SETS)


def _env_kwargs(env_id: str, env_kwargs: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    import gymnasium as gym

    short = env_id.removeprefix("TPO/").removesuffix("-v0")
    full_id = f"TPO/{short}-v0"
    if full_id not in _env_ids():
        raise ValueError(f"--env {env_id!r} is neither a text env nor a multi-turn env with tools: use one "
                         f"of {', '.join(_env_ids())}")
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
    import tpo_gym
    from tpo_gym.envs.text import ReasoningGymTask

    full_id, kwargs = _env_kwargs(env_id, env_kwargs)
    if full_id not in tpo_gym.TEXT_ENV_IDS:
        raise ValueError(f"--env {env_id!r} is a multi-turn env: its rows are environment_rows'")
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


def environment_rows(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, system_prompt: str | None = None,
    tasks: int = TASKS,
) -> dict[str, list[dict[str, Any]]]:
    """verl's RL rows of a multi-turn env: ``tasks`` tasks per split, drawn with seed 0 (train) and 1
    (test) as :func:`~tpo_agents.integrations.env_tools.task_prompts` draws them (an env with fewer tasks
    than that repeats them, in both splits).

    Each row: ``data_source`` (``tpo_gym/<env>``), ``prompt`` (an optional system message, then the env's
    prompt and its tool set's instruction), ``ability`` (``agent``), ``agent_name`` (``tool_agent``: verl's
    ``ToolAgentLoop``), ``reward_model`` ``{"style": "rule", "ground_truth": str}`` and ``extra_info``
    ``{"split", "index", "env_id", "env_kwargs" (JSON), "context", "tools_kwargs"}``, where ``tools_kwargs``
    gives every tool of the set the task's context (``{tool: {"create_kwargs": {"context": c}}}``).
    """
    import gymnasium as gym

    from tpo_agents.integrations.env_tools import TOOL_SETS, task_prompts

    full_id, kwargs = _env_kwargs(env_id, env_kwargs)
    if full_id not in TOOL_SETS:
        raise ValueError(f"--env {env_id!r} is not a multi-turn env with tools: use one of "
                         f"{', '.join(TOOL_SETS)}")
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"--tasks {tasks!r}: expected an integer >= 1")
    tools, task = TOOL_SETS[full_id], gym.make(full_id, **kwargs).unwrapped.task
    kwargs_json = json.dumps(kwargs, sort_keys=True)
    source = f"tpo_gym/{full_id.removeprefix('TPO/').removesuffix('-v0')}"
    prefix = [{"role": "system", "content": system_prompt}] if system_prompt else []
    rows: dict[str, list[dict[str, Any]]] = {}
    for seed, split in enumerate(SPLITS):
        rows[split] = [
            {
                "data_source": source,
                "prompt": [*prefix, {"role": "user", "content": text}],
                "ability": "agent",
                "agent_name": "tool_agent",
                "reward_model": {"style": "rule", "ground_truth": str(task.ground_truth(context))},
                "extra_info": {"split": split, "index": i, "env_id": full_id, "env_kwargs": kwargs_json,
                               "context": context,
                               "tools_kwargs": {name: {"create_kwargs": {"context": context}}
                                                for name in tools.tools}},
            }
            for i, (context, text) in enumerate(task_prompts(tools, tasks, seed, **kwargs))
        ]
    return rows


def tools_config(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """verl's tool config of a multi-turn env (``multi_turn.tool_config_path``): one
    :class:`~tpo_agents.integrations.verl.tools.EnvTool` per tool of its set, the env made with
    ``env_kwargs`` as :func:`environment_rows` makes it."""
    from tpo_agents.integrations.env_tools import TOOL_SETS

    full_id, kwargs = _env_kwargs(env_id, env_kwargs)
    return {"tools": [{"class_name": ENV_TOOL,
                       "config": {"type": "native", "env_id": full_id, "tool": name, "env_kwargs": kwargs}}
                      for name in TOOL_SETS[full_id].tools]}


def export_dataset(
    env_id: str, out_dir: str | os.PathLike[str], env_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None, tasks: int | None = None,
) -> dict[str, Path]:
    """Write :func:`dataset_rows` (a text env) or :func:`environment_rows` (a multi-turn env, ``tasks`` per
    split, default :data:`TASKS`, and :func:`tools_config` as ``out_dir/tools.yaml``) as
    ``out_dir/train.parquet`` and ``out_dir/test.parquet`` (pyarrow, installed with verl); returns the
    paths by name (``train``, ``test``, ``tools``). Checks everything before writing anything: ``tasks``
    with a text env is an error (its splits are the env's own: ``size`` / ``eval_size`` kwargs)."""
    from tpo_agents.integrations.env_tools import TOOL_SETS

    multi_turn = _env_kwargs(env_id, env_kwargs)[0] in TOOL_SETS
    if tasks is not None and not multi_turn:
        raise ValueError(f"--tasks {tasks!r}: only a multi-turn env ({', '.join(TOOL_SETS)}) takes it; a "
                         "text env exports its own splits (their sizes: --env-kwargs size:N eval_size:N)")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ModuleNotFoundError("writing parquet needs pyarrow: pip install 'tpo-gym[verl]' or "
                                  "pyarrow") from err
    from tpo_agents.files import atomic_write

    if multi_turn:
        rows = environment_rows(env_id, env_kwargs, system_prompt, TASKS if tasks is None else tasks)
        tools = tools_config(env_id, env_kwargs)
    else:
        rows, tools = dataset_rows(env_id, env_kwargs, system_prompt), None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, split_rows in rows.items():
        paths[split] = out / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(split_rows), paths[split])
    if tools is not None:
        import yaml

        paths["tools"] = out / "tools.yaml"
        text = yaml.safe_dump(tools, sort_keys=False)
        atomic_write(paths["tools"], lambda f: f.write(text.encode()))
    return paths
