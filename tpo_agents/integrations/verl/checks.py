"""The config validator: every reason why a composed verl config cannot run TPO's contiguous-group loss.

The loss takes rows ``[j*K, (j+1)*K)`` of a micro-batch as group j. verl's legacy trainer
(``trainer.use_v1=false``) repeats each prompt K times interleaved and keeps a prompt's rows contiguous
through the data-parallel split, the mini-batches and the micro-batches as long as
``trainer.balance_batch=false``, ``use_dynamic_bsz=false``, ``actor.shuffle=false`` and every per-GPU
mini/micro-batch is a multiple of K rows; the v1 trainer always rebalances rows by length and is
refused. :func:`config_errors` checks all of this, ``actor.rollout_n`` = ``rollout.n``, TPO's
settings in the policy-loss node (:mod:`tpo_agents.integrations.verl.settings`), and that a tool config of
a multi-turn env's tools (:class:`~tpo_agents.integrations.verl.tools.EnvTool`) goes with the reward that
reads their episodes (``episode_score``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .settings import DEFAULT_ETA, DEFAULT_LOGSCORE, TARGET, check_settings

__all__ = ["NAME", "VERL_DEFAULTS", "check_config", "config_errors", "load_config", "summary"]

#: The name of the advantage estimator and of the policy loss in verl's registries.
NAME = "tpo"

#: verl 0.9.1's defaults (verl/trainer/config/ppo_trainer.yaml) for every key the validator reads,
#: used when hydra and verl are not installed to compose the real config.
VERL_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.rollout_correction.bypass_mode": False,
    "algorithm.rollout_correction.rollout_is": None,
    "algorithm.rollout_correction.rollout_rs": None,
    "actor_rollout_ref.actor.strategy": "fsdp",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
    "actor_rollout_ref.actor.policy_loss._target_": "verl.workers.config.PolicyLossConfig",
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.actor.ppo_micro_batch_size": None,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": None,
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.shuffle": False,
    "actor_rollout_ref.actor.use_prefix_grouper": False,
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


def _merge_file(config: dict[str, Any], yaml_path: Path, seen: tuple[Path, ...] = ()) -> None:
    """Merge a config file into ``config``: first the entries of its ``defaults`` list that are files
    beside it (as hydra composes ``defaults: [base, _self_]``; verl's own ``ppo_trainer`` is given by
    :data:`VERL_DEFAULTS`), then the file itself without its ``defaults``/``hydra`` keys."""
    import yaml

    if yaml_path.resolve() in seen:
        raise ValueError(f"{str(yaml_path)!r} includes itself through its defaults list")
    loaded = yaml.safe_load(yaml_path.read_text()) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{str(yaml_path)!r} holds a {type(loaded).__name__}, not a mapping of config keys")
    for entry in loaded.get("defaults") or []:
        base = yaml_path.parent / f"{entry}.yaml" if isinstance(entry, str) else None
        if base is not None and base.is_file():
            _merge_file(config, base, (*seen, yaml_path.resolve()))
    _merge(config, {k: v for k, v in loaded.items() if k not in ("defaults", "hydra")})


def _compose_plain(yaml_path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """verl's defaults for the checked keys, the file (and the files its ``defaults`` list names beside
    it) and ``[+|++]key=value`` overrides (values parsed as YAML, as hydra does for plain values)."""
    import yaml

    config: dict[str, Any] = {}
    for dotted, value in VERL_DEFAULTS.items():
        _set(config, dotted, value)
    if yaml_path is not None:
        _merge_file(config, yaml_path)
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


def _settings_errors(config: Mapping[str, Any]) -> list[str]:
    """TPO's eta and log-score in the policy-loss node, and the ``_target_`` that carries them."""
    node = _get(config, f"{_ACTOR}.policy_loss", None) or {}
    given = [key for key in ("tpo_eta", "tpo_logscore") if key in node]
    target = node.get("_target_")
    if given and target not in (None, TARGET):
        return [f"{_ACTOR}.policy_loss._target_={target!r} cannot carry {', '.join(given)}: set it to "
                f"{TARGET!r}"]
    try:
        check_settings(node.get("tpo_eta", DEFAULT_ETA), node.get("tpo_logscore", DEFAULT_LOGSCORE))
    except ValueError as err:
        return [str(err)]
    return []


def config_errors(config: Mapping[str, Any]) -> list[str]:
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
        (f"{_ACTOR}.use_dynamic_bsz", False, "dynamic batch sizes regroup rows by length"),
        (f"{_ACTOR}.shuffle", False, "shuffling the mini-batches mixes rows of different groups"),
        ("algorithm.rollout_correction.bypass_mode", False, "bypass mode replaces the loss by 'bypass_mode'"),
    ):
        value = _get(config, key)
        if value != wanted:
            errors.append(f"{key}={value!r}: must be {wanted} ({why})")
    # The legacy trainer balances whole uid groups (get_group_balanced_partitions, rows kept in order)
    # when the actor uses the prefix grouper; otherwise it sorts rows by length and splits groups.
    balance = _get(config, "trainer.balance_batch")
    if balance is not False and _get(config, f"{_ACTOR}.use_prefix_grouper") is not True:
        errors.append(f"trainer.balance_batch={balance!r}: must be False (balancing reorders rows across DP "
                      f"ranks and splits groups), or keep it with {_ACTOR}.use_prefix_grouper=true (whole "
                      f"groups are balanced)")
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
    actor_n = _get(config, f"{_ACTOR}.rollout_n", None)
    if k is not None and isinstance(actor_n, int) and not isinstance(actor_n, bool) and actor_n != k:
        errors.append(f"{_ACTOR}.rollout_n={actor_n}: must equal actor_rollout_ref.rollout.n={k} (the loss "
                      f"reads its group size K from it); leave it to verl's default ${{oc.select:...}}")
    errors.extend(_settings_errors(config))
    errors.extend(_tool_errors(config))
    return errors


ENV_TOOL = "tpo_agents.integrations.verl.tools.EnvTool"
"""The class name of a multi-turn env's tool in a verl tool config."""


def _tool_errors(config: Mapping[str, Any]) -> list[str]:
    """A tool config that names :data:`ENV_TOOL` needs the reward ``episode_score`` (the episode's return);
    a tool config that cannot be read is reported."""
    import yaml

    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
    path = _get(config, key, None)
    if not path:
        return []
    try:
        tools = (yaml.safe_load(Path(path).read_text()) or {}).get("tools") or []
    except (OSError, yaml.YAMLError, AttributeError) as err:
        return [f"{key}={path!r}: cannot read it as a verl tool config ({type(err).__name__})"]
    if not any(isinstance(tool, Mapping) and tool.get("class_name") == ENV_TOOL for tool in tools):
        return []
    name = _get(config, "reward.custom_reward_function.name", None)
    if name != "episode_score":
        return [f"reward.custom_reward_function.name={name!r}: the tools of {path} play a multi-turn env, "
                f"whose reward is the episode's return: set it to 'episode_score' (and "
                f"reward.custom_reward_function.path=pkg://tpo_agents.integrations.verl)"]
    return []


def check_config(config: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` with the first of :func:`config_errors`, if any."""
    errors = config_errors(config)
    if errors:
        raise ValueError(errors[0])


def summary(config: Mapping[str, Any]) -> str:
    k = _get(config, "actor_rollout_ref.rollout.n")
    dp = _data_parallel_size(config, [])
    mini = _get(config, f"{_ACTOR}.ppo_mini_batch_size")
    micro = _get(config, f"{_ACTOR}.ppo_micro_batch_size_per_gpu")
    node = _get(config, f"{_ACTOR}.policy_loss", None) or {}
    eta, logscore = check_settings(node.get("tpo_eta", DEFAULT_ETA),
                                   node.get("tpo_logscore", DEFAULT_LOGSCORE))
    return (f"ok: TPO with K={k}, {_get(config, 'data.train_batch_size')} prompts per step, mini-batches of "
            f"{mini} prompts, data-parallel size {dp}, micro-batches of {micro // k} group(s) per GPU, "
            f"eta={eta}, logscore={logscore}")
