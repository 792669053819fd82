"""Hyperparameter samplers of the zoo's Optuna search (``train.py -optimize``), one per algorithm.

A sampler draws one trial's hyperparameters and returns them **as a zoo YAML entry would write
them**: plain numbers and strings (``policy_kwargs`` as a string evaluated with ``nn`` in scope), so
that the best trial can be written to ``best.yml`` and loaded back with ``--hyperparams``.

Keys held fixed are never drawn: the keys that define an ablation (``tpo_1ep``'s ``n_epochs=1``) and
every key given as a ``key:value`` override on the command line (``-params batch_size:4``), so a
search can tune some hyperparameters while others stay where the user put them.

Ranges. The grouped algorithms (the paper's TPO, GRPO, DG, PPO and the PG baselines) search the
learning rate over a log range of a factor 10 either side of the entry's own rate (1e-3 for the
transformer, 0.1 for the tabular bandits, 1e-5 for LLMs), ``eta`` over [0.1, 10] (log), ``n_epochs``
over 1..8, ``clip_range`` over [0.05, 0.4] and GRPO's ``beta`` over [1e-3, 1] (log). Where the
collection mode uses them, ``group_size`` (K) is drawn over 2..32 and ``batch_size`` (B) over a log
range of a factor 4 either side of the entry's B (at least 2: the batch-mean baseline needs two
samples). SB3's algorithms use the RL Zoo's ranges (``rl_zoo3/hyperparams_opt.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Collection modes whose groups are K candidates per context (``group_size`` matters).
GROUPED_MODES = frozenset({"token", "sequence", "text"})
#: The RL Zoo's network sizes: on-policy (actor and critic) and off-policy (Q-network) ones.
ON_POLICY_NETS = {
    "tiny": "dict(pi=[64], vf=[64])",
    "small": "dict(pi=[64, 64], vf=[64, 64])",
    "medium": "dict(pi=[256, 256], vf=[256, 256])",
}
OFF_POLICY_NETS = {"small": "[64, 64]", "medium": "[256, 256]", "big": "[400, 300]"}
ACTIVATIONS = {"tanh": "nn.Tanh", "relu": "nn.ReLU"}


@dataclass
class SamplerContext:
    """What a sampler may read: the search's base hyperparameters and the keys it must not draw.

    :param algo: the zoo's algorithm key (``tpo``, ``sb3_ppo``, ...).
    :param base: the merged hyperparameters of the entry (YAML < files < overrides).
    :param fixed: keys held at their ``base`` value (ablation definitions and ``key:value`` overrides).
    :param group_mode: the collection mode of a grouped algorithm (``None`` for SB3's algorithms).
    :param n_envs: the number of training envs (SB3's algorithms).
    """

    algo: str
    base: dict[str, Any] = field(default_factory=dict)
    fixed: frozenset[str] = frozenset()
    group_mode: str | None = None
    n_envs: int = 1


class Draw:
    """Suggest values through an Optuna trial into ``params``, skipping the context's fixed keys."""

    def __init__(self, trial: Any, context: SamplerContext) -> None:
        self.trial, self.context = trial, context
        self.params: dict[str, Any] = {}

    def free(self, *names: str) -> bool:
        """True when none of ``names`` is held fixed (so the sampler may draw them)."""
        return not any(name in self.context.fixed for name in names)

    def uniform(self, name: str, low: float, high: float, log: bool = False) -> None:
        """Draw ``name`` uniformly (or log-uniformly) in ``[low, high]`` unless it is fixed."""
        if self.free(name):
            self.params[name] = self.trial.suggest_float(name, low, high, log=log)

    def integer(self, name: str, low: int, high: int, log: bool = False) -> None:
        """Draw the integer ``name`` in ``[low, high]`` unless it is fixed."""
        if self.free(name):
            self.params[name] = self.trial.suggest_int(name, low, high, log=log)

    def choice(self, name: str, choices: list[Any]) -> None:
        """Draw ``name`` among ``choices`` unless it is fixed."""
        if self.free(name):
            self.params[name] = self.trial.suggest_categorical(name, choices)

    def base_number(self, name: str, default: float) -> float:
        """The entry's value of ``name`` as a number (``lin_<v>`` reads as ``v``), else ``default``."""
        value = self.context.base.get(name, default)
        if isinstance(value, str):
            value = value[4:] if value.startswith("lin_") else value
            try:
                return float(value)
            except ValueError:
                return default
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


# ----------------------------------------------------------------------------- grouped algorithms
def _learning_rate(draw: Draw) -> None:
    """Log range of a factor 10 either side of the entry's learning rate."""
    rate = draw.base_number("learning_rate", 1e-3)
    draw.uniform("learning_rate", rate / 10, rate * 10, log=True)


def _group_sizes(draw: Draw, batch: bool = True) -> None:
    """``group_size`` where the mode uses K; ``batch_size`` around the entry's B (not in exact mode)."""
    context = draw.context
    mode = context.group_mode
    if mode in GROUPED_MODES or (mode == "single" and context.base.get("match") == "interactions"):
        draw.integer("group_size", 2, 32, log=True)
    if batch and mode != "exact":
        size = int(draw.base_number("batch_size", 100))
        draw.integer("batch_size", max(2, size // 4), max(4, size * 4), log=True)


def sample_tpo(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """TPO: ``eta``, ``learning_rate``, ``n_epochs``, ``group_size`` and ``batch_size``."""
    draw = Draw(trial, context)
    draw.uniform("eta", 0.1, 10.0, log=True)
    _learning_rate(draw)
    draw.integer("n_epochs", 1, 8)
    _group_sizes(draw)
    return draw.params


def sample_grpo(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """GRPO: ``clip_range``, ``beta`` (the k3 KL weight), ``learning_rate``, ``n_epochs``."""
    draw = Draw(trial, context)
    draw.uniform("clip_range", 0.05, 0.4)
    draw.uniform("beta", 1e-3, 1.0, log=True)
    _learning_rate(draw)
    draw.integer("n_epochs", 1, 8)
    return draw.params


def sample_dg(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """DG (one optimizer step per batch): ``eta`` and ``learning_rate``."""
    draw = Draw(trial, context)
    draw.uniform("eta", 0.1, 10.0, log=True)
    _learning_rate(draw)
    return draw.params


def sample_ppo(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """The paper's critic-free PPO: ``clip_range``, ``learning_rate``, ``n_epochs``."""
    draw = Draw(trial, context)
    draw.uniform("clip_range", 0.05, 0.4)
    _learning_rate(draw)
    draw.integer("n_epochs", 1, 8)
    return draw.params


def sample_pg(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """REINFORCE (``pg``) and the supervised oracle (``ce``): ``learning_rate`` and ``batch_size``."""
    draw = Draw(trial, context)
    _learning_rate(draw)
    _group_sizes(draw)
    return draw.params


def sample_group_pg(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """Group PG: ``eta``, ``learning_rate``, ``group_size`` and ``batch_size``."""
    draw = Draw(trial, context)
    draw.uniform("eta", 0.1, 10.0, log=True)
    _learning_rate(draw)
    _group_sizes(draw)
    return draw.params


# ---------------------------------------------------------------------- SB3 (RL Zoo's ranges)
def _policy_kwargs(draw: Draw, net_arch: str | None, activation: str | None) -> None:
    """``policy_kwargs`` as a zoo string: the entry's own ``policy_kwargs`` with the drawn network."""
    extra = [f"net_arch={net_arch}"] if net_arch else []
    extra += [f"activation_fn={activation}"] if activation else []
    base = draw.context.base.get("policy_kwargs")
    inner = ", ".join(([base if isinstance(base, str) else repr(base)] if base else []) + extra)
    draw.params["policy_kwargs"] = f"dict({inner})"


def _gamma_lambda(draw: Draw, gae: bool = True) -> None:
    """``gamma`` = 1 - x and ``gae_lambda`` = 1 - y with x, y drawn log-uniformly (as the RL Zoo)."""
    if draw.free("gamma"):
        draw.params["gamma"] = 1 - draw.trial.suggest_float("one_minus_gamma", 1e-4, 0.03, log=True)
    if gae and draw.free("gae_lambda"):
        draw.params["gae_lambda"] = 1 - draw.trial.suggest_float("one_minus_gae_lambda", 1e-4, 0.1, log=True)


def _network(draw: Draw, nets: dict[str, str], activation: bool = True) -> None:
    """Draw the RL Zoo's ``net_arch`` size (and activation) unless ``policy_kwargs`` is fixed."""
    if not draw.free("policy_kwargs"):
        return
    net = nets[draw.trial.suggest_categorical("net_arch", list(nets))]
    act = None
    if activation:
        act = ACTIVATIONS[draw.trial.suggest_categorical("activation_fn", list(ACTIVATIONS))]
    _policy_kwargs(draw, net, act)


def _rollout_sizes(draw: Draw) -> None:
    """``n_steps`` = 2^(5..12) and ``batch_size`` = 2^(2..10), the batch capped at n_steps x n_envs."""
    if draw.free("n_steps"):
        draw.params["n_steps"] = 2 ** draw.trial.suggest_int("n_steps_pow", 5, 12)
    if draw.free("batch_size"):
        draw.params["batch_size"] = 2 ** draw.trial.suggest_int("batch_size_pow", 2, 10)
        n_steps = int(draw.params.get("n_steps", draw.base_number("n_steps", 2048)))
        draw.params["batch_size"] = min(draw.params["batch_size"], n_steps * draw.context.n_envs)


def sample_sb3_ppo(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """Stable-Baselines3's PPO (RL Zoo ``sample_ppo_params``); also ``ppo_lstm`` (RecurrentPPO)."""
    draw = Draw(trial, context)
    _rollout_sizes(draw)
    _gamma_lambda(draw)
    draw.uniform("learning_rate", 1e-5, 0.002, log=True)
    draw.uniform("ent_coef", 1e-8, 0.1, log=True)
    draw.choice("clip_range", [0.1, 0.2, 0.3, 0.4])
    draw.choice("n_epochs", [1, 5, 10, 20])
    draw.uniform("max_grad_norm", 0.3, 2.0)
    _network(draw, ON_POLICY_NETS)
    return draw.params


def sample_a2c(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """A2C (RL Zoo ``sample_a2c_params``)."""
    draw = Draw(trial, context)
    draw.choice("n_steps", [32, 64, 128, 256, 512, 1024, 2048])
    _gamma_lambda(draw)
    draw.uniform("learning_rate", 1e-5, 0.002, log=True)
    draw.uniform("max_grad_norm", 0.3, 2.0)
    draw.uniform("ent_coef", 1e-8, 0.1, log=True)
    _network(draw, {k: ON_POLICY_NETS[k] for k in ("small", "medium")})
    return draw.params


def sample_trpo(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """TRPO from sb3-contrib (RL Zoo ``sample_trpo_params``)."""
    draw = Draw(trial, context)
    _rollout_sizes(draw)
    _gamma_lambda(draw)
    draw.uniform("learning_rate", 1e-5, 0.002, log=True)
    draw.integer("n_critic_updates", 5, 30)
    draw.integer("cg_max_steps", 5, 30)
    draw.uniform("target_kl", 0.001, 0.1, log=True)
    _network(draw, {k: ON_POLICY_NETS[k] for k in ("small", "medium")})
    return draw.params


def sample_dqn(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """DQN (RL Zoo ``sample_dqn_params``): ``gradient_steps`` = train_freq // subsample_steps."""
    draw = Draw(trial, context)
    _gamma_lambda(draw, gae=False)
    if draw.free("batch_size"):
        draw.params["batch_size"] = 2 ** trial.suggest_int("batch_size_pow", 2, 11)
    draw.uniform("learning_rate", 1e-5, 0.002, log=True)
    draw.integer("train_freq", 1, 10)
    if draw.free("gradient_steps"):
        train_freq = int(draw.params.get("train_freq", draw.base_number("train_freq", 4)))
        subsample = trial.suggest_int("subsample_steps", 1, max(1, min(train_freq, 8)))
        draw.params["gradient_steps"] = max(train_freq // subsample, 1)
    draw.uniform("exploration_final_eps", 0.0, 0.2)
    draw.uniform("exploration_fraction", 0.0, 0.5)
    draw.integer("target_update_interval", 1, 20000, log=True)
    if draw.free("policy_kwargs"):
        net = OFF_POLICY_NETS[trial.suggest_categorical("net_arch", list(OFF_POLICY_NETS))]
        _policy_kwargs(draw, net, None)
    return draw.params


def sample_qrdqn(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """QR-DQN from sb3-contrib: DQN's ranges plus ``n_quantiles`` (5..200) in ``policy_kwargs``."""
    params = sample_dqn(trial, context)
    if "policy_kwargs" in params:
        n_quantiles = trial.suggest_int("n_quantiles", 5, 200)
        params["policy_kwargs"] = params["policy_kwargs"][:-1] + f", n_quantiles={n_quantiles})"
    return params


def sample_ars(trial: Any, context: SamplerContext) -> dict[str, Any]:
    """ARS from sb3-contrib (RL Zoo ``sample_ars_params``): ``n_top`` = top fraction x ``n_delta``."""
    draw = Draw(trial, context)
    if draw.free("n_delta"):
        draw.params["n_delta"] = 2 ** trial.suggest_int("n_delta_pow", 2, 6)
    draw.uniform("learning_rate", 1e-5, 0.002, log=True)
    draw.uniform("delta_std", 0.01, 0.3)
    if draw.free("n_top"):
        n_delta = int(draw.params.get("n_delta", draw.base_number("n_delta", 8)))
        draw.params["n_top"] = max(int(trial.suggest_float("top_frac_size", 0.05, 1.0) * n_delta), 1)
    return draw.params


Sampler = Callable[[Any, SamplerContext], dict[str, Any]]

#: Algorithm key -> sampler. Ablations share their parent's sampler (their defining key stays fixed).
SAMPLERS: dict[str, Sampler] = {
    "tpo": sample_tpo,
    "tpo_no_anchor": sample_tpo,
    "tpo_1ep": sample_tpo,
    "grpo": sample_grpo,
    "grpo_no_kl": sample_grpo,
    "grpo_masked": sample_grpo,
    "dg": sample_dg,
    "ppo": sample_ppo,
    "pg": sample_pg,
    "ce": sample_pg,
    "group_pg": sample_group_pg,
    "sb3_ppo": sample_sb3_ppo,
    "ppo_lstm": sample_sb3_ppo,
    "a2c": sample_a2c,
    "trpo": sample_trpo,
    "dqn": sample_dqn,
    "qrdqn": sample_qrdqn,
    "ars": sample_ars,
}
