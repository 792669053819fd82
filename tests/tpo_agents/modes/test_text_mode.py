"""The text mode end to end on a tiny random language model: groups of completions scored by a text env,
one update's effect on a group, micro-batched gradients equal the full batch, a short TPO run learning
a toy task, logging, the zoo and evaluation; the reference KL one token mean whatever the
micro-batching, and truncated completions leaving their group with ``mask_truncated_completions``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch as th

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

from stable_baselines3.common.logger import KVWriter, Logger  # noqa: E402

from tests.llm_fixtures import build_tiny_llm  # noqa: E402
from tpo_agents import DG, GRPO, PG, TPO, losses  # noqa: E402
from tpo_agents.modes.text import TextBatch  # noqa: E402

th.set_num_threads(1)

TOY = "tpo_toy_uppercase"
CLOSE = "</answer>"


def _register_toy_dataset() -> None:
    """A reasoning-gym task whose score is the fraction of upper-case letters in the answer."""
    from dataclasses import dataclass

    from reasoning_gym.dataset import ProceduralDataset
    from reasoning_gym.factory import DATASETS, register_dataset

    if TOY in DATASETS:
        return

    @dataclass
    class ToyConfig:
        seed: int | None = None
        size: int = 50

        def validate(self) -> None:
            assert self.size > 0

    class ToyDataset(ProceduralDataset):
        def __init__(self, config: ToyConfig) -> None:
            super().__init__(config=config, seed=config.seed, size=config.size)

        def __getitem__(self, idx: int) -> dict:
            return {"question": f"Shout {idx}.", "answer": "A", "metadata": {}}

        def score_answer(self, answer: str | None, entry: dict) -> float:
            return sum(c.isupper() for c in answer) / len(answer) if answer else 0.0

    register_dataset(TOY, ToyDataset, ToyConfig)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny character LM with ``</answer>`` as one likely token, so that completions close the tag."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = Path(build_tiny_llm(tmp_path_factory.mktemp("text_mode_llm")))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_tokens([CLOSE])
    model = AutoModelForCausalLM.from_pretrained(directory)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with th.no_grad():
        close = tokenizer.convert_tokens_to_ids(CLOSE)
        model.lm_head.weight[close] = 0.0
        model.lm_head.weight[close, 0] = 2.5
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    _register_toy_dataset()
    return str(directory)


def make(algo, model_dir: str, **kwargs):
    policy_kwargs = dict(model=model_dir, prefill="<answer>", stop=CLOSE, max_new_tokens=6,
                         micro_batch_size=8)  # fmt: skip
    policy_kwargs.update(kwargs.pop("policy_kwargs", {}))
    settings = dict(batch_size=4, group_size=4, learning_rate=1e-2, n_epochs=1, group_mode="text", seed=0)
    settings.update(kwargs)
    return algo("LLMPolicy", "TPO/ReasoningGym-v0", env_kwargs=dict(dataset=TOY, size=20, eval_size=5),
                policy_kwargs=policy_kwargs, device="cpu", **settings)  # fmt: skip


class _Rows(KVWriter):
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write(self, key_values, key_excluded, step=0) -> None:
        self.rows.append(dict(key_values))


def _collect(model) -> TextBatch:
    model.set_logger(Logger(None, []))
    _, callback = model._setup_learn(10**6, None)
    return model.collect(callback)


def test_a_batch_is_groups_of_completions_of_one_prompt(model_dir):
    model = make(TPO, model_dir)
    batch = _collect(model)
    assert model.env.num_envs == 16 and batch.scores.shape == (4, 4) and len(batch.prompts) == 4
    assert all(text.startswith("<answer>") for text in batch.completions.texts)
    assert batch.old_token_log_probs is None  # pi_old: the update's first forward
    part, weight = next(model.mode.parts(batch))
    assert len(part.rows) == 8 and weight == 0.5  # micro_batch_size 8: two groups of K = 4 per part
    first = model.mode.log_probs(model.policy, part)
    model.mode.keep_old_log_probs(part, first)
    assert batch.old_token_log_probs.shape == batch.completions.completion_mask.shape
    assert th.equal(batch.old_token_log_probs[part.rows], first.detach())
    assert th.isnan(batch.old_token_log_probs[8:]).all()  # the second part's rows: not written yet
    old = batch.old_token_log_probs.clone()
    view = model.mode.group_view(part, model.mode.log_probs(model.policy, part))
    assert view.logscores.shape == (2, 4) and th.equal(view.logscores, view.old_logscores)
    th.testing.assert_close(batch.old_token_log_probs, old, rtol=0, atol=0, equal_nan=True)  # writes nothing


def test_pi_old_is_the_first_epoch_s_forward_and_stays(model_dir):
    model = make(TPO, model_dir, learning_rate=3e-3, n_epochs=2)
    batch = _collect(model)
    batch.scores = th.zeros_like(batch.scores)
    batch.scores[:, 0] = 1.0  # signal in every group (a batch without any has an exactly zero gradient)
    with th.no_grad():
        before = th.cat([model.policy.token_log_probs(batch.completions, part.rows)
                         for part, _ in model.mode.parts(batch)])  # fmt: skip
    model.train(batch)
    assert th.equal(batch.old_token_log_probs, before)  # the same forward at theta_old, bit for bit
    with th.no_grad():
        after = model.policy.token_log_probs(batch.completions, th.arange(len(before)))
    assert (after - before).abs().max() > 1e-4  # the two epochs moved the policy; pi_old stayed


def test_one_tpo_update_raises_the_best_completion_of_a_group(model_dir):
    model = make(TPO, model_dir, learning_rate=3e-3)
    batch = _collect(model)
    batch.scores = th.zeros_like(batch.scores)
    batch.scores[0, 1] = 1.0  # one winner in group 0, every other group neutral
    part = next(model.mode.parts(batch))[0]
    with th.no_grad():
        token_lp = model.policy.token_log_probs(batch.completions, part.rows)
    before = losses.completion_logscores(token_lp, part.mask, 4, batch.logscore)[0].softmax(-1)[1]
    model.train(batch)
    with th.no_grad():
        now = model.mode.log_probs(model.policy, part)
    after = model.mode.group_view(part, now).logscores[0].softmax(-1)[1]
    assert after > before


@pytest.mark.parametrize("algo", [TPO, GRPO])
def test_one_epoch_logs_the_kl_to_pi_old_after_the_step(model_dir, algo):
    """With the LLM configs' single epoch, train/approx_kl is the k3 KL per token between pi_old and the
    policy after the step (> 0); GRPO's clip fraction, 0 by construction at the first epoch, is not logged."""
    model = make(algo, model_dir, learning_rate=3e-3)
    batch = _collect(model)
    batch.scores = th.zeros_like(batch.scores)
    batch.scores[:, 0] = 1.0
    model.train(batch)
    logged = model.logger.name_to_value
    rows = th.arange(batch.scores.numel())
    with th.no_grad():
        after = model.policy.token_log_probs(batch.completions, rows)
    expected = float(losses.k3_kl(after - batch.old_token_log_probs, batch.mask.float()))
    assert expected > 1e-6 and logged["train/approx_kl"] == pytest.approx(expected, rel=1e-4)
    assert "train/clip_fraction" not in logged


def test_logscore_spread_leaves_out_rows_without_tokens(model_dir):
    """A completion whose mask is empty has L_old = 0, above every real mean log-score: the spread and
    the effective group size are those of each group's rows with tokens."""
    model = make(TPO, model_dir)
    batch = _collect(model)
    model.train(batch)
    batch.completions.completion_mask[0] = 0  # row 0 of group 0 emptied (mask_truncated_completions)
    model.mode.log_update(model.logger, batch)
    old = batch.old_logscores()
    valid = batch.mask.bool().any(-1).reshape(old.shape)
    spreads = [float(group[keep].max() - group[keep].min()) for group, keep in zip(old, valid, strict=True)]
    assert old[0, 0] == 0.0 and old[0, 1:].max() < 0
    logged = model.logger.name_to_value
    assert logged["rollout/logscore_spread"] == pytest.approx(np.mean(spreads), rel=1e-5)
    p_old = old[0, 1:].softmax(-1)
    size_0 = float(th.exp(-(p_old * p_old.log()).sum()))
    others = [float(th.exp(-(g.softmax(-1) * g.log_softmax(-1)).sum())) for g in old[1:]]
    assert logged["rollout/effective_group_size"] == pytest.approx(np.mean([size_0, *others]), rel=1e-5)


def test_micro_batches_accumulate_the_full_batch_gradient(model_dir):
    grads = []
    for micro in (16, 4):
        model = make(GRPO, model_dir, policy_kwargs=dict(micro_batch_size=micro))
        batch = _collect(model)
        assert len(list(model.mode.parts(batch))) == 16 // micro
        model.policy.optimizer.zero_grad()
        model._accumulate_gradients(batch)
        grads.append(th.cat([p.grad.flatten() for p in model.policy.parameters() if p.grad is not None]))
    th.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("algo", [DG, PG])
def test_single_sample_methods_use_the_masked_sample_view(model_dir, algo):
    model = make(algo, model_dir, group_size=2)
    assert model._view == "sample"
    model.learn(n_iterations=1)


@pytest.mark.slow
def test_tpo_learns_the_toy_task_and_logs_the_text_metrics(model_dir):
    model = make(TPO, model_dir, batch_size=4, group_size=8, learning_rate=2e-2, n_epochs=2, kl_coef=1e-3,
                 mode_kwargs=dict(sample_every=5))  # fmt: skip
    rows = _Rows()
    model.set_logger(Logger(None, [rows]))
    model.learn(n_iterations=24)
    scores = [row["rollout/mean_score"] for row in rows.rows]
    assert np.mean(scores[-6:]) > np.mean(scores[:6]) + 0.1, scores
    last = rows.rows[-1]
    for key in ("rollout/format_rate", "rollout/completion_length", "rollout/effective_group_size",
                "rollout/logscore_spread", "time/generation_tokens_per_s", "time/train_tokens_per_s",
                "train/approx_kl", "train/reference_kl"):  # fmt: skip
        assert np.isfinite(last[key]), key
    assert 1.0 <= last["rollout/effective_group_size"] <= 8.0
    assert rows.rows[0]["samples/completions"].startswith("| prompt | completion | answer | score |")


def test_text_mode_errors(model_dir):
    with pytest.raises(ValueError, match="baseline='expected' needs an action set"):
        make(PG, model_dir, baseline="expected")
    with pytest.raises(ValueError, match="TPO in text mode collects groups from a text env"):
        make(TPO, model_dir, group_mode="text").set_env("TPO/TokenCopy-v0")
    with pytest.raises(ValueError, match="kl_coef=0.1 needs a mode with a reference model"):
        TPO("TransformerPolicy", "TPO/TokenCopy-v0", kl_coef=0.1, env_kwargs=dict(sequence_length=3))


def test_evaluate_reports_greedy_score_and_pass_at_k(model_dir, tmp_path):
    from tpo_agents.zoo.evaluate import main

    model = make(TPO, model_dir)
    model.save(tmp_path / "model.zip")
    argv = ["--algo", "tpo", "--env", "ReasoningGym", "--model", str(tmp_path / "model.zip"), "-n", "5",
            "--pass-k", "3", "--env-kwargs", f"dataset:{TOY}", "size:20", "eval_size:5"]  # fmt: skip
    result = main(argv)
    assert result["n_items"] == 5 and 0.0 <= result["mean_score_greedy"] <= 1.0
    assert 0.0 <= result["pass@3"] <= 1.0 and 0.0 <= result["format_rate_greedy"] <= 1.0


# ------------------------------------------------------------ the KL and truncated completions
def _text_model(algo, model_dir, micro: int, kl_coef: float):
    return algo("LLMPolicy", "TPO/ReasoningGym-v0",
                env_kwargs=dict(dataset="basic_arithmetic", size=8, eval_size=2, seed=1),
                policy_kwargs=dict(model=model_dir, max_new_tokens=6, micro_batch_size=micro),
                batch_size=4, group_size=4, learning_rate=1e-2, n_epochs=1, group_mode="text", seed=0,
                kl_coef=kl_coef, device="cpu")  # fmt: skip


def test_reference_kl_is_one_token_mean_whatever_the_micro_batch_size(tiny_llm_dir):
    grads, kls = [], []
    for micro in (16, 4):
        model = _text_model(TPO, tiny_llm_dir, micro, kl_coef=0.5)
        model.policy.reference_model()  # the frozen copy of the original weights, before they move
        with th.no_grad():  # move theta away from the reference (the original weights)
            g = th.Generator().manual_seed(0)
            for param in model.policy.parameters():
                param.add_(0.05 * th.randn(param.shape, generator=g))
        model.set_logger(Logger(None, []))
        _, callback = model._setup_learn(10**6, None)
        batch = model.collect(callback)
        batch.scores.zero_()  # neutral groups: at theta = theta_old the TPO term has no gradient
        model.policy.optimizer.zero_grad()
        stats, _ = model._accumulate_gradients(batch)
        grads.append(th.cat([p.grad.flatten() for p in model.policy.parameters() if p.grad is not None]))
        kls.append(stats["reference_kl"])
        lengths = batch.completions.completion_mask.sum(-1)
        assert lengths.min() < lengths.max()  # ragged rows: a per-part mean would weight them differently
    assert grads[0].abs().max() > 0
    th.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)
    assert kls[0] == pytest.approx(kls[1], rel=1e-5)


def test_text_mode_drops_truncated_completions_with_mask_truncated_completions(tiny_llm_dir):
    """Completions cut by max_new_tokens get an empty mask and leave their group's softmax: the TPO loss
    and gradient equal tpo_agents.losses.completion_tpo_loss with those rows invalid, the count is logged."""
    model = TPO("LLMPolicy", "TPO/ReasoningGym-v0",
                env_kwargs=dict(dataset="basic_arithmetic", size=8, eval_size=2, seed=1),
                policy_kwargs=dict(model=tiny_llm_dir, max_new_tokens=6, micro_batch_size=16,
                                   mask_truncated_completions=True),
                batch_size=4, group_size=4, learning_rate=1e-2, group_mode="text", seed=0,
                device="cpu")  # fmt: skip
    model.set_logger(Logger(None, []))
    _, callback = model._setup_learn(10**6, None)
    batch = model.collect(callback)
    truncated = batch.completions.truncated
    assert truncated.any() and not truncated.all()  # the tiny model ends some completions with EOS
    assert (batch.mask[truncated] == 0).all() and (batch.mask[~truncated].sum(-1) > 0).all()
    batch.scores = th.arange(16.0).reshape(4, 4) % 3
    part = next(model.mode.parts(batch))[0]
    lp = model.mode.log_probs(model.policy, part)
    model.mode.keep_old_log_probs(part, lp)
    loss, stats = model.group_loss(model.mode.group_view(part, lp))
    assert stats["dropped_rows"] == int(truncated.sum())
    expected, _ = losses.completion_tpo_loss(lp, batch.old_token_log_probs, batch.mask.float(),
                                             batch.scores.reshape(-1), 4)  # fmt: skip
    th.testing.assert_close(loss, expected, atol=1e-6, rtol=0)
