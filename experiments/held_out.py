"""The language-model experiments' held-out evaluations: before against after training, beside a shortcut.

Beyond the report's metric (the greedy exact-match error): what each method learnt, before against after
training, beside the task's shortcut.

``held_out_rows(runs)`` gives, for every (variant, method) whose seeds record the evaluations of
``experiments.recorders.LLMEvalRecorder``, the seed mean of each :data:`HELD_OUT` value at the first
evaluation (before any update) and at the last, and the best constant answer's errors on the same prompts;
``native_pairwise(runs)`` gives TPO − method of the final native (partial-credit) error, with its bootstrap
interval and rank-sum p (``experiments.pairwise.compare``): on a partial-credit task the native score is
what the methods trained on, while the report's metric counts only whole answers. ``held_out_table``
prints both as Markdown (``python -m experiments.report`` and ``experiments.docs_tables``'
``held-out:<experiment>``).
"""

from __future__ import annotations

from typing import Any

from experiments.pairwise import REFERENCE, compare
from experiments.runs import Runs

HELD_OUT = (
    ("eval/error", "exact error"),
    ("eval/native_error", "native error"),
    ("eval/sampled_native_error", "sampled native error"),
    ("eval/format_rate", "format rate"),
    ("eval/mode_frac", "most common answer's share"),
)
"""(key, column) of the held-out values shown before and after training: the greedy answer's exact-match
and native error, the native error of samples at temperature 1, the share of greedy answers in the task's
format and the share of the most common greedy answer (1 for a constant policy)."""
SHORTCUT = (("eval/shortcut_error", "exact"), ("eval/shortcut_native_error", "native"))
"""The best constant answer's held-out errors (the same at every evaluation)."""
SHORTCUT_OF = {"eval/error": "eval/shortcut_error", "eval/native_error": "eval/shortcut_native_error"}
"""The greedy answer's held-out error -> the best constant answer's error on the same prompts (the
report's figure draws it as a dotted line)."""
NATIVE = "eval/native_error"
WITHOUT_SIGNAL = "update/train/zero_variance_frac"
"""The share of training groups whose completions all scored the same (no signal for either method)."""
WINDOW = 10
"""Updates averaged at each end of training for :data:`WITHOUT_SIGNAL`."""


def _evaluated(cell: Runs) -> bool:
    return all(key in cell.arrays for key, _ in (*HELD_OUT, *SHORTCUT))


def held_out_rows(runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, method) of ``order`` that records every :data:`HELD_OUT` value: its seeds,
    the evaluations' x (updates), per value the seed means at the first and the last evaluation, and
    where recorded the share of training groups without signal over the first and the last
    :data:`WINDOW` updates (a policy that answers each prompt the same way every time has a share of 1,
    and neither method learns from it)."""
    rows = []
    for variant, algo in order:
        cell = runs[variant][algo]
        if not _evaluated(cell):
            continue
        row: dict[str, Any] = {"variant": variant, "algo": algo, "seeds": len(cell.seeds),
                               "x": [float(cell.x(NATIVE)[0]), float(cell.x(NATIVE)[-1])]}
        for key, _ in HELD_OUT:
            values = cell.arrays[key]
            row[key] = [float(values[:, 0].mean()), float(values[:, -1].mean())]
        for key, _ in SHORTCUT:
            row[key] = float(cell.arrays[key][:, -1].mean())
        if WITHOUT_SIGNAL in cell.arrays:
            share = cell.arrays[WITHOUT_SIGNAL]
            row[WITHOUT_SIGNAL] = [float(share[:, :WINDOW].mean()), float(share[:, -WINDOW:].mean())]
        rows.append(row)
    return rows


def native_pairwise(runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, method other than TPO) of ``order`` whose variant holds TPO, both recording
    the native error: TPO − method of the final native error (``compare``: difference of seed means,
    bootstrap interval, rank-sum p, P(TPO lower))."""
    rows = []
    for variant, algo in order:
        if algo == REFERENCE or REFERENCE not in runs[variant]:
            continue
        tpo, other = runs[variant][REFERENCE], runs[variant][algo]
        if not (_evaluated(tpo) and _evaluated(other)):
            continue
        rows.append({"variant": variant, "algo": algo, "seeds": [len(tpo.seeds), len(other.seeds)],
                     **compare(tpo.arrays[NATIVE][:, -1], other.arrays[NATIVE][:, -1])})
    return rows


def _before_after(pair: list[float]) -> str:
    return f"{pair[0]:.3f} → {pair[1]:.3f}"


def held_out_table(rows: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> str:
    """``held_out_rows`` (and, where there are any, ``native_pairwise``'s rows) as Markdown."""
    head = ["variant", "method", "seeds", "updates", *(f"{name} (before → after)" for _, name in HELD_OUT),
            "best constant: exact / native error",
            f"training groups without signal (first → last {WINDOW} updates)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["variant"], row["algo"], str(row["seeds"]), "{:.0f} → {:.0f}".format(*row["x"]),
                 *(_before_after(row[key]) for key, _ in HELD_OUT),
                 " / ".join(f"{row[key]:.3f}" for key, _ in SHORTCUT),
                 _before_after(row[WITHOUT_SIGNAL]) if WITHOUT_SIGNAL in row else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    if pairs:
        lines = ["| variant | TPO − method | seeds | final native error: difference (pp) [95%] | p | "
                 "P(TPO lower) |", "|" + "---|" * 6]
        for pair in pairs:
            low, high = (f"{100 * v:+.2f}" for v in pair["ci"])
            seeds = "{} / {}".format(*pair["seeds"])
            lines.append(f"| {pair['variant']} | tpo − {pair['algo']} | {seeds} "
                         f"| {100 * pair['difference']:+.2f} [{low}, {high}] | {pair['p']:.2g} | "
                         f"{pair['lower']:.2f} |")
        text += "\n\n" + "\n".join(lines)
    return text


def held_out(runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]]) -> str | None:
    """``held_out_table`` of ``runs``, None where no cell records the held-out evaluations."""
    rows = held_out_rows(runs, order)
    if not rows:
        return None
    return held_out_table(rows, native_pairwise(runs, order))
