"""One experiment's figure and table, ours beside the paper's, from the per-seed files (no training).

``python -m experiments.report <experiment> [--smoke] [--out results/paper] [--figures docs/figures/]``:
the paper's figure (seed mean +- s.e., log-scale error) as a PNG and its table, ours beside the paper's,
from the per-seed files (default ``results/paper``, the committed results; no training).

"Final" is the seed mean of the last single point and "steps to X%" the first x at which the seed-mean
curve is below X% by more than float32's resolution, 2^-23, so that a float32 curve at exactly X is not
below it (Tables 1-3, 5; ``experiments.metrics.below``), each with its percentile-bootstrap 95%
interval over seeds in brackets; a † marks a paper value outside that interval. Beyond the paper: the
median over seeds of each seed's own first crossing (its interval, and how many seeds cross), the
interquartile mean (IQM) of the seeds' finals with its interval, and the performance profiles (fraction
of seeds with final error at most tau) as a second figure, and the "pairwise differences": in every
variant holding TPO, TPO minus each other method of the final (difference of seed means) and of the
per-seed crossing (difference of medians), each with its bootstrap 95% interval (the two methods'
seeds resampled independently) and a two-sided Wilcoxon rank-sum p-value, exact given the ties
(``experiments.metrics.rank_sum_test``; ``experiments.pairwise``; in the JSON under ``pairwise``); where
the experiment sets one variant against another (``compared_variants``), each method's difference
between the two (``experiments.settings``; JSON ``settings``); for the language-model experiments,
the held-out evaluations before and after training beside the best constant answer
(``experiments.held_out``; JSON ``held_out``) and, for the learning-rate grid, each rate's validation
error and the rate chosen (``experiments.lr_choice``). The tables are printed as Markdown and saved with
the figures as ``<figures>/<experiment>[_smoke].{png,json}`` and ``..._profiles.png``: by default
``docs/figures`` for the committed and the smoke results, ``<out>/figures`` for any other ``--out`` (a
report of other runs never overwrites the documented figures).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from experiments.core import RESULTS, SMOKE_RESULTS, Experiment
from experiments.definitions import EXPERIMENTS, get_experiment
from experiments.figures import COLORS, draw
from experiments.held_out import held_out, held_out_rows, native_pairwise
from experiments.lr_choice import lr_grid
from experiments.metrics import (
    bootstrap_final,
    bootstrap_iqm,
    bootstrap_median_steps,
    bootstrap_steps,
    final,
    iqm,
    outside,
    seed_steps,
    steps_to,
)
from experiments.pairwise import pairwise, pairwise_table
from experiments.paper import MNIST_SURPLUS, NEVER, paper_cell
from experiments.profiles import draw_profiles, profiles
from experiments.runs import Runs, SharedFrom, load_runs
from experiments.settings import setting_differences, settings_table

MNIST_CHECKPOINT = 2000
"""Fig. 5b's "step-2,000 checkpoint" (Sec. 3.3): the evaluation labelled 2,000, taken after 2,200 steps."""
MECHANISM_ORDER = ("pg", "group_pg", "grpo", "dg", "tpo")
DAGGER_LEGEND = "† the paper's value lies outside our bootstrap 95% interval over seeds"


def _ordered(experiment: Experiment, runs: dict[str, dict[str, Runs]]) -> list[tuple[str, str]]:
    grid = experiment.build(experiment.full.updates, False)
    order = [(v, a) for v, cell in grid.items() for a in cell]
    found = [(v, a) for v, cell in runs.items() for a in cell]
    return [c for c in order if c in found] + sorted(c for c in found if c not in order)


# ------------------------------------------------------------------------------------------- numbers
def fmt(value: Any, percent: bool) -> str:
    """A number as the tables print it (percent for token tasks and MNIST, scientific for tabular)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return "never" if value == NEVER else value
    if math.isnan(value):  # the s.e. of one seed
        return "–"
    if percent:
        return f"{100 * value:.2f}%"
    return f"{value:.2e}"


def fmt_steps(value: Any) -> str:
    """A "steps to X" value: an integer, "never", or blank."""
    if value is None:
        return ""
    return value if isinstance(value, str) else f"{value:g}"


def fmt_interval(interval: list[Any], percent: bool) -> str:
    """A bootstrap interval of a final error: ``[2.80, 3.02]`` (percent) or ``[4.9e-05, 5.4e-05]``."""
    if percent:
        return "[" + ", ".join(f"{100 * v:.2f}" for v in interval) + "]"
    return "[" + ", ".join(f"{v:.1e}" for v in interval) + "]"


def _steps_value(step: float) -> int | str:
    """A steps-to-X value as rows hold it: an integer (a float for a median between two), or ``NEVER``
    for +inf."""
    if math.isinf(step):
        return NEVER
    return int(step) if float(step).is_integer() else float(step)


def _paper_number(value: Any) -> float | None:
    """A paper value as a number for the † flag: ``NEVER`` is inf, other text (``>95%``) None."""
    if isinstance(value, str):
        return math.inf if value == NEVER else None
    return value


def _cpu_seconds(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """``cpu_s_per_seed``, the mean one-thread CPU seconds per seed over the files that record
    ``cpu_s`` (None where none does), and ``cpu_s_seeds``, how many do. Unlike ``wall_s`` it does not
    count time a job spent suspended or waiting for a core."""
    cpu = [m["cpu_s"] for m in metas if m.get("cpu_s") is not None]
    return {"cpu_s_per_seed": float(np.mean(cpu)) if cpu else None, "cpu_s_seeds": len(cpu)}


def summarize(experiment: Experiment, runs: dict[str, dict[str, Runs]]) -> list[dict[str, Any]]:
    """One row per (variant, algorithm): ours (final, s.e., steps to X, bootstrap 95% intervals over
    seeds) and the paper's numbers, with ``*_outside`` flags where the paper's lies outside ours."""
    rows = []
    for variant, algo in _ordered(experiment, runs):
        r = runs[variant][algo]
        curves = r.arrays[experiment.metric]
        mean, se = final(curves)
        row = {"variant": variant, "algo": algo, "label": r.label, "seeds": len(r.seeds),
               "updates": int(r.meta[0]["spec"]["n_updates"]), "final": mean, "final_se": se,
               "wall_s_per_seed": float(np.mean([m["wall_s"] for m in r.meta])),
               **_cpu_seconds(r.meta),
               "shared_from": r.shared_from, "paper": paper_cell(experiment.name, variant, algo)}
        final_ci = bootstrap_final(curves)
        row["final_ci"] = list(final_ci)
        row["final_iqm"] = iqm(curves[:, -1])
        row["final_iqm_ci"] = list(bootstrap_iqm(curves[:, -1]))
        row["final_outside"] = outside(_paper_number(row["paper"].get("final")), final_ci)
        if experiment.threshold is not None:
            x = r.x(experiment.metric)
            step = steps_to(curves, experiment.threshold, x)
            steps_ci = bootstrap_steps(curves, experiment.threshold, x)
            row["steps"] = NEVER if step is None else int(step)
            row["steps_ci"] = [_steps_value(v) for v in steps_ci]
            row["steps_outside"] = outside(_paper_number(row["paper"].get("steps")), steps_ci)
            per_seed = seed_steps(curves, experiment.threshold, x)
            row["seed_steps_median"] = _steps_value(float(np.median(per_seed)))
            row["seed_steps_ci"] = [_steps_value(v) for v in
                                    bootstrap_median_steps(curves, experiment.threshold, x)]
            row["seed_steps_reached"] = int(np.isfinite(per_seed).sum())
        if "update/misalignment" in r.arrays:
            row["misalignment"], row["misalignment_se"] = final(r.arrays["update/misalignment"])
        rows.append(row)
    return rows


def markdown_table(experiment: Experiment, rows: list[dict[str, Any]]) -> str:
    """The table of ``summarize`` as Markdown."""
    percent = not experiment.name.startswith("tabular")
    pct = f"{100 * experiment.threshold:g}%" if experiment.threshold is not None else ""
    head = ["variant", "method", "seeds", "updates", "final (ours)", "final (paper)", "final (ref. code)",
            "IQM final (ours)"]
    if experiment.threshold is not None:
        head += [f"steps to {pct} (ours)", "(paper)", "(ref. code)",
                 "per-seed steps: median (seeds reaching)"]
    tabular = any("misalignment" in row for row in rows)
    if tabular:
        head += ["misalignment (ours)", "(ref. code)"]
    head += ["wall s / seed", "CPU s / seed (seeds recording it)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        paper = row["paper"]
        method = row["label"] + _shared(row["shared_from"])
        cells = [row["variant"], method, str(row["seeds"]), str(row["updates"]),
                 f"{fmt(row['final'], percent)} ± {fmt(row['final_se'], percent)} "
                 + fmt_interval(row["final_ci"], percent),
                 fmt(paper.get("final"), percent) + _dagger(row["final_outside"]),
                 fmt(paper.get("ref_final"), percent),
                 f"{fmt(row['final_iqm'], percent)} " + fmt_interval(row["final_iqm_ci"], percent)]
        if experiment.threshold is not None:
            cells += [_steps_cell(row["steps"], row["steps_ci"]),
                      fmt_steps(paper.get("steps")) + _dagger(row["steps_outside"]),
                      fmt_steps(paper.get("ref_steps")),
                      _steps_cell(row["seed_steps_median"], row["seed_steps_ci"])
                      + f" ({row['seed_steps_reached']}/{row['seeds']})"]
        if tabular:
            cells += [f"{row['misalignment']:.2e} ± {row['misalignment_se']:.1e}",
                      fmt(paper.get("ref_misalignment"), False)]
        cells.append(f"{row['wall_s_per_seed']:.1f}")
        cells.append("" if row["cpu_s_per_seed"] is None
                     else f"{row['cpu_s_per_seed']:.1f} ({row['cpu_s_seeds']}/{row['seeds']})")
        lines.append("| " + " | ".join(cells) + " |")
    if any(row["final_outside"] or row.get("steps_outside") for row in rows):
        lines += ["", DAGGER_LEGEND]
    return "\n".join(lines)


def _shared(source: SharedFrom | None) -> str:
    """What a row's method says of the run it shows: an interaction-matched cell's grouped method is its
    prompt-matched run (``prompts/H7``), a borrowed cell another experiment's (``terminal prompts/H7``)."""
    if source is None:
        return ""
    return " (= prompt-matched run)" if source.experiment is None else f" (= `{source}`)"


def _dagger(flag: bool) -> str:
    return " †" if flag else ""


def _steps_cell(step: int | str, interval: list[int | str]) -> str:
    """``61 [55, 70]``, ``61 [55, never]``; just ``never`` when every resample never reaches X."""
    if interval == [NEVER, NEVER]:
        return fmt_steps(step)
    return f"{fmt_steps(step)} [{fmt_steps(interval[0])}, {fmt_steps(interval[1])}]"


def mnist_mechanism(runs: dict[str, dict[str, Runs]], checkpoint: int = MNIST_CHECKPOINT
                    ) -> dict[str, dict[str, Any]]:
    """Fig. 5b: per-bin surplus at the evaluation labelled closest to ``checkpoint``, averaged over the
    seeds whose bin is non-empty, with mean counts."""
    out = {}
    for cell in runs.values():
        for algo in [a for a in MECHANISM_ORDER if a in cell]:
            r = cell[algo]
            if "eval/mechanism_surplus" not in r.arrays:
                continue
            x = r.x("eval/error")
            index = int(np.argmin(np.abs(x - checkpoint)))
            surplus = r.arrays["eval/mechanism_surplus"][:, index]  # [seeds, 4]
            with warnings.catch_warnings():  # an empty bin in every seed is NaN ("n/a")
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(surplus, axis=0)
            out[algo] = {"label": float(x[index]), "surplus": [float(v) for v in mean],
                         "counts": r.arrays["eval/mechanism_counts"][:, index].mean(0).tolist()}
    return out


def mechanism_table(mechanism: dict[str, dict[str, Any]]) -> str:
    """Fig. 5b as a Markdown table, ours beside the paper's and the reference code's."""
    bins = ["[0, .25)", "[.25, .5)", "[.5, .75)", "[.75, 1]"]
    lines = ["| method | label | " + " | ".join(f"surplus {b}" for b in bins)
             + " | top bin (paper) | top bin (ref. code) | mean misclassified per bin |",
             "|" + "---|" * 9]
    for algo, m in mechanism.items():
        values = " | ".join("n/a" if math.isnan(v) else f"{v:+.4f}" for v in m["surplus"])
        ref = MNIST_SURPLUS.get(algo, {})
        paper_top = ref.get("paper", ("",) * 4)[3]
        ref_top = ref.get("ref", ("",) * 4)[3]
        counts = " / ".join(f"{c:.0f}" for c in m["counts"])
        lines.append(f"| {algo} | {m['label']:.0f} | {values} | {paper_top} | {ref_top} | {counts} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- main
def report(name: str, out: str | Path, figures: str | Path, smoke: bool = False) -> str:
    """Draw the figure, write the summary JSON and return the Markdown tables of ``name``."""
    experiment = get_experiment(name)
    runs = load_runs(out, name)
    if not runs:
        return f"no results for {name} under {out}"
    stem = Path(figures) / f"{name}{'_smoke' if smoke else ''}"
    rows = summarize(experiment, runs)
    mechanism = mnist_mechanism(runs, 80 if smoke else MNIST_CHECKPOINT) if name == "mnist" else None
    draw(experiment, runs, _ordered(experiment, runs), stem.with_suffix(".png"), mechanism)
    finals = {variant: {r.label: r.arrays[experiment.metric][:, -1] for r in cell.values()}
              for variant, cell in runs.items()}
    profile_path = stem.with_name(stem.name + "_profiles.png")
    draw_profiles(experiment.paper, profiles(finals), profile_path, COLORS)
    text = f"### {name}: {experiment.paper}\n\n{markdown_table(experiment, rows)}\n"
    if mechanism:
        text += f"\n{mechanism_table(mechanism)}\n"
    order = _ordered(experiment, runs)
    differences = pairwise(experiment, runs, order)
    if differences:
        text += f"\npairwise differences\n\n{pairwise_table(experiment, differences)}\n"
    settings = setting_differences(experiment, runs, order)
    if settings:
        text += f"\nsetting differences\n\n{settings_table(settings)}\n"
    evaluations = held_out(runs, order)
    if evaluations:
        text += f"\nevaluations before and after training\n\n{evaluations}\n"
    grid = lr_grid(experiment, runs)
    if grid:
        text += f"\nlearning rates\n\n{grid}\n"
    summary = {"experiment": name, "paper": experiment.paper, "smoke": smoke, "rows": rows,
               "mechanism": mechanism, "pairwise": differences, "settings": settings}
    if evaluations:
        summary["held_out"] = {"rows": held_out_rows(runs, order),
                               "native_pairwise": native_pairwise(runs, order)}
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1, default=str))
    return text + f"\nfigures: {stem.with_suffix('.png')}, {profile_path}\n"


DOC_FIGURES = "docs/figures"
"""The figures of docs/results.md."""


def default_figures(out: str | Path) -> Path:
    """Where a report of the results in ``out`` draws its figures when ``--figures`` is not given:
    :data:`DOC_FIGURES` for the committed (``results/paper``) and smoke results, ``<out>/figures``
    otherwise."""
    documented = {Path(folder).resolve() for folder in (RESULTS, SMOKE_RESULTS)}
    return Path(DOC_FIGURES) if Path(out).resolve() in documented else Path(out) / "figures"


def main(argv: list[str] | None = None) -> int:
    """Report one experiment (or ``all``)."""
    parser = argparse.ArgumentParser(prog="python -m experiments.report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    parser.add_argument("--smoke", action="store_true", help=f"report the smoke results ({SMOKE_RESULTS})")
    parser.add_argument("--out", help=f"results folder (default {RESULTS}, or {SMOKE_RESULTS} with --smoke)")
    parser.add_argument("--figures", help=f"where the PNG and JSON go (default {DOC_FIGURES} for {RESULTS} "
                                          f"and {SMOKE_RESULTS}, else <out>/figures)")
    args = parser.parse_args(argv)
    out = args.out or (SMOKE_RESULTS if args.smoke else RESULTS)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    for name in names:
        print(report(name, out, args.figures or default_figures(out), args.smoke))
    return 0


if __name__ == "__main__":
    sys.exit(main())
