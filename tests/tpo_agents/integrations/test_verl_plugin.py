"""The verl plugin (``tpo_agents.integrations.verl``): estimator and loss against ``tpo_agents.losses``, the
normalisation over micro-batches and data-parallel ranks, the one warning when most loss calls have no
signal, the config validator, the reward function and the parquet exporter. Without verl installed the
pure functions are tested; with verl (the ``verl`` extra, see ``.ci/verl``) the same maths is checked
through verl's own registries, its ``ppo_loss`` and its micro-batching, and the shipped config is composed
with hydra."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tpo_agents import losses as L
from tpo_agents.integrations import verl as tv
from tpo_agents.integrations.verl import loss as verl_loss

torch.set_num_threads(1)
# verl lists the training engines it cannot import (torchtitan, megatron, ...) when its workers load
pytestmark = pytest.mark.filterwarnings("ignore:.* engine is not available:UserWarning")

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "configs" / "verl" / "tpo_qwen3_1.7b.yaml"
HAS_VERL = importlib.util.find_spec("verl") is not None
HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None
HAS_REASONING_GYM = importlib.util.find_spec("reasoning_gym") is not None
needs_verl = pytest.mark.skipif(not HAS_VERL, reason="verl is not installed (extra verl, see .ci/verl)")
needs_pyarrow = pytest.mark.skipif(not HAS_PYARROW, reason="pyarrow is not installed (it comes with verl)")
needs_rg = pytest.mark.skipif(not HAS_REASONING_GYM, reason="reasoning-gym is not installed (extra llm)")

K = 4
SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0,   0.0, 0.0, 0.0, 0.0,   0.5, 0.2, 0.9, 0.1,
                       1.0, 1.0, 0.0, 1.0,   0.3, 0.3, 0.3, 0.3,   0.01, 0.0, 0.0, 0.0])
G = SCORES.numel() // K
T = 6


def make_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """A hand-made verl batch: G groups of K contiguous rows, ragged response masks, terminal rewards."""
    g = torch.Generator().manual_seed(seed)
    n = G * K
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(1)).float()
    rewards = torch.zeros(n, T)
    rewards[torch.arange(n), lengths - 1] = SCORES
    old = -torch.rand(n, T, generator=g).mul(3.0) * mask
    new = (old + 0.2 * torch.randn(n, T, generator=g)) * mask
    uids = np.repeat(np.array([f"prompt-{j}" for j in range(G)], dtype=object), K)
    return {"mask": mask, "rewards": rewards, "old": old, "new": new, "uids": uids}


def actor_config(eta: float | None = None, logscore: str | None = None, **overrides: object) -> dict:
    """verl's actor config as the loss reads it; eta and logscore go to the policy-loss node."""
    policy_loss = {"loss_mode": "tpo"}
    if eta is not None:
        policy_loss["tpo_eta"] = eta
    if logscore is not None:
        policy_loss["tpo_logscore"] = logscore
    config = {"rollout_n": K, "use_dynamic_bsz": False, "shuffle": False, "ppo_micro_batch_size_per_gpu": K,
              "global_batch_info": {}, "policy_loss": policy_loss}
    config.update(overrides)
    return config


def reference(batch: dict, log_prob: torch.Tensor, eta: float = 1.0, logscore: str = "mean") -> torch.Tensor:
    """tpo_agents.losses on the raw scores: tpo_loss(L_theta, tpo_target(L_old, s, eta)), mean over groups."""
    m = batch["mask"]
    old = L.sequence_logscores(batch["old"], m, logscore).view(G, K)
    new = L.sequence_logscores(log_prob, m, logscore).view(G, K)
    return L.tpo_loss(new, L.tpo_target(old, SCORES.view(G, K), eta))


# ---------------------------------------------------------------------------------------------------
# Estimator


def test_estimator_is_standardize_broadcast_over_response_tokens():
    b = make_batch()
    adv, returns = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    u = L.standardize(SCORES.view(G, K)).flatten()
    torch.testing.assert_close(adv, u.unsqueeze(1) * b["mask"], atol=1e-6, rtol=0)
    assert returns is adv
    assert (adv[4:8] == 0).all()  # an all-zero group is neutral: u = 0 exactly


def test_estimator_groups_by_uid_in_any_row_order():
    b = make_batch()
    perm = torch.randperm(G * K, generator=torch.Generator().manual_seed(1))
    adv, _ = tv.compute_tpo_advantage(b["rewards"][perm], b["mask"][perm], None, b["uids"][perm.numpy()])
    expected, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    torch.testing.assert_close(adv, expected[perm], atol=1e-6, rtol=0)  # same groups, other sum order


def test_estimator_errors():
    b = make_batch()
    with pytest.raises(ValueError, match="uid"):
        tv.compute_tpo_advantage(b["rewards"], b["mask"], None, None)
    with pytest.raises(ValueError, match="one uid per row"):
        tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"][:-1])
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        tv.compute_tpo_advantage(b["rewards"][:, :2], b["mask"], None, b["uids"])


def test_restandardising_u_is_exact_to_rounding():
    """tpo_target re-standardises its scores; u is already standardised, so q is unchanged."""
    u = L.standardize(SCORES.view(G, K))
    torch.testing.assert_close(L.standardize(u), u, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------
# Loss


@pytest.mark.parametrize("logscore", ["mean", "sum"])
@pytest.mark.parametrize("eta", [0.5, 1.0, 3.0])
def test_loss_and_gradient_equal_agents_losses(logscore, eta):
    b = make_batch()
    adv, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    log_prob = b["new"].clone().requires_grad_()
    loss, metrics = tv.compute_tpo_policy_loss(b["old"], log_prob, adv, b["mask"].bool(), "token-mean",
                                               actor_config(eta, logscore))
    loss.backward()
    ref_log_prob = b["new"].clone().requires_grad_()
    ref = reference(b, ref_log_prob, eta, logscore)
    ref.backward()
    torch.testing.assert_close(loss, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(log_prob.grad, ref_log_prob.grad, atol=1e-6, rtol=0)
    old_scores = L.sequence_logscores(b["old"], b["mask"], logscore).view(G, K)
    log_p = torch.log_softmax(old_scores, -1)
    effective = torch.exp(-(log_p.exp() * log_p).sum(-1)).mean().item()  # exp(H(p_old)), mean over groups
    assert metrics["actor/tpo_effective_group_size"] == pytest.approx(effective)
    assert metrics["actor/tpo_zero_variance_frac"] == pytest.approx(2 / G)  # the 0s and the 0.3s
    assert metrics["actor/tpo_eta"] == eta


@pytest.mark.parametrize(("dp_size", "groups_per_micro"), [(1, 1), (1, 3), (2, 1), (3, 2)])
def test_micro_batches_and_ranks_add_up_to_the_mean_over_all_groups(dp_size, groups_per_micro):
    """verl backward()s every micro-batch's loss and averages gradients over the D ranks: the
    result must be the gradient of tpo_loss over all G groups (global_batch_size = G * K rows)."""
    b = make_batch()
    adv, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    log_prob = b["new"].clone().requires_grad_()
    config = actor_config(ppo_micro_batch_size_per_gpu=K * groups_per_micro,
                          global_batch_info={"dp_size": dp_size, "global_batch_size": G * K})
    rows_per_rank = G * K // dp_size
    micro = K * groups_per_micro
    total = 0.0
    for rank in range(dp_size):
        for start in range(rank * rows_per_rank, (rank + 1) * rows_per_rank, micro):
            rows = slice(start, start + micro)
            loss, _ = tv.compute_tpo_policy_loss(b["old"][rows], log_prob[rows], adv[rows],
                                                 b["mask"][rows].bool(), "token-mean", config)
            loss.backward()  # gradients accumulate over micro-batches and (here) over ranks
            total += loss.item()
    grad = log_prob.grad / dp_size  # the all-reduce averages over ranks
    ref_log_prob = b["new"].clone().requires_grad_()
    ref = reference(b, ref_log_prob)
    ref.backward()
    assert total / dp_size == pytest.approx(ref.item(), abs=1e-6)
    torch.testing.assert_close(grad, ref_log_prob.grad, atol=1e-6, rtol=0)


def test_neutral_groups_have_zero_gradient_on_the_snapshot():
    """All-zero-variance groups: u = 0, q = p_old, so at theta = old the gradient p - q vanishes."""
    b = make_batch()
    b["rewards"].zero_()
    adv, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    log_prob = b["old"].clone().requires_grad_()
    loss, metrics = tv.compute_tpo_policy_loss(b["old"], log_prob, adv, b["mask"], "token-mean",
                                               actor_config())
    loss.backward()
    assert log_prob.grad.abs().max().item() < 1e-7
    assert metrics["actor/tpo_zero_variance_frac"] == 1.0
    assert metrics["actor/tpo_target_gap"] < 1e-7


def test_first_response_token_carries_u():
    adv = torch.tensor([[0.0, 2.0, 2.0, 0.0], [5.0, 5.0, 0.0, 0.0], [7.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    assert tv.row_advantages(adv, mask).tolist() == [2.0, 5.0, 0.0]


def test_contiguous_groups_shapes():
    assert tv.contiguous_groups(torch.arange(8.0), 4).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="6 rows is not a positive multiple of rollout_n=4"):
        tv.contiguous_groups(torch.arange(6.0), 4)
    with pytest.raises(ValueError, match=r"one value per row \[N\]"):
        tv.contiguous_groups(torch.zeros(4, 2), 4)


def _loss_inputs(b: dict) -> tuple:
    adv, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    return b["old"], b["new"], adv, b["mask"].bool()


def test_loss_refuses_rows_that_are_not_contiguous_groups():
    old, new, adv, mask = _loss_inputs(make_batch())
    perm = torch.arange(G * K).roll(1)  # every group shifted by one row, as a balanced reorder would
    with pytest.raises(ValueError, match="not one z-scored group of rollout_n=4"):
        tv.compute_tpo_policy_loss(old[perm], new[perm], adv[perm], mask[perm], "token-mean", actor_config())


def test_loss_refuses_grpo_advantages():
    b = make_batch()
    scores = SCORES.view(G, K)
    grpo = (scores - scores.mean(-1, keepdim=True)) / (scores.std(-1, keepdim=True) + 1e-6)  # verl's grpo
    adv = grpo.flatten().unsqueeze(1) * b["mask"]
    with pytest.raises(ValueError, match="adv_estimator=tpo"):
        tv.compute_tpo_policy_loss(b["old"], b["new"], adv, b["mask"], "token-mean", actor_config())


@pytest.mark.parametrize(("overrides", "message"), [
    ({"rollout_n": 1}, "rollout_n=1"),
    ({"rollout_n": None}, "rollout_n=None"),
    ({"use_dynamic_bsz": True}, "use_dynamic_bsz=True"),
    ({"shuffle": True}, "shuffle=True"),
    ({"ppo_micro_batch_size_per_gpu": 6}, "ppo_micro_batch_size_per_gpu=6 is not a multiple of rollout_n=4"),
    ({"global_batch_info": {"dp_size": 2}}, "no global_batch_size"),
    ({"global_batch_info": {"dp_size": 1, "global_batch_size": 10}}, "global_batch_size=10"),
])
def test_loss_refuses_bad_actor_configs(overrides, message):
    old, new, adv, mask = _loss_inputs(make_batch())
    with pytest.raises(ValueError, match=message):
        tv.compute_tpo_policy_loss(old, new, adv, mask, "token-mean", actor_config(**overrides))


def test_loss_refuses_wrong_shapes_weights_and_missing_config():
    old, new, adv, mask = _loss_inputs(make_batch())
    with pytest.raises(ValueError, match="rows is not a positive multiple"):
        tv.compute_tpo_policy_loss(old[:-1], new[:-1], adv[:-1], mask[:-1], "token-mean", actor_config())
    with pytest.raises(ValueError, match="must be shaped like log_prob"):
        tv.compute_tpo_policy_loss(old[:, :2], new, adv, mask, "token-mean", actor_config())
    with pytest.raises(ValueError, match="rollout_is=null"):
        tv.compute_tpo_policy_loss(old, new, adv, mask, "token-mean", actor_config(), torch.ones_like(old))
    with pytest.raises(ValueError, match="config=None"):
        tv.compute_tpo_policy_loss(old, new, adv, mask, "token-mean", None)


def test_settings_from_the_policy_loss_config():
    assert tv.tpo_settings({}) == (1.0, "mean")
    assert tv.tpo_settings({"policy_loss": {"loss_mode": "tpo"}}) == (1.0, "mean")
    assert tv.tpo_settings(actor_config(0.25, "sum")) == (0.25, "sum")
    for config, message in ((actor_config(0.0), "tpo_eta=0.0: must be a finite number > 0"),
                            (actor_config("x"), "tpo_eta='x'"), (actor_config(float("inf")), "tpo_eta=inf"),
                            (actor_config(logscore="max"), "tpo_logscore='max': use 'mean' .* or 'sum'")):
        with pytest.raises(ValueError, match=message):
            tv.tpo_settings(config)
    old, new, adv, mask = _loss_inputs(make_batch())
    with pytest.raises(ValueError, match="tpo_eta=-1"):
        tv.compute_tpo_policy_loss(old, new, adv, mask, "token-mean", actor_config(-1))


def test_an_empty_response_leaves_its_group_softmax():
    """A row without response tokens (L = 0 under every policy) is dropped from its group's softmax: the
    loss and gradient equal the group of the other rows, and the count is logged."""
    b = make_batch()
    b["mask"][1] = 0.0
    b["rewards"][1] = 0.0
    b["old"][1] = 0.0
    b["new"][1] = 0.0
    adv, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    log_prob = b["new"].clone().requires_grad_()
    loss, metrics = tv.compute_tpo_policy_loss(b["old"], log_prob, adv, b["mask"], "token-mean",
                                               actor_config())
    loss.backward()
    assert metrics["actor/tpo_dropped_rows"] == 1.0
    assert (log_prob.grad[1] == 0).all()
    valid = b["mask"].any(-1)
    ref_log_prob = b["new"].clone().requires_grad_()
    scores = SCORES.clone()
    scores[1] = 0.0
    ref, _ = L.completion_tpo_loss(ref_log_prob, b["old"], b["mask"], scores, K, valid=valid)
    ref.backward()
    torch.testing.assert_close(loss, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(log_prob.grad, ref_log_prob.grad, atol=1e-6, rtol=0)


@pytest.fixture
def calls_without_signal(monkeypatch):
    """A fresh count of the loss calls without signal (the plugin keeps one per process)."""
    count = copy.copy(verl_loss.CALLS_WITHOUT_SIGNAL)
    count.reset()
    monkeypatch.setattr(verl_loss, "CALLS_WITHOUT_SIGNAL", count)
    return count


def _warnings_of_loss_calls(batch: dict, n_calls: int) -> list[str]:
    """Call the loss ``n_calls`` times on the batch; the messages of the warnings about no signal."""
    adv, _ = tv.compute_tpo_advantage(batch["rewards"], batch["mask"], None, batch["uids"])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(n_calls):
            tv.compute_tpo_policy_loss(batch["old"], batch["new"], adv, batch["mask"], "token-mean",
                                       actor_config())  # fmt: skip
    return [str(w.message) for w in record if "had no signal" in str(w.message)]


@pytest.mark.parametrize("case", ["equal scores", "no response tokens"])
def test_most_loss_calls_without_signal_warn_once(case, calls_without_signal):
    b = make_batch()
    b["rewards"].zero_()  # equal scores in every group
    if case == "no response tokens":
        b["mask"].zero_()
    n = verl_loss.WARN_AFTER_CALLS
    assert _warnings_of_loss_calls(b, n - 1) == []  # too few calls yet
    (message,) = _warnings_of_loss_calls(b, 5)  # the n-th call warns, the later ones do not
    assert message.startswith(f"{n} of {n} tpo loss calls (micro-batches) of this process had no signal")
    expected = "actor/tpo_zero_variance_frac = 1" if case == "equal scores" else "actor/tpo_dropped_rows"
    assert expected in message
    assert calls_without_signal.steps == n + 4


def test_loss_calls_with_signal_do_not_warn(calls_without_signal):
    assert _warnings_of_loss_calls(make_batch(), 2 * verl_loss.WARN_AFTER_CALLS) == []
    assert calls_without_signal.flat == calls_without_signal.dropped == 0


# ---------------------------------------------------------------------------------------------------
# Config validator


def test_shipped_config_passes_the_validator():
    config = tv.load_config([str(CONFIG)], use_hydra=False)
    assert tv.config_errors(config) == []
    assert config["actor_rollout_ref"]["rollout"]["n"] == 16
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-5
    assert "lora_rank" not in config["actor_rollout_ref"]["model"]  # graph colouring: all weights, no KL
    assert config["actor_rollout_ref"]["actor"]["use_kl_loss"] is False
    assert config["data"]["train_batch_size"] == 16


A = "actor_rollout_ref.actor"


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.balance_batch=true", "trainer.balance_batch=True: must be False"),
    ("trainer.use_v1=true", "trainer.use_v1=True: must be False"),
    (f"{A}.use_dynamic_bsz=true", f"{A}.use_dynamic_bsz=True: must be False"),
    (f"{A}.shuffle=true", f"{A}.shuffle=True: must be False"),
    (f"{A}.ppo_micro_batch_size_per_gpu=24", "ppo_micro_batch_size_per_gpu=24: must be a multiple of "
                                              "actor_rollout_ref.rollout.n=16"),
    (f"{A}.ppo_micro_batch_size_per_gpu=null", "ppo_micro_batch_size_per_gpu=None: must be an integer"),
    (f"+{A}.ppo_micro_batch_size=64", "ppo_micro_batch_size=64: must be null"),
    (f"{A}.ppo_mini_batch_size=6", "ppo_mini_batch_size=6 prompts: must be a multiple of the data-parallel "
                                   "size 4"),
    (f"{A}.ppo_mini_batch_size=32", "data.train_batch_size=16: must be a multiple of"),
    ("data.train_batch_size=18", "data.train_batch_size=18 prompts: must be a multiple of the data-parallel"),
    (f"{A}.ppo_micro_batch_size_per_gpu=48", "must divide the 64 rows of a mini-batch per rank"),
    ("algorithm.adv_estimator=grpo", "algorithm.adv_estimator='grpo' with"),
    (f"{A}.policy_loss.loss_mode=vanilla", "loss_mode='vanilla': TPO needs both"),
    ("actor_rollout_ref.rollout.n=1", "actor_rollout_ref.rollout.n=1: must be an integer >= 2"),
    ("algorithm.rollout_correction.bypass_mode=true", "bypass_mode=True: must be False"),
    ("algorithm.rollout_correction.rollout_is=token", "rollout_is='token': must be null"),
    ("trainer.n_gpus_per_node=3", "must be a multiple of the data-parallel size 3"),
    (f"{A}.ulysses_sequence_parallel_size=3", "ulysses sequence parallel size 3 does not divide the 4 GPUs"),
    (f"{A}.policy_loss.tpo_logscore=max", "tpo_logscore='max'"),
    (f"{A}.policy_loss.tpo_eta=0", "tpo_eta=0: must be a finite number > 0"),
    (f"{A}.policy_loss._target_=verl.workers.config.PolicyLossConfig", "cannot carry tpo_eta, tpo_logscore"),
    (f"+{A}.rollout_n=8", "rollout_n=8: must equal actor_rollout_ref.rollout.n=16"),
])
def test_validator_rejects_with_one_line_naming_the_value(override, message):
    errors = tv.config_errors(tv.load_config([str(CONFIG), override], use_hydra=False))
    assert errors, override
    assert any(message in error for error in errors), errors
    assert all("\n" not in error for error in errors)


def test_validator_megatron_parallel_sizes():
    overrides = [f"{A}.strategy=megatron", f"+{A}.megatron.tensor_model_parallel_size=2"]
    config = tv.load_config([str(CONFIG), *overrides], use_hydra=False)
    assert tv.config_errors(config) == []  # data-parallel size 4 / 2 = 2
    config = tv.load_config([str(CONFIG), *overrides, f"+{A}.megatron.tensor_model_parallel_size=3"],
                            use_hydra=False)
    assert "tensor x pipeline x context parallel size 3 does not divide the 4 GPUs" in "".join(
        tv.config_errors(config))
    config = tv.load_config([str(CONFIG), *overrides, f"+{A}.megatron.context_parallel_size=2"],
                            use_hydra=False)
    assert tv.config_errors(config) == [
        f"{A}.megatron.context_parallel_size=2: must be 1 (with context parallelism Megatron divides the "
        f"loss by token counts, a per-token loss)"]


def test_balance_batch_is_allowed_with_the_prefix_grouper():
    """verl's legacy trainer balances whole uid groups, rows in order, with the actor's prefix grouper."""
    balanced = ["trainer.balance_batch=true", f"{A}.use_prefix_grouper=true"]
    assert tv.config_errors(tv.load_config([str(CONFIG), *balanced], use_hydra=False)) == []
    errors = tv.config_errors(tv.load_config([str(CONFIG), "trainer.balance_batch=true"], use_hydra=False))
    assert len(errors) == 1 and "use_prefix_grouper=true" in errors[0]


def test_validator_reads_verl_defaults_for_missing_keys():
    errors = tv.config_errors(tv.load_config(["algorithm.adv_estimator=tpo"], use_hydra=False))
    text = "\n".join(errors)
    assert "trainer.balance_batch=True" in text  # verl's default is True
    assert "trainer.use_v1=True" in text
    assert "loss_mode='vanilla'" in text
    assert "actor_rollout_ref.rollout.n=1" in text


def test_validator_reads_tpo_settings_from_the_policy_loss_node():
    overrides = [f"{A}.policy_loss.tpo_eta=0.5", f"{A}.policy_loss.tpo_logscore=sum"]
    config = tv.load_config([str(CONFIG), *overrides], use_hydra=False)
    assert tv.config_errors(config) == []
    assert config["actor_rollout_ref"]["actor"]["policy_loss"]["_target_"] == tv.TARGET
    with pytest.raises(ValueError, match="tpo_eta='abc'"):
        tv.check_config(tv.load_config([str(CONFIG), f"{A}.policy_loss.tpo_eta=abc"], use_hydra=False))


def test_validator_source_errors(tmp_path):
    with pytest.raises(ValueError, match="neither a .yaml config file nor a key=value override"):
        tv.load_config(["nonsense"], use_hydra=False)
    with pytest.raises(ValueError, match="does not exist"):
        tv.load_config([str(tmp_path / "missing.yaml")], use_hydra=False)
    with pytest.raises(ValueError, match="two config files"):
        tv.load_config([str(CONFIG), str(CONFIG)], use_hydra=False)


def test_check_command(capsys):
    assert tv.main(["check", str(CONFIG), "--no-hydra"]) == 0
    assert capsys.readouterr().out.startswith("ok: TPO with K=16, 16 prompts per step")
    bad = ["trainer.balance_batch=true", f"{A}.shuffle=true"]
    assert tv.main(["check", str(CONFIG), *bad, "--no-hydra"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


# ---------------------------------------------------------------------------------------------------
# Reward function and data export

ARITHMETIC = {"dataset": "basic_arithmetic", "size": 4, "eval_size": 2, "min_terms": 2, "max_terms": 2,
              "seed": 3}


def solved(row: dict) -> float:
    """The score of the right answer to an exported row."""
    gold = row["reward_model"]["ground_truth"]
    return tv.compute_score(row["data_source"], f"<answer>{gold}</answer>", gold, row["extra_info"])["score"]


@needs_rg
def test_dataset_rows_hold_verl_columns_and_the_env_prompts():
    from tpo_gym.envs.text import ReasoningGymTask

    rows = tv.dataset_rows("TPO/ReasoningGym-v0", ARITHMETIC, system_prompt="Be brief.")
    assert [len(rows["train"]), len(rows["test"])] == [4, 2]
    task = ReasoningGymTask(split="test", **ARITHMETIC)
    row = rows["test"][1]
    assert row["data_source"] == "tpo_gym/basic_arithmetic" and row["ability"] == "reasoning"
    assert row["prompt"] == [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": task.prompt(1)}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": str(task.entry(1)["answer"])}
    info = row["extra_info"]
    assert (info["split"], info["index"], info["reward"]) == ("test", 1, "native")
    assert info["env_id"] == "TPO/ReasoningGym-v0"
    assert json.loads(info["env_kwargs"]) == ARITHMETIC


@needs_rg
def test_dataset_rows_errors():
    with pytest.raises(ValueError, match="is neither a text env nor a multi-turn env"):
        tv.dataset_rows("TPO/TokenCopy-v0")
    with pytest.raises(ValueError, match="'GuessNumber' is a multi-turn env: its rows are environment_rows'"):
        tv.dataset_rows("GuessNumber")
    with pytest.raises(ValueError, match="writes both splits"):
        tv.dataset_rows("GraphColor", {"split": "test"})


@needs_rg
def test_compute_score_equals_score_completion():
    from tpo_gym.envs.text import ReasoningGymTask, score_completion

    row = tv.dataset_rows("TPO/ReasoningGym-v0", ARITHMETIC)["train"][2]
    task = ReasoningGymTask(split="train", **ARITHMETIC)
    gold = row["reward_model"]["ground_truth"]
    completions = (f"so <answer>{gold}</answer>", f"<answer>{gold}9</answer>", f"it is {gold}", "<answer>x")
    for completion in completions:
        for reward in ("native", "binary"):
            expected, _, format_ok = score_completion(task.dataset, task.entry(2), completion, reward)
            got = tv.compute_score(row["data_source"], completion, gold, row["extra_info"], reward=reward)
            assert got == {"score": expected, "format_ok": float(format_ok),
                           "is_success": float(expected >= 0.99)}
    assert solved(row) == 1.0


@needs_rg
def test_compute_score_errors():
    row = tv.dataset_rows("TPO/ReasoningGym-v0", ARITHMETIC)["test"][0]
    with pytest.raises(ValueError, match="extra_info lacks env_kwargs, split, index"):
        tv.compute_score("gsm8k", "<answer>1</answer>", "1", {})
    with pytest.raises(ValueError, match="does not match the rebuilt reasoning-gym item"):
        tv.compute_score(row["data_source"], "<answer>1</answer>", "not the answer", row["extra_info"])
    with pytest.raises(ValueError, match="reward='exact'"):
        tv.compute_score(row["data_source"], "<answer>1</answer>", None, row["extra_info"], reward="exact")
    with pytest.raises(ValueError, match="split='val'"):
        tv.compute_score(row["data_source"], "", None, {**row["extra_info"], "split": "val"})


@needs_rg
@needs_pyarrow
def test_parquet_export_round_trip(tmp_path):
    import pyarrow.parquet as pq

    paths = tv.export_dataset("ReasoningGym", tmp_path, ARITHMETIC)
    assert set(paths) == {"train", "test"}
    rows = tv.dataset_rows("TPO/ReasoningGym-v0", ARITHMETIC)
    for split, path in paths.items():
        read = pq.read_table(path).to_pylist()
        assert read == rows[split]
    assert solved(pq.read_table(paths["test"]).to_pylist()[1]) == 1.0


@needs_rg
@needs_pyarrow
def test_export_command(tmp_path, capsys):
    out = tmp_path / "gc"
    assert tv.main(["export", "--env", "TPO/GraphColor-v0", "--out", str(out), "--env-kwargs", "size:3",
                    "eval_size:2", "reward:binary"]) == 0
    assert capsys.readouterr().out.split() == ["train:", str(out / "train.parquet"), "test:",
                                               str(out / "test.parquet")]
    assert tv.main(["export", "--env", "TPO/GraphColor-v0", "--out", str(out), "--env-kwargs", "size"]) == 1
    assert "key:value" in capsys.readouterr().err


@pytest.mark.skipif(HAS_PYARROW, reason="pyarrow is installed")
def test_export_without_pyarrow_says_how_to_install(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="pyarrow"):
        tv.export_dataset("GraphColor", tmp_path)


@pytest.mark.skipif(HAS_VERL, reason="verl is installed")
def test_register_without_verl_is_a_no_op():
    assert tv.register() is False


# ---------------------------------------------------------------------------------------------------
# With verl installed: the plugin as verl loads and calls it

_REGISTERED = (
    "import verl\n"
    "from verl.trainer.ppo import core_algos as c\n"
    "print(c.get_adv_estimator_fn('tpo').__module__, c.get_policy_loss_fn('tpo').__module__)\n"
)


@needs_verl
@pytest.mark.parametrize("env", [{}, {"VERL_USE_EXTERNAL_PLUGINS": "none",
                                      "VERL_USE_EXTERNAL_MODULES": "tpo_agents.integrations.verl"}])
def test_import_verl_registers_tpo(env, tmp_path):
    """In a fresh interpreter, `import verl` alone loads the plugin (entry point, or the module list)."""
    result = subprocess.run([sys.executable, "-c", _REGISTERED], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, **env}, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["tpo_agents.integrations.verl.loss", "tpo_agents.integrations.verl.loss"]


@needs_verl
def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert plugins.get("tpo") == "tpo_agents.integrations.verl"


def _verl_batch(b: dict, prompt_len: int = 3):
    """The legacy trainer's actor input for the hand-made batch: left-padded prompts, right-padded
    responses, old log-probs and the estimator's advantages, converted as verl does (no padding)."""
    from tensordict import TensorDict
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.workers.utils.padding import left_right_2_no_padding

    n = G * K
    g = torch.Generator().manual_seed(5)
    mask = b["mask"].long()
    prompt_lens = torch.randint(1, prompt_len + 1, (n,), generator=g)
    prompt_mask = (torch.arange(prompt_len) >= prompt_len - prompt_lens.unsqueeze(1)).long()
    attention = torch.cat([prompt_mask, mask], 1)
    input_ids = torch.randint(3, 50, attention.shape, generator=g) * attention
    # called as verl.trainer.ppo.ray_trainer.compute_advantage calls a registered estimator
    adv, returns = get_adv_estimator_fn("tpo")(token_level_rewards=b["rewards"], response_mask=b["mask"],
                                               config=AlgoConfig(adv_estimator="tpo"), index=b["uids"])
    td = TensorDict({"prompts": input_ids[:, :prompt_len], "responses": input_ids[:, prompt_len:],
                     "input_ids": input_ids, "attention_mask": attention,
                     "position_ids": (attention.cumsum(1) - 1).clamp(min=0), "response_mask": mask,
                     "old_log_probs": b["old"], "advantages": adv}, batch_size=[n])
    return left_right_2_no_padding(td), attention


@needs_verl
@pytest.mark.parametrize("dp_size", [1, 2])
def test_verl_ppo_loss_with_micro_batches_equals_agents_losses(dp_size):
    """verl's own actor loss (`verl.workers.utils.losses.ppo_loss`) on verl's micro-batches
    (`prepare_micro_batches`), with a real FSDPActorConfig, one backward per micro-batch and the
    gradient averaged over the ranks, equals tpo_agents.losses.tpo_loss over all groups."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig
    from verl.workers.engine.utils import prepare_micro_batches
    from verl.workers.utils.losses import ppo_loss

    b = make_batch()
    td, attention = _verl_batch(b)
    n = G * K
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), attention.sum(1).cumsum(0)])
    # one log-prob per token of every (unpadded) sequence, as the model's output: the leaves
    flat = torch.zeros(int(offsets[-1]))
    lengths = b["mask"].sum(1).long()
    for i in range(n):  # the response log-probs sit one token left of the response tokens
        end = int(offsets[i + 1])
        flat[end - int(lengths[i]) - 1:end - 1] = b["new"][i, :int(lengths[i])]
    flat.requires_grad_()
    config = FSDPActorConfig(strategy="fsdp", rollout_n=K, ppo_mini_batch_size=G,
                             ppo_micro_batch_size_per_gpu=K, policy_loss=PolicyLossConfig(loss_mode="tpo"))
    rows_per_rank = n // dp_size
    for rank in range(dp_size):
        rows = list(range(rank * rows_per_rank, (rank + 1) * rows_per_rank))  # verl's DP chunk
        rank_td = tu.index_select_tensor_dict(td, rows)
        tu.assign_non_tensor(rank_td, dp_size=dp_size, batch_num_tokens=int(b["mask"].sum()),
                             global_batch_size=n, micro_batch_size_per_gpu=K, use_dynamic_bsz=False)
        micro_batches, _ = prepare_micro_batches(rank_td)
        assert len(micro_batches) == rows_per_rank // K
        for j, micro in enumerate(micro_batches):
            first = rank * rows_per_rank + j * K
            values = flat[int(offsets[first]):int(offsets[first + K])]
            nested = torch.nested.nested_tensor_from_jagged(
                values, offsets=offsets[first:first + K + 1] - offsets[first])
            loss, metrics = ppo_loss(config, {"log_probs": nested}, micro)
            loss.backward()
            assert metrics["actor/tpo_eta"].aggregate() == 1.0
    ref_log_prob = b["new"].clone().requires_grad_()
    reference(b, ref_log_prob).backward()
    grad = torch.zeros_like(b["new"])
    for i in range(n):
        end = int(offsets[i + 1])
        grad[i, :int(lengths[i])] = flat.grad[end - int(lengths[i]) - 1:end - 1] / dp_size
    torch.testing.assert_close(grad, ref_log_prob.grad, atol=1e-6, rtol=0)


@needs_verl
def test_shipped_config_composes_with_hydra_and_builds_verl_configs():
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    config = tv.load_config([str(CONFIG)], use_hydra=True)
    assert tv.config_errors(config) == []
    actor = omega_conf_to_dataclass(OmegaConf.create(config["actor_rollout_ref"]["actor"]))
    assert type(actor).__name__ == "FSDPActorConfig"
    assert (actor.rollout_n, actor.policy_loss.loss_mode) == (16, "tpo")
    assert type(actor.policy_loss).__name__ == "TPOPolicyLossConfig"  # eta travels in verl's own config
    assert tv.tpo_settings(actor) == (1.0, "mean")
    tuned = tv.load_config([str(CONFIG), "actor_rollout_ref.actor.policy_loss.tpo_eta=0.5"], use_hydra=True)
    actor = omega_conf_to_dataclass(OmegaConf.create(tuned["actor_rollout_ref"]["actor"]))
    assert tv.tpo_settings(actor) == (0.5, "mean")
    with pytest.raises(Exception, match="tpo_eta=-2"):  # hydra's InstantiationException around our ValueError
        omega_conf_to_dataclass(OmegaConf.create({**tuned["actor_rollout_ref"]["actor"], "policy_loss": {
            **tuned["actor_rollout_ref"]["actor"]["policy_loss"], "tpo_eta": -2}}))
    assert config["reward"]["custom_reward_function"] == {"path": "pkg://tpo_agents.integrations.verl",
                                                          "name": "compute_score"}
    bad = tv.load_config([str(CONFIG), "trainer.balance_batch=true"], use_hydra=True)
    assert tv.config_errors(bad) == [
        "trainer.balance_batch=True: must be False (balancing reorders rows across DP ranks and splits "
        "groups), or keep it with actor_rollout_ref.actor.use_prefix_grouper=true (whole groups are "
        "balanced)"]


@needs_verl
@needs_rg
def test_reward_function_loads_as_verl_loads_it():
    from verl.utils.import_utils import load_extern_object

    fn = load_extern_object(module_path="pkg://tpo_agents.integrations.verl", object_name="compute_score")
    row = tv.dataset_rows("TPO/ReasoningGym-v0", ARITHMETIC)["train"][0]
    gold = row["reward_model"]["ground_truth"]
    extra_info = {**row["extra_info"], "num_turns": None, "rollout_reward_scores": {}}  # as verl adds them
    assert fn(data_source=row["data_source"], solution_str=f"<answer>{gold}</answer>", ground_truth=gold,
              extra_info=extra_info)["score"] == 1.0


@needs_verl
@needs_rg
def test_parquet_reads_back_with_datasets_as_verl_does(tmp_path):
    import datasets

    paths = tv.export_dataset("ReasoningGym", tmp_path / "data", ARITHMETIC)
    table = datasets.load_dataset("parquet", data_files=str(paths["train"]),
                                  cache_dir=str(tmp_path / "cache"))
    row = table["train"][3]
    assert row["prompt"][-1]["role"] == "user"
    assert solved(row) == 1.0


PAPER_RECIPES = {  # file -> (model, data folder): the paper's LLM runs (Sec. 3.8, App. G)
    "tpo_qwen3_1.7b.yaml": ("Qwen/Qwen3-1.7B", "graph_color"),
    "tpo_qwen3_1.7b_knights_knaves.yaml": ("Qwen/Qwen3-1.7B", "knights_knaves"),
    "tpo_qwen3_1.7b_gsm8k.yaml": ("Qwen/Qwen3-1.7B", "gsm8k"),
    "tpo_r1_distill_qwen_1.5b.yaml": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "graph_color"),
    "tpo_r1_distill_qwen_1.5b_knights_knaves.yaml": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
                                                     "knights_knaves"),
    "tpo_r1_distill_qwen_1.5b_gsm8k.yaml": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "gsm8k"),
}


@pytest.mark.parametrize("use_hydra", [False, pytest.param(True, marks=needs_verl)])
@pytest.mark.parametrize("recipe", sorted(PAPER_RECIPES))
def test_paper_recipes_state_the_paper_settings(recipe, use_hydra):
    """K = 16, 16 prompts, AdamW 1e-5 on 4 GPUs everywhere; LoRA rank 32 and KL 1e-3 on GSM8K only."""
    config = tv.load_config([str(CONFIG.parent / recipe)], use_hydra=use_hydra)
    assert tv.config_errors(config) == []
    model, task = PAPER_RECIPES[recipe]
    ref, actor = config["actor_rollout_ref"], config["actor_rollout_ref"]["actor"]
    assert ref["model"]["path"] == model
    assert config["data"]["train_files"] == f"data/verl/{task}/train.parquet"
    assert (ref["rollout"]["n"], config["data"]["train_batch_size"], actor["optim"]["lr"]) == (16, 16, 1e-5)
    assert config["trainer"]["n_gpus_per_node"] == 4
    gsm8k = task == "gsm8k"
    assert (ref["model"].get("lora_rank", 0) == 32) == gsm8k
    assert actor["use_kl_loss"] == gsm8k and (not gsm8k or actor["kl_loss_coef"] == 0.001)


def test_an_all_empty_group_gives_no_gradient():
    """Every row of group 0 without response tokens: the loss stays finite and that group contributes
    nothing (the others' mean over all G groups is unchanged)."""
    b = make_batch()
    b["mask"][:K] = 0.0
    b["rewards"][:K] = 0.0
    adv, _ = tv.compute_tpo_advantage(b["rewards"], b["mask"], None, b["uids"])
    log_prob = (b["new"] * b["mask"]).clone().requires_grad_()
    loss, metrics = tv.compute_tpo_policy_loss(b["old"] * b["mask"], log_prob, adv, b["mask"], "token-mean",
                                               actor_config())
    loss.backward()
    assert torch.isfinite(loss) and (log_prob.grad[:K] == 0).all()
    assert metrics["actor/tpo_dropped_rows"] == K
