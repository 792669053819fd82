"""benchmarks/llm_gpu.sh, the prepared GPU check: the shell script parses, and its text-mode part runs
(here on the CPU with the tiny test model, HF backend) and reports its figures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

ROOT = Path(__file__).resolve().parents[2]
torch.set_num_threads(1)


def test_the_script_parses():
    script = str(ROOT / "benchmarks" / "llm_gpu.sh")
    result = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_text_mode_part_reports_its_figures(tiny_llm_dir, tmp_path):
    from benchmarks.llm_gpu_text import main

    result = main(["--model", tiny_llm_dir, "--updates", "1", "--batch-size", "2", "--group-size", "2",
                   "--device", "cpu", "--out", str(tmp_path)])  # fmt: skip
    assert result["updates"] == 1 and result["backend"] == "hf"
    assert result["generation_tokens_per_s"] > 0 and result["train_tokens_per_s"] > 0
    assert 0.0 <= result["mean_score"] <= 1.0
