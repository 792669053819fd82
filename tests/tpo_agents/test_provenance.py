"""What a seed file records of the machine: the CPU's model and the instruction set of torch's kernels."""

from __future__ import annotations

from pathlib import Path

import torch

from tpo_agents.provenance import cpu_description, cpu_model

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu avx2

processor\t: 1
model name\t: AMD EPYC 9R14 96-Core Processor
"""


def test_cpu_model_is_the_first_model_name_of_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    assert cpu_model(cpuinfo) == "AMD EPYC 9R14 96-Core Processor"


def test_cpu_model_without_cpuinfo_is_the_platform_s(tmp_path: Path) -> None:
    import platform

    assert cpu_model(tmp_path / "missing") == (platform.processor() or "unknown")
    (tmp_path / "empty").write_text("processor\t: 0\nmodel name\t: \n")
    assert cpu_model(tmp_path / "empty") == (platform.processor() or "unknown")


def test_cpu_description_names_the_kernels_instruction_set() -> None:
    assert cpu_description() == f"{cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"
