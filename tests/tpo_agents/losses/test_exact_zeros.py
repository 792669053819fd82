"""Exact zeros where the paper has them (Sec. 2, Sec. 4.2): a group without signal (equal scores:
u = 0, q = p_old, A = 0) contributes an exactly zero TPO and GRPO gradient at theta = theta_old, in
every path: the losses on their own (any K, the action-major layout of the tables and the MLP, valid
masks, sum and mean log-scores), the token, sequence and single modes of the learn loop, the text mode,
TargetPOTrainer (TRL) and verl's loss. A batch whose every group has no signal then leaves the
parameters where they were: a normalising optimizer (Muon, Adam) turns any rounding noise left in such
a gradient into a full-size step in a random direction."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from tpo_agents import losses as L
from tpo_agents.layout import as_action_major

torch.set_num_threads(1)
N_TRIALS = 200


def zero_variance_trial(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random groups ``[G, K]`` (K in 2..9) of equal scores (a value whose float mean may round) and
    random log-scores L_old; returns (L_old, scores)."""
    g = torch.Generator().manual_seed(seed)
    n_groups, k = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(2, 10, (1,), generator=g))
    old = torch.randn(n_groups, k, generator=g) * 5 - 10
    value = torch.rand(n_groups, 1, generator=g).round(decimals=1)
    return old, value.expand(n_groups, k).contiguous()


def gradient(loss_fn, old: torch.Tensor) -> torch.Tensor:
    logscores = old.clone().requires_grad_()  # theta = theta_old: L_theta equals L_old bit for bit
    loss_fn(logscores).backward()
    return logscores.grad


@pytest.mark.parametrize("action_major", [False, True])
def test_tpo_and_grpo_gradients_of_zero_variance_groups_are_exactly_zero(action_major):
    for seed in range(N_TRIALS):
        old, scores = zero_variance_trial(seed)
        if action_major:
            old, scores = as_action_major(old), as_action_major(scores)
        target = L.tpo_target(old, scores)
        assert gradient(partial(L.tpo_loss, target=target), old).eq(0).all(), seed
        advantages = L.grpo_advantages(scores)
        assert gradient(partial(L.grpo_loss, old_logscores=old, advantages=advantages), old).eq(0).all(), seed


def test_masked_and_completion_tpo_gradients_of_zero_variance_groups_are_exactly_zero():
    for seed in range(N_TRIALS):
        old, scores = zero_variance_trial(seed)
        g = torch.Generator().manual_seed(seed)
        valid = torch.rand(old.shape, generator=g) > 0.2
        grad = gradient(lambda lt: L.masked_tpo_loss(lt, old, scores, valid)[0], old)  # noqa: B023
        assert grad.eq(0).all(), seed
        n, k = old.numel(), old.shape[-1]
        mask = (torch.arange(4) < torch.randint(1, 5, (n, 1), generator=g)).float()
        token_old = torch.randn(n, 4, generator=g) * mask
        for logscore in ("sum", "mean"):
            loss = partial(completion_loss, old=token_old, mask=mask, scores=scores.reshape(-1), k=k,
                           logscore=logscore)
            assert gradient(loss, token_old).eq(0).all(), (seed, logscore)


def completion_loss(token_lp, old, mask, scores, k, logscore) -> torch.Tensor:
    return L.completion_tpo_loss(token_lp, old, mask, scores, k, logscore=logscore)[0]


def test_the_tpo_gradient_is_p_minus_q_over_the_groups():
    """Away from the zero-variance case the written-out gradient is the cross-entropy's (float64 autograd)."""
    g = torch.Generator().manual_seed(0)
    new, old = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    scores = torch.randint(0, 2, (6, 5), generator=g).float()
    valid = torch.rand(6, 5, generator=g) > 0.3
    for mask in (None, valid):
        target = L.tpo_target(old, scores) if mask is None else L.masked_tpo_loss(new, old, scores, mask)[1]
        ours = gradient(partial(L.tpo_loss, target=target, valid=mask), new)
        exact = new.double().requires_grad_()
        log_p = torch.log_softmax(exact, -1) if mask is None else L.masked_log_softmax(exact, mask)
        (-(target.double() * log_p).sum(-1).mean()).backward()
        torch.testing.assert_close(ours.double(), exact.grad, atol=1e-7, rtol=0)
        assert L.tpo_loss(new, target, mask).item() == pytest.approx(
            -(target * log_p.float().detach()).sum(-1).mean().item(), abs=1e-6)


# ------------------------------------------------------------------------------- the learn loop


def token_task_model(algo: str, mode: str, reward: str, seed: int = 0):
    from tpo_agents.zoo.registry import get_algo

    extra = {"beta": 0.04} if algo == "grpo" else {}
    return get_algo(algo)(
        "TransformerPolicy", "TPO/TokenReversal-v0", learning_rate=1e-3, batch_size=4, group_size=4,
        group_mode=mode, n_epochs=2, seed=seed,
        env_kwargs=dict(reward=reward, sequence_length=4, vocab_size=2), **extra,
    )  # fmt: skip


def collect(model):
    from stable_baselines3.common.callbacks import CallbackList

    model._setup_learn(10**6, None, True, "run", False)
    callback = CallbackList([])
    callback.init_callback(model)
    return model.collect(callback)


@pytest.mark.parametrize(("algo", "mode", "reward"), [
    ("tpo", "sequence", "terminal"), ("grpo", "sequence", "terminal"), ("grpo_no_kl", "sequence", "terminal"),
    ("tpo", "token", "bag_of_tokens"), ("grpo", "token", "bag_of_tokens"),
])  # fmt: skip
def test_a_batch_without_signal_leaves_the_transformer_where_it_was(algo, mode, reward):
    """Every group's scores set equal (an all-fail batch): the first epoch's gradient is exactly 0, so
    every epoch's is (Muon and Adam start from zero moments), and no parameter moves."""
    model = token_task_model(algo, mode, reward)
    batch = collect(model)
    if mode == "token":
        batch.scores = torch.zeros_like(batch.scores)
    else:
        batch.token_rewards = torch.zeros_like(batch.token_rewards)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.train(batch)
    assert model.logger.name_to_value["train/grad_norm"] == 0.0
    for old, new in zip(before, model.policy.parameters(), strict=True):
        assert torch.equal(old, new.detach())


def test_pi_old_is_the_update_s_own_forward_at_theta_old():
    """The batch's pi_old is the teacher-forced re-scoring the loss computes at theta_old, bit for bit
    (sampling decodes with a KV cache, whose log-probs differ by rounding): the first epoch's forward."""
    from tpo_agents.policies.decoding import episode_log_probs

    model = token_task_model("grpo", "sequence", "terminal")
    batch = collect(model)
    with torch.no_grad():
        at_theta_old = episode_log_probs(model.policy, batch)
    model.train(batch)
    assert torch.equal(batch.old_log_probs, at_theta_old)


# ------------------------------------------------------------------------- language-model paths


def test_an_all_fail_batch_gives_targetpotrainer_an_exactly_zero_gradient(tiny_llm_dir, tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from tests.tpo_agents.integrations.test_trl_integration import make_trainer, micro_batch

    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, micro_batch(trainer, [0.0, 0.0, 0.0, 0.0])).backward()
    assert all(p.grad.eq(0).all() for p in trainer.model.parameters() if p.grad is not None)


def test_an_all_fail_batch_leaves_the_language_model_where_it_was_in_the_text_mode(tiny_llm_dir):
    pytest.importorskip("transformers")
    pytest.importorskip("reasoning_gym")
    from tpo_agents.tpo import TPO

    model = TPO("LLMPolicy", "TPO/ReasoningGym-v0", batch_size=2, group_size=4, n_epochs=1, seed=0,
                learning_rate=1e-2, policy_kwargs=dict(model=tiny_llm_dir, max_new_tokens=6),
                env_kwargs=dict(dataset="letter_counting", min_words=1, max_words=1))  # fmt: skip
    batch = collect(model)
    batch.scores = torch.zeros_like(batch.scores)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.train(batch)
    assert model.logger.name_to_value["train/grad_norm"] == 0.0
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, model.policy.parameters(), strict=True))


def test_verl_s_loss_gives_zero_variance_groups_an_exactly_zero_gradient():
    from tpo_agents.integrations import verl as tv

    k = 4
    for seed in range(N_TRIALS // 10):
        g = torch.Generator().manual_seed(seed)
        mask = (torch.arange(5) < torch.randint(1, 6, (2 * k, 1), generator=g)).float()
        old = -torch.rand(2 * k, 5, generator=g) * 3 * mask
        config = {"rollout_n": k, "global_batch_info": {}, "ppo_micro_batch_size_per_gpu": 2 * k,
                  "policy_loss": {"loss_mode": "tpo", "tpo_eta": 1.0, "tpo_logscore": "mean"}}
        advantages = torch.zeros(2 * k, 5)  # u = 0 on every row: no group has signal
        grad = gradient(lambda lp: tv.compute_tpo_policy_loss(old, lp, advantages, mask,  # noqa: B023
                                                              "token-mean", config)[0], old)  # noqa: B023
        assert grad.eq(0).all(), seed


# --------------------------------------------------------------- batches without signal: step or skip


def without_signal(batch):
    batch.token_rewards = torch.zeros_like(batch.token_rewards)
    return batch


@pytest.mark.parametrize("skip", [False, True])
def test_a_batch_without_signal_after_one_with_is_counted_and_stepped_on_momentum_or_skipped(skip):
    """After an update with signal the optimizer has momentum: on a batch without signal it still moves
    the parameters (the reference's and TRL's behaviour), unless the update is skipped."""
    model = token_task_model("grpo", "sequence", "terminal")
    model.skip_batches_without_signal = skip
    first = collect(model)
    first.token_rewards = torch.zeros_like(first.token_rewards)
    first.token_rewards[0] = 1.0  # one success: signal in group 0
    model.train(first)
    updates = model._n_updates
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.train(without_signal(collect(model)))
    after = list(model.policy.parameters())
    moved = any(not torch.equal(a, b.detach()) for a, b in zip(before, after, strict=True))
    assert moved is not skip
    assert model.batches_without_signal == 1
    assert model.logger.name_to_value["train/batches_without_signal"] == 1
    assert model._n_updates == updates + (0 if skip else model.n_epochs)


def test_single_mode_counts_batches_whose_advantages_are_all_zero():
    model = token_task_model("ppo", "single", "bag_of_tokens")
    batch = collect(model)
    assert model.mode.has_signal(batch, "sample") is bool(batch.token_rewards.std(0).gt(0).any())
    batch.token_rewards = torch.ones_like(batch.token_rewards)  # every sample right: A = 0 everywhere
    assert not model.mode.has_signal(batch, "sample")


@pytest.mark.parametrize("setting", [{"n_seeds": 2}, {"kl_coef": 0.1}])
def test_skipping_is_refused_where_it_would_drop_a_gradient(setting):
    from tpo_agents.zoo.registry import get_algo

    with pytest.raises(ValueError, match="skip_batches_without_signal"):
        get_algo("tpo")("TransformerPolicy", "TPO/TokenReversal-v0", skip_batches_without_signal=True,
                        env_kwargs=dict(sequence_length=3), **setting)


def test_one_warning_when_most_batches_have_no_signal():
    model = token_task_model("tpo", "sequence", "terminal")
    collect_batch = model.collect

    def all_fail(callback, collector=None, rollout_metrics=True):
        batch = collect_batch(callback, collector, rollout_metrics)
        return without_signal(batch) if batch is not None else None

    model.collect = all_fail
    with pytest.warns(UserWarning, match="3 of 3 batches had no signal") as record:
        model.learn(n_iterations=3)
    assert len([w for w in record if "no signal" in str(w.message)]) == 1
    assert model.batches_without_signal == 3
