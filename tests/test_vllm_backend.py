"""The vLLM backend's glue on a CPU, with a fake ``vllm`` module standing in for the engine (the real one
needs a CUDA GPU): sampling parameters, prompts without padding, outputs into padded completions, and the
weight sync after an update (LoRA merged, plain names, prefix cache dropped)."""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

import pytest
import torch
from gymnasium import spaces

pytest.importorskip("transformers")
torch.set_num_threads(1)


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
        answer = types.SimpleNamespace
        return [
            answer(
                outputs=[answer(token_ids=[5 + i, 6, 7][: 1 + (i + j) % 3]) for j in range(sampling_params.n)]
            )
            for i, _ in enumerate(prompts)
        ]

    def reset_prefix_cache(self) -> None:
        self.resets += 1


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> type[FakeEngine]:
    module = types.ModuleType("vllm")
    module.LLM = FakeEngine
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a)
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    FakeEngine.instances.clear()
    return FakeEngine


def make_policy(model: str, **kwargs: Any):
    from agents.policies import LLMPolicy

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
