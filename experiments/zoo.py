"""The experiments' hyperparameters, read from the zoo's YAML files as ``python train.py`` reads them.

A run's keyword arguments are the entry of its env id (or ``default``) in ``zoo_configs/<algo>.yml``,
read by ``tpo_agents.zoo.hyperparams.load_hyperparams``, plus the keyword arguments that define an
ablation (``tpo_agents.zoo.registry.defining_settings``).

An experiment adds only what it varies (V, H, K, eta, the reward type, the target logic, the matching,
the grouping level, a swept batch size, ...) through :func:`zoo_run`. The zoo-only keys (``n_timesteps``,
``env_kwargs``, ``eval_env_kwargs``, ``callback``, ...) never reach the constructor: the number of updates
is the experiment's, and the YAML ``env_kwargs`` are the defaults of the run's env kwargs.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from experiments.core import RunSpec
from tpo_agents.zoo.hyperparams import PROJECT_CONFIGS

ZOO_CONFIGS = PROJECT_CONFIGS
"""The project's configs, ``zoo_configs/`` of a checkout (the single source of the paper's settings)."""


@functools.cache
def _load(configs: str, algo: str, env_id: str) -> dict[str, Any]:
    from tpo_agents.zoo.hyperparams import load_hyperparams

    return load_hyperparams([configs], algo, env_id, verbose=0).values


def zoo_hyperparams(algo: str, env_id: str, configs: str | Path | None = None) -> dict[str, Any]:
    """The zoo's values of ``algo`` on ``env_id`` (zoo-only keys included), from ``configs/<algo>.yml``."""
    return copy.deepcopy(_load(str(configs or ZOO_CONFIGS), algo, env_id))


def zoo_env_kwargs(algo: str, env_id: str, configs: str | Path | None = None) -> dict[str, Any]:
    """The zoo entry's ``env_kwargs`` of ``algo`` on ``env_id`` (``configs/<algo>.yml``), evaluated."""
    from tpo_agents.zoo.hyperparams import evaluated

    return evaluated(zoo_hyperparams(algo, env_id, configs).get("env_kwargs") or {})


def zoo_run(algo: str, env_id: str, n_updates: int, env_kwargs: dict[str, Any] | None = None,
            recorder: str = "curves", recorder_kwargs: dict[str, Any] | None = None,
            configs: str | Path | None = None, **kwargs: Any) -> RunSpec:
    """A run of ``algo`` on ``env_id`` with the zoo's hyperparameters, ``kwargs`` and ``env_kwargs`` on top.

    Raises ``ValueError`` if the YAML file or ``kwargs`` contradict the setting that defines an ablation
    (e.g. ``n_epochs`` of ``tpo_1ep``), as the zoo does.
    """
    from tpo_agents.zoo.hyperparams import algo_kwargs
    from tpo_agents.zoo.registry import defining_settings

    values = zoo_hyperparams(algo, env_id, configs)
    constructor = {**algo_kwargs(values), **kwargs}
    policy = constructor.pop("policy", None)
    if policy is None:
        raise ValueError(f"zoo_configs/{algo}.yml sets no policy for {env_id}")
    constructor.update(defining_settings(algo, constructor))
    env = {**zoo_env_kwargs(algo, env_id, configs), **(env_kwargs or {})}
    return RunSpec(algo, env_id, env, policy, constructor, n_updates, recorder, dict(recorder_kwargs or {}))
