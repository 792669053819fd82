"""How the seeds of each cell end: counts over seeds where the seed mean hides a split.

Under a sparse reward a cell's seeds split into those that learn and those that do not, and the seed mean
of the final error (the report's "final") cannot tell 10 seeds at 50% from 5 at 0% and 5 at 100%. For an
experiment with a threshold X on an error curve in [0, 1], ``seed_outcomes`` counts, per (variant,
method), over the seeds j with curve e_j(t) (t = 0..T-1, the report's "final" is e_j(T-1)):

* below X at the end: e_j(T-1) < X (``experiments.metrics.below``, as every "steps to X");
* below X at some point: the seeds with a first crossing s_j = min{t : e_j(t) < X}
  (``experiments.metrics.seed_steps``), and the range of those s_j;
* crossed, ended at or above X: below X at some point, not at the end;
* exactly 0 at the end: e_j(T-1) = 0;
* failed: e_j(T-1) > 1/2;
* of the seeds never below X, the range of their lowest point min_t e_j(t).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.core import Experiment
from experiments.metrics import below, seed_steps

if TYPE_CHECKING:
    from experiments.runs import Runs

FAILED = 0.5
"""A seed whose final error is above this failed."""


def seed_outcomes(experiment: Experiment, runs: dict[str, dict[str, Runs]],
                  cells: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, algorithm) of ``cells``: the counts of the module docstring, with the
    first-crossing range (``None`` where no seed crosses) and the lowest-point range of the seeds that never
    cross (``None`` where every seed crosses)."""
    if experiment.threshold is None:
        raise ValueError(f"seed outcomes need a threshold; experiment {experiment.name!r} has none")
    rows = []
    for variant, algo in cells:
        r = runs[variant][algo]
        curves = np.asarray(r.arrays[experiment.metric], dtype=np.float64)
        last = curves[:, -1]
        x = r.x(experiment.metric)
        first = seed_steps(curves, experiment.threshold, x)
        crossed = np.isfinite(first)
        ends_below = below(last, experiment.threshold)
        lowest = curves[~crossed].min(1)
        rows.append({
            "variant": variant, "algo": algo, "label": r.label, "seeds": len(r.seeds),
            "ends_below": int(ends_below.sum()), "crossed": int(crossed.sum()),
            "crossed_ended_above": int((crossed & ~ends_below).sum()),
            "ends_at_zero": int((last == 0).sum()), "failed": int((last > FAILED).sum()),
            "first_crossing_range": [float(first[crossed].min()), float(first[crossed].max())]
            if crossed.any() else None,
            "never_lowest_range": [float(lowest.min()), float(lowest.max())] if len(lowest) else None})
    return rows


def _range(values: list[float] | None, scale: float, digits: int, unit: str) -> str:
    if values is None:
        return "—"
    low, high = (f"{scale * v:,.{digits}f}" for v in values)
    return f"{low}{unit}" if low == high else f"{low}–{high}{unit}"


def outcomes_table(experiment: Experiment, rows: list[dict[str, Any]]) -> str:
    """``seed_outcomes``' rows as a Markdown table (errors in percent)."""
    x = f"{100 * experiment.threshold:g}%"
    head = ["variant", "method", "seeds", f"final below {x}", f"ever below {x}",
            f"crossed, final ≥ {x}", "final exactly 0", f"failed (final > {100 * FAILED:g}%)",
            f"first crossing of {x} (range)", f"never below {x}: lowest error (range)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["variant"], row["label"], str(row["seeds"]), str(row["ends_below"]), str(row["crossed"]),
                 str(row["crossed_ended_above"]), str(row["ends_at_zero"]), str(row["failed"]),
                 _range(row["first_crossing_range"], 1, 0, ""),
                 _range(row["never_lowest_range"], 100, 1, "%")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
