"""The GPU scripts name real experiments, variants and workloads; ``--device`` reaches every job and is
checked in one line before anything runs (no GPU needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.speed import WORKLOADS
from experiments.core import check_device
from experiments.definitions import EXPERIMENTS, get_experiment
from experiments.runner import plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["experiments/gpu.sh", "benchmarks/gpu.sh"])
def test_the_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True)


def test_the_tables_script_names_real_experiments_and_variants() -> None:
    text = (ROOT / "experiments/gpu.sh").read_text()
    calls = re.findall(r"^run (\w+)(?: --variants (\S+))?", text, flags=re.M)
    loop = re.search(r"for experiment in ([\w ]+); do", text)
    names = [name for name, _ in calls] + (loop.group(1).split() if loop else [])
    assert names[:2] == ["vocab_sweep", "terminal"] and set(names) <= set(EXPERIMENTS)
    for name, variants in calls:
        if variants:
            experiment = get_experiment(name)
            grid = experiment.build(experiment.full.updates, False)
            assert set(variants.split(",")) <= set(grid), (name, variants)


def test_the_speed_script_names_real_workloads() -> None:
    script = (ROOT / "benchmarks/gpu.sh").read_text()
    command = script.split("python -m benchmarks.speed", 1)[1].replace("\\", " ")
    named = command.split(" -", 1)[0].split()  # the workloads, before the first flag
    assert set(named) == set(WORKLOADS) - {"tpo_token_smoke"}


def test_the_device_reaches_every_task(tmp_path: Path) -> None:
    tasks = plan(get_experiment("tabular_single"), tmp_path, smoke=True, n_seeds=2, device="cuda:1")
    assert tasks and {task.device for task in tasks} == {"cuda:1"}
    assert {task.device for task in plan(get_experiment("tabular_single"), tmp_path, smoke=True)} == {"cpu"}


@pytest.mark.slow
def test_a_device_this_machine_lacks_is_one_line(tmp_path: Path) -> None:
    assert check_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"--device 'tpu': not a PyTorch device"):
        check_device("tpu")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"this machine has 0 CUDA device"):
            check_device("cuda")
        proc = subprocess.run([sys.executable, "-m", "experiments.run", "tabular_single", "--smoke",
                               "--device", "cuda", "--out", str(tmp_path)],
                              capture_output=True, text=True, cwd=ROOT)  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "CUDA" in proc.stderr
        assert not any(tmp_path.iterdir())
