"""Parity with the reference JAX implementation: initial parameters, candidate sampling, logged task error.

Reads ``tests/fixtures/reference_init_sampling.json``, written by
``tests/fixtures/make_reference_init_sampling.py`` with the reference's environment (JAX, flax), so these
tests need no JAX. Three parts:

* initialisation: the transformer (V = 2 and 16, 2H = 20) and the MNIST MLP have the reference's
  parameters under a fixed name mapping (:func:`transformer_name`, :func:`mlp_name`), each with the same
  distribution: flax's LeCun normal (a normal truncated at +-2 std and rescaled to std ``1/sqrt(fan_in)``)
  for the kernels, ``normal(1/sqrt(d))`` for the token embedding, ``normal(0.02)`` for the position table,
  zero biases and unit LayerNorm scales. Pooled statistics over ``N_SEEDS`` seeds are compared with the
  reference's pooled over its keys, with tolerances of ``Z`` standard errors of the two sample sizes;
* sampling: the K candidates drawn at a state are i.i.d. draws with replacement at temperature 1, as
  ``jax.random.categorical(key, logits, shape=(K,))`` draws them: token frequencies (chi-square bounds),
  the number of distinct tokens among K = 8 and the within-group pair-collision rate;
* logged metric: the ``rollout/task_error`` each collection mode logs equals the error the reference's
  step functions return on the same hand-made batch (1 - the mean of every reward of the batch sampled
  before the update: all B*K*H of sequence groups, the B*H behaviour rewards of token groups), with the
  env's rewards equal to the reference's on it.

All draws use fixed seeds, so the outcomes are deterministic; the tolerances are what a fresh seed would
need (a failure of a Z = 5 bound has probability < 1e-6 per comparison when the distributions agree).
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tpo_agents.modes.episodes import Episodes
from tpo_agents.modes.sequence import SequenceMode
from tpo_agents.modes.single import SingleMode
from tpo_agents.modes.token import TokenGroups, TokenMode
from tpo_agents.policies.base import TRUNCATED_NORMAL_STD, multinomial_rows
from tpo_agents.policies.mlp import MlpSoftmaxPolicy
from tpo_agents.policies.transformer import TransformerSoftmaxPolicy
from tpo_agents.rollout import sample_actions
from tpo_gym.envs.tokens import TokenTaskVectorEnv

torch.set_num_threads(1)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reference_init_sampling.json"
#: Tolerance in standard errors of the compared estimates (two-sided normal tail 5.7e-7).
Z = 5.0
#: Upper standard-normal quantile for the chi-square bounds (tail probability 1e-6).
Z_CHI2 = 4.753
#: Seeds of our side's pooled initialisation (the fixture pools the reference's over its own keys).
N_SEEDS = 16
#: ``|x| / std`` never exceeds this under flax's truncated normal: 2 / 0.8796 = 2.2737.
TRUNCATION_BOUND = 2.0 / TRUNCATED_NORMAL_STD
#: Density of ``|x| / std`` at the truncation bound: 2 * 0.8796 * phi(2) / (2 Phi(2) - 1) = 0.0995.
BOUND_DENSITY = 2 * TRUNCATED_NORMAL_STD * math.exp(-2.0) / math.sqrt(2 * math.pi) / math.erf(math.sqrt(2))
#: P(|N(0, 1)| > TRUNCATION_BOUND): an untruncated normal's share beyond the bound (0.0230).
BEYOND_BOUND = math.erfc(TRUNCATION_BOUND / math.sqrt(2))


@cache
def reference() -> dict[str, Any]:
    """The fixture (read once)."""
    return json.loads(FIXTURE.read_text())


def lr_schedule(_: float) -> float:
    """Constant learning rate (irrelevant here)."""
    return 1e-3


# ----------------------------------------------------------------------------------------- statistics
def summary(values: np.ndarray, quantile_levels: list[float]) -> dict[str, Any]:
    """The fixture's statistics (``init.statistics``) of pooled values, in float64: n, mean, std (ddof 0),
    min, max, max |x|, the fraction farther than 2 std from the mean, linear-interpolation quantiles."""
    x = np.asarray(values, dtype=np.float64).ravel()
    mean, std = float(x.mean()), float(x.std())
    return {
        "n": int(x.size), "mean": mean, "std": std, "min": float(x.min()), "max": float(x.max()),
        "max_abs": float(np.abs(x).max()),
        "frac_beyond_2std": float(np.mean(np.abs(x - mean) > 2 * std)),
        "quantiles": [float(v) for v in np.quantile(x, quantile_levels)],
    }


def chi2_upper(df: int) -> float:
    """Upper 1e-6 quantile of chi-square with ``df`` degrees of freedom by Wilson-Hilferty: above the
    exact value by 15% at df = 1 down to 1.5% at df = 15 (a tail below 1e-6: conservative)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + Z_CHI2 * math.sqrt(h)) ** 3


def pooled_chi2(observed: np.ndarray, expected: np.ndarray, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson's chi-square of counts against expected counts, adjacent bins merged until each expects
    at least ``min_expected`` (the chi-square approximation's usual condition); returns (statistic, df)."""
    obs_bins, exp_bins, o, e = [], [], 0.0, 0.0
    for count, mean in zip(observed, expected, strict=True):
        o, e = o + count, e + mean
        if e >= min_expected:
            obs_bins, exp_bins, o, e = obs_bins + [o], exp_bins + [e], 0.0, 0.0
    if (e > 0 or o > 0) and obs_bins:  # a short tail joins the last bin
        obs_bins[-1], exp_bins[-1] = obs_bins[-1] + o, exp_bins[-1] + e
    elif e > 0 or o > 0:
        obs_bins, exp_bins = [o], [e]
    obs_arr, exp_arr = np.asarray(obs_bins), np.asarray(exp_bins)
    return float(((obs_arr - exp_arr) ** 2 / exp_arr).sum()), len(obs_arr) - 1


def homogeneity_chi2(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """Chi-square of two count vectors over the same bins against one common distribution (2 x V
    contingency table); returns (statistic, df), bins empty in both dropped."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    na, nb = a.sum(), b.sum()
    pooled = (a + b) / (na + nb)
    stat = ((a - na * pooled) ** 2 / (na * pooled)).sum() + ((b - nb * pooled) ** 2 / (nb * pooled)).sum()
    return float(stat), len(a) - 1


def within(a: float, b: float, standard_error: float) -> bool:
    """``|a - b| <= Z * standard_error`` (and equality when the standard error is 0)."""
    return abs(a - b) <= Z * standard_error + 1e-12


# ----------------------------------------------------------------------------------------- init
def transformer_name(path: str, n_layers: int) -> str:
    """Our ``TransformerSoftmaxPolicy`` parameter name of a flax path of the reference's transformer.

    ==========================================  =====================================
    reference (flax, ``params/...``)            ours (``policy.model....``)
    ==========================================  =====================================
    ``Embed_0/embedding``                       ``token_embedding``
    ``pos_emb``                                 ``position_embedding``
    ``LayerNorm_{2i}`` / ``LayerNorm_{2i+1}``   ``layers.i.ln1`` / ``layers.i.ln2``
    ``SelfAttention_i/{query,key,value,out}``   ``layers.i.attn.{query,key,value,out}``
    ``Dense_{2i}`` / ``Dense_{2i+1}``           ``layers.i.mlp.fc1`` / ``layers.i.mlp.fc2``
    ``LayerNorm_{2L}`` / ``Dense_{2L}``         ``ln_f`` / ``head``
    ==========================================  =====================================

    Leaves keep their names (``kernel``, ``bias``, ``scale``) and flax's shapes.
    """
    fixed = {"Embed_0/embedding": "token_embedding", "pos_emb": "position_embedding"}
    if path in fixed:
        return "model." + fixed[path]
    module, *rest = path.split("/")
    kind, index = module.rsplit("_", 1)
    i = int(index)
    if kind == "SelfAttention":
        return f"model.layers.{i}.attn." + ".".join(rest)
    last = {"LayerNorm": "ln_f", "Dense": "head"}[kind]
    if i == 2 * n_layers:
        return f"model.{last}." + ".".join(rest)
    part = {"LayerNorm": ("ln1", "ln2"), "Dense": ("mlp.fc1", "mlp.fc2")}[kind][i % 2]
    return f"model.layers.{i // 2}.{part}." + ".".join(rest)


def mlp_name(path: str) -> tuple[str, bool]:
    """Our ``MlpSoftmaxPolicy`` parameter of a flax ``PolicyMLP`` path, and whether it is transposed:
    ``Dense_j/kernel`` (in, out) is ``net.{2j}.weight`` (out, in) (``nn.Linear``'s layout; the ReLUs
    sit at the odd indices), ``Dense_j/bias`` is ``net.{2j}.bias``."""
    module, leaf = path.split("/")
    j = int(module.rsplit("_", 1)[1])
    return (f"net.{2 * j}.weight", True) if leaf == "kernel" else (f"net.{2 * j}.bias", False)


def expected_init(path: str, shape: list[int]) -> tuple[str, float]:
    """The documented initialiser of a reference parameter: (kind, std or constant), kind one of
    ``truncated`` (LeCun normal, std ``1/sqrt(fan_in)``), ``normal`` or ``constant``.

    fan_in: the input axes of the kernel, ``shape[0]`` of a Dense or of a query/key/value kernel
    ``(d, heads, d_head)``, ``heads * d_head`` of the attention output kernel ``(heads, d_head, d)``.
    """
    leaf = path.rsplit("/", 1)[-1]
    if path == "pos_emb":
        return "normal", 0.02
    if leaf == "embedding":
        return "normal", 1.0 / math.sqrt(shape[1])
    if leaf == "bias":
        return "constant", 0.0
    if leaf == "scale":
        return "constant", 1.0
    fan_in = math.prod(shape[:-1]) if "/out/" in path else shape[0]
    return "truncated", 1.0 / math.sqrt(fan_in)


@cache
def our_transformer_values(vocab_size: int, max_len: int) -> dict[str, np.ndarray]:
    """Each parameter of ``TransformerSoftmaxPolicy`` (V, 2H = ``max_len``) stacked over seeds
    ``0..N_SEEDS-1`` (``torch.manual_seed`` before each build, the global generator restored after)."""
    obs_space = spaces.MultiDiscrete(np.full(max_len, vocab_size + 1))
    stacked: dict[str, list[np.ndarray]] = {}
    with torch.random.fork_rng(devices=[]):
        for seed in range(N_SEEDS):
            torch.manual_seed(seed)
            policy = TransformerSoftmaxPolicy(obs_space, spaces.Discrete(vocab_size), lr_schedule)
            for name, p in policy.named_parameters():
                stacked.setdefault(name, []).append(p.detach().numpy().copy())
    return {name: np.stack(values) for name, values in stacked.items()}


@cache
def our_mlp_values(input_dim: int, hidden: tuple[int, ...], n_actions: int) -> dict[str, np.ndarray]:
    """Each parameter of ``MlpSoftmaxPolicy`` stacked over seeds ``0..N_SEEDS-1`` (see
    :func:`our_transformer_values`)."""
    stacked: dict[str, list[np.ndarray]] = {}
    obs_space = spaces.Box(0.0, 1.0, (input_dim,), dtype=np.float32)
    with torch.random.fork_rng(devices=[]):
        for seed in range(N_SEEDS):
            torch.manual_seed(seed)
            policy = MlpSoftmaxPolicy(obs_space, spaces.Discrete(n_actions), lr_schedule,
                                      net_arch=list(hidden))
            for name, p in policy.named_parameters():
                stacked.setdefault(name, []).append(p.detach().numpy().copy())
    return {name: np.stack(values) for name, values in stacked.items()}


def our_values(model_key: str) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, bool]]]:
    """Our stacked parameters for a fixture model, and the map reference path -> (our name, transposed)."""
    model = reference()["init"]["models"][model_key]
    config, paths = model["config"], [p["path"] for p in model["params"]]
    if model_key.startswith("transformer"):
        values = our_transformer_values(config["vocab_size"], config["max_seq_len"])
        return values, {p: (transformer_name(p, config["num_layers"]), False) for p in paths}
    values = our_mlp_values(config["input_dim"], tuple(config["hidden_sizes"]), config["num_actions"])
    return values, {p: mlp_name(p) for p in paths}


MODELS = ("transformer_v2", "transformer_v16", "mnist_mlp")


@pytest.mark.parametrize("model_key", MODELS)
def test_same_parameters_and_shapes(model_key: str) -> None:
    """The name mapping is a bijection between the reference's parameters and ours, with equal shapes
    (flax's ``(in, out)`` kernel is ``nn.Linear``'s ``(out, in)`` weight transposed)."""
    values, names = our_values(model_key)
    assert sorted(name for name, _ in names.values()) == sorted(values)
    for ref in reference()["init"]["models"][model_key]["params"]:
        name, transposed = names[ref["path"]]
        shape = list(values[name].shape[1:])
        assert (shape[::-1] if transposed else shape) == ref["shape"], ref["path"]


def constant_problems(ref: dict[str, Any], ours: dict[str, Any], value: float) -> list[str]:
    """Where either side is not the constant ``value`` (zero biases, unit LayerNorm scales)."""
    sides = (("reference", ref), ("ours", ours))
    return [f"{side} not constant {value}: min {stats['min']}, max {stats['max']}"
            for side, stats in sides if not stats["min"] == stats["max"] == value]


def documented_problems(ref: dict[str, Any], ours: dict[str, Any], target: float) -> list[str]:
    """Where either side's mean is not 0 or its std not the documented ``target``: SE of a mean
    ``target / sqrt(n)``, of a std ``target / sqrt(2 n)`` (exact for a normal, conservative for the
    truncated normal's lighter tails)."""
    problems = []
    for side, stats in (("reference", ref), ("ours", ours)):
        if not within(stats["std"], target, target / math.sqrt(2 * stats["n"])):
            problems.append(f"{side} std {stats['std']:.5f} vs documented {target:.5f}")
        if not within(stats["mean"], 0.0, target / math.sqrt(stats["n"])):
            problems.append(f"{side} mean {stats['mean']:.5f} vs 0")
    return problems


def two_sample_problems(ref: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Where our pooled statistics differ from the reference's beyond the two samples' error: mean (SE
    ``sqrt(s1^2/n1 + s2^2/n2)``), std (``sqrt(s1^2/2n1 + s2^2/2n2)``), the share beyond 2 std (pooled
    proportion ``sqrt(p (1 - p) (1/n1 + 1/n2))``), and each quantile through the share of our values at
    or below the reference's quantile value (``sqrt(q (1 - q) (1/n1 + 1/n2))``, plus 1/n for the
    quantile's interpolation)."""
    n1, n2, s1, s2 = ref["n"], ours["n"], ref["std"], ours["std"]
    problems = []
    if not within(ours["mean"], ref["mean"], math.sqrt(s1**2 / n1 + s2**2 / n2)):
        problems.append(f"mean {ours['mean']:.5f} vs reference {ref['mean']:.5f}")
    if not within(s2, s1, math.sqrt(s1**2 / (2 * n1) + s2**2 / (2 * n2))):
        problems.append(f"std {s2:.5f} vs reference {s1:.5f}")
    f1, f2 = ref["frac_beyond_2std"], ours["frac_beyond_2std"]
    p = (f1 * n1 + f2 * n2) / (n1 + n2)
    if not within(f2, f1, math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))):
        problems.append(f"beyond 2 std {f2:.4f} vs reference {f1:.4f}")
    for q, below in zip(reference()["init"]["quantile_levels"], ours["below_ref_quantiles"], strict=True):
        if not within(below, q, math.sqrt(q * (1 - q) * (1 / n1 + 1 / n2)) + 1 / min(n1, n2)):
            problems.append(f"{below:.4f} of ours below the reference's {q} quantile")
    return problems


def truncation_problems(ref: dict[str, Any], ours: dict[str, Any], kind: str, target: float) -> list[str]:
    """Where the largest ``|x| / target`` contradicts the initialiser. Truncated: at most
    ``TRUNCATION_BOUND`` and at least ``bound - gap``, the gap such that
    ``P(max < bound - gap) = exp(-BOUND_DENSITY * gap * n) = 1e-9``. Normal: beyond the bound, checked
    where ``n * BEYOND_BOUND > 20`` values are expected there (``P(none) < exp(-20)``)."""
    gap = math.log(1e9) / (BOUND_DENSITY * min(ref["n"], ours["n"]))
    problems = []
    for side, stats in (("reference", ref), ("ours", ours)):
        extreme = stats["max_abs"] / target
        if kind == "truncated" and not TRUNCATION_BOUND - gap <= extreme <= TRUNCATION_BOUND * (1 + 1e-5):
            problems.append(f"{side} max|x|/std {extreme:.4f} not in [{TRUNCATION_BOUND - gap:.4f}, "
                            f"{TRUNCATION_BOUND:.4f}] (truncated at 2 std before rescaling)")
        if kind == "normal" and stats["n"] * BEYOND_BOUND > 20 and extreme <= TRUNCATION_BOUND:
            problems.append(f"{side} max|x|/std {extreme:.4f}: truncated, expected an untruncated normal")
    return problems


def compare_init(ref: dict[str, Any], ours: dict[str, Any], kind: str, target: float) -> list[str]:
    """The ways our pooled statistics ``ours`` differ from the reference's ``ref`` beyond sampling
    error, or either from the documented initialiser ``(kind, target)``; empty when they agree."""
    if kind == "constant":
        return constant_problems(ref, ours, target)
    return (documented_problems(ref, ours, target) + two_sample_problems(ref, ours)
            + truncation_problems(ref, ours, kind, target))


@pytest.mark.parametrize("model_key", MODELS)
def test_initial_distributions_match(model_key: str) -> None:
    """Every initial tensor has the reference's distribution (mean, std, tails, quantiles, truncation)
    and the documented initialiser's std; biases 0 and LayerNorm scales 1 exactly."""
    values, names = our_values(model_key)
    levels = reference()["init"]["quantile_levels"]
    failures = []
    for ref in reference()["init"]["models"][model_key]["params"]:
        x = values[names[ref["path"]][0]].astype(np.float64).ravel()
        ours = summary(x, levels)
        ours["below_ref_quantiles"] = [float(np.mean(x <= v)) for v in ref["quantiles"]]
        kind, target = expected_init(ref["path"], ref["shape"])
        failures += [f"{ref['path']}: {problem}" for problem in compare_init(ref, ours, kind, target)]
    assert not failures, "\n".join(failures)


# ----------------------------------------------------------------------------------------- sampling
def distinct_count_pmf(probs: np.ndarray, k: int) -> np.ndarray:
    """Exact P(m distinct values among k i.i.d. draws from ``probs``), m = 0..k: a dynamic programme over
    the categories on ``sum prod_a p_a^c_a / c_a!`` by (draws used, categories used), times k!."""
    table = np.zeros((k + 1, k + 1))
    table[0, 0] = 1.0
    for p in probs:
        new = table.copy()
        for c in range(1, k + 1):
            new[c:, 1:] += table[: k + 1 - c, :k] * p**c / math.factorial(c)
        table = new
    return table[k] * math.factorial(k)


def group_statistics(draws: np.ndarray, vocab_size: int) -> dict[str, Any]:
    """The fixture's per-case statistics of rows of K draws (see the generator's ``group_statistics``),
    plus the per-row distinct counts and pair-collision fractions."""
    rows, k = draws.shape
    counts = np.stack([(draws == a).sum(1) for a in range(vocab_size)], axis=1)
    distinct = (counts > 0).sum(1)
    pairs = (counts * (counts - 1) / 2).sum(1) / (k * (k - 1) / 2)
    return {
        "token_counts": counts.sum(0), "distinct_hist": np.bincount(distinct, minlength=k + 1),
        "frac_rows_with_duplicate": float(np.mean(distinct < k)),
        "pair_collision_mean": float(pairs.mean()), "pair_collision_std": float(pairs.std()),
    }


def hist_mean_std(hist: np.ndarray) -> tuple[float, float]:
    """Mean and std of the values 0..len-1 counted by ``hist``."""
    values = np.arange(len(hist))
    mean = float((hist * values).sum() / hist.sum())
    return mean, float(math.sqrt((hist * (values - mean) ** 2).sum() / hist.sum()))


def our_draws(logits: list[float], rows: int, k: int, per_row: bool, seed: int) -> np.ndarray:
    """``rows`` groups of K candidates from our samplers on ``log_softmax(logits)``: K draws per row
    (``sample_actions``, the token mode's candidates) or one draw from each of K copies of the row
    (``multinomial_rows`` with n = 1, the K episodes of a sequence group), ``[rows, K]``."""
    log_probs = torch.log_softmax(torch.tensor(logits, dtype=torch.float32), -1)
    generator = torch.Generator().manual_seed(seed)
    if per_row:
        return sample_actions(log_probs.expand(rows, -1), k, [generator]).numpy()
    return multinomial_rows(log_probs.expand(rows * k, -1), 1, [generator]).reshape(rows, k).numpy()


SAMPLING_CASES = ("v2_uniform", "v2_skewed", "v16_spread", "v16_peaked")


@pytest.mark.parametrize("case", SAMPLING_CASES)
def test_reference_draws_follow_softmax_of_logits(case: str) -> None:
    """The fixture's ``jax.random.categorical`` counts fit softmax(logits) (temperature 1), and its
    distinct-count histogram fits the exact with-replacement distribution: chi-square below its 1e-6
    upper quantile."""
    ref = reference()["sampling"]["cases"][case]
    probs, n_rows, k = np.asarray(ref["probs"]), ref["n_rows"], ref["group_size"]
    stat, df = pooled_chi2(np.asarray(ref["token_counts"]), probs * n_rows * k)
    assert stat <= chi2_upper(df), (stat, df)
    stat, df = pooled_chi2(np.asarray(ref["distinct_hist"]), distinct_count_pmf(probs, k) * n_rows)
    assert stat <= chi2_upper(df), (stat, df)


def test_reference_samples_at_temperature_one() -> None:
    """Every ``categorical`` call of the reference draws from its logits (log-probs) unscaled."""
    sites = reference()["sampling"]["categorical_call_sites"]
    assert sites and all(site["logits_is_name"] for site in sites), sites


@pytest.mark.parametrize("per_row", [True, False], ids=["k_per_row", "one_per_copy"])
@pytest.mark.parametrize("case", SAMPLING_CASES)
def test_candidate_sampler_matches_reference(case: str, per_row: bool) -> None:
    """Our candidates are K i.i.d. draws with replacement from pi, as the reference's: the token counts
    fit softmax(logits) and the reference's counts (chi-square, 1e-6 quantile), and the number of
    distinct tokens per group, the rate of groups with a repeat and the pair-collision rate agree with
    the reference's and with their exact values (``sum_a p_a^2`` for a pair) within Z standard errors."""
    ref = reference()["sampling"]["cases"][case]
    probs, n_rows, k = np.asarray(ref["probs"]), ref["n_rows"], ref["group_size"]
    ours = group_statistics(our_draws(ref["logits"], n_rows, k, per_row, seed=1234), len(probs))
    stat, df = pooled_chi2(ours["token_counts"], probs * n_rows * k)
    assert stat <= chi2_upper(df), ("counts vs softmax", stat, df)
    stat, df = homogeneity_chi2(ours["token_counts"], ref["token_counts"])
    assert stat <= chi2_upper(df), ("counts vs reference", stat, df)
    pmf = distinct_count_pmf(probs, k)
    stat, df = pooled_chi2(ours["distinct_hist"], pmf * n_rows)
    assert stat <= chi2_upper(df), ("distinct counts vs exact", stat, df)
    (mean_ours, sd_ours), (mean_ref, sd_ref) = hist_mean_std(ours["distinct_hist"]), hist_mean_std(
        np.asarray(ref["distinct_hist"]))
    assert within(mean_ours, mean_ref, math.sqrt((sd_ours**2 + sd_ref**2) / n_rows)), (mean_ours, mean_ref)
    dup_exact = 1.0 - pmf[k]  # k distinct values = no repeat
    dup_se = math.sqrt(dup_exact * (1 - dup_exact) / n_rows)
    assert within(ours["frac_rows_with_duplicate"], dup_exact, dup_se)
    assert within(ours["frac_rows_with_duplicate"], ref["frac_rows_with_duplicate"], math.sqrt(2) * dup_se)
    pair_se = math.sqrt((ours["pair_collision_std"] ** 2 + ref["pair_collision_std"] ** 2) / n_rows)
    assert within(ours["pair_collision_mean"], ref["pair_collision_mean"], pair_se)
    assert within(ours["pair_collision_mean"], float((probs**2).sum()), pair_se)


@cache
def small_transformer_policy(vocab: int, horizon: int) -> TransformerSoftmaxPolicy:
    """A ``TransformerSoftmaxPolicy`` (V, H) built under seed 0, the global generator restored after."""
    obs_space = spaces.MultiDiscrete(np.full(2 * horizon, vocab + 1))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return TransformerSoftmaxPolicy(obs_space, spaces.Discrete(vocab), lr_schedule)


def test_policy_samples_at_temperature_one() -> None:
    """``TransformerSoftmaxPolicy.sample`` draws from exp(action_log_probs) unscaled: counts over 4000
    copies of one state fit the policy's own probabilities (chi-square, 1e-6 quantile)."""
    vocab, rows = 16, 4000
    policy = small_transformer_policy(vocab, 3)
    obs = torch.tensor([[3, 1, 4, 9, vocab, vocab]]).expand(rows, -1)
    with torch.no_grad():
        actions, log_probs = policy.sample(obs, generator=torch.Generator().manual_seed(7))
    assert torch.allclose(log_probs, log_probs[:1].expand_as(log_probs))
    probs = log_probs[0].double().exp().numpy()
    stat, df = pooled_chi2(np.bincount(actions.numpy(), minlength=vocab), probs * rows)
    assert stat <= chi2_upper(df), (stat, df)


def test_completions_sample_at_temperature_one() -> None:
    """``sample_completions`` (ancestral sampling) draws each token from its returned distribution
    unscaled: the first tokens of 4000 completions of one prompt fit it (chi-square, 1e-6 quantile)."""
    vocab, rows = 16, 4000
    policy = small_transformer_policy(vocab, 3)
    prompts = torch.tensor([[3, 1, 4]]).expand(rows, -1)
    completions, log_probs = policy.sample_completions(prompts, generator=torch.Generator().manual_seed(8))
    probs = log_probs[0, 0].double().exp().numpy()
    stat, df = pooled_chi2(np.bincount(completions[:, 0].numpy(), minlength=vocab), probs * rows)
    assert stat <= chi2_upper(df), (stat, df)


# ----------------------------------------------------------------------------------------- logged metric
METRIC_TASKS = tuple(range(3))


def metric_task(index: int) -> dict[str, Any]:
    """The fixture's hand-made batch ``index`` with the reference's rewards and logged errors."""
    return reference()["metrics"]["tasks"][index]


def make_env(task: dict[str, Any], num_envs: int) -> TokenTaskVectorEnv:
    """Our token-task vector env for a fixture task (target type = our logic, same reward, H and V)."""
    return TokenTaskVectorEnv(num_envs, logic=task["target_type"], reward=task["reward_type"],
                              sequence_length=task["horizon"], vocab_size=task["vocab_size"])


def play(env: TokenTaskVectorEnv, prompts: np.ndarray, actions: np.ndarray, group_size: int,
         candidates: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Reset ``env`` on ``prompts`` (each shared by ``group_size`` sub-envs), take ``actions`` [N, H] and
    score ``candidates`` [N, H, K] before each step; returns (token_rewards [N, H] of the final info,
    returns [N], candidate scores [N, H, K] or None)."""
    env.reset(options={"group_size": group_size, "contexts": prompts})
    scores, returns = [], np.zeros(len(actions))
    for t in range(actions.shape[1]):
        if candidates is not None:
            scores.append(env.score_candidates(candidates[:, t]))
        _, rewards, _, _, infos = env.step(actions[:, t])
        returns += rewards
    token_rewards = np.asarray(infos["final_info"]["token_rewards"])
    return token_rewards, returns, None if candidates is None else np.stack(scores, axis=1)


def episodes(prompts: np.ndarray, actions: np.ndarray, token_rewards: np.ndarray, returns: np.ndarray,
             group_size: int, vocab: int) -> Episodes:
    """An ``Episodes`` batch of the given rows (observations and old log-probs are placeholders: the
    rollout metrics read the rewards only)."""
    n, horizon = actions.shape
    return Episodes(
        obs=torch.zeros(n, horizon, 2 * horizon, dtype=torch.long), actions=torch.as_tensor(actions),
        old_log_probs=torch.full((n, horizon, vocab), -math.log(vocab)),
        token_rewards=torch.as_tensor(token_rewards, dtype=torch.float32),
        returns=torch.as_tensor(returns, dtype=torch.float32), contexts=torch.arange(n) // group_size,
        n_contexts=n // group_size, group_size=group_size,
        prompts=torch.as_tensor(np.repeat(prompts, group_size, axis=0)),
    )


@pytest.mark.parametrize("index", METRIC_TASKS)
def test_env_rewards_match_reference_on_hand_made_batch(index: int) -> None:
    """Our env's per-token rewards (final ``token_rewards``; token candidates' ``score_candidates``) equal
    the reference's rollouts' rewards on the same prompts and actions: exact-match flag at every position
    (terminal), cumulative product (sequential), per-token hits (bag of tokens)."""
    task = metric_task(index)
    batch, k, horizon = task["batch_size"], task["k_candidates"], task["horizon"]
    single, group = task["single"], task["group"]
    prompts, actions = np.asarray(single["prompts"]), np.asarray(single["actions"])
    rewards, _, _ = play(make_env(task, batch), prompts, actions, 1)
    np.testing.assert_array_equal(rewards, single["rewards"])
    prompts, actions = np.asarray(group["prompts"]), np.asarray(group["actions"]).reshape(batch * k, horizon)
    rewards, _, _ = play(make_env(task, batch * k), prompts, actions, k)
    np.testing.assert_array_equal(rewards.reshape(batch, k, horizon), group["rewards"])
    if "token" in task:
        token = task["token"]
        prompts, candidates = np.asarray(token["prompts"]), np.asarray(token["candidate_actions"])
        rewards, _, scores = play(make_env(task, batch), prompts, np.asarray(token["behavior_actions"]), 1,
                                  candidates)
        np.testing.assert_array_equal(rewards, token["behavior_rewards"])
        np.testing.assert_array_equal(scores, token["candidate_rewards"])


def mode_settings(task: dict[str, Any], group_size: int) -> dict[str, Any]:
    """Constructor arguments of a collection mode for a fixture task."""
    obs_space = spaces.MultiDiscrete(np.full(2 * task["horizon"], task["vocab_size"] + 1))
    return {"batch_size": task["batch_size"], "group_size": group_size, "match": "prompts",
            "baseline": "batch_mean", "observation_space": obs_space}


def single_mode_error(task: dict[str, Any]) -> float:
    """Our single mode's ``task_error`` on the task's B single trajectories."""
    prompts, actions = np.asarray(task["single"]["prompts"]), np.asarray(task["single"]["actions"])
    rewards, returns, _ = play(make_env(task, task["batch_size"]), prompts, actions, 1)
    batch = episodes(prompts, actions, rewards, returns, 1, task["vocab_size"])
    return float(SingleMode(**mode_settings(task, 1)).rollout_metrics(batch)["task_error"].item())


def sequence_mode_error(task: dict[str, Any]) -> float:
    """Our sequence mode's ``task_error`` on the task's B x K sequences (K per prompt)."""
    k, horizon = task["k_candidates"], task["horizon"]
    prompts, actions = np.asarray(task["group"]["prompts"]), np.asarray(task["group"]["actions"])
    actions = actions.reshape(-1, horizon)
    rewards, returns, _ = play(make_env(task, len(actions)), prompts, actions, k)
    batch = episodes(prompts, actions, rewards, returns, k, task["vocab_size"])
    return float(SequenceMode(**mode_settings(task, k)).rollout_metrics(batch)["task_error"].item())


def token_mode_error(task: dict[str, Any]) -> float:
    """Our token mode's ``task_error`` on the task's B behaviour trajectories with K scored token
    candidates per state (the behaviour token is candidate 0)."""
    batch, horizon, vocab = task["batch_size"], task["horizon"], task["vocab_size"]
    prompts, candidates = np.asarray(task["token"]["prompts"]), np.asarray(task["token"]["candidate_actions"])
    rewards, returns, scores = play(make_env(task, batch), prompts, candidates[:, :, 0], 1, candidates)
    groups = TokenGroups(
        obs=torch.zeros(batch, horizon, 2 * horizon, dtype=torch.long),
        actions=torch.as_tensor(candidates[:, :, 0]), candidates=torch.as_tensor(candidates),
        scores=torch.as_tensor(scores, dtype=torch.float32),
        old_log_probs=torch.full((batch, horizon, vocab), -math.log(vocab)),
        token_rewards=torch.as_tensor(rewards, dtype=torch.float32),
        returns=torch.as_tensor(returns, dtype=torch.float32), prompts=torch.as_tensor(prompts),
    )
    mode = TokenMode(**mode_settings(task, task["k_candidates"]))
    return float(mode.rollout_metrics(groups)["task_error"].item())


def logged_errors(task: dict[str, Any]) -> dict[str, float]:
    """Our modes' ``rollout/task_error`` on the task's batch, the rewards from our env, keyed by the
    reference algorithms collected alike: single trajectories (reinforce, dg, ppo) by the single mode, K
    sequences per prompt (tpo, tpo_no_anchor, group_pg, grpo, grpo_no_kl) by the sequence mode, token
    candidates (tpo_token, grpo_token, grpo_token_no_kl; dense reward only) by the token mode."""
    kinds = reference()["metrics"]
    errors = dict.fromkeys(kinds["single_algorithms"], single_mode_error(task))
    errors.update(dict.fromkeys(kinds["group_algorithms"], sequence_mode_error(task)))
    if "token" in task:
        errors.update(dict.fromkeys(kinds["token_algorithms"], token_mode_error(task)))
    return errors


@pytest.mark.parametrize("index", METRIC_TASKS)
def test_logged_task_error_matches_reference_on_hand_made_batch(index: int) -> None:
    """Our modes log the reference's error on the same batch: 1 - mean of every reward of the batch
    before the update (B*H single trajectories, B*K*H sequence groups, B*H behaviour tokens of token
    groups, not their B*H*K candidates); float32 means of at most 48 rewards agree to 1e-6."""
    task = metric_task(index)
    ours = logged_errors(task)
    for algorithm, error in task["errors"].items():
        assert ours[algorithm] == pytest.approx(error, abs=1e-6), algorithm
    group = np.asarray(task["group"]["rewards"])  # the batch tells the alternatives apart
    assert 1 - group[:, 0].mean() != pytest.approx(ours["tpo"], abs=1e-6)
    if "token" in task:
        candidates = np.asarray(task["token"]["candidate_rewards"])
        assert 1 - candidates.mean() != pytest.approx(ours["tpo_token"], abs=1e-6)


def test_fixture_provenance() -> None:
    """The fixture names the reference commit its sources were checked against and the versions that
    produced it, and stays small."""
    provenance = reference()["provenance"]
    assert provenance["reference_commit"] and len(provenance["reference_commit"]) == 40
    assert provenance["sources_match_commit"] is True
    assert {"jax", "flax"} <= set(provenance["versions"])
    assert FIXTURE.stat().st_size < 200 * 1024
