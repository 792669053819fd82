"""verl's ``custom_reward_function`` for the exported envs: :func:`compute_score` (text envs) and
:func:`episode_score` (multi-turn envs played through :class:`~tpo_agents.integrations.verl.tools.EnvTool`).

``reward.custom_reward_function.path=pkg://tpo_agents.integrations.verl`` and ``name=compute_score`` (or
``episode_score``); for ``compute_score`` each process rebuilds a split's reasoning-gym task once (cached
under a lock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["EPISODE", "SPLITS", "compute_score", "episode_score"]

_TASKS: dict[tuple[str, str], Any] = {}
_TASKS_LOCK = threading.Lock()
SPLITS = {"train": "train", "test": "test"}
EPISODE = "tpo_episode"
"""The key of a trajectory's episode in ``extra_info`` (verl merges the agent loop's ``extra_fields`` in)."""


def _task(env_kwargs_json: str, split: str) -> Any:
    """The :class:`tpo_gym.envs.text.ReasoningGymTask` of a parquet row, built once per process."""
    from tpo_gym.envs.text import ReasoningGymTask

    key = (env_kwargs_json, split)
    with _TASKS_LOCK:
        if key not in _TASKS:
            _TASKS[key] = ReasoningGymTask(split=SPLITS[split], **json.loads(env_kwargs_json))
        return _TASKS[key]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | None,
    extra_info: Mapping[str, Any] | None = None,
    reward: str | None = None,
    **unused: Any,
) -> dict[str, float]:
    """verl ``custom_reward_function``: score one completion of an exported text-env row.

    Rebuilds the reasoning-gym item from ``extra_info`` (``env_kwargs``, ``split``, ``index``, written
    by :func:`export_dataset`) and returns :func:`tpo_gym.envs.text.score_completion`'s score: the
    dataset's own ``score_answer`` on the answer its format reads (the last ``<answer>...</answer>``;
    GSM8K: ``#### N`` by default; 0 without one), or 1/0 as that is >= 0.99 with ``reward="binary"``
    (``reward`` overrides the exported mode; verl passes it from
    ``reward.custom_reward_function.reward_kwargs``). Returns ``{"score", "format_ok", "is_success"}``
    (verl logs the extra keys). Other keywords verl may pass are ignored. Raises a
    one-line ``ValueError`` for a row that was not exported by this module or whose ground truth
    does not match the rebuilt item.
    """
    from tpo_gym.envs.text import REWARDS, SUCCESS_THRESHOLD, score_completion

    info = dict(extra_info or {})
    missing = [key for key in ("env_kwargs", "split", "index") if info.get(key) is None]
    if missing:
        raise ValueError(f"extra_info lacks {', '.join(missing)} (data_source={data_source!r}): export the "
                         f"data with `python -m tpo_agents.integrations.verl export`")
    split = info["split"]
    if split not in SPLITS:
        raise ValueError(f"extra_info split={split!r}: expected 'train' or 'test'")
    env_kwargs = info["env_kwargs"]
    mode = reward or info.get("reward") or json.loads(env_kwargs).get("reward", "native")
    if mode not in REWARDS:
        raise ValueError(f"reward={mode!r}: use one of {', '.join(REWARDS)}")
    task = _task(env_kwargs, split)
    entry = task.entry(int(info["index"]))
    expected = None if entry["answer"] is None else str(entry["answer"])
    if ground_truth is not None and expected is not None and str(ground_truth) != expected:
        raise ValueError(f"ground truth {str(ground_truth)[:60]!r} of {split} item {info['index']} does not "
                         f"match the rebuilt reasoning-gym item {expected[:60]!r}: re-export the data")
    score, _, format_ok = score_completion(task.dataset, entry, solution_str, mode)
    return {"score": float(score), "format_ok": float(format_ok),
            "is_success": float(score >= SUCCESS_THRESHOLD)}


def episode_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | None,
    extra_info: Mapping[str, Any] | None = None,
    **unused: Any,
) -> dict[str, float]:
    """verl ``custom_reward_function`` of a multi-turn env's rows: the return of the trajectory's episode.

    ``extra_info`` holds the row's ``env_id`` (written by the exporter) and, once a tool was called, the
    episode :class:`~tpo_agents.integrations.verl.tools.EnvTool` kept under :data:`EPISODE` (verl's reward
    managers merge the agent loop's ``extra_fields`` into it). A trajectory that called no tool scores 0.
    Returns ``{"score", "is_success" (return >= 1: solved), "env_turns" (tool calls the env played)}``.
    Raises a one-line ``ValueError`` for a row that was not exported for a multi-turn env, or an episode of
    another env or task than the row's.
    """
    info = dict(extra_info or {})
    env_id = info.get("env_id")
    if env_id is None or "context" not in info:
        raise ValueError(f"extra_info lacks env_id or context (data_source={data_source!r}): export the "
                         f"data with `python -m tpo_agents.integrations.verl export --env <multi-turn env>`")
    episode = info.get(EPISODE)
    if not episode:
        return {"score": 0.0, "is_success": 0.0, "env_turns": 0.0}
    if (episode["env_id"], int(episode["context"])) != (env_id, int(info["context"])):
        raise ValueError(f"the episode is of {episode['env_id']} task {episode['context']}, the row of "
                         f"{env_id} task {info['context']}")
    score = float(episode["return"])
    return {"score": score, "is_success": float(score >= 1.0), "env_turns": float(len(episode["calls"]))}
