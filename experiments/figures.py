"""The report's figure: one panel per (curve, variant), each method's seed mean and standard error.

The figure of ``experiments.report``: one panel per (curve, variant), each method's seed mean
+- s.e. (``tpo_agents.zoo.results.seed_mean_se``: population std / sqrt(n)) over the update axis, the
threshold as a dashed line, a log axis where the experiment asks for one; MNIST adds Fig. 5b's bars,
the language-model experiments the best constant answer's held-out error as a dotted line
(``experiments.held_out.SHORTCUT_OF``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.core import Experiment
from experiments.held_out import SHORTCUT_OF
from tpo_agents.zoo.results import seed_mean_se

if TYPE_CHECKING:
    from experiments.runs import Runs

COLORS = {"tpo": "C3", "grpo": "C1", "dg": "C0", "ppo": "C2", "pg": "C2", "ce": "k", "group_pg": "C4",
          "grpo_no_kl": "C5", "tpo_no_anchor": "C6", "tpo_1ep": "C9", "grpo_masked": "C8", "grpo_trl": "C7"}


def save_panels(fig: Any, flat: Any, n_used: int, title: str, path: Path, fontsize: float = 9) -> None:
    """Finish a grid of panels: blank the unused ones (after the first ``n_used``), legend the first
    with every label of the used panels (a method drawn only on a later panel included), title the
    figure, and write it to ``path`` (folders created) as a PNG, closing the figure."""
    import matplotlib.pyplot as plt

    for ax in flat[n_used:]:
        ax.axis("off")
    handles: dict[str, Any] = {}
    for ax in flat[:n_used]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    flat[0].legend(list(handles.values()), list(handles), fontsize=6)
    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, runs: dict[str, Runs], algos: list[str], key: str, log: bool, title: str) -> None:
    for algo in algos:
        r = runs.get(algo)
        if r is None or key not in r.arrays:
            continue
        mean, se = seed_mean_se(r.arrays[key])
        x = r.x(key)
        color = COLORS.get(algo)
        ax.plot(x, mean, label=r.label, lw=1.3, color=color)
        low = mean - se
        if log:  # a band reaching zero cannot be drawn on a log axis: leave a gap there
            low = np.where(low > 0, low, np.nan)
        ax.fill_between(x, low, mean + se, color=color, alpha=0.2, lw=0)
    if log:
        ax.set_yscale("log", nonpositive="mask")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step" if key.startswith("eval/") else "update (episode / step)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, which="both", lw=0.4)


def _shortcut_line(ax: Any, runs: dict[str, Runs], key: str) -> None:
    """The shortcut's error on the evaluated prompts or tasks of panel ``key`` as a dotted line, where the
    cell's seeds record it (the same for every method and seed of a variant): the best constant answer
    (single-turn tasks), the env's shortcut (an agent env: GuessNumber's reply-blind guesses)."""
    shortcut = SHORTCUT_OF.get(key)
    recorded = [r.arrays[shortcut] for r in runs.values() if shortcut in r.arrays]
    if recorded:
        ax.axhline(float(recorded[0][:, -1].mean()), color="grey", ls=":", lw=1.0, label="shortcut")


def draw(experiment: Experiment, runs: dict[str, dict[str, Runs]], order: list[tuple[str, str]], path: Path,
         mechanism: dict[str, dict[str, Any]] | None = None) -> None:
    """The figure: one panel per (curve, variant) in ``order`` ((variant, algorithm) cells), seed mean
    +- s.e.; MNIST adds Fig. 5b's bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (experiment.metric, *experiment.panels)
    logs = experiment.log_panels + (False,) * len(keys)
    variants = list(dict.fromkeys(v for v, _ in order))
    algos = list(dict.fromkeys(a for _, a in order))
    panels = [(k, log, v) for k, log in zip(keys, logs, strict=False) for v in variants]
    n = len(panels) + (1 if mechanism else 0)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    flat = axes.ravel()
    names = [key.split("/", 1)[1] for key in keys]
    for ax, (key, log, variant) in zip(flat, panels, strict=False):
        name = key.split("/", 1)[1]
        _panel(ax, runs[variant], algos, key, log, f"{variant}: {key if names.count(name) > 1 else name}")
        if key == experiment.metric and experiment.threshold is not None:
            ax.axhline(experiment.threshold, color="grey", ls="--", lw=0.7)
        _shortcut_line(ax, runs[variant], key)
    if mechanism:
        ax = flat[len(panels)]
        width = 0.8 / len(mechanism)
        for i, (algo, m) in enumerate(mechanism.items()):
            ax.bar(np.arange(4) + i * width, np.nan_to_num(m["surplus"]), width, label=algo,
                   color=COLORS.get(algo))
        ax.set_xticks(np.arange(4) + 0.4 - width / 2, ["<.25", ".25-.5", ".5-.75", ">=.75"], fontsize=7)
        ax.set_title(f"surplus by concentration, label {next(iter(mechanism.values()))['label']:.0f}",
                     fontsize=9)
        ax.axhline(0, color="k", lw=0.5)
        ax.legend(fontsize=6)
    save_panels(fig, flat, n, f"{experiment.paper}: seed mean ± s.e.", path, fontsize=10)
