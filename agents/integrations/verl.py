"""TPO as a verl plugin (verl 0.9.x): advantage estimator and policy loss ``"tpo"``, a config
validator, a reasoning-gym reward function and a parquet exporter for the text envs.

Target Policy Optimization (arXiv 2604.06159, Sec. 2) in verl's notation. For a prompt x, verl's
rollout draws K = ``actor_rollout_ref.rollout.n`` completions y_1..y_K with scores s_i (the sum of
the row's ``token_level_rewards``). Then

* estimator ``"tpo"``: u = standardize(s) within the group of rows sharing a ``uid``, with the
  population std and u = 0 for a zero-variance group (:func:`agents.losses.standardize`), written
  on every response token of row i (``advantages = returns = u_i * response_mask``);
* loss ``"tpo"``: the log-scores ``L_i = sum_t m_t log pi(y_t)`` (``TPO_LOGSCORE=sum``) or that sum
  divided by the number of response tokens (``mean``, the default, as for the text envs), under the
  rollout snapshot (``old_log_prob``, L_old) and under theta (``log_prob``, L_theta);
  ``q = softmax_K(log_softmax_K(sg L_old) + u / eta)`` (:func:`agents.losses.tpo_target`) and
  ``CE_g = -sum_i q_i log softmax_K(L_theta)_i`` (:func:`agents.losses.tpo_loss`).

Group layout. The loss sees one micro-batch of rows and no ``uid``: it takes rows
``[j*K, (j+1)*K)`` as group j. verl's legacy trainer (``trainer.use_v1=false``) repeats each prompt K
times *interleaved*, so a prompt's K rows are contiguous, and keeps them contiguous through the DP
split, the mini-batches and the micro-batches as long as ``trainer.balance_batch=false``,
``use_dynamic_bsz=false``, ``actor.shuffle=false`` and every per-GPU mini/micro-batch is a multiple
of K rows (:func:`config_errors` checks all of this; the v1 trainer always rebalances rows by length
and is refused). Each micro-batch's advantages are checked to be z-scored groups (mean 0, population
std 0 or 1), so a broken layout or another estimator fails at once instead of training on mixed
groups.

Normalisation. verl's FSDP engine calls ``loss.backward()`` on every micro-batch's loss as returned
(no division by the number of micro-batches) and data parallelism averages gradients over the D
ranks; the Megatron engine multiplies the loss by its number of micro-batches to undo its own
schedule's division, so the same convention holds there (not with context parallelism, where Megatron
divides by token counts: refused by the validator). verl's own ``agg_loss`` therefore returns
``sum over the micro-batch / global size * D`` with ``global_batch_info`` (``dp_size`` = D,
``global_batch_size`` = rows in the optimizer step's mini-batch on all ranks,
``ppo_mini_batch_size * rollout.n``). The TPO loss of a micro-batch m holding G_m groups is

    loss_m = (D / G) * sum_{g in m} CE_g,      G = global_batch_size / K = ppo_mini_batch_size,

so that the accumulated, DP-averaged gradient is (1/D) sum_ranks sum_m grad loss_m
= (1/G) sum_{all G groups} grad CE_g, the gradient of :func:`agents.losses.tpo_loss` over every group
of the mini-batch (the whole batch when ``ppo_mini_batch_size = data.train_batch_size``, as in the
paper's setting). Without ``global_batch_size`` (a direct call) the loss is the mean over the
micro-batch's groups. ``loss_agg_mode`` and ``loss_scale_factor`` do not touch the TPO term (they
still aggregate verl's KL and entropy terms).

Settings. verl's ``PolicyLossConfig`` has fixed fields and hydra refuses unknown keys there, so the
loss reads environment variables: ``TPO_ETA`` (eta > 0, default 1.0) and ``TPO_LOGSCORE``
(``mean`` or ``sum``, default ``mean``). Export them in the launching shell (a local Ray cluster
inherits them) or pass ``+ray_kwargs.ray_init.runtime_env.env_vars.TPO_ETA=0.5`` (multi-node).

Loading. ``pip install -e ".[verl]"`` registers the module under the ``verl.plugins`` entry point,
which verl imports on ``import verl`` in every process (``VERL_USE_EXTERNAL_PLUGINS``, default
``auto``); ``VERL_USE_EXTERNAL_MODULES=agents.integrations.verl`` also works. verl logs a failing
plugin only at debug level: ``get_policy_loss_fn("tpo")`` then reports an unknown loss mode.
Without verl installed the pure functions below still work (the tests use them).

Command line::

    python -m agents.integrations.verl check configs/verl/tpo_qwen3_1.7b.yaml [key=value ...]
    python -m agents.integrations.verl export --env TPO/GraphColor-v0 --out data/verl/graph_color \\
        [--env-kwargs size:2000 reward:binary] [--system-prompt TEXT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.losses import (
    effective_group_size,
    logscore_spread,
    sequence_logscores,
    standardize,
    target_gap,
    tpo_loss,
    tpo_target,
    zero_variance_groups,
)

__all__ = [
    "ENV_ETA",
    "ENV_LOGSCORE",
    "NAME",
    "check_config",
    "compute_score",
    "compute_tpo_advantage",
    "compute_tpo_policy_loss",
    "config_errors",
    "contiguous_groups",
    "dataset_rows",
    "export_dataset",
    "load_config",
    "main",
    "register",
    "row_advantages",
    "tpo_settings",
]

#: The name of the advantage estimator and of the policy loss in verl's registries.
NAME = "tpo"
#: Environment variable holding eta (> 0) for the loss; default :data:`DEFAULT_ETA`.
ENV_ETA = "TPO_ETA"
#: Environment variable holding the log-score reduction, ``mean`` or ``sum``; default ``mean``.
ENV_LOGSCORE = "TPO_LOGSCORE"
DEFAULT_ETA = 1.0
DEFAULT_LOGSCORE = "mean"
LOGSCORES = ("mean", "sum")
#: How far a group's advantages may be from a z-score (mean 0, popstd 0 or 1) before the loss refuses them.
GROUP_TOLERANCE = 1e-3

_LAYOUT_HINT = ("use algorithm.adv_estimator=tpo with trainer.use_v1=false, trainer.balance_batch=false, "
                "actor.use_dynamic_bsz=false, actor.shuffle=false")


# ---------------------------------------------------------------------------------------------------
# Settings


def tpo_settings(environ: Mapping[str, str] | None = None) -> tuple[float, str]:
    """``(eta, logscore)`` from ``TPO_ETA`` and ``TPO_LOGSCORE`` (defaults 1.0 and ``mean``).

    Raises a one-line ``ValueError`` naming the bad value and what is allowed.
    """
    environ = os.environ if environ is None else environ
    raw_eta = environ.get(ENV_ETA, "").strip()
    try:
        eta = float(raw_eta) if raw_eta else DEFAULT_ETA
    except ValueError:
        raise ValueError(f"{ENV_ETA}={raw_eta!r} is not a number: set a float > 0 (default 1.0)") from None
    if not math.isfinite(eta) or eta <= 0:
        raise ValueError(f"{ENV_ETA}={raw_eta!r}: eta must be a finite float > 0 (default 1.0)")
    logscore = environ.get(ENV_LOGSCORE, "").strip().lower() or DEFAULT_LOGSCORE
    if logscore not in LOGSCORES:
        raise ValueError(f"{ENV_LOGSCORE}={environ.get(ENV_LOGSCORE)!r}: use 'mean' (default) or 'sum'")
    return eta, logscore


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    """``config.name`` for a verl dataclass config, a DictConfig, a dict or a namespace."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


# ---------------------------------------------------------------------------------------------------
# Advantage estimator


def compute_tpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Sequence[Any] | np.ndarray | None = None,
    **unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``"tpo"``: within-group standardised scores (paper Sec. 2, App. A).

    s_i = sum_t r_{i,t};  u = standardize(s) over the rows sharing a uid ``index`` (population std,
    u = 0 for a zero-variance group, :func:`agents.losses.standardize`);  A_{i,t} = u_i m_{i,t}.
    Returns ``(advantages, returns)``, both ``A`` ``[N, T]``. Groups are found by uid, so the row
    order does not matter here (the loss needs contiguous groups). ``config`` (verl's
    ``AlgoConfig``) and other keywords verl passes (``reward_baselines``) are not used.
    """
    if index is None:
        raise ValueError("the tpo estimator needs the prompt uid of every row (index=None): verl passes "
                         "non_tensor_batch['uid']")
    if token_level_rewards.dim() != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must both be [N, T]")
    uids = np.asarray(index, dtype=object)
    n_rows = token_level_rewards.shape[0]
    if uids.shape != (n_rows,):
        raise ValueError(f"index has shape {uids.shape}; expected one uid per row, ({n_rows},)")
    with torch.no_grad():
        scores = token_level_rewards.sum(-1)
        _, inverse, counts = np.unique(uids.astype(str), return_inverse=True, return_counts=True)
        order = np.argsort(inverse, kind="stable")
        u = torch.zeros_like(scores)
        for rows in np.split(order, np.cumsum(counts)[:-1]):
            rows_t = torch.as_tensor(rows, device=scores.device)
            u[rows_t] = standardize(scores[rows_t].unsqueeze(0)).squeeze(0)
        advantages = u.unsqueeze(-1) * response_mask.to(u.dtype)
    return advantages, advantages


# ---------------------------------------------------------------------------------------------------
# Policy loss


def contiguous_groups(values: torch.Tensor, group_size: int, name: str = "rows") -> torch.Tensor:
    """Per-row values ``[N]`` as groups ``[N / K, K]`` of K contiguous rows (row j*K + i is candidate i
    of group j). Raises a one-line ``ValueError`` when N is not a positive multiple of K."""
    n_rows = values.shape[0]
    if values.dim() != 1:
        raise ValueError(f"{name} must be one value per row [N], got shape {tuple(values.shape)}")
    if n_rows == 0 or n_rows % group_size:
        raise ValueError(f"{name}: {n_rows} rows is not a positive multiple of rollout_n={group_size}: every "
                         f"micro-batch must hold whole groups (ppo_micro_batch_size_per_gpu a multiple of "
                         f"{group_size})")
    return values.reshape(n_rows // group_size, group_size)


def row_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's advantage u_i ``[N]``: the value at its first response token (the estimator writes
    the same u_i on every response token), 0 for a row without response tokens."""
    if advantages.shape != response_mask.shape or advantages.dim() != 2:
        raise ValueError(f"advantages {tuple(advantages.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must both be [N, T]")
    mask = response_mask.bool()
    first = mask.to(torch.int8).argmax(-1, keepdim=True)
    u = advantages.detach().gather(-1, first).squeeze(-1)
    return torch.where(mask.any(-1), u, torch.zeros_like(u))


def _check_standardized(u: torch.Tensor, group_size: int) -> None:
    """Refuse groups ``[G, K]`` of advantages that are not z-scores: mixed rows or another estimator."""
    mean = u.mean(-1)
    std = (u - mean.unsqueeze(-1)).pow(2).mean(-1).sqrt()
    bad = (mean.abs() > GROUP_TOLERANCE) | ((std > GROUP_TOLERANCE) & ((std - 1).abs() > GROUP_TOLERANCE))
    if bad.any():
        j = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"rows {j * group_size}..{(j + 1) * group_size - 1} of the micro-batch are not one z-scored "
            f"group of rollout_n={group_size} (advantage mean {float(mean[j]):.4g}, population std "
            f"{float(std[j]):.4g}; expected 0 and 0 or 1): {_LAYOUT_HINT}")


def _check_actor_config(config: Any, group_size: int) -> None:
    """The actor settings that keep groups whole, read from verl's ``ActorConfig`` at each call."""
    if _cfg(config, "use_dynamic_bsz", False):
        raise ValueError("actor.use_dynamic_bsz=True regroups rows by length: the tpo loss needs False")
    if _cfg(config, "shuffle", False):
        raise ValueError("actor.shuffle=True shuffles rows across groups: the tpo loss needs False")
    micro = _cfg(config, "ppo_micro_batch_size_per_gpu", None)
    if micro is not None and int(micro) % group_size:
        raise ValueError(f"actor.ppo_micro_batch_size_per_gpu={micro} is not a multiple of "
                         f"rollout_n={group_size}")


def _group_size(config: Any) -> int:
    k = _cfg(config, "rollout_n", None)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 2:
        raise ValueError(f"rollout_n={k!r}: the tpo loss needs actor_rollout_ref.rollout.n >= 2 completions "
                         f"per prompt")
    return int(k)


def _global_scale(config: Any, n_local_groups: int, group_size: int) -> float:
    """D * G_m / G: turns the micro-batch's group mean into its share of the mean over all G groups."""
    info = _cfg(config, "global_batch_info", None) or {}
    dp_size = int(info.get("dp_size") or 1)
    global_rows = info.get("global_batch_size")
    if global_rows is None:
        if dp_size > 1:
            raise ValueError(f"global_batch_info has dp_size={dp_size} but no global_batch_size: the tpo "
                             f"loss cannot normalise over all groups")
        return 1.0
    global_rows = int(global_rows)
    if global_rows <= 0 or global_rows % group_size:
        raise ValueError(f"global_batch_size={global_rows} rows is not a positive multiple of rollout_n="
                         f"{group_size}")
    return n_local_groups * dp_size / (global_rows // group_size)


def compute_tpo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl policy loss ``"tpo"``: the TPO cross-entropy on contiguous groups (paper Sec. 2, Eqs. 2-3).

    Rows ``[j*K, (j+1)*K)`` of the micro-batch are group j, K = ``config.rollout_n``;
    L_i = sequence_logscores(log-probs, mask, ``TPO_LOGSCORE``) (sum, or mean over response tokens),
    u_i = the row's advantage (the ``"tpo"`` estimator's z-score),
    q = softmax_K(log_softmax_K(sg L_old) + u / eta)  (eta = ``TPO_ETA``),
    CE_g = - sum_i q_i log softmax_K(L_theta)_i,
    loss = (D / G) sum_{g in micro-batch} CE_g with D = ``global_batch_info["dp_size"]`` and
    G = ``global_batch_info["global_batch_size"]`` / K (the mean over all groups of the optimizer
    step once verl sums micro-batches and averages ranks; see the module docstring), or the mean
    over the micro-batch's groups without ``global_batch_size``.
    ``loss_agg_mode`` is ignored (the loss is per group, not per token). Metrics (means over the
    micro-batch): ``actor/tpo_effective_group_size`` exp(H(softmax L_old)), ``actor/tpo_logscore_spread``
    max - min L_old, ``actor/tpo_target_gap`` mean |p_theta - q|, ``actor/tpo_zero_variance_frac``,
    ``actor/ppo_kl`` (mean of log pi_old - log pi_theta over response tokens) and ``actor/tpo_eta``.
    """
    if config is None:
        raise ValueError("the tpo loss needs verl's actor config (config=None): it reads rollout_n and "
                         "global_batch_info")
    if rollout_is_weights is not None:
        raise ValueError("rollout_is_weights were passed: the tpo loss has no importance-weighted form; set "
                         "algorithm.rollout_correction.rollout_is=null")
    for name, tensor in (("old_log_prob", old_log_prob), ("advantages", advantages),
                         ("response_mask", response_mask)):
        if tensor.shape != log_prob.shape:
            raise ValueError(f"{name} {tuple(tensor.shape)} must be shaped like log_prob "
                             f"{tuple(log_prob.shape)}")
    group_size = _group_size(config)
    _check_actor_config(config, group_size)
    eta, reduction = tpo_settings()

    dtype = torch.promote_types(log_prob.dtype, torch.float32)  # the group maths in fp32 at least
    mask = response_mask.to(dtype)
    logscores = contiguous_groups(
        sequence_logscores(log_prob.to(dtype), mask, reduction), group_size, "log_prob")
    old_logscores = contiguous_groups(
        sequence_logscores(old_log_prob.detach().to(dtype), mask, reduction), group_size, "old_log_prob")
    u = contiguous_groups(row_advantages(advantages, response_mask).to(dtype), group_size, "advantages")
    _check_standardized(u, group_size)

    target = tpo_target(old_logscores, u, eta)
    loss = tpo_loss(logscores, target) * _global_scale(config, logscores.shape[0], group_size)

    with torch.no_grad():
        tokens = mask.sum().clamp(min=1)
        log_ratio = old_log_prob.to(dtype) - log_prob.detach().to(dtype)
        metrics = {
            "actor/tpo_effective_group_size": effective_group_size(old_logscores).item(),
            "actor/tpo_logscore_spread": logscore_spread(old_logscores).item(),
            "actor/tpo_target_gap": target_gap(logscores.detach(), target).item(),
            "actor/tpo_zero_variance_frac": zero_variance_groups(u).float().mean().item(),
            "actor/ppo_kl": ((log_ratio * mask).sum() / tokens).item(),
            "actor/tpo_eta": eta,
        }
    return loss, metrics


# ---------------------------------------------------------------------------------------------------
# Registration with verl


def _is_ours(fn: Any, ours: Any) -> bool:
    name = (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None))
    return name == (ours.__module__, ours.__qualname__)


def register() -> bool:
    """Register ``"tpo"`` in verl's advantage-estimator and policy-loss registries.

    Returns False when verl is not installed; idempotent (a second import of this module does not
    clash). Called when this module is imported, which verl's ``verl.plugins`` entry point does.
    """
    if importlib.util.find_spec("verl") is None:
        return False
    from verl.trainer.ppo import core_algos

    for registry, decorator, fn in (
        (core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.register_adv_est, compute_tpo_advantage),
        (core_algos.POLICY_LOSS_REGISTRY, core_algos.register_policy_loss, compute_tpo_policy_loss),
    ):
        current = registry.get(NAME)
        if current is not None and not _is_ours(current, fn):
            raise ValueError(f"verl already has a {NAME!r} entry from {current.__module__}."
                             f"{current.__qualname__}; uninstall that plugin or list the plugins to load in "
                             f"VERL_USE_EXTERNAL_PLUGINS")
        if current is None:
            decorator(NAME)(fn)
    return True


# ---------------------------------------------------------------------------------------------------
# Config validator

#: verl 0.9.1's defaults (verl/trainer/config/ppo_trainer.yaml) for every key the validator reads,
#: used when hydra and verl are not installed to compose the real config.
VERL_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.rollout_correction.bypass_mode": False,
    "algorithm.rollout_correction.rollout_is": None,
    "algorithm.rollout_correction.rollout_rs": None,
    "actor_rollout_ref.actor.strategy": "fsdp",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.actor.ppo_micro_batch_size": None,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": None,
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.shuffle": False,
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.context_parallel_size": 1,
    "actor_rollout_ref.rollout.n": 1,
    "data.train_batch_size": 1024,
    "trainer.balance_batch": True,
    "trainer.use_v1": True,
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
}

_MISSING = object()
_ACTOR = "actor_rollout_ref.actor"


def _get(config: Mapping[str, Any], dotted: str, default: Any = _MISSING) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if default is _MISSING:
                return VERL_DEFAULTS.get(dotted)
            return default
        node = node[part]
    return node


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    node = config
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = dict(value) if isinstance(value, Mapping) else value
    return base


def _split_sources(sources: Sequence[str]) -> tuple[Path | None, list[str]]:
    yaml_path: Path | None = None
    overrides: list[str] = []
    for source in sources:
        if "=" in source and not Path(source).is_file():
            overrides.append(source)
        elif Path(source).suffix in (".yaml", ".yml"):
            if not Path(source).is_file():
                raise ValueError(f"config file {source!r} does not exist")
            if yaml_path is not None:
                raise ValueError(f"two config files {str(yaml_path)!r} and {source!r}: give one, plus "
                                 f"key=value overrides")
            yaml_path = Path(source)
        else:
            raise ValueError(f"{source!r} is neither a .yaml config file nor a key=value override")
    return yaml_path, overrides


def _hydra_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("hydra", "omegaconf", "verl"))


def _compose_with_hydra(yaml_path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """The config exactly as ``verl.trainer.main_ppo`` composes it (verl's ppo_trainer + file + overrides)."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    if yaml_path is None:
        with initialize_config_module("verl.trainer.config", version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=overrides)
    else:
        with initialize_config_dir(config_dir=str(yaml_path.parent.resolve()), version_base=None):
            cfg = compose(config_name=yaml_path.stem, overrides=overrides)
    GlobalHydra.instance().clear()
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an interpolation that only resolves at run time (e.g. ${oc.env:...})
        return OmegaConf.to_container(cfg, resolve=False)


def _compose_plain(yaml_path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """verl's defaults for the checked keys, the file (without its ``defaults``/``hydra`` keys) and
    ``[+|++]key=value`` overrides (values parsed as YAML, as hydra does for plain values)."""
    import yaml

    config: dict[str, Any] = {}
    for dotted, value in VERL_DEFAULTS.items():
        _set(config, dotted, value)
    if yaml_path is not None:
        loaded = yaml.safe_load(yaml_path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{str(yaml_path)!r} holds a {type(loaded).__name__}, not a mapping of config "
                             f"keys")
        _merge(config, {k: v for k, v in loaded.items() if k not in ("defaults", "hydra")})
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+")
        if key.startswith("~"):
            raise ValueError(f"override {override!r}: deletions (~key) need hydra; install the verl extra")
        _set(config, key, yaml.safe_load(value) if value.strip() else None)
    return config


def load_config(sources: Sequence[str], use_hydra: bool | None = None) -> dict[str, Any]:
    """The verl config given by at most one YAML file and any ``key=value`` overrides, as a dict.

    With hydra and verl installed (``use_hydra`` None = auto) this composes it as
    ``verl.trainer.main_ppo --config-path DIR --config-name NAME key=value ...`` does (a file with a
    ``defaults: [ppo_trainer, _self_]`` list and ``hydra.searchpath: [pkg://verl.trainer.config]``);
    without them, verl 0.9.1's defaults (:data:`VERL_DEFAULTS`) for the checked keys, the file and the
    overrides are merged in that order.
    """
    yaml_path, overrides = _split_sources(sources)
    if use_hydra is None:
        use_hydra = _hydra_available()
    if use_hydra:
        return _compose_with_hydra(yaml_path, overrides)
    return _compose_plain(yaml_path, overrides)


def _int_value(config: Mapping[str, Any], key: str, errors: list[str], low: int = 1) -> int | None:
    value = _get(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        errors.append(f"{key}={value!r}: must be an integer >= {low}")
        return None
    return value


def _data_parallel_size(config: Mapping[str, Any], errors: list[str]) -> int | None:
    world = [_int_value(config, key, errors) for key in ("trainer.n_gpus_per_node", "trainer.nnodes")]
    if None in world:
        return None
    world_size = world[0] * world[1]
    strategy = _get(config, f"{_ACTOR}.strategy")
    if strategy == "megatron":
        keys = [f"{_ACTOR}.megatron.{name}" for name in
                ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")]
    else:
        keys = [f"{_ACTOR}.ulysses_sequence_parallel_size"]
    model_parallel = 1
    for key in keys:
        value = _int_value(config, key, errors)
        if value is None:
            return None
        model_parallel *= value
    if world_size % model_parallel:
        kind = "tensor x pipeline x context" if strategy == "megatron" else "ulysses sequence"
        errors.append(f"the {kind} parallel size {model_parallel} does not divide the {world_size} GPUs "
                      f"(trainer.n_gpus_per_node x trainer.nnodes)")
        return None
    return world_size // model_parallel


def _env_setting_errors(config: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    errors = []
    ray_env = _get(config, "ray_kwargs.ray_init.runtime_env.env_vars", None) or {}
    for source, env in (("the environment", environ), ("ray_kwargs.ray_init.runtime_env.env_vars", ray_env)):
        values = {key: str(env[key]) for key in (ENV_ETA, ENV_LOGSCORE) if env.get(key) is not None}
        try:
            tpo_settings(values)
        except ValueError as err:
            errors.append(f"{err} (from {source})")
    return errors


def config_errors(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every reason why ``config`` (a composed verl config, see :func:`load_config`) cannot run TPO's
    contiguous-group loss, one line each naming the bad value and what is allowed; ``[]`` if none."""
    errors: list[str] = []
    estimator = _get(config, "algorithm.adv_estimator")
    loss_mode = _get(config, f"{_ACTOR}.policy_loss.loss_mode")
    if estimator != NAME or loss_mode != NAME:
        errors.append(f"algorithm.adv_estimator={estimator!r} with {_ACTOR}.policy_loss.loss_mode="
                      f"{loss_mode!r}: TPO needs both set to {NAME!r} (the loss reads the estimator's "
                      f"z-scores)")
    for key, wanted, why in (
        ("trainer.use_v1", False, "the v1 trainer always reorders rows by length; use the legacy trainer"),
        ("trainer.balance_batch", False, "balancing reorders rows across DP ranks and splits groups"),
        (f"{_ACTOR}.use_dynamic_bsz", False, "dynamic batch sizes regroup rows by length"),
        (f"{_ACTOR}.shuffle", False, "shuffling the mini-batches mixes rows of different groups"),
        ("algorithm.rollout_correction.bypass_mode", False, "bypass mode replaces the loss by 'bypass_mode'"),
    ):
        value = _get(config, key)
        if value != wanted:
            errors.append(f"{key}={value!r}: must be {wanted} ({why})")
    for key in ("algorithm.rollout_correction.rollout_is", "algorithm.rollout_correction.rollout_rs"):
        value = _get(config, key)
        if value is not None:
            errors.append(f"{key}={value!r}: must be null (TPO's loss has no importance weights or "
                          f"rejection masks)")
    deprecated = _get(config, f"{_ACTOR}.ppo_micro_batch_size")
    if deprecated is not None:
        errors.append(f"{_ACTOR}.ppo_micro_batch_size={deprecated!r}: must be null (deprecated); set "
                      f"{_ACTOR}.ppo_micro_batch_size_per_gpu, a multiple of rollout.n")

    k = _int_value(config, "actor_rollout_ref.rollout.n", errors, low=2)
    prompts = _int_value(config, "data.train_batch_size", errors)
    mini = _int_value(config, f"{_ACTOR}.ppo_mini_batch_size", errors)
    micro = _int_value(config, f"{_ACTOR}.ppo_micro_batch_size_per_gpu", errors)
    dp = _data_parallel_size(config, errors)
    if k is not None and micro is not None and micro % k:
        errors.append(f"{_ACTOR}.ppo_micro_batch_size_per_gpu={micro}: must be a multiple of "
                      f"actor_rollout_ref.rollout.n={k} (whole groups per micro-batch), e.g. "
                      f"{k * max(1, micro // k)}")
    if prompts is not None and mini is not None and prompts % mini:
        errors.append(f"data.train_batch_size={prompts}: must be a multiple of "
                      f"{_ACTOR}.ppo_mini_batch_size={mini}")
    if dp is not None and mini is not None and mini % dp:
        errors.append(f"{_ACTOR}.ppo_mini_batch_size={mini} prompts: must be a multiple of the data-parallel "
                      f"size {dp}, so that each rank's share of a mini-batch is whole groups")
    if dp is not None and prompts is not None and prompts % dp:
        errors.append(f"data.train_batch_size={prompts} prompts: must be a multiple of the data-parallel "
                      f"size {dp}")
    if None not in (dp, mini, micro, k) and mini % dp == 0 and (mini * k // dp) % micro:
        errors.append(f"{_ACTOR}.ppo_micro_batch_size_per_gpu={micro}: must divide the {mini * k // dp} "
                      f"rows of a mini-batch per rank (ppo_mini_batch_size x rollout.n / data-parallel size)")
    context_parallel = _get(config, f"{_ACTOR}.megatron.context_parallel_size")
    megatron = _get(config, f"{_ACTOR}.strategy") == "megatron"
    if megatron and isinstance(context_parallel, int) and context_parallel > 1:
        errors.append(f"{_ACTOR}.megatron.context_parallel_size={context_parallel}: must be 1 (with context "
                      f"parallelism Megatron divides the loss by token counts, a per-token loss)")
    errors.extend(_env_setting_errors(config, os.environ if environ is None else environ))
    return errors


def check_config(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Raise ``ValueError`` with the first of :func:`config_errors`, if any."""
    errors = config_errors(config, environ)
    if errors:
        raise ValueError(errors[0])


def _summary(config: Mapping[str, Any]) -> str:
    k = _get(config, "actor_rollout_ref.rollout.n")
    dp = _data_parallel_size(config, [])
    mini = _get(config, f"{_ACTOR}.ppo_mini_batch_size")
    micro = _get(config, f"{_ACTOR}.ppo_micro_batch_size_per_gpu")
    eta, logscore = tpo_settings()
    return (f"ok: TPO with K={k}, {_get(config, 'data.train_batch_size')} prompts per step, mini-batches of "
            f"{mini} prompts, data-parallel size {dp}, micro-batches of {micro // k} group(s) per GPU, "
            f"eta={eta}, logscore={logscore}")


# ---------------------------------------------------------------------------------------------------
# Reward function and data export

_TASKS: dict[tuple[str, str], Any] = {}
_TASKS_LOCK = threading.Lock()
_SPLITS = {"train": "train", "test": "eval"}


def _task(env_kwargs_json: str, split: str) -> Any:
    """The :class:`tpo_gym.envs.text.ReasoningGymTask` of a parquet row, built once per process."""
    from tpo_gym.envs.text import ReasoningGymTask

    key = (env_kwargs_json, split)
    with _TASKS_LOCK:
        if key not in _TASKS:
            _TASKS[key] = ReasoningGymTask(split=_SPLITS[split], **json.loads(env_kwargs_json))
        return _TASKS[key]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | None,
    extra_info: Mapping[str, Any] | None = None,
    reward: str | None = None,
    **unused: Any,
) -> dict[str, float]:
    """verl ``custom_reward_function``: score one completion of an exported text-env row.

    Rebuilds the reasoning-gym item from ``extra_info`` (``env_kwargs``, ``split``, ``index``, written
    by :func:`export_dataset`) and returns :func:`tpo_gym.envs.text.score_completion`'s score: the
    dataset's own ``score_answer`` on the last ``<answer>...</answer>`` (0 without one), or 1/0 as
    that is >= 0.99 with ``reward="binary"`` (``reward`` overrides the exported mode; verl passes it
    from ``reward.custom_reward_function.reward_kwargs``). Returns ``{"score", "format_ok",
    "is_success"}`` (verl logs the extra keys). Other keywords verl may pass are ignored. Raises a
    one-line ``ValueError`` for a row that was not exported by this module or whose ground truth
    does not match the rebuilt item.
    """
    from tpo_gym.envs.text import REWARDS, SUCCESS_THRESHOLD, score_completion

    info = dict(extra_info or {})
    missing = [key for key in ("env_kwargs", "split", "index") if info.get(key) is None]
    if missing:
        raise ValueError(f"extra_info lacks {', '.join(missing)} (data_source={data_source!r}): export the "
                         f"data with `python -m agents.integrations.verl export`")
    split = info["split"]
    if split not in _SPLITS:
        raise ValueError(f"extra_info split={split!r}: expected 'train' or 'test'")
    env_kwargs = info["env_kwargs"]
    mode = reward or info.get("reward") or json.loads(env_kwargs).get("reward", "native")
    if mode not in REWARDS:
        raise ValueError(f"reward={mode!r}: use one of {', '.join(REWARDS)}")
    task = _task(env_kwargs, split)
    entry = task.entry(int(info["index"]))
    expected = None if entry["answer"] is None else str(entry["answer"])
    if ground_truth is not None and expected is not None and str(ground_truth) != expected:
        raise ValueError(f"ground truth {str(ground_truth)[:60]!r} of {split} item {info['index']} does not "
                         f"match the rebuilt reasoning-gym item {expected[:60]!r}: re-export the data")
    score, _, format_ok = score_completion(task.dataset, entry, solution_str, mode)
    return {"score": float(score), "format_ok": float(format_ok),
            "is_success": float(score >= SUCCESS_THRESHOLD)}


def _env_kwargs(env_id: str, env_kwargs: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    import gymnasium as gym

    import tpo_gym

    short = env_id.removeprefix("TPO/").removesuffix("-v0")
    full_id = env_id if env_id in tpo_gym.TEXT_ENV_IDS else f"TPO/{short}-v0"
    if full_id not in tpo_gym.TEXT_ENV_IDS:
        raise ValueError(f"--env {env_id!r} is not a text env: use one of {', '.join(tpo_gym.TEXT_ENV_IDS)}")
    kwargs = {**gym.spec(full_id).kwargs, **(env_kwargs or {})}
    if "split" in kwargs:
        raise ValueError(f"env kwarg split={kwargs['split']!r}: the exporter writes both splits (train and "
                         f"test)")
    try:
        json.dumps(kwargs)
    except TypeError as err:
        raise ValueError(f"env kwargs {kwargs!r} must be JSON values (numbers, strings, lists, dicts): "
                         f"{err}") from None
    return full_id, kwargs


def dataset_rows(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, system_prompt: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """verl's RL rows of a text env's splits: ``{"train": [...], "test": [...]}`` (test = its eval split).

    Each row: ``data_source`` (``tpo_gym/<dataset>``), ``prompt`` (chat messages: an optional system
    message, then the env's prompt as the user message), ``ability`` (``reasoning``),
    ``reward_model`` ``{"style": "rule", "ground_truth": str | None}`` and ``extra_info``
    ``{"split", "index" (item of the split), "env_id", "env_kwargs" (JSON of the env's kwargs),
    "reward"}``, all that :func:`compute_score` needs to rebuild the item.
    """
    from tpo_gym.envs.text import ReasoningGymTask

    full_id, kwargs = _env_kwargs(env_id, env_kwargs)
    kwargs_json = json.dumps(kwargs, sort_keys=True)
    rows: dict[str, list[dict[str, Any]]] = {}
    for split, env_split in _SPLITS.items():
        task = ReasoningGymTask(split=env_split, **kwargs)
        prefix = [{"role": "system", "content": system_prompt}] if system_prompt else []
        rows[split] = [
            {
                "data_source": f"tpo_gym/{task.name}",
                "prompt": [*prefix, {"role": "user", "content": task.prompt(i)}],
                "ability": "reasoning",
                "reward_model": {"style": "rule", "ground_truth": _ground_truth(task.entry(i))},
                "extra_info": {"split": split, "index": i, "env_id": full_id, "env_kwargs": kwargs_json,
                               "reward": task.reward},
            }
            for i in range(task.num_items)
        ]
    return rows


def _ground_truth(entry: Mapping[str, Any]) -> str | None:
    return None if entry["answer"] is None else str(entry["answer"])


def export_dataset(
    env_id: str, out_dir: str | os.PathLike[str], env_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> dict[str, Path]:
    """Write :func:`dataset_rows` as ``out_dir/train.parquet`` and ``out_dir/test.parquet`` (pyarrow,
    installed with verl); returns ``{"train": path, "test": path}``."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ModuleNotFoundError("writing parquet needs pyarrow: pip install 'tpo-gym[verl]' or "
                                  "pyarrow") from err
    rows = dataset_rows(env_id, env_kwargs, system_prompt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, split_rows in rows.items():
        paths[split] = out / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(split_rows), paths[split])
    return paths


# ---------------------------------------------------------------------------------------------------
# Command line


def _parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``key:value`` items, each value read as the zoo reads ``--env-kwargs`` (Python, else a string)."""
    from agents.zoo.hyperparams import parse_value

    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise ValueError(f"--env-kwargs expects key:value pairs, got {item!r}")
        kwargs[key] = parse_value(value)
    return kwargs


def main(argv: Sequence[str] | None = None) -> int:
    """``check`` a verl config for TPO, or ``export`` a text env's parquet files; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m agents.integrations.verl",
                                     description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="validate a verl config for the tpo estimator and loss")
    check.add_argument("sources", nargs="+",
                       help="at most one config .yaml and any key=value overrides (hydra syntax)")
    check.add_argument("--no-hydra", action="store_true",
                       help="merge verl 0.9.1's defaults instead of composing with hydra")
    export = commands.add_parser("export", help="write a text env's train/test parquet files for verl")
    export.add_argument("--env", required=True, help="a text env id, e.g. TPO/GraphColor-v0")
    export.add_argument("--out", required=True, help="output folder")
    export.add_argument("--env-kwargs", nargs="+", default=[],
                        help="key:value env kwargs (size:2000 reward:binary)")
    export.add_argument("--system-prompt", default=None, help="a system message put before every prompt")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            config = load_config(args.sources, use_hydra=False if args.no_hydra else None)
            errors = config_errors(config)
            for error in errors:
                print(f"error: {error}", file=sys.stderr)
            if errors:
                return 1
            print(_summary(config))
        else:
            paths = export_dataset(args.env, args.out, _parse_env_kwargs(args.env_kwargs), args.system_prompt)
            for split, path in paths.items():
                print(f"{split}: {path}")
    except (ValueError, ModuleNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
else:
    register()
