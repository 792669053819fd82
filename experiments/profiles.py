"""Performance profiles of the seeds' final errors, beyond the paper (Agarwal et al. 2021).

The aggregate view of Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice", whose
``rliable`` draws them for scores.

For one (variant, method) with final errors e_1..e_n over seeds, the profile is P(tau) = #{j: e_j <=
tau} / n on a log grid of tau, drawn with its pointwise percentile-bootstrap 95% band over seeds
(``experiments.metrics.score_profile``, ``bootstrap_profile``); one panel per variant, one line per
method. A curve further up and to the left is a method whose seeds end lower, seed by seed rather than
on average.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.figures import save_panels
from experiments.metrics import bootstrap_profile, score_profile

N_TAUS = 200
Finals = dict[str, dict[str, np.ndarray]]
"""variant -> method label -> the seeds' final errors [n_seeds]."""


def tau_grid(finals: Finals, n: int = N_TAUS) -> np.ndarray:
    """``n`` log-spaced thresholds from half the smallest positive final to the largest final (at least
    twice the lowest end); ``[1e-4, 1]`` when no final is positive."""
    values = np.concatenate([v for cell in finals.values() for v in cell.values()])
    positive = values[values > 0]
    low = float(positive.min()) / 2 if len(positive) else 1e-4
    high = max(float(values.max()), 2 * low) if len(positive) else 1.0
    return np.geomspace(low, high, n)


def profiles(finals: Finals, taus: np.ndarray | None = None) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``variant -> method -> {"tau", "profile", "low", "high"}`` (lists, for the report's JSON)."""
    taus = tau_grid(finals) if taus is None else np.asarray(taus, dtype=np.float64)
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for variant, cell in finals.items():
        for label, values in cell.items():
            low, high = bootstrap_profile(values, taus)
            out.setdefault(variant, {})[label] = {
                "tau": taus.tolist(), "profile": score_profile(values, taus).tolist(),
                "low": low.tolist(), "high": high.tolist()}
    return out


def draw_profiles(title: str, curves: dict[str, dict[str, dict[str, list[float]]]], path: Path,
                  colors: dict[str, Any] | None = None) -> None:
    """One panel per variant of ``profiles``' curves (log tau), each method with its band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(4.5, 3.6 * cols), 3.1 * rows), squeeze=False)
    flat = axes.ravel()
    for ax, (variant, cell) in zip(flat, curves.items(), strict=False):
        for label, curve in cell.items():
            color = (colors or {}).get(label.split(" ")[0])
            ax.step(curve["tau"], curve["profile"], where="post", label=label, lw=1.3, color=color)
            ax.fill_between(curve["tau"], curve["low"], curve["high"], step="post", alpha=0.2, lw=0,
                            color=color)
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(variant, fontsize=9)
        ax.set_xlabel("tau (final error)", fontsize=8)
        ax.set_ylabel("fraction of seeds <= tau", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, which="both", lw=0.4)
    heading = f"{title}\nperformance profiles over seeds, 95% bootstrap bands"
    save_panels(fig, flat, len(curves), heading, path)
