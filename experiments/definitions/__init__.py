"""The table of experiments: name -> ``Experiment`` (one small module per paper section)."""

from __future__ import annotations

from experiments.core import Experiment
from experiments.definitions.agents import AGENTS_GRID, AGENTS_STUDY
from experiments.definitions.llm import LLM_CPU, LLM_GRID, LLM_STUDY
from experiments.definitions.mnist import MNIST
from experiments.definitions.sparse import DIAGNOSTICS, EPOCH_SWEEP, K_SWEEP, MASKING
from experiments.definitions.tabular import TABULAR_MULTI, TABULAR_SINGLE
from experiments.definitions.terminal import ABLATIONS, TERMINAL
from experiments.definitions.tokens import ETA_SWEEP, VARIATIONS, VOCAB_SWEEP

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (TABULAR_SINGLE, TABULAR_MULTI, MNIST, VOCAB_SWEEP, VARIATIONS, TERMINAL, ABLATIONS,
              K_SWEEP, EPOCH_SWEEP, MASKING, DIAGNOSTICS, ETA_SWEEP, LLM_CPU, LLM_GRID,
              LLM_STUDY, AGENTS_GRID, AGENTS_STUDY)
}


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name lists the choices."""
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; choose one of: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def borrowed_cells(experiment: Experiment, updates: int | None = None, smoke: bool = False
                   ) -> dict[tuple[str, str], tuple[str, str]]:
    """``(variant, algo) -> (other experiment, its variant)`` for each method of ``experiment``'s
    :attr:`~experiments.core.Experiment.cells_from` variants whose run the other experiment's cell holds
    with the same settings (an equal ``RunSpec`` at ``updates``, default the full size's, or the smoke
    size's at ``smoke``)."""
    if not experiment.cells_from:  # load_runs and the what-ran table ask for every experiment
        return {}
    size = experiment.smoke if smoke else experiment.full
    own = experiment.build(updates or size.updates, smoke)
    found = {}
    for variant, name, other_variant in experiment.cells_from:
        other = get_experiment(name).build(updates or size.updates, smoke).get(other_variant, {})
        for algo, spec in own.get(variant, {}).items():
            if other.get(algo) == spec:
                found[variant, algo] = (name, other_variant)
    return found
