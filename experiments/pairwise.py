"""The paper's comparisons as differences: TPO against each other method of a cell, over their seeds.

``experiments.report``'s "pairwise differences": in every cell (variant) that holds TPO, TPO against each
other method of the cell, over their independent seeds.

* Final: the seeds' final errors (the last single point of the metric, the report's "final"); the
  difference of their means, mean(TPO) - mean(method), negative where TPO ends lower.
* Per-seed steps to X% (experiments with a threshold): each seed's own first crossing
  (``experiments.metrics.seed_steps``, never = +inf, as the report's per-seed column); the difference of
  the medians over seeds (the report's per-seed statistic: a mean is +inf once a single seed never
  crosses), with never - never = 0. +inf: TPO's median is never and the method's is not; -inf: the
  reverse.

Each with its percentile-bootstrap 95% interval (``bootstrap_difference``: the two methods' seeds
resampled independently, fixed generator seed), the two-sided Wilcoxon rank-sum (Mann-Whitney U)
p-value (``rank_sum_test``: exact, the permutation distribution of the sum of midranks over every split
of the pooled seeds, ties at their midrank; never ranks after every crossing, tied with the other nevers)
and the chance that a TPO seed's value is the lower of a (TPO, method) pair of seeds, ties half
(1 - U / (n_TPO n_method)): the direction of the test, which compares ranks, not means, and can disagree
with the sign of the difference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.core import Experiment
from experiments.metrics import bootstrap_difference, difference, rank_sum_test, seed_steps

if TYPE_CHECKING:
    from experiments.runs import Runs

REFERENCE = "tpo"
"""The method every other one is compared with."""
PAIRWISE_LEGEND = (
    "TPO − method over independent seeds (negative: TPO lower); [95%]: percentile bootstrap, each "
    "method's seeds resampled on their own; p: two-sided Wilcoxon rank-sum (Mann–Whitney U), exact: "
    "P(|R − E[R]| ≥ observed) for the sum R of TPO's midranks (ties at their average rank) over every "
    "split of the pooled seeds; P(TPO lower): the chance that a TPO seed's value is below a method "
    "seed's (ties count half; 1 - U / (n_TPO n_method)), the direction the test measures. final: "
    "difference of the seed means of the last point. per-seed steps: difference of the medians of each "
    "seed's own first crossing (never = +inf, ranked after every crossing; never − never = 0; ±inf: one "
    "median is never; \"never − never\" in place of the numbers: no seed of either crosses).")


def compare(a: np.ndarray, b: np.ndarray, statistic: Callable[..., Any] = np.mean) -> dict[str, Any]:
    """``difference`` (statistic(a) - statistic(b)), its ``bootstrap_difference`` interval, the
    ``rank_sum_test`` p-value and ``lower`` = 1 - U / (n_a n_b) = P(a_i < b_j) + P(a_i = b_j) / 2 over all
    pairs of seeds (the direction the test measures: above 1/2 where a's values rank lower)."""
    u, p = rank_sum_test(a, b)
    return {"difference": difference(a, b, statistic), "ci": list(bootstrap_difference(a, b, statistic)),
            "p": p, "lower": 1.0 - u / (len(a) * len(b))}


def _signed_steps(value: float) -> float | int | str:
    """A difference of steps as JSON holds it: an integer where whole, ``"+inf"`` / ``"-inf"``."""
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return int(value) if value.is_integer() else value


def reference_pairs(runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]]
                    ) -> Iterator[tuple[str, str, Runs, Runs]]:
    """``(variant, method, TPO's runs, the method's runs)`` for each (variant, method other than TPO) of
    ``order`` whose variant holds TPO: the pairs every comparison with TPO is made on."""
    for variant, algo in order:
        if algo != REFERENCE and REFERENCE in runs[variant]:
            yield variant, algo, runs[variant][REFERENCE], runs[variant][algo]


def pairwise(experiment: Experiment, runs: dict[str, dict[str, Runs]],
             order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, method) of ``order`` whose variant holds TPO: TPO - method of the final
    (``final_*``) and, with a threshold, of the per-seed median steps (``seed_steps_*``;
    ``seed_steps_reached``: how many seeds of each cross it)."""
    rows = []
    for variant, algo, tpo, other in reference_pairs(runs, order):
        curves_tpo, curves_other = tpo.arrays[experiment.metric], other.arrays[experiment.metric]
        final = compare(curves_tpo[:, -1], curves_other[:, -1])
        row = {"variant": variant, "algo": algo, "label": other.label, "reference": tpo.label,
               "seeds": [len(tpo.seeds), len(other.seeds)], "final_difference": final["difference"],
               "final_difference_ci": final["ci"], "final_p": final["p"], "final_lower": final["lower"]}
        if experiment.threshold is not None:
            crossings = (seed_steps(curves_tpo, experiment.threshold, tpo.x(experiment.metric)),
                         seed_steps(curves_other, experiment.threshold, other.x(experiment.metric)))
            steps = compare(*crossings, np.median)
            row["seed_steps_reached"] = [int(np.isfinite(c).sum()) for c in crossings]
            row["seed_steps_difference"] = _signed_steps(steps["difference"])
            row["seed_steps_difference_ci"] = [_signed_steps(v) for v in steps["ci"]]
            row["seed_steps_p"] = steps["p"]
            row["seed_steps_lower"] = steps["lower"]
        rows.append(row)
    return rows


def _never_both(row: dict[str, Any]) -> bool:
    """Whether no seed of either method of a ``pairwise`` row crosses the threshold (never - never)."""
    return row.get("seed_steps_reached") == [0, 0]


def _fmt_difference(value: float, percent: bool) -> str:
    """A difference of finals: ``-6.95`` (percentage points) or ``-1.3e-04``."""
    return f"{100 * value:+.2f}" if percent else f"{value:+.1e}"


def _fmt_steps(value: float | int | str) -> str:
    """A difference of steps as ``_signed_steps`` holds it: ``+49.5``, ``-28``, ``-inf``."""
    return value if isinstance(value, str) else f"{value:+g}"


def pairwise_table(experiment: Experiment, rows: list[dict[str, Any]]) -> str:
    """The rows of ``pairwise`` as Markdown, with the legend."""
    percent = not experiment.name.startswith("tabular")
    unit = " (pp)" if percent else ""
    head = ["variant", "TPO − method", "seeds", f"final: difference{unit} [95%]", "p", "P(TPO lower)"]
    if experiment.threshold is not None:
        head += [f"per-seed steps to {100 * experiment.threshold:g}%: median difference [95%]", "p",
                 "P(TPO lower)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        low, high = (_fmt_difference(v, percent) for v in row["final_difference_ci"])
        cells = [row["variant"], f"{row['reference']} − {row['label']}", "{} / {}".format(*row["seeds"]),
                 f"{_fmt_difference(row['final_difference'], percent)} [{low}, {high}]",
                 f"{row['final_p']:.2g}", f"{row['final_lower']:.2f}"]
        if experiment.threshold is not None and _never_both(row):
            cells += ["never − never", "–", "–"]
        elif experiment.threshold is not None:
            low, high = (_fmt_steps(v) for v in row["seed_steps_difference_ci"])
            cells += [f"{_fmt_steps(row['seed_steps_difference'])} [{low}, {high}]",
                      f"{row['seed_steps_p']:.2g}", f"{row['seed_steps_lower']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", PAIRWISE_LEGEND])


def _verdict(reference: str, ci: list[float], p: float, lower: float, seeds: str) -> str:
    """Which way a difference lies, read from its interval and its rank-sum p together (at the 5% level):
    the interval below (above) zero and p < 0.05: ``reference`` lower (higher); only the interval: lower in
    the mean, the ranks not separating the two; only the ranks: the interval holding zero, the ranks putting
    ``reference`` lower or higher (``lower``: P(reference lower), above 1/2 where it ranks lower); neither:
    no difference shown at ``seeds``."""
    low, high = ci
    side = "lower" if high < 0 else "higher" if low > 0 else None
    if side is not None:
        return f"{reference} {side}" + ("" if p < 0.05 else
                                          " in the mean; the ranks do not separate the two")
    if p < 0.05:
        return f"the interval holds zero; the ranks put {reference} {'lower' if lower > 0.5 else 'higher'}"
    return f"the interval holds zero: no difference shown at {seeds} seeds"


def findings(experiment: Experiment, rows: list[dict[str, Any]]) -> str:
    """The rows of ``pairwise`` in words, one line per (variant, method), once both methods hold their full
    seeds (``experiment.seeds_of``): the difference of the final errors with its interval, exact p and seed
    counts, with a threshold also the per-seed first crossing's (or that no seed of either crosses), each
    with its verdict (:func:`_verdict`); before then, how many seeds each has."""
    percent = not experiment.name.startswith("tabular")
    unit = " pp" if percent else ""
    lines = []
    for row in rows:
        full_tpo, full_other = (experiment.seeds_of(row["variant"], a) for a in (REFERENCE, row["algo"]))
        n_tpo, n_other = row["seeds"]
        reference = row["reference"]
        head = f"- `{row['variant']}`, {reference} − {row['label']}:"
        if n_tpo < full_tpo or n_other < full_other:
            committed = (f"{n_tpo} and {n_other} of {full_tpo}" if full_tpo == full_other
                         else f"{n_tpo} of {full_tpo} and {n_other} of {full_other}")
            lines.append(f"{head} no result yet ({committed} seeds committed).")
            continue
        seeds = f"{n_tpo} against {n_other}"
        low, high = row["final_difference_ci"]
        line = (f"{head} final error {_fmt_difference(row['final_difference'], percent)}{unit} "
                f"(95% interval [{_fmt_difference(low, percent)}, {_fmt_difference(high, percent)}], "
                f"exact rank-sum p = {row['final_p']:.2g}, {seeds} seeds): "
                f"{_verdict(reference, [low, high], row['final_p'], row['final_lower'], seeds)}")
        if experiment.threshold is not None and _never_both(row):
            line += f"; no seed of either first crosses {100 * experiment.threshold:g}%"
        elif experiment.threshold is not None:
            steps_low, steps_high = row["seed_steps_difference_ci"]
            line += (f"; per-seed first crossing of {100 * experiment.threshold:g}% "
                     f"{_fmt_steps(row['seed_steps_difference'])} steps (95% interval "
                     f"[{_fmt_steps(steps_low)}, {_fmt_steps(steps_high)}], p = {row['seed_steps_p']:.2g}): "
                     + _verdict(reference, [float(steps_low), float(steps_high)], row["seed_steps_p"],
                                row["seed_steps_lower"], seeds))
        lines.append(line + ".")
    return "\n".join(lines)
