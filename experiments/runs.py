"""The seeds of one experiment as the report reads them: each cell's curves stacked along a seed axis.

``load_runs(out, experiment)`` gives, for every (variant, algorithm) cell under ``<out>/<experiment>``, a
:class:`Runs` holding its seeds' curves stacked along a first seed axis and their meta
(``experiments.core.load_seed``).

The report (``experiments.report``), its figures (``experiments.figures``, ``experiments.profiles``) and
its pairwise differences (``experiments.pairwise``) import this module; it imports none of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from experiments.core import load_seed
from experiments.definitions import EXPERIMENTS, borrowed_cells


@dataclass(frozen=True)
class SharedFrom:
    """The cell whose runs a cell shows in place of its own: ``variant`` of ``experiment`` (None: of the
    same experiment, as an interaction-matched cell shows its prompt-matched twin's grouped methods)."""

    variant: str
    experiment: str | None = None

    def __str__(self) -> str:
        return self.variant if self.experiment is None else f"{self.experiment} {self.variant}"


@dataclass
class Runs:
    """All seeds of one (variant, algorithm): ``arrays[key]`` is [n_seeds, ...]."""

    seeds: list[int]
    arrays: dict[str, np.ndarray]
    meta: list[dict[str, Any]] = field(default_factory=list)
    shared_from: SharedFrom | None = None
    name: str = ""
    """The cell's method name, its folder (``grpo_trl`` runs the spec's ``algo`` ``grpo``); "" for the
    spec's ``algo``."""

    def x(self, key: str) -> np.ndarray:
        """The x values of curve ``key``: evaluation labels for ``eval/`` curves, else 0-based updates."""
        if key.startswith("eval/"):
            return self.arrays["eval/x"][0]
        return np.arange(self.arrays[key].shape[1])

    @property
    def label(self) -> str:
        """Method name (the spec's ``algo``, or the cell's :attr:`name`) with its grouping mode (e.g.
        ``tpo (token)``)."""
        spec = self.meta[0]["spec"]
        mode = spec["kwargs"].get("group_mode", "")
        algo = self.name or spec["algo"]
        return f"{algo} ({mode})" if mode in ("token", "sequence") else algo


def load_runs(out: str | Path, experiment: str, paths: Iterable[str | Path] | None = None
              ) -> dict[str, dict[str, Runs]]:
    """``variant -> algo -> Runs`` of every seed file under ``<out>/<experiment>`` (``paths``: of those
    of these files that lie there).

    If a cell holds seeds of different settings, only those of the most common setting are kept. The
    runs the experiment borrows from another's cell (:func:`borrow_runs`) are read from that one's folder.
    """
    root = Path(out) / experiment
    found = sorted(root.glob("**/seed_*.npz"))
    if paths is not None:
        chosen = {Path(p).resolve() for p in paths}
        found = [path for path in found if path.resolve() in chosen]
    cells: dict[tuple[str, str], list[tuple[int, dict, dict]]] = {}
    for path in found:
        arrays, meta = load_seed(path)
        variant = str(path.parent.parent.relative_to(root))
        cells.setdefault((variant, path.parent.name), []).append((meta["seed"], arrays, meta))
    result: dict[str, dict[str, Runs]] = {}
    for (variant, algo), seeds in cells.items():
        common, _ = Counter(m["fingerprint"] for _, _, m in seeds).most_common(1)[0]
        seeds = sorted((s for s in seeds if s[2]["fingerprint"] == common), key=lambda s: s[0])
        keys = set.intersection(*(set(a) for _, a, _ in seeds))
        arrays = {k: np.stack([a[k] for _, a, _ in seeds]) for k in sorted(keys)}
        metas = [m for _, _, m in seeds]
        result.setdefault(variant, {})[algo] = Runs([s for s, _, _ in seeds], arrays, metas, name=algo)
    share_grouped_runs(result)
    borrow_runs(result, out, experiment, paths)
    return result


def borrow_runs(runs: dict[str, dict[str, Runs]], out: str | Path, experiment: str,
                paths: Iterable[str | Path] | None = None) -> None:
    """Add to ``runs`` the cells ``experiment`` borrows (:func:`experiments.definitions.borrowed_cells`)
    that its own folder does not hold: the other experiment's seeds below this experiment's full number
    of the method, marked ``shared_from=SharedFrom(<variant>, <other>)``."""
    if experiment not in EXPERIMENTS:
        return
    definition = EXPERIMENTS[experiment]
    others: dict[str, dict[str, dict[str, Runs]]] = {}
    for (variant, algo), (other, cell) in borrowed_cells(definition).items():
        if algo in runs.get(variant, {}):
            continue
        if other not in others:
            others[other] = load_runs(out, other, paths)
        found = others[other].get(cell, {}).get(algo)
        if found is None:
            continue
        keep = [i for i, seed in enumerate(found.seeds) if seed < definition.seeds_of(variant, algo)]
        runs.setdefault(variant, {})[algo] = Runs(
            [found.seeds[i] for i in keep], {key: values[keep] for key, values in found.arrays.items()},
            [found.meta[i] for i in keep], shared_from=SharedFrom(cell, other), name=found.name)


def share_grouped_runs(runs: dict[str, dict[str, Runs]]) -> None:
    """Interaction matching leaves grouped methods unchanged (Sec. 3.6): show their prompt-matched runs."""
    for variant, cell in runs.items():
        if variant.startswith("interactions/"):
            twin = "prompts/" + variant.split("/", 1)[1]
            for algo, other in runs.get(twin, {}).items():
                if algo not in cell:
                    cell[algo] = replace(other, shared_from=SharedFrom(twin))
