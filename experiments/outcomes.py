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

``outcome_differences`` compares, in every variant holding TPO, TPO's share of seeds with each of the
first three end states (final below X, exactly 0, failed) with each other method's: the difference of the
shares with its percentile-bootstrap 95% interval (each method's seeds resampled on their own,
``experiments.metrics.bootstrap_difference`` of the 0/1 outcomes) and the two-sided Fisher exact p of the
two counts (``experiments.metrics.fisher_exact_test``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.core import Experiment
from experiments.metrics import below, bootstrap_difference, difference, fisher_exact_test, seed_steps
from experiments.pairwise import reference_pairs

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
        first = seed_steps(curves, experiment.threshold, r.x(experiment.metric))
        crossed = np.isfinite(first)
        ends = end_states(experiment, r)
        lowest = curves[~crossed].min(1)
        rows.append({
            "variant": variant, "algo": algo, "label": r.label, "seeds": len(r.seeds),
            **{name: int(flags.sum()) for name, flags in ends.items()}, "crossed": int(crossed.sum()),
            "crossed_ended_above": int((crossed & ~ends["ends_below"]).sum()),
            "first_crossing_range": [float(first[crossed].min()), float(first[crossed].max())]
            if crossed.any() else None,
            "never_lowest_range": [float(lowest.min()), float(lowest.max())] if len(lowest) else None})
    return rows


def end_states(experiment: Experiment, runs: Runs) -> dict[str, np.ndarray]:
    """Per seed, whether its final error is below the threshold (``ends_below``), exactly 0
    (``ends_at_zero``) and above :data:`FAILED` (``failed``)."""
    last = np.asarray(runs.arrays[experiment.metric], dtype=np.float64)[:, -1]
    return {"ends_below": below(last, experiment.threshold), "ends_at_zero": last == 0,
            "failed": last > FAILED}


def outcome_differences(experiment: Experiment, runs: dict[str, dict[str, Runs]],
                        cells: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, method) of ``cells`` whose variant holds TPO: per end state (:func:`end_states`)
    the two counts, the difference of the shares (TPO - method) with its bootstrap 95% interval, and the
    Fisher exact p."""
    rows = []
    for variant, algo, tpo, other in reference_pairs(runs, cells):
        row: dict[str, Any] = {"variant": variant, "algo": algo, "label": other.label, "reference": tpo.label,
                               "seeds": [len(tpo.seeds), len(other.seeds)]}
        ends_tpo, ends_other = end_states(experiment, tpo), end_states(experiment, other)
        for name, flags in ends_tpo.items():
            a, b = flags.astype(np.float64), ends_other[name].astype(np.float64)
            row[name] = {"counts": [int(a.sum()), int(b.sum())], "difference": difference(a, b),
                         "ci": list(bootstrap_difference(a, b)),
                         "p": fisher_exact_test(int(a.sum()), len(a), int(b.sum()), len(b))}
        rows.append(row)
    return rows


def _range(values: list[float] | None, scale: float, digits: int, unit: str) -> str:
    if values is None:
        return "—"
    low, high = (f"{scale * v:,.{digits}f}" for v in values)
    return f"{low}{unit}" if low == high else f"{low}–{high}{unit}"


def _head(experiment: Experiment) -> dict[str, str]:
    x = f"{100 * experiment.threshold:g}%"
    return {"ends_below": f"final below {x}", "ends_at_zero": "final exactly 0",
            "failed": f"failed (final > {100 * FAILED:g}%)"}


def _signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def outcome_differences_table(experiment: Experiment, rows: list[dict[str, Any]]) -> str:
    """``outcome_differences``' rows as a Markdown table with its legend."""
    head = _head(experiment)
    lines = ["| variant | TPO − method | seeds | " + " | ".join(head.values()) + " |",
             "|" + "---|" * (3 + len(head))]
    for row in rows:
        cells = [row["variant"], f"{row['reference']} − {row['label']}", " / ".join(map(str, row["seeds"]))]
        for name in head:
            end = row[name]
            low, high = end["ci"]
            cells.append(f"{end['counts'][0]} vs {end['counts'][1]}: {_signed(end['difference'])} pp "
                         f"[{_signed(low)}, {_signed(high)}], p = {end['p']:.2g}")
        lines.append("| " + " | ".join(cells) + " |")
    legend = ("a vs b: TPO's seeds and the method's in that end state; then TPO's share of its seeds minus "
              "the method's, in percentage points, with its percentile-bootstrap 95% interval (each method's "
              "seeds resampled on their own); p: two-sided Fisher exact test of the two counts.")
    return "\n".join([*lines, "", legend])


def outcomes_table(experiment: Experiment, rows: list[dict[str, Any]]) -> str:
    """``seed_outcomes``' rows as a Markdown table (errors in percent)."""
    x = f"{100 * experiment.threshold:g}%"
    ends = _head(experiment)
    head = ["variant", "method", "seeds", ends["ends_below"], f"ever below {x}", f"crossed, final ≥ {x}",
            ends["ends_at_zero"], ends["failed"], f"first crossing of {x} (range)",
            f"never below {x}: lowest error (range)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["variant"], row["label"], str(row["seeds"]), str(row["ends_below"]), str(row["crossed"]),
                 str(row["crossed_ended_above"]), str(row["ends_at_zero"]), str(row["failed"]),
                 _range(row["first_crossing_range"], 1, 0, ""),
                 _range(row["never_lowest_range"], 100, 1, "%")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
