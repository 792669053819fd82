"""benchmarks.llm_speed: our own path runs and is timed on a tiny LM built in code, so that a change of
``train``'s signature (which the benchmark wraps) cannot break it silently."""

from __future__ import annotations

import pytest
import torch

from benchmarks.llm_speed import parse_args, run_ours

torch.set_num_threads(1)


@pytest.mark.filterwarnings("ignore:2 of 2 batches had no signal")  # a random LM scores alike
def test_our_path_times_every_update(tiny_llm_dir: str) -> None:
    sizes = ["--updates", "2", "--prompts", "2", "--k", "2", "--max-new-tokens", "4", "--micro-batch", "2"]
    args = parse_args(["--model", tiny_llm_dir, "--paths", "ours", *sizes, "--threads", "1"])
    seconds, tokens = run_ours(args)
    assert len(seconds) == len(tokens) == 2
    assert all(s > 0 for s in seconds) and all(1 <= t <= 2 * 2 * 4 for t in tokens)
