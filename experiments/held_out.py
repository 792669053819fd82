"""The language-model experiments' evaluations (held-out prompts, an agent env's tasks): before against
after training, beside a shortcut.

Beyond the report's metric (the greedy exact-match error, or an agent's failure rate): what each method
learnt, before against after training, beside the task's shortcut.

``held_out_rows(runs)`` gives, for every (variant, method) whose seeds record the evaluations of
``experiments.recorders.LLMEvalRecorder`` (:data:`ANSWERS`) or ``AgentEvalRecorder`` (:data:`AGENTS`), the
seed mean of each of their values at the first evaluation (before any update) and at the last, and the
shortcut's errors on the same tasks (the best constant answer; an agent env's own shortcut, e.g. the
reply-blind guesses of GuessNumber);
``native_pairwise(runs)`` gives TPO − method of the final native (partial-credit) error, with its bootstrap
interval and rank-sum p (``experiments.pairwise.compare``): on a partial-credit task the native score is
what the methods trained on, while the report's metric counts only whole answers. ``held_out_table``
prints both as Markdown (``python -m experiments.report`` and ``experiments.docs_tables``'
``held-out:<experiment>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from experiments.pairwise import compare, reference_pairs
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
AGENT_HELD_OUT = (
    ("eval/error", "sampled error"),
    ("eval/greedy_error", "greedy error"),
    ("eval/turns", "turns"),
    ("eval/format_rate", "turns in format"),
)
"""(key, column) of an agent's evaluations (``AgentEvalRecorder``): 1 - the success rate of the sampled and of
the greedy conversations, the sampled ones' mean turns and their share of turns in the env's format."""
AGENT_SHORTCUT = (("eval/shortcut_error", "error"),)
"""The env's shortcut's error (1 - its success rate: GuessNumber's reply-blind guesses)."""


@dataclass(frozen=True)
class Evaluations:
    """What one recorder's evaluations show: its values (before → after), the shortcut's errors and
    their column, and the value compared TPO − method beside the report's metric (None: none)."""

    name: str
    values: tuple[tuple[str, str], ...]
    shortcut: tuple[tuple[str, str], ...]
    shortcut_column: str
    compared: str | None


ANSWERS = Evaluations("answers", HELD_OUT, SHORTCUT, "best constant: exact / native error", NATIVE)
"""A single-turn language-model experiment's evaluations (``LLMEvalRecorder``)."""
AGENTS = Evaluations("agents", AGENT_HELD_OUT, AGENT_SHORTCUT, "the env's shortcut: error", None)
"""A multi-turn agent experiment's evaluations (``AgentEvalRecorder``)."""
WITHOUT_SIGNAL = "update/train/zero_variance_frac"
"""The share of training groups whose completions all scored the same (no signal for either method)."""
WINDOW = 10
"""Updates averaged at each end of training for :data:`WITHOUT_SIGNAL`."""


def evaluations_of(cell: Runs) -> Evaluations | None:
    """The evaluations ``cell``'s seeds record (:data:`ANSWERS` or :data:`AGENTS`), None for neither."""
    for kind in (ANSWERS, AGENTS):
        if all(key in cell.arrays for key, _ in (*kind.values, *kind.shortcut)):
            return kind
    return None


def held_out_rows(runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One row per (variant, method) of ``order`` that records every :data:`HELD_OUT` value: its seeds,
    the evaluations' x (updates), per value the seed means at the first and the last evaluation, and
    where recorded the share of training groups without signal over the first and the last
    :data:`WINDOW` updates (a policy that answers each prompt the same way every time has a share of 1,
    and neither method learns from it)."""
    rows = []
    for variant, algo in order:
        cell = runs[variant][algo]
        kind = evaluations_of(cell)
        if kind is None:
            continue
        x = cell.x(kind.values[0][0])
        row: dict[str, Any] = {"variant": variant, "algo": algo, "evaluations": kind.name,
                               "seeds": len(cell.seeds), "x": [float(x[0]), float(x[-1])]}
        for key, _ in kind.values:
            values = cell.arrays[key]
            row[key] = [float(values[:, 0].mean()), float(values[:, -1].mean())]
        for key, _ in kind.shortcut:
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
    for variant, algo, tpo, other in reference_pairs(runs, order):
        kind = evaluations_of(tpo)
        if kind is None or kind is not evaluations_of(other) or kind.compared is None:
            continue
        rows.append({"variant": variant, "algo": algo, "seeds": [len(tpo.seeds), len(other.seeds)],
                     **compare(tpo.arrays[kind.compared][:, -1], other.arrays[kind.compared][:, -1])})
    return rows


def _before_after(pair: list[float]) -> str:
    return f"{pair[0]:.3f} → {pair[1]:.3f}"


def held_out_table(rows: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> str:
    """``held_out_rows`` (and, where there are any, ``native_pairwise``'s rows) as Markdown: one table per
    kind of evaluations, in the order the rows first show each."""
    kinds = {kind.name: kind for kind in (ANSWERS, AGENTS)}
    tables = [_rows_table(kinds[name], [row for row in rows if row["evaluations"] == name])
              for name in dict.fromkeys(row["evaluations"] for row in rows)]
    return "\n\n".join(tables + ([_pairs_table(pairs)] if pairs else []))


def _rows_table(kind: Evaluations, rows: list[dict[str, Any]]) -> str:
    head = ["variant", "method", "seeds", "updates", *(f"{name} (before → after)" for _, name in kind.values),
            kind.shortcut_column, f"training groups without signal (first → last {WINDOW} updates)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["variant"], row["algo"], str(row["seeds"]), "{:.0f} → {:.0f}".format(*row["x"]),
                 *(_before_after(row[key]) for key, _ in kind.values),
                 " / ".join(f"{row[key]:.3f}" for key, _ in kind.shortcut),
                 _before_after(row[WITHOUT_SIGNAL]) if WITHOUT_SIGNAL in row else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pairs_table(pairs: list[dict[str, Any]]) -> str:
    lines = ["| variant | TPO − method | seeds | final native error: difference (pp) [95%] | p | "
             "P(TPO lower) |", "|" + "---|" * 6]
    for pair in pairs:
        low, high = (f"{100 * v:+.2f}" for v in pair["ci"])
        seeds = "{} / {}".format(*pair["seeds"])
        lines.append(f"| {pair['variant']} | tpo − {pair['algo']} | {seeds} "
                     f"| {100 * pair['difference']:+.2f} [{low}, {high}] | {pair['p']:.2g} | "
                     f"{pair['lower']:.2f} |")
    return "\n".join(lines)


def held_out(runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]]) -> str | None:
    """``held_out_table`` of ``runs``, None where no cell records the held-out evaluations."""
    rows = held_out_rows(runs, order)
    if not rows:
        return None
    return held_out_table(rows, native_pairwise(runs, order))
