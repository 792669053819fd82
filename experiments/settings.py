"""One setting against another, method by method (``experiments.report``'s "setting differences").

For each pair (variant, baseline variant) of ``Experiment.compared_variants``, every method present in both,
the variant's seeds against the baseline's (e.g. Table 3's ``skip/H10``, which skips the batches without
signal, against ``prompts/H10``, which lets the optimizer step on their zero gradient).

* Final: the difference of the seed means of the last point of the metric, variant − baseline, with its
  percentile-bootstrap 95% interval, rank-sum p and P(variant lower) (``experiments.pairwise.compare``).
* Batches without signal: per seed, the updates whose batch error is exactly 0 or 1 (every completion
  succeeded, or every one failed: with binary rewards no group then carries signal, the batches a skip
  setting does not train on), the mean over seeds on each side. A lower bound of such batches: one in
  which every group is all-success or all-failure but the groups differ is not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.core import Experiment
from experiments.pairwise import compare

if TYPE_CHECKING:
    from experiments.runs import Runs

SETTINGS_LEGEND = (
    "variant − baseline, the same method, over independent seeds (negative: the variant lower); [95%]: "
    "percentile bootstrap, each side's seeds resampled on their own; p: two-sided Wilcoxon rank-sum, exact "
    "(ties at their midrank); P(variant lower): the chance that a variant seed's final is below a baseline "
    "seed's (ties half). Batches without signal: updates whose batch error is exactly 0 or 1 (no group "
    "carries signal under binary rewards), mean per seed.")


def batches_without_signal(curves: np.ndarray) -> np.ndarray:
    """Per seed (row of ``curves``, the batch error of each update): how many updates have a batch error
    of exactly 0 or 1."""
    return ((curves == 0.0) | (curves == 1.0)).sum(axis=1)


def setting_differences(experiment: Experiment, runs: dict[str, dict[str, Runs]],
                        order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, baseline) of ``experiment.compared_variants`` and method in both (methods in
    the order of ``order``'s (variant, method) cells): variant − baseline of the final, and the batches
    without signal on each side."""
    rows = []
    for variant, baseline in experiment.compared_variants:
        for algo in [a for v, a in order if v == variant and a in runs.get(baseline, {})]:
            cell, other = runs[variant][algo], runs[baseline][algo]
            curves, base_curves = cell.arrays[experiment.metric], other.arrays[experiment.metric]
            final = compare(curves[:, -1], base_curves[:, -1])
            rows.append({"variant": variant, "baseline": baseline, "algo": algo, "label": cell.label,
                         "seeds": [len(cell.seeds), len(other.seeds)],
                         "final_difference": final["difference"], "final_difference_ci": final["ci"],
                         "final_p": final["p"], "final_lower": final["lower"],
                         "without_signal": [float(batches_without_signal(curves).mean()),
                                            float(batches_without_signal(base_curves).mean())]})
    return rows


def settings_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`setting_differences` as Markdown (percentage points), with the legend."""
    head = ["variant − baseline", "method", "seeds", "final: difference (pp) [95%]", "p", "P(variant lower)",
            "batches without signal per seed: variant / baseline"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        low, high = (f"{100 * v:+.2f}" for v in row["final_difference_ci"])
        cells = [f"{row['variant']} − {row['baseline']}", row["label"], "{} / {}".format(*row["seeds"]),
                 f"{100 * row['final_difference']:+.2f} [{low}, {high}]", f"{row['final_p']:.2g}",
                 f"{row['final_lower']:.2f}", "{:.1f} / {:.1f}".format(*row["without_signal"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", SETTINGS_LEGEND])
