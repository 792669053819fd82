"""The runs whose first updates ``tests/tpo_agents/test_pinned.py`` pins (regenerate:
``python -m tests.pinned_runs``).

Each run trains a small copy of a paper setting and records, per update, the task error before it
(``rollout/task_error``), the loss and the first epoch's gradient norm. The numbers in
``tests/data/pinned_updates.json`` (the first :data:`N_PINNED` updates of each run) pin today's behaviour:
a refactor must reproduce them for the same seeds, within :func:`tolerance`. The exact-mode runs
(no sampling) are still those of the code before the core was reshaped into mode objects; the sampled
runs were re-pinned when sampling became inverse-CDF (one uniform per draw,
``tpo_agents.policies.base.multinomial_rows``), which changes every sampled action for a given seed but not
the distribution the actions are drawn from.

Why only the first few updates, and why a tolerance: training is chaotic, so the round-off of a
machine's float kernels (AVX2, AVX-512, or torch's scalar ``default`` kernels, chosen with
``ATEN_CPU_CAPABILITY``) grows update by update, and a transformer's PPO ratio that lies at the clip
boundary is clipped on one machine and not on another, and a sampled action whose uniform lies within
round-off of a boundary of the inverse CDF is drawn differently (``token/grpo``'s update 4 under the
``default`` kernels: hence 4 pinned updates). Update 0 is computed from the initial parameters, so it
differs between kernels only by the order of float sums; the later pinned updates differ by what a few
updates of round-off do. Bitwise reproducibility on one machine is tested apart
(the same seed twice gives identical numbers over :data:`N_UPDATES` updates).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch as th
from stable_baselines3.common.logger import KVWriter, Logger

import tpo_gym  # noqa: F401  (registers the envs)
from tpo_agents.zoo.registry import get_algo

N_UPDATES = 20
"""Updates of the determinism runs (same seed twice, same machine: identical numbers)."""
N_PINNED = 4
"""Updates pinned against ``pinned_updates.json`` (on any CPU's kernels, within :func:`tolerance`)."""
FIRST_RTOL = 2e-5
"""Relative tolerance of update 0 (the initial parameters: only the order of float sums differs)."""
LATER_RTOL = 1e-3
"""Relative tolerance of updates 1 .. N_PINNED - 1 (the worst seen across kernels: 9.1e-5, ``token/ppo``)."""
ATOL = 1e-5
"""Absolute tolerance of every pinned value: a batch without reward signal has a zero gradient in exact
arithmetic, whose norm is rounding noise (seen from 1e-7 to 1.5e-6 across kernels and matmul layouts)."""
KEYS = ("rollout/task_error", "train/loss", "train/grad_norm")
PINNED = Path(__file__).parent / "data" / "pinned_updates.json"

TOKENS = dict(sequence_length=5, vocab_size=2, reward="bag_of_tokens")
TERMINAL = dict(sequence_length=4, vocab_size=2, reward="terminal")
TRANSFORMER = dict(learning_rate=1e-3, batch_size=8, group_size=4)
TOKEN, SINGLE, SEQUENCE = ({**TRANSFORMER, "group_mode": mode} for mode in ("token", "single", "sequence"))
REVERSAL = "TPO/TokenReversal-v0"
MNIST = dict(learning_rate=1e-3, batch_size=16, n_epochs=1, group_mode="single")
BANDIT = dict(learning_rate=0.1, batch_size=100, n_epochs=1)
ARMS, ONE_CONTEXT = {"n_arms": 10}, {**BANDIT, "group_mode": "single"}

#: name -> (algo, env id, env kwargs, policy, algorithm kwargs)
RUNS: dict[str, tuple[str, str, dict, str, dict]] = {
    "token/tpo": ("tpo", REVERSAL, TOKENS, "TransformerPolicy", TOKEN),
    "token/grpo": ("grpo", REVERSAL, TOKENS, "TransformerPolicy", TOKEN),
    "token/dg": ("dg", REVERSAL, TOKENS, "TransformerPolicy", SINGLE),
    "token/ppo": ("ppo", REVERSAL, TOKENS, "TransformerPolicy", SINGLE),
    "sequence/tpo": ("tpo", REVERSAL, TERMINAL, "TransformerPolicy", SEQUENCE),
    "sequence/grpo": ("grpo", REVERSAL, TERMINAL, "TransformerPolicy", SEQUENCE),
    "mnist/tpo": ("tpo", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "baseline": "expected"}),
    "mnist/grpo": ("grpo", "TPO/MNISTBandit-v0", {}, "MlpPolicy", MNIST),
    "mnist/dg": ("dg", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "baseline": "expected"}),
    "mnist/pg": ("pg", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "baseline": "expected"}),
    "mnist/group_pg": ("group_pg", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "baseline": "expected"}),
    "mnist/ce": ("ce", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "group_mode": "exact"}),
    "bandit/tpo": ("tpo", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", {**ONE_CONTEXT, "baseline": 0.5}),
    "bandit/grpo": ("grpo", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", ONE_CONTEXT),
    "bandit/dg": ("dg", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", {**ONE_CONTEXT, "baseline": 0.5}),
    "bandit/pg": ("pg", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", {**ONE_CONTEXT, "baseline": 0.5}),
    **{
        f"exact/{algo}": (
            algo, "TPO/MultiContextBandit-v0", {"n_contexts": 20, "n_arms": 5}, "TabularPolicy",
            {**BANDIT, "group_mode": "exact", "policy_kwargs": {"init": "normal"}},
        )
        for algo in ("tpo", "grpo", "dg", "pg", "ce")
    },
}


class _Recorder(KVWriter):
    """Keeps the pinned keys of every logger dump."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.rows.append({key: float(key_values[key]) for key in KEYS if key in key_values})


def tolerance(update: int) -> float:
    """The relative tolerance of pinned update ``update`` (0-based): :data:`FIRST_RTOL` for update 0,
    :data:`LATER_RTOL` after it."""
    return FIRST_RTOL if update == 0 else LATER_RTOL


def run(name: str, seed: int = 0, n_updates: int = N_PINNED) -> dict[str, list[float]]:
    """The first ``n_updates`` updates of run ``name``: each pinned key as a list."""
    th.set_num_threads(1)
    algo, env_id, env_kwargs, policy, kwargs = RUNS[name]
    model = get_algo(algo)(policy, gym.make(env_id, **env_kwargs), seed=seed, device="cpu", **kwargs)
    recorder = _Recorder()
    model.set_logger(Logger(folder=None, output_formats=[recorder]))
    n_envs = model.env.num_envs
    steps_per_update = n_envs * (env_kwargs.get("sequence_length", 1) if "Token" in env_id else 1)
    model.learn(total_timesteps=n_updates * steps_per_update)
    rows = recorder.rows[:n_updates]
    assert len(rows) == n_updates, (name, len(rows))
    return {key: [row[key] for row in rows] for key in KEYS if key in rows[0]}


if __name__ == "__main__":
    names = sys.argv[1:] or list(RUNS)
    results = json.loads(PINNED.read_text()) if PINNED.exists() else {}
    for name in names:
        results[name] = run(name)
        print(name, {k: v[:3] for k, v in results[name].items()})
    PINNED.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
