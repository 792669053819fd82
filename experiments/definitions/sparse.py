"""What explains TPO's gains under sparse reward (paper Section 4, Figs. 11-16).

Reverse copy with terminal reward, H = 8, V = 2, B = 256 prompts, K = 32 completions, 2,000 episodes;
sequence-level grouped methods; the other settings are the zoo's (``zoo_configs/<algo>.yml``, V = 2
included). Every run also records the per-episode diagnostics of ``train/``:
first-epoch gradient norm, all-fail and zero-variance group fractions, target mass (TPO) or |A| (GRPO)
per successful and per failed candidate.

* ``diagnostics`` (Sections 4.1-4.3, Figs. 11, 12, 15): TPO, TPO (1 epoch), GRPO, GRPO (no KL), PPO,
  DG; 10 seeds.
* ``k_sweep`` (Section 4.2, Fig. 13): K in {4, 8, 16, 32, 64} for TPO and GRPO; 30 seeds.
* ``masking`` (Section 4.2, Fig. 14): TPO, GRPO and GRPO-masked at K = 32; 30 seeds.
* ``epoch_sweep`` (Section 4.3, Fig. 16): E in {1, 2, 4, 8, 16} for TPO and GRPO at K = 32; 30 seeds.

Smoke size: 2 seeds, 3 episodes and B = 32 prompts (one episode at B = 256, K = 32 takes ~10 s on one core).
"""

from __future__ import annotations

from typing import Any

from experiments.core import Experiment, Grid, RunSpec, Size
from experiments.definitions.tokens import token_run

H, B, K = 8, 256, 32
SMOKE_B = 32
DIAGNOSTIC_ALGOS = ("tpo", "tpo_1ep", "grpo", "grpo_no_kl", "ppo", "dg")
K_VALUES = (4, 8, 16, 32, 64)
EPOCHS = (1, 2, 4, 8, 16)


def _run(algo: str, updates: int, smoke: bool, **kwargs: Any) -> RunSpec:
    kwargs = {"K": K, **kwargs}
    return token_run(algo, updates, reward="terminal", H=H, B=SMOKE_B if smoke else B, **kwargs)


def build_diagnostics(updates: int, smoke: bool) -> Grid:
    """The six methods of Figs. 11-12 and 15."""
    return {f"H{H}_K{K}": {a: _run(a, updates, smoke) for a in DIAGNOSTIC_ALGOS}}


def build_k_sweep(updates: int, smoke: bool) -> Grid:
    """TPO and GRPO at each K."""
    return {f"K{k}": {a: _run(a, updates, smoke, K=k) for a in ("tpo", "grpo")} for k in K_VALUES}


def build_masking(updates: int, smoke: bool) -> Grid:
    """TPO, GRPO and GRPO-masked."""
    return {f"K{K}": {a: _run(a, updates, smoke) for a in ("tpo", "grpo", "grpo_masked")}}


def build_epochs(updates: int, smoke: bool) -> Grid:
    """TPO and GRPO at each epoch count."""
    return {f"E{e}": {a: _run(a, updates, smoke, n_epochs=e) for a in ("tpo", "grpo")} for e in EPOCHS}


DIAGNOSTIC_PANELS = ("update/train/grad_norm", "update/all_fail", "update/train/q_mass_winners",
                     "update/train/q_mass_losers")
DIAGNOSTICS = Experiment(
    name="diagnostics", paper="Sections 4.1-4.3 (Figs. 11, 12, 15)", full=Size(10, 2000),
    smoke=Size(2, 3), build=build_diagnostics, threshold=0.01, panels=DIAGNOSTIC_PANELS,
    log_panels=(True, False, False, False, False),
)
K_SWEEP = Experiment(
    name="k_sweep", paper="Section 4.2, Fig. 13", full=Size(30, 2000), smoke=Size(2, 3),
    build=build_k_sweep, threshold=0.01, log_panels=(True,),
)
MASKING = Experiment(
    name="masking", paper="Section 4.2, Fig. 14", full=Size(30, 2000), smoke=Size(2, 3),
    build=build_masking, threshold=0.01, log_panels=(True,),
)
EPOCH_SWEEP = Experiment(
    name="epoch_sweep", paper="Section 4.3, Fig. 16", full=Size(30, 2000), smoke=Size(2, 3),
    build=build_epochs, threshold=0.01, log_panels=(True,),
)
