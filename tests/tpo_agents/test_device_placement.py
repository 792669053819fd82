"""Every tensor the learn loop builds lives on the model's device: with torch's default device set to
``meta`` while a CPU model learns, a tensor made without ``device=`` lands on ``meta`` and the next
operation that mixes it with the model's tensors, or reads its data, fails. So this CPU test finds what
would put a tensor on the CPU beside a CUDA model (``device="cuda"``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch as th

import tpo_gym  # noqa: F401
from tpo_agents.zoo.registry import make_agent

th.set_num_threads(1)

TINY_TRANSFORMER = {"n_layers": 1, "d_model": 8, "n_heads": 1}
BANDIT = {"n_contexts": 4, "n_arms": 3}
RUNS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    **{f"{algo} table exact": (algo, "TabularPolicy", "TPO/MultiContextBandit-v0",
                                    {"env_kwargs": BANDIT, "group_mode": "exact"})
       for algo in ("tpo", "grpo", "dg", "pg", "ce")},
    **{f"{algo} table single": (algo, "TabularPolicy", "TPO/KArmedBandit-v0",
                                {"env_kwargs": {"n_arms": 5}, "group_mode": "single", "batch_size": 4})
       for algo in ("tpo", "grpo", "dg", "pg", "group_pg", "ppo")},
    "tpo table single, several contexts": ("tpo", "TabularPolicy", "TPO/MultiContextBandit-v0",
                                           {"env_kwargs": BANDIT, "group_mode": "single", "batch_size": 4}),
    **{f"{algo} mnist single": (algo, "MlpPolicy", "TPO/MNISTBandit-v0",
                                {"group_mode": "single", "batch_size": 4, "baseline": "expected"})
       for algo in ("tpo", "dg", "pg")},
    "ppo mnist single": ("ppo", "MlpPolicy", "TPO/MNISTBandit-v0", {"group_mode": "single", "batch_size": 4}),
    "ce mnist exact": ("ce", "MlpPolicy", "TPO/MNISTBandit-v0",
                            {"group_mode": "exact", "batch_size": 4}),
    **{f"{algo} tokens": (algo, "TransformerPolicy", "TPO/TokenReversal-v0",
                          {"batch_size": 2, "group_size": 2, "policy_kwargs": TINY_TRANSFORMER})
       for algo in ("tpo", "grpo", "dg", "ppo")},
    "tpo terminal sequences": ("tpo", "TransformerPolicy", "TPO/TokenReversal-v0",
                               {"batch_size": 2, "group_size": 2, "policy_kwargs": TINY_TRANSFORMER,
                                "env_kwargs": {"reward": "terminal", "sequence_length": 3}}),
}


@pytest.mark.parametrize("n_seeds", [1, 2])
@pytest.mark.parametrize("name", sorted(RUNS))
def test_learning_makes_no_tensor_on_the_default_device(name: str, n_seeds: int) -> None:
    algo, policy, env, settings = RUNS[name]
    model = make_agent(algo, policy, env, n_seeds=n_seeds, seed=0, **settings)
    with th.device("meta"):
        model.learn(n_iterations=2, log_interval=1)  # the generic or the fused path, diagnostics logged
    assert all(p.device.type == "cpu" for p in model.policy.parameters())
