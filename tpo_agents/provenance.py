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
