"""The vLLM backend's glue on a CPU, with a fake ``vllm`` module standing in for the engine (the real one
needs a CUDA GPU): sampling parameters, prompts without padding, outputs into padded completions, the
weight sync after an update (LoRA merged, plain names, prefix cache dropped, bf16 base weights bit
identical after the merge and unmerge), and pi_old: the trainer's forward, not the engine's log-probs."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from gymnasium import spaces

pytest.importorskip("transformers")
torch.set_num_threads(1)


#: The log-prob the fake engine reports for every sampled token (the sampler's, not the trainer's).
ENGINE_LOG_PROB = -0.5


class FakeEngine:
    """Records what the backend asks of ``vllm.LLM``; answers with fixed token ids."""

    instances: list[FakeEngine] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs, self.requests, self.loaded, self.resets = kwargs, [], [], 0
        model = types.SimpleNamespace(load_weights=lambda weights: self.loaded.extend(weights))
        runner = types.SimpleNamespace(model=model)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner))
        )
        FakeEngine.instances.append(self)

    def generate(self, prompts: list[dict], sampling_params: Any, use_tqdm: bool) -> list[Any]:
        self.requests.append((prompts, sampling_params))
        return [
            types.SimpleNamespace(outputs=[self.sample([5 + i, 6, 7][: 1 + (i + j) % 3])
                                           for j in range(sampling_params.n)])
            for i, _ in enumerate(prompts)
        ]

    @staticmethod
    def sample(token_ids: list[int]) -> Any:
        """One output: its token ids and the sampler's log-prob of each, ENGINE_LOG_PROB (vLLM's
        ``logprobs``: one ``{token id: Logprob}`` per token), which the loss must not read."""
        logprobs = [{token: types.SimpleNamespace(logprob=ENGINE_LOG_PROB)} for token in token_ids]
        return types.SimpleNamespace(token_ids=token_ids, logprobs=logprobs,
                                     cumulative_logprob=ENGINE_LOG_PROB * len(token_ids))

    def reset_prefix_cache(self) -> None:
        self.resets += 1


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> type[FakeEngine]:
    module = types.ModuleType("vllm")
    module.LLM = FakeEngine
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    # the project's own check, not torch.cuda.is_available: a CUDA build of torch would then try a real device
    monkeypatch.setattr("tpo_agents.policies.llm.vllm_usable", lambda: True)
    FakeEngine.instances.clear()
    return FakeEngine


def make_policy(model: str, **kwargs: Any):
    from tpo_agents.policies import LLMPolicy

    settings = dict(backend="vllm", dtype="float32", stop="</a>", max_new_tokens=3, temperature=0.7)
    return LLMPolicy(spaces.Text(64), spaces.Text(64), lambda _: 1e-2, model=model, **settings, **kwargs)


def test_generation_goes_through_the_engine(tiny_llm_dir: str, fake_vllm) -> None:
    policy = make_policy(tiny_llm_dir)
    engine = fake_vllm.instances[-1]
    assert (
        engine.kwargs["model"] == tiny_llm_dir
        and engine.kwargs["distributed_executor_backend"] == "external_launcher"
    )
    completions = policy.generate(["hi", "what?"], n=2)
    prompts, params = engine.requests[-1]
    assert (params.n, params.temperature, params.max_tokens, params.stop) == (2, 0.7, 3, ["</a>"])
    assert params.include_stop_str_in_output
    unpadded = [
        policy.tokenizer(policy.format_prompt(p), add_special_tokens=False)["input_ids"]
        for p in ("hi", "what?")
    ]
    assert [request["prompt_token_ids"] for request in prompts] == unpadded
    assert completions.completion_ids.shape == (4, 3)
    assert completions.completion_mask.sum(-1).tolist() == [1, 2, 2, 3]
    assert completions.completion_ids[0].tolist()[:1] == [5] and completions.owner.tolist() == [0, 0, 1, 1]
    greedy = policy.generate(["hi"], n=1, greedy=True)
    assert engine.requests[-1][1].temperature == 0.0 and greedy.completion_ids.shape[0] == 1


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_weight_sync_loads_plain_names_and_drops_the_cache(
    tiny_llm_dir: str, fake_vllm, lora_rank: int
) -> None:
    if lora_rank:
        pytest.importorskip("peft")
    policy = make_policy(tiny_llm_dir, lora_rank=lora_rank)
    engine = fake_vllm.instances[-1]
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    policy.sync_generator()
    names = [name for name, _ in engine.loaded]
    assert engine.resets == 1 and "model.embed_tokens.weight" in names
    assert not any("lora_" in name or "base_model" in name or "base_layer" in name for name in names)
    assert len(names) == len(set(names))
    after = dict(policy.model.named_parameters())
    assert all(torch.equal(before[name], after[name]) for name in before)  # unmerged again


def test_pi_old_is_the_trainers_forward_not_the_engines_log_probs(tiny_llm_dir: str, fake_vllm) -> None:
    """Text mode with the vLLM backend: the engine is asked for no log-probs, and the L_old of the loss's
    group view is the trainer's teacher-forced forward of the engine's completions at theta_old (the first
    epoch's), not the log-probs the engine reports for its samples."""
    pytest.importorskip("reasoning_gym")
    from stable_baselines3.common.logger import Logger

    from tpo_agents import TPO
    from tpo_agents.losses import completion_logscores

    k = 4
    model = TPO("LLMPolicy", "TPO/ReasoningGym-v0",
                env_kwargs=dict(dataset="basic_arithmetic", size=8, eval_size=2, seed=1),
                policy_kwargs=dict(model=tiny_llm_dir, backend="vllm", dtype="float32", max_new_tokens=3,
                                   micro_batch_size=2 * k),
                batch_size=2, group_size=k, n_epochs=1, group_mode="text", seed=0, device="cpu")  # fmt: skip
    model.set_logger(Logger(None, []))
    _, callback = model._setup_learn(10**6, None)
    batch = model.collect(callback)
    policy, loss, seen = model.policy, model.group_loss, []

    def spy(view, diagnostics):
        with torch.no_grad():  # the trainer's forward at theta_old: the optimizer has not stepped yet
            forward = policy.token_log_probs(batch.completions, torch.arange(batch.scores.numel()))
        mask = batch.mask.float()
        engine = torch.full_like(forward, ENGINE_LOG_PROB)
        seen.append((view.old_logscores.detach(), completion_logscores(forward, mask, k, policy.logscore),
                     completion_logscores(engine, mask, k, policy.logscore)))
        return loss(view, diagnostics)

    model.group_loss = spy
    model.train(batch)
    params = fake_vllm.instances[-1].requests[-1][1]
    assert getattr(params, "logprobs", None) is None
    [(old, trainer, engine)] = seen
    torch.testing.assert_close(old, trainer, rtol=0, atol=1e-6)
    assert (old - engine).abs().min() > 1e-2


def test_lora_merge_unmerge_syncs_leave_bf16_base_weights_bit_identical(tiny_llm_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tpo_agents.policies.generation import VLLMGenerator

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
