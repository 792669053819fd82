"""A job's training state on disk, so that a stopped process resumes its job where it stopped.

A job that trains longer than ``every_s`` seconds (``experiments.run --checkpoint-every``) writes its whole
state at the start of a collection, when k updates are done and the next has not begun: the agent (policy,
optimizer, env and its RNG, counters), the recorder (the curves so far), torch's, NumPy's and Python's
global RNG states, and the job's CPU and wall seconds so far. It goes to
:func:`experiments.core.checkpoint_path`, beside the job's first seed file, atomically (a temporary file
moved over the last one). A job started again whose checkpoint records the same run (spec fingerprint,
seeds, code commit, device) loads it and trains the remaining updates: the same samples, updates and
curves as a job that never stopped. The seed files written, the checkpoint is deleted.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

from tpo_agents.files import atomic_write


def rng_states() -> dict[str, Any]:
    """The process's global RNG states: torch's (CPU and, once initialised, CUDA), NumPy's, Python's."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                              "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`rng_states` returned."""
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` and the global RNG states to ``path`` atomically (``torch.save``)."""
    atomic_write(path, lambda f: torch.save({**state, "rng": rng_states()}, f))


def load_checkpoint(path: Path, identity: dict[str, Any], log: Any = None) -> dict[str, Any] | None:
    """The state saved at ``path`` with the global RNG states restored, or None where there is none; a
    checkpoint of another run (its ``identity`` differs: spec fingerprint, seeds, code) or one that cannot
    be read is ignored, with a line to ``log`` (default stderr) saying why."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=False)
    except Exception as error:  # noqa: BLE001  (a truncated or foreign file: the job starts over)
        print(f"{path}: not resumed, the checkpoint cannot be read ({type(error).__name__}: {error})",
              file=log or sys.stderr, flush=True)
        return None
    if state.get("identity") != identity:
        theirs = state.get("identity") or {}
        differ = ", ".join(f"{key} {theirs.get(key)!r} here {value!r}" for key, value in identity.items()
                           if theirs.get(key) != value)
        print(f"{path}: not resumed, the checkpoint is of another run ({differ})", file=log or sys.stderr,
              flush=True)
        return None
    set_rng_states(state.pop("rng"))
    return state


class Checkpointer(BaseCallback):
    """Save ``state()`` to ``path`` (:func:`save_checkpoint`) at the start of a collection once ``every_s``
    seconds have passed since the job started or last saved (0: at every collection but the first). Placed
    after the recorder, so that the update just done is in its curves."""

    def __init__(self, path: Path, every_s: float, state: Callable[[], dict[str, Any]],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.path, self.every_s, self.state, self.clock = path, every_s, state, clock
        self.last = clock()
        self.collections = 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        self.collections += 1
        if self.collections > 1 and self.clock() - self.last >= self.every_s:
            save_checkpoint(self.path, self.state())
            self.last = self.clock()
