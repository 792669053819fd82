"""The paper's summary statistics and the MNIST mechanism diagnostics as pure functions.

* Curves and finals are the seed mean +- s.e. of ``tpo_agents.zoo.results.seed_mean_se`` (population std /
  sqrt(n), as the paper's figures): the one definition, shared with the zoo's plots.
* ``steps_to``: "steps to X% error" (Tables 1, 2, 5) = the first x (0-based episode, or MNIST evaluation
  label) at which the **seed-mean** curve is below the threshold, unsmoothed; ``None`` ("never") if it
  never is. "Below" is ``below``: by more than float32's resolution, the precision in which the curves
  are computed and stored, so that an error of exactly X (stored as 0.0099999998 or 0.0099999904 for
  1%) is not below X.
* ``final``: the seed mean of the **last single point** (no window average; Tables 3, 5).
* ``bootstrap_final``, ``bootstrap_steps``: percentile-bootstrap intervals over seeds of both (not in the
  paper); ``outside``: whether a paper value lies outside such an interval.
* Beyond the paper: ``seed_steps`` (each seed's own first crossing) with its median and the bootstrap
  interval of that median (``bootstrap_median_steps``): robust where the seed-mean curve hovers at the
  threshold; ``iqm`` (interquartile mean of the seeds' finals) with ``bootstrap_iqm``, and
  ``score_profile`` (fraction of seeds with final error at most tau, the performance profile of Agarwal
  et al. 2021 for errors) with ``bootstrap_profile``: the aggregate statistics of ``rliable``, on the
  same percentile bootstrap over seeds as the rest of this module.
* Two methods compared over their independent seeds: ``difference`` (a statistic of one method's seeds
  minus the other's) with ``bootstrap_difference`` (each method's seeds resampled on their own) and
  ``rank_sum_test`` (two-sided Wilcoxon rank-sum / Mann-Whitney U p-value, exact given the ties); two
  success counts (e.g. seeds below a threshold) with ``fisher_exact_test`` (two-sided, exact).
* ``mechanism``: the MNIST "surplus" of an update direction over its scalar one-vs-rest surrogate
  (Fig. 5b, App. C).

The misalignment of the bandit figures is ``tpo_agents.losses.cosine_misalignment``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tpo_agents.zoo.results import seed_mean_se

LAMBDA_TPO = math.exp(10.0 / 3.0)
"""TPO's odds factor on a 10-class one-hot score: exp(3 - (-1/3)) (App. B, C)."""

CONCENTRATION_EDGES = (0.0, 0.25, 0.5, 0.75, 1.01)
"""Bins of the wrong-class concentration c of a misclassified image (Fig. 5b)."""
BOOTSTRAP_SEED = 0
"""The default generator seed of the bootstrap intervals, so that a report is reproducible."""
FLOAT32_RESOLUTION = 2.0**-23
"""float32's machine epsilon: the curves are fractions in [0, 1] computed and stored in float32 (an error
as ``1 - accuracy``), so each holds its exact value to within about one float32 unit at 1 (2^-24); two
values closer than this are the same value."""


def below(values: np.ndarray, threshold: float) -> np.ndarray:
    """Where ``values`` are strictly below ``threshold``: ``values < threshold - FLOAT32_RESOLUTION``.

    The one comparison of every "steps to X" statistic. A float32 curve at an exact X (1% stored as
    0.0099999998, or computed as ``1 - 0.99`` in float32: 0.0099999904) is X, not below it.
    """
    return np.asarray(values, dtype=np.float64) < threshold - FLOAT32_RESOLUTION


def steps_to(curves: np.ndarray, threshold: float, x: np.ndarray | None = None) -> float | None:
    """First x at which the seed-mean curve is strictly below ``threshold`` (``below``), else None.

    ``curves`` is [n_seeds, n_points]; ``x`` defaults to the 0-based index (episodes, steps).
    """
    mean = np.asarray(curves, dtype=np.float64).mean(0)
    crossed = np.flatnonzero(below(mean, threshold))
    if len(crossed) == 0:
        return None
    x = np.arange(len(mean)) if x is None else np.asarray(x)
    return float(x[crossed[0]])


def final(curves: np.ndarray) -> tuple[float, float]:
    """(seed mean, s.e.) of the last point of ``curves`` [n_seeds, n_points]."""
    mean, se = seed_mean_se(np.asarray(curves)[:, -1])
    return float(mean), float(se)


def _resample_index(n: int, n_boot: int, rng: np.random.Generator | None) -> np.ndarray:
    """index [n_boot, n] ~ Uniform{0..n-1}: ``n_boot`` resamples of n seeds with replacement (the
    generator seeded with ``BOOTSTRAP_SEED`` when ``rng`` is None)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED) if rng is None else rng
    return rng.integers(n, size=(n_boot, n))


def _resampled_means(curves: np.ndarray, n_boot: int, rng: np.random.Generator | None) -> np.ndarray:
    """Seed means of ``n_boot`` resamples of the seed rows of ``curves`` [n_seeds, ...], with replacement.

    index [n_boot, n_seeds] ~ Uniform{0..n_seeds-1}; resample b's mean is sum_s count_bs curves_s / n_seeds,
    with count_bs = #{j: index_bj = s}, so all means are one matrix product ([n_boot, ...]).
    """
    curves = np.asarray(curves, dtype=np.float64)
    n = len(curves)
    index = _resample_index(n, n_boot, rng)
    counts = np.bincount((index + n * np.arange(n_boot)[:, None]).ravel(), minlength=n_boot * n)
    return np.tensordot(counts.reshape(n_boot, n), curves, axes=1) / n


def _percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The (1 - level)/2 and (1 + level)/2 empirical quantiles (inverted CDF: always a sampled value,
    so +inf is allowed)."""
    tail = 50.0 * (1.0 - level)
    low, high = np.percentile(values, [tail, 100.0 - tail], method="inverted_cdf")
    return float(low), float(high)


def bootstrap_final(curves: np.ndarray, n_boot: int = 2000, level: float = 0.95,
                    rng: np.random.Generator | None = None) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` interval of ``final``'s seed mean over seeds.

    For resamples b = 1..n_boot of the seed rows with replacement, m_b = mean_j curves[i_bj, -1];
    the interval is the ((1 - level)/2, (1 + level)/2) quantiles of {m_b}. One seed: (value, value).
    """
    return _percentile_interval(_resampled_means(np.asarray(curves)[:, -1], n_boot, rng), level)


def bootstrap_steps(curves: np.ndarray, threshold: float, x: np.ndarray | None = None, n_boot: int = 2000,
                    level: float = 0.95, rng: np.random.Generator | None = None) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` interval of ``steps_to`` over seeds (+inf = never reached).

    For resamples b of the seed rows with replacement, s_b = min{x_t : mean_j curves[i_bj, t] below
    threshold} (``below``; +inf if empty); the interval is the ((1 - level)/2, (1 + level)/2) quantiles
    of {s_b}, so the high end is inf when more than (1 - level)/2 of the resamples never reach the threshold.
    """
    crossed = below(_resampled_means(curves, n_boot, rng), threshold)  # [n_boot, n_points]
    x = np.arange(crossed.shape[1], dtype=np.float64) if x is None else np.asarray(x, dtype=np.float64)
    steps = np.where(crossed.any(1), x[crossed.argmax(1)], np.inf)
    return _percentile_interval(steps, level)


def seed_steps(curves: np.ndarray, threshold: float, x: np.ndarray | None = None) -> np.ndarray:
    """Each seed's own first x strictly below ``threshold`` (``below``; +inf: never), ``[n_seeds]``.

    s_j = min{x_t : curves[j, t] below threshold}; ``x`` defaults to the 0-based index.
    """
    crossed = below(curves, threshold)
    x = np.arange(crossed.shape[1], dtype=np.float64) if x is None else np.asarray(x, dtype=np.float64)
    return np.where(crossed.any(1), x[crossed.argmax(1)], np.inf)


def median_steps(curves: np.ndarray, threshold: float, x: np.ndarray | None = None) -> float:
    """The median over seeds of ``seed_steps`` (+inf when half or more of the seeds never cross)."""
    return float(np.median(seed_steps(curves, threshold, x)))


def bootstrap_median_steps(curves: np.ndarray, threshold: float, x: np.ndarray | None = None,
                           n_boot: int = 2000, level: float = 0.95, rng: np.random.Generator | None = None
                           ) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` interval of ``median_steps`` over seeds: the quantiles of
    {median_j s_{i_bj}} over resamples b of the seeds (the resamples of ``bootstrap_final``)."""
    steps = seed_steps(curves, threshold, x)
    return _percentile_interval(np.median(steps[_resample_index(len(steps), n_boot, rng)], axis=1), level)


def iqm(values: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle values after dropping floor(n / 4) of the sorted
    ``values`` at each end (``scipy.stats.trim_mean(values, 0.25)``, rliable's ``aggregate_iqm``)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64).ravel())
    cut = len(ordered) // 4
    return float(ordered[cut:len(ordered) - cut].mean())


def _iqm_rows(samples: np.ndarray) -> np.ndarray:
    """``iqm`` of each row of ``samples`` [n_boot, n]."""
    ordered = np.sort(samples, axis=1)
    cut = ordered.shape[1] // 4
    return ordered[:, cut:ordered.shape[1] - cut].mean(1)


def bootstrap_iqm(values: np.ndarray, n_boot: int = 2000, level: float = 0.95,
                  rng: np.random.Generator | None = None) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` interval of ``iqm`` of the seeds' ``values`` [n_seeds]."""
    values = np.asarray(values, dtype=np.float64)
    return _percentile_interval(_iqm_rows(values[_resample_index(len(values), n_boot, rng)]), level)


def score_profile(values: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The performance profile of errors: for each tau, the fraction of seeds whose value is at most tau,
    ``[len(taus)]`` (rliable's run-score distribution with "at most", lower being better)."""
    values = np.asarray(values, dtype=np.float64)
    return (values[:, None] <= np.asarray(taus, dtype=np.float64)[None, :]).mean(0)


def bootstrap_profile(values: np.ndarray, taus: np.ndarray, n_boot: int = 2000, level: float = 0.95,
                      rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile-bootstrap ``level`` band (low, high) of ``score_profile`` over seeds."""
    values = np.asarray(values, dtype=np.float64)
    samples = values[_resample_index(len(values), n_boot, rng)]  # [n_boot, n]
    profiles = (samples[:, :, None] <= np.asarray(taus, dtype=np.float64)).mean(1)  # [n_boot, n_taus]
    tail = 50.0 * (1.0 - level)
    low, high = np.percentile(profiles, [tail, 100.0 - tail], axis=0, method="inverted_cdf")
    return low, high


def difference(a: np.ndarray, b: np.ndarray, statistic: Callable[..., Any] = np.mean) -> float:
    """statistic(a) - statistic(b) over the seeds of two methods, with inf - inf = 0 (a tie: both never
    cross a threshold)."""
    return float(_tie_difference(statistic(np.asarray(a, dtype=np.float64)),
                                 statistic(np.asarray(b, dtype=np.float64))))


def _tie_difference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x - y elementwise, 0 where x == y (so inf - inf = 0, not NaN)."""
    with np.errstate(invalid="ignore"):
        return np.where(x == y, 0.0, np.subtract(x, y))


def bootstrap_difference(a: np.ndarray, b: np.ndarray, statistic: Callable[..., Any] = np.mean,
                         n_boot: int = 2000, level: float = 0.95, rng: np.random.Generator | None = None
                         ) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` interval of ``difference(a, b, statistic)`` for independent seeds.

    Each method's seeds are resampled on their own, from one generator (seeded with ``BOOTSTRAP_SEED``
    when ``rng`` is None): index_a [n_boot, n_a], then index_b [n_boot, n_b]; resample r gives
    d_r = statistic(a[index_a[r]]) - statistic(b[index_b[r]]) (inf - inf = 0), and the interval is the
    ((1 - level)/2, (1 + level)/2) quantiles of {d_r}.
    """
    rng = np.random.default_rng(BOOTSTRAP_SEED) if rng is None else rng
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    index_a, index_b = _resample_index(len(a), n_boot, rng), _resample_index(len(b), n_boot, rng)
    resampled = _tie_difference(statistic(a[index_a], axis=1), statistic(b[index_b], axis=1))
    return _percentile_interval(resampled, level)


def _doubled_midranks(values: np.ndarray) -> np.ndarray:
    """Twice the 1-based midranks of ``values`` (ties at their average rank, +inf last), as integers: a tie
    group of t equal values holding ranks last - t + 1 .. last has midrank last - (t - 1) / 2, doubled
    2 last - t + 1."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)
    return (2 * last - counts + 1)[inverse].astype(np.int64)


def _subset_sum_counts(values: np.ndarray, k: int) -> np.ndarray:
    """counts[s]: how many of the C(N, k) k-element subsets of the N positive integers ``values`` (as
    positions: equal values count apart) sum to s, for s = 0 .. the sum of the k largest values.

    Dynamic programming over the values: with c_j[m, s] the number of m-element subsets of the first j
    values that sum to s, c_j[m, s] = c_{j-1}[m, s] + c_{j-1}[m - 1, s - v_j]; counts = c_N[k]. In float64:
    exact integers up to 2^53, beyond that rounded to a relative 1e-16 per addition.
    """
    top = int(np.sort(values)[len(values) - k:].sum())
    table = np.zeros((k + 1, top + 1))
    table[0, 0] = 1.0
    for value in (int(v) for v in values):
        table[1:, value:] = table[1:, value:] + table[:-1, : top + 1 - value]
    return table[k]


def rank_sum_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sided Wilcoxon rank-sum (Mann-Whitney U) test of two independent samples: (U, p), p exact.

    With R_a the sum of a's ranks in the pooled N = n_a + n_b values (ties: the midrank, their average
    rank; +inf ranks last), U = R_a - n_a (n_a + 1) / 2. p is the exact permutation p-value given the
    ties: over all C(N, n_a) equally likely ways to split the pooled midranks into n_a and n_b,
    p = P(|R - E[R]| >= |R_a - E[R]|), E[R] = n_a (N + 1) / 2, with the distribution of R computed
    exactly by ``_subset_sum_counts`` on the doubled midranks (integers, so the comparison needs no
    tolerance). Taken over the smaller sample (its deviation from its mean is the other's, negated),
    that costs N (min(n_a, n_b) + 1) (2 N min(n_a, n_b)) operations at most: milliseconds for 40 against
    40 seeds, half a second for 100 against 100. Complete separation of 3 against 3 gives
    p = 2 / C(6, 3) = 0.1, of 5 against 5 2 / C(10, 5) = 0.0079; all values tied (or an empty sample): p = 1.
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    n_a, n_b = len(a), len(b)
    doubled = _doubled_midranks(np.concatenate([a, b]))
    u = float(doubled[:n_a].sum() / 2.0 - n_a * (n_a + 1) / 2.0)
    if min(n_a, n_b) == 0:
        return u, 1.0
    k, observed = (n_a, int(doubled[:n_a].sum())) if n_a <= n_b else (n_b, int(doubled[n_a:].sum()))
    counts = _subset_sum_counts(doubled, k)
    mean = k * (n_a + n_b + 1)  # E[2 R] over k of the doubled midranks, whose total is N (N + 1)
    extreme = np.abs(np.arange(len(counts)) - mean) >= abs(observed - mean)
    return u, min(1.0, float(counts[extreme].sum() / counts.sum()))


FISHER_TIE = 1e-7
"""The relative tolerance under which ``fisher_exact_test`` counts a table's probability as equal to the
observed one's (scipy.stats.fisher_exact's)."""


def fisher_exact_test(successes_a: int, n_a: int, successes_b: int, n_b: int) -> float:
    """Two-sided Fisher exact test of two success rates, successes_a / n_a against successes_b / n_b: p.

    The 2x2 table [[s_a, n_a - s_a], [s_b, n_b - s_b]] with its margins fixed (N = n_a + n_b, K = s_a + s_b
    successes in all): under equal rates the first row's successes x are hypergeometric,
    P(x) = C(K, x) C(N - K, n_a - x) / C(N, n_a) for max(0, n_a - (N - K)) <= x <= min(K, n_a), and
    p = sum of P(x) over the tables no more likely than the observed one, P(x) <= P(s_a) (1 + FISHER_TIE)
    (scipy.stats.fisher_exact's two-sided p). The binomial coefficients are Python's exact integers
    (``math.comb``), so only the final division rounds. Equal rates give p = 1; 13 of 20 against 7 of 20
    p = 0.113, 20 of 20 against 14 of 20 p = 0.0202.
    """
    if not (0 <= successes_a <= n_a and 0 <= successes_b <= n_b):
        raise ValueError(f"successes must lie in 0..n: {successes_a} of {n_a}, {successes_b} of {n_b}")
    total, successes = n_a + n_b, successes_a + successes_b
    weights = [math.comb(successes, x) * math.comb(total - successes, n_a - x)
               for x in range(max(0, n_a - (total - successes)), min(successes, n_a) + 1)]
    observed = math.comb(successes, successes_a) * math.comb(total - successes, n_a - successes_a)
    scale = round(1 / FISHER_TIE)  # w <= observed (1 + FISHER_TIE), in integers
    extreme = sum(w for w in weights if w * scale <= observed * (scale + 1))
    return extreme / math.comb(total, n_a)  # the weights sum to C(N, n_a) (Vandermonde), so p <= 1


def outside(value: float | None, interval: tuple[float, float]) -> bool:
    """Whether ``value`` is a number outside [low, high] (None or NaN: False; inf stands for never)."""
    if value is None or math.isnan(value):
        return False
    low, high = interval
    return not low <= value <= high


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gamma(r: np.ndarray, lam: float = LAMBDA_TPO) -> np.ndarray:
    """TPO's failure weight gamma(r) = r (lambda - 1) / (lambda (1 - r) + r) (App. C)."""
    return r * (lam - 1.0) / (lam * (1.0 - r) + r)


def _dg_scalar(p: np.ndarray, b: np.ndarray, eta: float, q: np.ndarray) -> np.ndarray:
    """DG's beta with every wrong class at probability q: p(1-b)s((1-b)l_y/eta) + p b s(-b l_q/eta)."""
    surprisal_y = -np.log(np.maximum(p, 1e-8))
    surprisal_q = -np.log(np.maximum(q, 1e-8))
    return p * (1 - b) * _sigmoid((1 - b) * surprisal_y / eta) + p * b * _sigmoid(-b * surprisal_q / eta)


def update_directions(probs: np.ndarray, labels: np.ndarray, algo: str, eta: float = 1.0
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Expected logit-space update Delta [N, C] of ``algo`` at each image and its scalar beta [N] (App. C).

    pg: Delta = p v (beta = p); group_pg: 6 p v; dg: the sampled-action expectation with b = sum pi^2,
    beta from the symmetric approximation (wrong classes at (1-p)/9, b_sym = p^2 + 9 q^2); tpo:
    Delta = p beta_+ v + sum_{j != y} pi_j gamma(pi_j) (pi - e_j), beta = p beta_+ + p gamma((1-p)/9).
    grpo: not defined (NaN), as in the reference.
    """
    n, n_classes = probs.shape
    onehot = np.eye(n_classes)[labels]
    p = probs[np.arange(n), labels]
    v = onehot - probs
    q_sym = (1 - p) / (n_classes - 1)
    wrong = 1.0 - onehot
    if algo == "pg":
        return p[:, None] * v, p
    if algo == "group_pg":
        return 6 * p[:, None] * v, 6 * p
    if algo == "tpo":
        beta_plus = p * (LAMBDA_TPO - 1) / (1 - p + LAMBDA_TPO * p)
        alpha = probs * _gamma(probs) * wrong
        delta = (p * beta_plus)[:, None] * v + alpha.sum(1, keepdims=True) * probs - alpha
        return delta, p * beta_plus + p * _gamma(q_sym)
    if algo == "dg":
        b = (probs**2).sum(1)
        surprisal = -np.log(np.maximum(probs, 1e-8))
        correct = p * (1 - b) * _sigmoid((1 - b) * surprisal[np.arange(n), labels] / eta)
        alpha = probs * b[:, None] * _sigmoid(-b[:, None] * surprisal / eta) * wrong
        delta = correct[:, None] * v + alpha.sum(1, keepdims=True) * probs - alpha
        return delta, _dg_scalar(p, p**2 + (n_classes - 1) * q_sym**2, eta, q_sym)
    return np.full_like(probs, np.nan), np.full(n, np.nan)


def mechanism(probs: np.ndarray, labels: np.ndarray, algo: str, eta: float = 1.0) -> dict[str, np.ndarray]:
    """Per-concentration-bin means of the exact gain, scalar gain and surplus on misclassified images.

    For a misclassified image (argmax != y), p = pi_y, v = e_y - pi, c = max_{j != y} pi_j / max(1 - p, 1e-8);
    gain = p <v, Delta>, scalar = p beta |v|^2, surplus = gain - scalar (Fig. 5b). Returns arrays of
    the 4 bins ``gain``, ``scalar``, ``surplus`` (NaN where a bin is empty) and ``counts``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels)
    wrong = probs.argmax(1) != labels
    probs, labels = probs[wrong], labels[wrong]
    n = len(labels)
    p = probs[np.arange(n), labels]
    v = np.eye(probs.shape[1])[labels] - probs
    others = probs.copy()
    others[np.arange(n), labels] = -np.inf
    concentration = others.max(1) / np.maximum(1 - p, 1e-8)
    bins = np.digitize(concentration, CONCENTRATION_EDGES[1:-1])
    delta, beta = update_directions(probs, labels, algo, eta)
    gain = p * (v * delta).sum(1)
    scalar = p * beta * (v * v).sum(1)
    out = {"counts": np.bincount(bins, minlength=4).astype(np.float64)}
    for name, values in (("gain", gain), ("scalar", scalar), ("surplus", gain - scalar)):
        sums = np.bincount(bins, weights=values, minlength=4)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[name] = np.where(out["counts"] > 0, sums / out["counts"], np.nan)
    return out
