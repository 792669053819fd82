"""benchmarks.llm_speed: our own path runs and is timed on a tiny LM built in code, so that a change of
``train``'s signature (which the benchmark wraps) cannot break it silently."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.llm_speed import parse_args, run_ours

torch.set_num_threads(1)


@pytest.mark.filterwarnings("ignore:2 of 2 batches had no signal")  # a random LM scores alike
def test_our_path_times_every_update(tiny_llm_dir: str) -> None:
    sizes = ["--updates", "2", "--prompts", "2", "--k", "2", "--max-new-tokens", "4", "--micro-batch", "2"]
    args = parse_args(["--model", tiny_llm_dir, "--paths", "ours", *sizes, "--threads", "1"])
    seconds, cpu_seconds, tokens = run_ours(args)
    assert len(seconds) == len(cpu_seconds) == len(tokens) == 2
    assert all(s > 0 for s in seconds + cpu_seconds) and all(1 <= t <= 2 * 2 * 4 for t in tokens)



@pytest.fixture
def eos_first_llm_dir(tiny_llm_dir: str, tmp_path: Path) -> str:
    """The tiny LM with its EOS logit raised far above the others: a sampled completion ends at once."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llm_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id, 0] = 1e3
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.filterwarnings("ignore:2 of 2 batches had no signal")
def test_fixed_length_gives_every_completion_the_limit(eos_first_llm_dir: str) -> None:
    sizes = ["--updates", "2", "--prompts", "2", "--k", "2", "--max-new-tokens", "5", "--micro-batch", "2"]
    base = ["--model", eos_first_llm_dir, "--paths", "ours", *sizes, "--threads", "1"]
    *_, sampled = run_ours(parse_args(base))
    *_, fixed = run_ours(parse_args([*base, "--fixed-length"]))
    assert max(sampled) < 2 * 2 * 5  # completions end at EOS
    assert fixed == [2 * 2 * 5, 2 * 2 * 5]  # prompts x K x the limit: EOS waits for the limit
