"""The language-model paths without silent errors: the text mode, TargetPOTrainer (TRL) and the verl
loss give one loss and gradient on the same rows, and each case that used to train on something else
is fixed (or refused) and pinned here: empty and truncated rows, the reference after ``load``, the KL
whatever the micro-batching, the stop string in the prompt's tail, the sampling temperature, the bf16
LoRA merge/unmerge sync, and one BOS in TRL's prompts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

pytest.importorskip("transformers")

from tpo_agents import losses as L  # noqa: E402
from tpo_agents.integrations import verl as tv  # noqa: E402
from tpo_agents.modes.text import TextBatch, TextMode, TextPart  # noqa: E402
from tpo_agents.policies import LLMPolicy  # noqa: E402
from tpo_agents.policies.generation import CompletionStop, VLLMGenerator, completion_lengths  # noqa: E402
from tpo_agents.tpo import TPO  # noqa: E402

torch.set_num_threads(1)
K = 4


def make_policy(model: str, **kwargs) -> LLMPolicy:
    kwargs = {"max_new_tokens": 12, **kwargs}
    return LLMPolicy(spaces.Text(256), spaces.Text(256), lambda _progress: 1e-2, model=model, **kwargs)


def rows(seed: int = 0, n_groups: int = 3, width: int = 6,
         random_scores: bool = False) -> dict[str, torch.Tensor]:
    """Ragged completions of n_groups x K rows: log-probs under theta and pi_old, masks, scores (fixed
    ones, or drawn from the same generator with ``random_scores``)."""
    g = torch.Generator().manual_seed(seed)
    n = n_groups * K
    lengths = torch.randint(1, width + 1, (n,), generator=g)
    mask = (torch.arange(width) < lengths[:, None]).float()
    old = -torch.rand(n, width, generator=g).mul(3.0) * mask
    new = (old + 0.3 * torch.randn(n, width, generator=g)) * mask
    if random_scores:
        scores = torch.rand(n, generator=g)
    else:
        scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.2, 0.9, 0.1, 0.3, 0.3, 0.3, 0.3])[:n]
    return {"mask": mask, "old": old, "new": new, "scores": scores}


def text_mode_loss(b: dict, new: torch.Tensor, logscore: str) -> torch.Tensor:
    """The text mode's TPO path: TextMode.group_view of a part holding every row, then TPO.group_loss."""
    n = b["scores"].numel()
    batch = TextBatch(
        prompts=["p"] * (n // K), completions=SimpleNamespace(completion_mask=b["mask"].long()),
        scores=b["scores"].reshape(-1, K), advantages=torch.zeros(n), old_token_log_probs=b["old"],
        answers=np.array([None] * n, dtype=object), format_ok=np.zeros(n, dtype=bool), logscore=logscore,
        group_size=K, rows_per_part=n,
    )  # fmt: skip
    view = TextMode.group_view(None, TextPart(batch, torch.arange(n)), new)
    algorithm = TPO("TransformerPolicy", "TPO/TokenCopy-v0", eta=0.7, env_kwargs=dict(sequence_length=3))
    loss, _ = algorithm.group_loss(view)  # the TPO algorithm's loss on the text mode's view
    return loss


def trl_loss(b: dict, new: torch.Tensor, logscore: str) -> torch.Tensor:
    from tpo_agents.integrations.trl import target_po_loss

    return target_po_loss(new, b["old"], b["mask"], b["scores"], K, eta=0.7, logscore=logscore)[0]


def verl_loss(b: dict, new: torch.Tensor, logscore: str) -> torch.Tensor:
    u = L.standardize(b["scores"].reshape(-1, K)).reshape(-1)
    config = {"rollout_n": K, "global_batch_info": {}, "ppo_micro_batch_size_per_gpu": b["scores"].numel(),
              "policy_loss": {"loss_mode": "tpo", "tpo_eta": 0.7, "tpo_logscore": logscore}}
    advantages = u[:, None] * b["mask"]
    return tv.compute_tpo_policy_loss(b["old"], new, advantages, b["mask"], "token-mean", config)[0]


@pytest.mark.parametrize("logscore", ["mean", "sum"])
def test_the_three_paths_give_one_loss_and_gradient(logscore):
    pytest.importorskip("trl")
    b = rows()
    reference_new = b["new"].clone().requires_grad_()
    reference, _ = L.completion_tpo_loss(reference_new, b["old"], b["mask"], b["scores"], K, 0.7, logscore)
    reference.backward()
    for path in (text_mode_loss, trl_loss, verl_loss):
        new = b["new"].clone().requires_grad_()
        loss = path(b, new, logscore)
        loss.backward()
        torch.testing.assert_close(loss, reference, atol=1e-6, rtol=0, msg=path.__name__)
        torch.testing.assert_close(new.grad, reference_new.grad, atol=1e-6, rtol=0, msg=path.__name__)


# ------------------------------------------------------------------------------------------ our loop


def test_temperature_scores_the_sampled_distribution(tiny_llm_dir):
    policy = make_policy(tiny_llm_dir, temperature=0.5)
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


def test_the_reference_without_lora_is_the_original_weights_also_after_load(tiny_llm_dir, tmp_path):
    policy = make_policy(tiny_llm_dir)
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
    loaded = make_policy(tiny_llm_dir)
    loaded.load_state_dict(torch.load(path))
    torch.testing.assert_close(loaded.token_log_probs(out, rows_).detach(), trained)
    torch.testing.assert_close(loaded.reference_token_log_probs(out, rows_), original)  # not the trained ones


def _text_model(algo, model_dir, micro: int, kl_coef: float):
    return algo("LLMPolicy", "TPO/ReasoningGym-v0",
                env_kwargs=dict(dataset="basic_arithmetic", size=8, eval_size=2, seed=1),
                policy_kwargs=dict(model=model_dir, max_new_tokens=6, micro_batch_size=micro),
                batch_size=4, group_size=4, learning_rate=1e-2, n_epochs=1, group_mode="text", seed=0,
                kl_coef=kl_coef, device="cpu")  # fmt: skip


def test_reference_kl_is_one_token_mean_whatever_the_micro_batch_size(tiny_llm_dir):
    pytest.importorskip("reasoning_gym")
    from stable_baselines3.common.logger import Logger

    from tpo_agents import TPO as TPOAlgo

    grads, kls = [], []
    for micro in (16, 4):
        model = _text_model(TPOAlgo, tiny_llm_dir, micro, kl_coef=0.5)
        model.policy.reference_model()  # the frozen copy of the original weights, before they move
        with torch.no_grad():  # move theta away from the reference (the original weights)
            g = torch.Generator().manual_seed(0)
            for param in model.policy.parameters():
                param.add_(0.05 * torch.randn(param.shape, generator=g))
        model.set_logger(Logger(None, []))
        _, callback = model._setup_learn(10**6, None)
        batch = model.collect(callback)
        batch.scores.zero_()  # neutral groups: at theta = theta_old the TPO term has no gradient
        model.policy.optimizer.zero_grad()
        stats, _ = model._accumulate_gradients(batch)
        grads.append(torch.cat([p.grad.flatten() for p in model.policy.parameters() if p.grad is not None]))
        kls.append(stats["reference_kl"])
        lengths = batch.completions.completion_mask.sum(-1)
        assert lengths.min() < lengths.max()  # ragged rows: a per-part mean would weight them differently
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)
    assert kls[0] == pytest.approx(kls[1], rel=1e-5)


def test_lora_merge_unmerge_syncs_leave_bf16_base_weights_bit_identical(tiny_llm_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llm_dir, dtype=torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    generator = object.__new__(VLLMGenerator)  # the sync's weight stream, without an engine
    generator.model = model
    merged = {key: value.clone() for key, value in generator._named_weights()}
    name = next(key for key in before if key.endswith("q_proj.base_layer.weight"))
    plain = name.removeprefix("base_model.model.").replace(".base_layer", "")
    assert not torch.equal(merged[plain].float(), before[name].float())  # the stream carries W + BA
    for _ in range(99):
        list(generator._named_weights())
    for key, param in model.named_parameters():
        assert torch.equal(param, before[key]), key


# ------------------------------------------------------------------------------------------ TRL only


def test_one_bos_in_trl_prompts(tiny_llm_dir):
    pytest.importorskip("trl")
    pytest.importorskip("reasoning_gym")
    from tokenizers import processors
    from transformers import AutoTokenizer

    from tpo_agents.integrations.trl import text_env_dataset

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    tokenizer.chat_template = "{{ bos_token }}" + tokenizer.chat_template  # a template that writes BOS
    bos = tokenizer.bos_token_id
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)])  # and a tokenizer that adds one
    assert tokenizer("x")["input_ids"][0] == bos
    dataset = text_env_dataset("TPO/ReasoningGym-v0", tokenizer, dataset="basic_arithmetic", size=2,
                               eval_size=1)
    ids = tokenizer(dataset[0]["prompt"])["input_ids"]  # as TRL tokenizes a string prompt
    assert ids.count(bos) == 1


def test_temperature_must_be_positive(tiny_llm_dir):
    with pytest.raises(ValueError, match="temperature=0"):
        make_policy(tiny_llm_dir, temperature=0)


def test_lora_dropout_is_refused(tiny_llm_dir):
    with pytest.raises(ValueError, match=r"lora_dropout=0.05: must be 0 \(pi_old"):
        make_policy(tiny_llm_dir, lora_rank=4, lora_dropout=0.05)


def test_text_mode_drops_truncated_completions_with_mask_truncated_completions(tiny_llm_dir):
    """Completions cut by max_new_tokens get an empty mask and leave their group's softmax: the TPO loss
    and gradient equal tpo_agents.losses.completion_tpo_loss with those rows invalid, the count is logged."""
    pytest.importorskip("reasoning_gym")
    from stable_baselines3.common.logger import Logger

    from tpo_agents import TPO as TPOAlgo

    model = TPOAlgo("LLMPolicy", "TPO/ReasoningGym-v0",
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
    batch.scores = torch.arange(16.0).reshape(4, 4) % 3
    part = next(model.mode.parts(batch))[0]
    lp = model.mode.log_probs(model.policy, part)
    loss, stats = model.group_loss(model.mode.group_view(part, lp))
    assert stats["dropped_rows"] == int(truncated.sum())
    expected, _ = L.completion_tpo_loss(lp, batch.old_token_log_probs, batch.mask.float(),
                                        batch.scores.reshape(-1), 4)  # fmt: skip
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)


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
