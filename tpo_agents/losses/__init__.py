"""Losses of TPO and its peers as pure functions of tensors, by what they score:
:mod:`~tpo_agents.losses.groups`, :mod:`~tpo_agents.losses.samples`, :mod:`~tpo_agents.losses.completions`,
and the update's :mod:`~tpo_agents.losses.diagnostics`; every function is importable from here.

Every loss is to be minimised and works for any policy (logit table, MLP, transformer, LLM).

Shapes
------
* Grouped losses take groups shaped ``[..., K]`` with at least one group axis (``[B, K]`` for
  sequence-level groups, ``[B, H, K]`` for token-level groups, ``[1, K]`` for one group), the K
  candidates on the last axis, and reduce as "sum over K, mean over the groups"; a 1-D tensor is
  rejected rather than guessed. ``L`` is a candidate's log-score under the policy (sequence
  log-prob, token log-prob, or any unnormalised log-score) and ``s`` its raw score.
* Single-sample losses take per-token log-probs ``logp`` shaped ``[B, T]`` (``[B]`` for bandits) and
  reduce as "sum over every axis after the first, mean over the batch axis". Advantages (and
  weights) have ``logp``'s shape, or ``[B]``: one value per sequence, the same as ``[B, 1]``.
* Exact updates (``exact`` mode) weight every action of the action set by ``pi_old(a)``: the
  single-sample losses take those probabilities as ``weights``.

Notation follows the paper (arXiv 2604.06159, Sec. 2): ``sg`` = stop-gradient (``detach``),
popstd = population std (divide by N). docs/algorithms.md states every formula with its choices.
"""

from tpo_agents.losses.completions import (
    completion_logscores,
    completion_tpo_loss,
    grouped_tpo_loss,
    masked_group_diagnostics,
    masked_standardize,
    masked_tpo_loss,
    reference_kl_terms,
    row_logscores,
)
from tpo_agents.losses.diagnostics import (
    clip_fraction,
    cosine_misalignment,
    group_diagnostics,
    k3_kl,
    policy_kl,
    target_gap,
    target_mass,
)
from tpo_agents.losses.groups import (
    GRPO_ADVANTAGE_STDS,
    TABULAR_SURPRISAL_EPS,
    check_scores,
    dapo_loss,
    group_pg_loss,
    group_softmax,
    grpo_advantages,
    grpo_loss,
    k3,
    masked_log_softmax,
    per_token,
    sequence_logscores,
    standardize,
    tpo_loss,
    tpo_target,
    zero_variance_groups,
)
from tpo_agents.losses.samples import (
    baseline_advantages,
    batch_standardized_advantages,
    ce_loss,
    context_mean_scores,
    dg_gate,
    dg_loss,
    dg_weights,
    expected_baseline,
    onehot_scores,
    pg_loss,
    policy_standardized_advantages,
    position_baseline_advantages,
    ppo_loss,
)

__all__ = [
    "GRPO_ADVANTAGE_STDS",
    "TABULAR_SURPRISAL_EPS",
    "baseline_advantages",
    "batch_standardized_advantages",
    "ce_loss",
    "check_scores",
    "clip_fraction",
    "completion_logscores",
    "completion_tpo_loss",
    "context_mean_scores",
    "cosine_misalignment",
    "dapo_loss",
    "dg_gate",
    "dg_loss",
    "dg_weights",
    "expected_baseline",
    "group_diagnostics",
    "group_pg_loss",
    "group_softmax",
    "grouped_tpo_loss",
    "grpo_advantages",
    "grpo_loss",
    "k3",
    "k3_kl",
    "masked_group_diagnostics",
    "masked_log_softmax",
    "masked_standardize",
    "masked_tpo_loss",
    "onehot_scores",
    "per_token",
    "pg_loss",
    "policy_kl",
    "policy_standardized_advantages",
    "position_baseline_advantages",
    "ppo_loss",
    "reference_kl_terms",
    "row_logscores",
    "sequence_logscores",
    "standardize",
    "target_gap",
    "target_mass",
    "tpo_loss",
    "tpo_target",
    "zero_variance_groups",
]
