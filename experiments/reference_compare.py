"""Our Table 3 seeds against the paper's reference code's own published per-seed curves.

``python -m experiments.reference_compare --reference-npz PATH [--out results/paper] [--variant prompts/H10]``

The reference repository (github.com/JeanKaddour/tpo) publishes its prompt-matched terminal-reward run at
H = 10 (TPO, GRPO, DG; 20 seeds x 2,000 episodes) as ``assets/token_reversal_sparse_reward_results.npz``
(keys ``<method>_errors`` [seeds, episodes]). For each method in both, with a seed's final error
f = the mean of its last ``WINDOW`` episodes' exact-match error:

* seeds with f below 5% (the seeds that solve the task), ours and the reference's, and the two-sided
  Fisher exact p of the two solve rates s_ours / n_ours against s_reference / n_reference
  (:func:`experiments.metrics.fisher_exact_test`: hypergeometric, given the 2x2 table's margins);
* mean(f_ours) - mean(f_reference) with a 95% bootstrap interval (each side's seeds resampled on their
  own) and the two-sided Wilcoxon rank-sum p of the two sets of f, exact
  (:func:`experiments.metrics.rank_sum_test`);
* the seed-mean error at a few episodes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.core import RESULTS
from experiments.metrics import bootstrap_difference, fisher_exact_test, rank_sum_test
from experiments.report import load_runs

WINDOW = 100
SOLVED = 0.05
"""A seed solves the task when its final error f is below this."""
EPISODES = (300, 600, 1000, 1999)
CURVE = "update/error"


def seed_finals(curves: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """Each seed's final error: the mean of its last ``window`` episodes, ``[n_seeds]``."""
    return curves[:, -window:].mean(1)


def compare(ours: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> list[dict]:
    """One row per method in both: ``ours`` and ``reference`` map a method to its curves [seeds, episodes]."""
    rows = []
    for method in sorted(set(ours) & set(reference)):
        a, b = seed_finals(ours[method]), seed_finals(reference[method])
        low, high = bootstrap_difference(a, b)
        solved = (int((a < SOLVED).sum()), int((b < SOLVED).sum()))
        rows.append({
            "method": method, "seeds": (len(a), len(b)), "below_5": solved,
            "fisher_p": fisher_exact_test(solved[0], len(a), solved[1], len(b)),
            "difference": float(a.mean() - b.mean()), "interval": (low, high), "p": rank_sum_test(a, b)[1],
            "at": {e: (float(ours[method][:, e].mean()), float(reference[method][:, e].mean()))
                   for e in EPISODES if e < min(ours[method].shape[1], reference[method].shape[1])},
        })  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a markdown table (errors in percent; the Fisher p of the seeds below 5% beside the
    rank-sum p of the finals)."""
    lines = ["| method | seeds (ours, ref.) | below 5% (ours, ref.) | ours - ref. [95%] | rank-sum p | "
             "Fisher p (below 5%) | seed-mean error at " + " / ".join(str(e) for e in EPISODES)
             + ", ours vs ref. |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        at = " / ".join(f"{o:.2f}" for o, _ in r["at"].values()) + " vs "
        at += " / ".join(f"{f:.2f}" for _, f in r["at"].values())
        low, high = r["interval"]
        seeds, below_5 = "{}, {}".format(*r["seeds"]), "{}, {}".format(*r["below_5"])
        difference = f"{100 * r['difference']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
        lines.append(f"| {r['method']} | {seeds} | {below_5} | {difference} | {r['p']:.3g} | "
                     f"{r['fisher_p']:.3g} | {at} |")
    return "\n".join(lines)


def read_reference(path: str | Path) -> dict[str, np.ndarray]:
    """``<method>_errors`` arrays of the reference's npz, by method."""
    with np.load(path) as data:
        return {key[: -len("_errors")]: np.asarray(data[key], dtype=np.float64)
                for key in data.files if key.endswith("_errors")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-npz", required=True, help="the reference's published per-seed curves")
    parser.add_argument("--out", default=str(RESULTS), help="our results folder (default results/paper)")
    parser.add_argument("--variant", default="prompts/H10", help="the terminal experiment's variant")
    args = parser.parse_args(argv)
    if not Path(args.reference_npz).is_file():
        parser.error(f"--reference-npz {args.reference_npz}: no such file")
    runs = load_runs(args.out, "terminal").get(args.variant)
    if not runs:
        parser.error(f"no terminal seeds for variant {args.variant!r} under {args.out}")
    ours = {algo: np.asarray(run.arrays[CURVE], dtype=np.float64)
            for algo, run in runs.items() if CURVE in run.arrays}
    print(f"terminal {args.variant}: {args.out} against {args.reference_npz} (final = mean of the last "
          f"{WINDOW} episodes)")
    print(table(compare(ours, read_reference(args.reference_npz))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
