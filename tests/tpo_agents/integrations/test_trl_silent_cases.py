"""TargetPOTrainer's silent cases, each pinned: rows whose mask TRL zeroed (``mask_truncated_completions``)
leave the group softmax and are counted, an all-truncated group gives no gradient, the KL is one mean
over the accumulation window's tokens whatever the micro-batching and follows ``use_bias_correction_kl``,
zero-variance groups with ``beta > 0`` get only the KL's gradient, multimodal inputs reach the model, the
MoE router loss is added, TRL scores at the sampling temperature as our loop does, and a run whose steps
mostly had no signal (every completion truncated and masked, or equal rewards) warns once."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")

from tests.tpo_agents.integrations.test_trl_integration import (  # noqa: E402
    grads,
    make_trainer,
    manual_token_log_probs,
    micro_batch,
)
from tests.trl_group_run import K  # noqa: E402
from tpo_agents import losses as L  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _loss_and_grads(trainer, inputs):
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), grads(trainer.model)


def test_a_row_with_a_zeroed_mask_leaves_the_softmax_and_is_counted(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    inputs["completion_mask"][3] = 0  # what mask_truncated_completions does to a truncated row
    loss, _ = _loss_and_grads(trainer, inputs)
    assert trainer._metrics["train"]["tpo/dropped_rows"][-1] == 1
    mask = inputs["completion_mask"].float()
    with torch.no_grad():
        token_lp = manual_token_log_probs(trainer.model, inputs)
        expected, _ = L.completion_tpo_loss(token_lp, token_lp, mask, inputs["scores"], K)
        naive = L.tpo_loss(L.sequence_logscores(token_lp, mask, "mean").reshape(2, K),
                           L.tpo_target(L.sequence_logscores(token_lp, mask, "mean").reshape(2, K),
                                        inputs["scores"].reshape(2, K)))  # fmt: skip
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert abs(naive.item() - expected.item()) > 1e-3  # the zero-mask row (L = 0) used to take the softmax
    # group 1 (K = 2) has one valid row left: fewer than two, so it gives no TPO gradient
    assert trainer._metrics["train"]["tpo/unusable_group_frac"][-1] == 0.5


def test_an_all_truncated_group_gives_no_gradient(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    only_first = {key: value[:2] if value.ndim else value for key, value in inputs.items()}
    first_loss, first_grads = _loss_and_grads(trainer, only_first)
    inputs["completion_mask"][2:] = 0
    loss, both_grads = _loss_and_grads(trainer, inputs)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(first_loss.item() / 2, abs=1e-6)  # the mean over both groups
    for a, b in zip(both_grads, first_grads, strict=True):
        torch.testing.assert_close(a, b / 2, atol=1e-6, rtol=0)


def eos_rollout(prompts, trainer):
    """Completion j of a prompt: ``"ab"`` then EOS for even j, ``"abc"`` without EOS (truncated) for odd j."""
    tokenizer = trainer.processing_class
    seen: dict[str, int] = {}
    prompt_ids, completion_ids = [], []
    for prompt in prompts:
        j = seen[prompt] = seen.get(prompt, -1) + 1
        prompt_ids.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        c = tokenizer("c", add_special_tokens=False)["input_ids"]
        tail = [tokenizer.eos_token_id] if j % 2 == 0 else c
        completion_ids.append(tokenizer("ab", add_special_tokens=False)["input_ids"] + tail)
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def truncated_rollout(prompts, trainer):
    """Every completion ``"abc"`` without EOS: TRL counts each one truncated."""
    tokenizer = trainer.processing_class
    return {"prompt_ids": [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts],
            "completion_ids": [tokenizer("abc", add_special_tokens=False)["input_ids"] for _ in prompts],
            "logprobs": None}  # fmt: skip


def _train_and_record(trainer) -> list[str]:
    """Train; the messages of the warnings about steps without signal."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.train()
    return [str(w.message) for w in record if "had no signal" in str(w.message)]


def _trainer(model_dir, tmp_path, reward, rollout, **config):
    """A 2-prompt trainer on the tiny model with its completions from ``rollout``."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.tpo_agents.integrations.test_trl_integration import make_config
    from tpo_agents.integrations import trl as tpo_trl

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    return tpo_trl.TargetPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward,
        train_dataset=Dataset.from_dict({"prompt": ["q: x", "q: y"]}),
        args=make_config(tmp_path, optim="sgd", **config), processing_class=tokenizer, rollout_func=rollout,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore:1 of 1 optimizer steps had no signal")  # the kept rows score equal
def test_mask_truncated_completions_is_honoured_end_to_end(tiny_llm_dir, tmp_path):
    from tests.trl_group_run import length_reward

    trainer = _trainer(tiny_llm_dir, tmp_path, length_reward, eos_rollout, mask_truncated_completions=True,
                       num_generations=4)  # fmt: skip
    trainer.train()
    logged = [row for row in trainer.state.log_history if "tpo/dropped_rows" in row]
    assert logged and logged[0]["tpo/dropped_rows"] == 2  # the two truncated completions of the prompt


def test_a_run_whose_every_completion_is_truncated_and_masked_warns_once(tiny_llm_dir, tmp_path):
    from tests.trl_group_run import length_reward

    trainer = _trainer(tiny_llm_dir, tmp_path, length_reward, truncated_rollout, max_steps=3, logging_steps=1,
                       mask_truncated_completions=True)  # fmt: skip
    (message,) = _train_and_record(trainer)
    assert message.startswith("3 of 3 optimizer steps had no signal")
    assert "3 with no group of two completions left" in message
    assert "mask_truncated_completions=False" in message and "tpo/unusable_group_frac = 1" in message
    logged = [row["tpo/unusable_group_frac"] for row in trainer.state.log_history
              if "tpo/unusable_group_frac" in row]  # fmt: skip
    assert logged == [1.0, 1.0, 1.0]


def test_equal_rewards_in_every_group_warn_once_per_train(tiny_llm_dir, tmp_path):
    def constant_reward(completions, **_):
        return [1.0] * len(completions)

    trainer = _trainer(tiny_llm_dir, tmp_path, constant_reward, eos_rollout, max_steps=2)
    for _ in range(2):  # a second train() counts its own steps and warns again
        (message,) = _train_and_record(trainer)
        assert message.startswith("2 of 2 optimizer steps had no signal")
        assert "2 with equal scores in every group" in message and "tpo/zero_variance_frac = 1" in message


def test_a_run_with_signal_does_not_warn(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path, max_steps=3)
    assert _train_and_record(trainer) == []
    assert (trainer._without_signal.steps, trainer._without_signal.flat) == (3, 0)


def _two_groups_with_reference(trainer, shift: float = 0.3):
    inputs = micro_batch(trainer, [1.0, 1.0, 0.0, 3.0])
    mask = inputs["completion_mask"].float()
    with torch.no_grad():
        inputs["ref_per_token_logps"] = manual_token_log_probs(trainer.model, inputs) + shift * mask
    inputs["num_items_in_batch"] = mask.sum()
    return inputs


def test_kl_is_one_token_mean_whatever_the_micro_batching(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path, beta=0.5)
    trainer.model.train()
    inputs = _two_groups_with_reference(trainer)
    trainer.args.steps_per_generation = 1
    trainer.current_gradient_accumulation_steps = 1
    _, whole = _loss_and_grads(trainer, inputs)
    trainer.args.steps_per_generation = 2  # the same window as two micro-batches of one group
    trainer.current_gradient_accumulation_steps = 2
    trainer.model.zero_grad()
    for part in (slice(0, 2), slice(2, 4)):
        split = {key: value[part] if value.ndim else value for key, value in inputs.items()}
        trainer._compute_loss(trainer.model, split).backward()
    for a, b in zip(grads(trainer.model), whole, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    mask = inputs["completion_mask"].float()
    lengths = mask.sum(-1)
    assert lengths[:2].sum() != lengths[2:].sum()  # unequal token counts: a per-micro-batch mean would differ


def test_use_bias_correction_kl_weights_the_k3_terms(tiny_llm_dir, tmp_path):
    for corrected in (False, True):
        trainer = make_trainer(tiny_llm_dir, tmp_path, beta=0.5, use_bias_correction_kl=corrected)
        trainer.current_gradient_accumulation_steps = 1
        trainer.model.train()
        inputs = _two_groups_with_reference(trainer)
        mask = inputs["completion_mask"].float()
        with torch.no_grad():
            token_lp = manual_token_log_probs(trainer.model, inputs)
        inputs["old_per_token_logps"] = token_lp - 0.2 * mask
        loss = trainer._compute_loss(trainer.model, inputs)
        tpo, _ = L.completion_tpo_loss(token_lp, inputs["old_per_token_logps"], mask, inputs["scores"], K)
        k3 = L.k3(inputs["ref_per_token_logps"] - token_lp)
        weight = torch.exp(token_lp - inputs["old_per_token_logps"]) if corrected else torch.ones_like(k3)
        expected = tpo + 0.5 * (k3 * weight * mask).sum() / mask.sum()
        assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_zero_variance_groups_with_beta_get_only_the_kl_gradient(tiny_llm_dir, tmp_path):
    """u = 0 gives q = p_old: at theta = theta_old the TPO term has no gradient, the KL term keeps its own
    (as in TRL's GRPO with beta > 0), so neutral groups still move the policy toward the reference."""
    trainer = make_trainer(tiny_llm_dir, tmp_path, beta=0.5)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = _two_groups_with_reference(trainer)
    inputs["scores"] = torch.full((4,), 0.5)
    _, with_kl = _loss_and_grads(trainer, inputs)
    trainer.beta = 0.0
    _, without_kl = _loss_and_grads(trainer, inputs)
    assert max(g.abs().max().item() for g in without_kl) < 1e-7
    assert max(g.abs().max().item() for g in with_kl) > 1e-4
    assert trainer._metrics["train"]["tpo/zero_variance_frac"][-1] == 1.0


def test_multimodal_inputs_reach_the_model_and_the_router_loss_is_added(tiny_llm_dir, tmp_path, monkeypatch):
    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 2
    trainer.model.train()
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    inputs["pixel_values"] = torch.ones(3, 5)
    inputs["image_grid_thw"] = torch.tensor([[1, 1, 3]])
    seen = {}
    original = trainer._get_per_token_logps_and_entropies

    def spy(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        seen.update(kwargs)  # the tiny model is text-only: score it without the image inputs
        logps, entropies, _ = original(model, input_ids, attention_mask, logits_to_keep)
        return logps, entropies, torch.tensor(2.0) if kwargs["compute_aux_loss"] else None

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", spy)
    plain = trainer._compute_loss(trainer.model, inputs).item()
    assert torch.equal(seen["pixel_values"], inputs["pixel_values"])
    assert torch.equal(seen["image_grid_thw"], inputs["image_grid_thw"])
    trainer.aux_loss_enabled, trainer.router_aux_loss_coef = True, 0.1
    with_router = trainer._compute_loss(trainer.model, inputs).item()
    assert with_router == pytest.approx(plain + 0.1 * 2.0 / 2, abs=1e-6)
    assert trainer._metrics["train"]["aux_loss"][-1] == 2.0


def test_trl_scores_at_the_sampling_temperature_like_our_loop(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path, temperature=0.5)
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    width = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        theirs, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, width)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = trainer.model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
        ours = torch.log_softmax(logits[:, -width - 1 : -1].float() / 0.5, -1)  # LLMPolicy's rule
        ours = ours.gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)
    mask = inputs["completion_mask"].bool()
    torch.testing.assert_close(theirs[mask], ours[mask], atol=1e-5, rtol=0)


def test_stop_cuts_completions_before_they_are_scored_and_trained(tiny_llm_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.tpo_agents.integrations.test_trl_integration import make_config
    from tpo_agents.integrations import trl as tpo_trl

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    tokenizer.padding_side = "left"
    seen: list[str] = []

    def reward(completions, **_):
        seen.extend(completions)
        return [float(len(text)) for text in completions]

    def generate(stop):
        seen.clear()
        trainer = tpo_trl.TargetPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(tiny_llm_dir), reward_funcs=reward,
            train_dataset=Dataset.from_dict({"prompt": ["q: x", "q: y"]}),
            args=make_config(tmp_path, stop=stop, max_completion_length=24, num_generations=4),
            processing_class=tokenizer,
        )  # fmt: skip
        trainer.model.train()
        return trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))

    generate(None)  # the same seed without a stop: pick a stop string inside the longest completion
    longest = max(seen, key=len)
    stop = longest[2:4]
    out = generate(stop)
    ids = [row[mask.bool()].tolist() for row, mask in zip(out["completion_ids"], out["completion_mask"],
                                                         strict=True)]  # fmt: skip
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert longest[:4] in seen  # that completion now ends with the stop
    for text, scored in zip(texts, seen, strict=True):
        assert text == scored  # the reward saw exactly the trained tokens
        assert scored.find(stop) in (-1, len(scored) - len(stop))  # no stop, or only at the very end


def test_stop_with_mask_truncated_completions_is_refused(tmp_path):
    from tests.tpo_agents.integrations.test_trl_integration import make_config
    from tpo_agents.integrations import trl as tpo_trl

    with pytest.raises(ValueError, match="stop='</answer>' with mask_truncated_completions=True"):
        tpo_trl.check_config(make_config(tmp_path, stop="</answer>", mask_truncated_completions=True))
    with pytest.raises(ValueError, match="stop=''"):
        make_config(tmp_path, stop="")
