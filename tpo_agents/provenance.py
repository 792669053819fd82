"""Which code produced a result: the git commit of the checkout, marked when its code has edits."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root (the folder above ``tpo_agents/``)."""
CODE_PATHS = ("tpo_agents", "tpo_gym")
"""The folders whose uncommitted edits mark the commit ``+dirty``: the code that trains."""


@functools.cache
def code_version() -> str:
    """``<short commit>`` of the checkout, ``<short commit>+dirty`` when :data:`CODE_PATHS` have
    uncommitted edits, ``"unknown"`` outside a git checkout (an installed package).

    Cached: the value when this process first asked, i.e. the code it imported.
    """
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", *CODE_PATHS], cwd=ROOT, capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name as ``cpuinfo`` (Linux's ``/proc/cpuinfo``) gives it, else
    ``platform.processor()``, else ``"unknown"``."""
    import platform

    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@functools.cache
def cpu_description() -> str:
    """The CPU a run computes on, ``"<model> (<instruction set of torch's CPU kernels>)"``, e.g.
    ``"AMD EPYC (AVX512)"``: :func:`cpu_model` and ``torch.backends.cpu.get_cpu_capability()`` (which
    ``ATEN_CPU_CAPABILITY`` can lower). The same code runs several times slower on some CPUs than on
    others, so CPU seconds compare only between runs of the same description."""
    import torch

    return f"{cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"
