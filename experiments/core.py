"""What an experiment is (a table of runs, repeated over seeds) and where each seed's curves live on disk.

An experiment is a table of runs (variant x algorithm), each run an agent of ``tpo_agents/`` on a ``tpo_gym``
env, repeated over seeds.

A ``RunSpec`` names the algorithm by its zoo name (``tpo_agents.zoo.registry``: ``tpo``, ``grpo_no_kl``,
``tpo_no_anchor``, ...; an ablation's defining keyword arguments come from the registry), the env id
and its kwargs, the constructor keyword arguments (the zoo's ``zoo_configs/<algo>.yml`` plus what the
experiment varies: ``experiments.zoo.zoo_run``) and the number of updates. Per-seed curves are
written to ``<out>/<experiment>/<variant>/<algo>/seed_<k>.npz`` atomically (compressed, floats as
float32; only the curves the report reads, ``Experiment.curves``), with the run's spec and code commit
in ``meta``; a seed whose file exists with the same spec is finished and never rerun. Files written by
earlier versions (uncompressed, float64, every curve) read the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tpo_agents.files import atomic_write

RESULTS = "results/paper"
"""The committed per-seed results behind docs/results.md: the default folder of ``experiments.run`` and
``experiments.report``."""
SMOKE_RESULTS = "results/smoke"
"""The smoke runs' folder (``--smoke``; not committed)."""


FINGERPRINT_NAMES: dict[str, dict[str, str]] = {"group_mode": {"exact": "population"}}
"""kwarg -> {current value: the value under which the committed seed files were written}. Fingerprints
are computed under the names of the committed files, so that a rename keeps them: the ``exact`` mode
was ``population`` when ``results/`` recorded its runs (``tpo_agents.modes.OLD_MODE_NAMES``), so a spec
of ``group_mode="exact"`` hashes as one of ``"population"`` and its finished seeds stay finished."""


@dataclass(frozen=True)
class RunSpec:
    """One (variant, algorithm) cell of an experiment; ``seed`` is added per run."""

    algo: str
    env_id: str
    env_kwargs: dict[str, Any]
    policy: str
    kwargs: dict[str, Any]
    n_updates: int
    recorder: str = "curves"
    recorder_kwargs: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A short hash of everything that defines the run (stored with each seed), with the kwargs'
        values under the names the committed files were written with (:data:`FINGERPRINT_NAMES`)."""
        fields = asdict(self)
        fields["kwargs"] = {key: FINGERPRINT_NAMES.get(key, {}).get(value, value) if isinstance(value, str)
                            else value for key, value in fields["kwargs"].items()}
        text = json.dumps(fields, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def with_updates(self, n_updates: int) -> RunSpec:
        """The same run with another number of updates."""
        return replace(self, n_updates=n_updates)


@dataclass(frozen=True)
class Size:
    """Seeds and updates (episodes or steps) of one size of an experiment."""

    seeds: int
    updates: int


Grid = dict[str, dict[str, RunSpec]]
"""variant -> algorithm -> run."""


@dataclass(frozen=True)
class RateGrid:
    """The learning rates a grid experiment chooses among (:mod:`experiments.lr_choice`).

    :param tasks: variant stem -> (task, the reward it trains with: ``binary`` or ``native``); the grid's
        variants are ``<stem>/<label(rate)>``
    :param rates: the rates, the same for every method
    :param label: rate -> the variant suffix (``lr1e-05``)
    :param error: what the validation error is, for the table's legend
    """

    tasks: dict[str, tuple[str, str]]
    rates: tuple[float, ...]
    label: Callable[[float], str]
    error: str


@dataclass(frozen=True)
class Experiment:
    """An experiment of the paper: ``build(size, smoke)`` returns its grid of runs.

    :param name: the CLI name (``python -m experiments.run <name>``)
    :param paper: what it reproduces (table / figure / section)
    :param full: the paper's size; ``smoke``: a few minutes on 2 CPU cores
    :param build: ``(updates, smoke) -> Grid``
    :param metric: the curve of the headline table and figure (``update/error`` or ``eval/error``)
    :param threshold: the "steps to X" threshold (a fraction), None for none
    :param panels: extra curves drawn as further figure rows (e.g. ``update/misalignment``)
    :param log_panels: which of the figure rows use a log y-axis
    :param stored: further curves the report reads (keys, or prefixes ending in ``/`` or ``_``), e.g.
        MNIST's ``eval/mechanism_`` (Fig. 5b)
    :param compared_variants: (variant, baseline variant) pairs whose methods the report sets against each
        other (``experiments.settings``), e.g. a setting against the paper's
    :param more_seeds: (variant, methods, seeds) of the cells run at more seeds than ``full`` (the
        runner's default for them), e.g. a headline result whose 20 seeds cannot tell two methods apart
    :param cells_from: (variant, other experiment, its variant): the methods of ``variant`` that the other
        experiment's cell runs with the same settings are that cell's runs, trained into and read from its
        folder (seeds below this experiment's full number), e.g. the ablations' TPO and GRPO, which are Table
        3's runs
    :param rate_grid: for a learning-rate grid, its tasks and rates (:class:`RateGrid`)
    """

    name: str
    paper: str
    full: Size
    smoke: Size
    build: Callable[[int, bool], Grid]
    metric: str = "update/error"
    threshold: float | None = 0.01
    panels: tuple[str, ...] = ()
    log_panels: tuple[bool, ...] = ()
    notes: str = ""
    stored: tuple[str, ...] = ()
    compared_variants: tuple[tuple[str, str], ...] = ()
    more_seeds: tuple[tuple[str, tuple[str, ...], int], ...] = ()
    cells_from: tuple[tuple[str, str, str], ...] = ()
    rate_grid: RateGrid | None = None

    def seeds_of(self, variant: str, algo: str) -> int:
        """The full number of seeds of the method ``algo`` in ``variant``: its :attr:`more_seeds`, else
        ``full.seeds``."""
        return next((seeds for cell, algos, seeds in self.more_seeds if cell == variant and algo in algos),
                    self.full.seeds)

    @property
    def curves(self) -> tuple[str, ...]:
        """The curves a seed file keeps: the metric, the panels, ``stored`` and ``eval/x`` (the x of any
        ``eval/`` curve)."""
        keys = (self.metric, *self.panels, *self.stored)
        return keys + (("eval/x",) if any(k.startswith("eval/") for k in keys) else ())


def seed_path(out: str | os.PathLike[str], experiment: str, variant: str, algo: str, seed: int) -> Path:
    """``<out>/<experiment>/<variant>/<algo>/seed_<k>.npz``."""
    return Path(out) / experiment / variant / algo / f"seed_{seed}.npz"


def checkpoint_path(seed_file: str | os.PathLike[str], n_seeds: int = 1) -> Path:
    """Where the job whose first seed file is ``seed_file`` keeps its checkpoint
    (``experiments.checkpoints``): ``seed_<k>.checkpoint.pt``, or ``seed_<k>..<k + S - 1>.checkpoint.pt``
    for a job of S seeds, in the same folder (not committed)."""
    path = Path(seed_file)
    stem = path.stem if n_seeds == 1 else f"{path.stem}..{int(path.stem.split('_')[-1]) + n_seeds - 1}"
    return path.with_name(f"{stem}.checkpoint.pt")


def kept(arrays: dict[str, np.ndarray], curves: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    """The arrays named by ``curves`` (a key, or a prefix ending in ``/`` or ``_``); all for None."""
    if curves is None:
        return dict(arrays)
    prefixes = tuple(c for c in curves if c.endswith(("/", "_")))
    return {k: v for k, v in arrays.items() if k in curves or (prefixes and k.startswith(prefixes))}


def save_seed(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write the curves (floats as float32) and ``meta`` (as JSON) to ``path``, compressed, atomically
    (:func:`tpo_agents.files.atomic_write`)."""
    stored = {k: np.asarray(v, dtype=np.float32) if np.issubdtype(np.asarray(v).dtype, np.floating)
              else np.asarray(v) for k, v in arrays.items()}
    atomic_write(path, lambda f: np.savez_compressed(f, meta=np.array(json.dumps(meta, default=str)),
                                                     **stored))


def load_seed(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The curves and meta of one seed file (compressed or not, float32 or float64). The meta's
    ``n_seeds`` (how many seeds the model that wrote it trained) is ``n_members`` in files written before
    ``tpo_agents`` named it ``n_seeds`` everywhere; it is read as ``n_seeds``."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files if key != "meta"}
        meta = json.loads(str(data["meta"]))
    if "n_members" in meta:
        meta["n_seeds"] = meta.pop("n_members")
    return arrays, meta


def is_finished(path: Path, spec: RunSpec) -> bool:
    """True if ``path`` holds a finished seed of exactly ``spec``."""
    if not path.exists():
        return False
    try:
        return load_seed(path)[1].get("fingerprint") == spec.fingerprint()
    except (OSError, ValueError, KeyError):
        return False


def check_device(device: str) -> str:
    """``device`` if this machine can train on it (``cpu``, ``cuda``, ``cuda:N``), else ``ValueError`` in
    one line naming it and what is there; imports torch only for a non-CPU device."""
    if device == "cpu":
        return device
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"--device {device!r}: not a PyTorch device; use cpu, cuda or cuda:N") from error
    if parsed.type != "cuda":
        raise ValueError(f"--device {device!r}: use cpu, cuda or cuda:N")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0 or (parsed.index is not None and parsed.index >= count):
        raise ValueError(f"--device {device!r}: this machine has {count} CUDA device(s)")
    return device
