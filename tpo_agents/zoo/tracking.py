"""Weights & Biases tracking of a zoo run (``--track``), as rl_zoo3 does it.

The run is named ``<env id>__<algo>__<seed>__<unix time>``; its TensorBoard logs go to
``runs/<run name>`` (rl_zoo3's folder) and are mirrored to W&B (``sync_tensorboard``), with the run's
flags as its config, the code saved and the project, entity, group and tags of the ``--wandb-*`` flags.
``WANDB_MODE=offline`` keeps everything in ``./wandb/`` (``wandb sync`` uploads it later). wandb is an
optional extra: ``pip install "tpo-gym[wandb]"``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from tpo_agents.zoo import hyperparams as hp

RUNS_DIR = "runs"
"""The TensorBoard root of tracked runs (rl_zoo3's)."""


def prepare(args: argparse.Namespace, algo: str, env_id: str) -> None:
    """Check that wandb is importable (a one-line :class:`ConfigError` otherwise), name the run
    (``args.wandb_run_name``) and point TensorBoard at ``runs/<run name>``; writes nothing."""
    try:
        import wandb  # noqa: F401
    except ImportError as err:
        raise hp.ConfigError('--track needs Weights & Biases: pip install "tpo-gym[wandb]"') from err
    args.wandb_run_name = f"{env_id}__{algo}__{args.seed}__{int(time.time())}"
    args.tensorboard_log = os.path.join(RUNS_DIR, args.wandb_run_name)


def start(args: argparse.Namespace, config: dict[str, Any]) -> Any:
    """Start the W&B run of ``args`` (after :func:`prepare`) with ``config``; returns it (``finish()``)."""
    import wandb

    return wandb.init(
        name=args.wandb_run_name,
        project=args.wandb_project_name,
        entity=args.wandb_entity,
        group=args.wandb_group,
        tags=list(args.wandb_tags) or None,
        config=hp.sanitized(config),
        sync_tensorboard=True,
        save_code=True,
    )
