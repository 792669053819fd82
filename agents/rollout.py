"""Batched stepping for the collection modes (``tpo_agents.modes``): a ``tpo_gym`` vector env and a policy
in, tensors out.

* ``collect_token_groups``  (token mode): one behaviour trajectory per context; at each prefix
  state x_t draw K next-action candidates a_{t,1..K} ~ pi_old(.|x_t) (with replacement, the first
  is the behaviour action), let the env score them without stepping, then step with the first.
* ``collect_episodes``      (sequence and single modes): K full episodes per context; the env resets
  blocks of K sub-envs to one shared context (K = 1 is the single-sample case).
* ``collect_exact``         (exact mode): every action of every context, scored exactly, for
  the tabular multi-context experiment's exact (expected) update.

Everything is batched: one policy forward per time step for all contexts x K, numpy env steps,
no Python loop over sub-envs, candidates or groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents.layout import is_action_major
from tpo_agents.policies.base import member_of_rows, multinomial_rows
from tpo_agents.policies.protocols import ActionPolicy, SequencePolicy

StepHook = Callable[[int], bool]
"""Called after every env step with the number of interactions it made; False stops collection."""


@dataclass
class Episodes:
    """``n_contexts * group_size`` episodes of ``T`` steps, context-major (rows bK..bK+K-1 share context b).

    ``token_rewards`` are the per-step rewards r_t (paper Sec. 3.4; for the token tasks the env's
    ``info["token_rewards"]``; terminal reward copies the exact-match flag to every position).
    """

    obs: th.Tensor  # [N, T, *obs_shape] observation before each action
    actions: th.Tensor  # [N, T]
    old_log_probs: th.Tensor  # [N, T, A] log pi_old(.|x_t), full action set
    token_rewards: th.Tensor  # [N, T]
    returns: th.Tensor  # [N] episode returns as the env paid them
    contexts: th.Tensor  # [N] integer context id when the env has one, else the row's group index
    n_contexts: int
    group_size: int
    prompts: th.Tensor | None = None  # [N, H] for the token tasks (teacher-forced re-scoring)
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)  # see distinct_sequences
    #: log pi_theta [N, T, A] with gradient, computed at collection (one forward per update; old_log_probs
    #: is its detached copy): the first epoch's log-probabilities (``CollectionMode.first_epoch_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)


@dataclass
class TokenGroups:
    """Token-level groups: B behaviour trajectories of H steps with K scored candidates per state."""

    obs: th.Tensor  # [B, H, *obs_shape]
    actions: th.Tensor  # [B, H] behaviour tokens (= candidates[..., 0])
    candidates: th.Tensor  # [B, H, K]
    scores: th.Tensor  # [B, H, K] r_{t,i}
    old_log_probs: th.Tensor  # [B, H, V]
    token_rewards: th.Tensor  # [B, H] the behaviour trajectory's rewards
    returns: th.Tensor  # [B]
    prompts: th.Tensor | None = None  # [B, H]
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)
    #: log pi_theta [B, H, V] with gradient for the first epoch (see ``Episodes.first_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)


@dataclass
class ExactBatch:
    """Every action of every context: ``rewards[n, a]`` and ``log pi_old(a | n)``."""

    obs: th.Tensor  # [N, *obs_shape]
    rewards: th.Tensor  # [N, A]
    old_log_probs: th.Tensor  # [N, A]
    #: log pi_theta [N, A] with gradient from a fused collector (see ``Episodes.first_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)


@dataclass
class TableSamples:
    """B sampled actions per member from a one-context logit table (the k-armed bandit in single mode,
    ``tpo_agents.fused_collection.TableSingleCollector``): the batch of ``Episodes`` with T = 1 without its
    ``[S*B, A]`` copies of the one row per member, which the single mode's views gather from instead.

    ``token_rewards`` and ``returns`` are as in ``Episodes`` (member-major rows, so the episode modes'
    ``rollout/`` metrics and monitor rows read them alike).
    """

    actions: th.Tensor  # [S, B] each member's sampled arms
    token_rewards: th.Tensor  # [S*B, 1]
    returns: th.Tensor  # [S*B]
    old_log_probs: th.Tensor  # [S, A] log pi_old of each member's one context
    prompts: None = None
    #: log pi_theta [S, A] with gradient, for the first epoch (see ``Episodes.first_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)

    def expanded(self, log_probs: th.Tensor) -> th.Tensor:
        """Member rows ``[S, A]`` repeated for each sample as ``Episodes`` holds them: ``[S*B, 1, A]``."""
        n_members, per_member = self.actions.shape
        return log_probs.unsqueeze(1).expand(n_members, per_member, -1).reshape(-1, 1, log_probs.shape[-1])


def sample_actions(log_probs: th.Tensor, n: int, generators: list[th.Generator] | None = None) -> th.Tensor:
    """``n`` i.i.d. draws (with replacement) from each row of ``log_probs`` [..., A] -> [..., n];
    ``generators``: one per member of a member-major batch (None: torch's global generator)."""
    return multinomial_rows(log_probs, n, generators).reshape(*log_probs.shape[:-1], n)


class _StepLogProbs:
    """log pi(.|x_t) along the trajectories of a batch, one call per step.

    A :class:`SequencePolicy` (the transformer) decodes incrementally with a KV cache, once per
    *distinct* prefix: sequences that share their prompt and
    the tokens so far (K completions of one prompt, or small vocabularies) have the same next-token
    distribution, so it is computed once and gathered (exact); a population shares prefixes within
    each member (:func:`member_unique`). Any other policy reads the observation.
    """

    def __init__(self, policy: ActionPolicy, prompts: np.ndarray | None) -> None:
        self.policy, self.cache, self.t = policy, None, 0
        self.prompts = prompts if isinstance(policy, SequencePolicy) else None
        self.prefix: th.Tensor | None = None  # [N] index of each sequence's distinct prefix
        self.members = _members(policy)

    def __call__(self, obs: th.Tensor, previous_actions: th.Tensor | None) -> th.Tensor:
        if self.prompts is None:
            return self.policy.action_log_probs(obs)
        if self.cache is None:
            prompts = _as_tensor(self.prompts, self.policy.device)
            distinct, inverse = member_unique(prompts, self.members)
            if len(distinct) == len(prompts):  # nothing shared: decode in batch order
                log_probs, self.cache = self.policy.decode_start(prompts)
                return log_probs
            self.prefix = inverse
            log_probs, self.cache = self.policy.decode_start(distinct)
            return log_probs[inverse]
        t, self.t = self.t, self.t + 1
        if self.prefix is None:  # every sequence is its own prefix, and stays so
            return self.policy.decode_next(previous_actions, self.cache, t)
        keys = th.stack([self.prefix, previous_actions.to(self.prefix.device)], dim=1)
        distinct, inverse = member_unique(keys, self.members)
        if len(distinct) == len(keys):  # all distinct from now on: switch to batch order
            self.cache, self.prefix = self.policy.select_cache(self.cache, self.prefix), None
            return self.policy.decode_next(previous_actions, self.cache, t)
        self.cache, self.prefix = self.policy.select_cache(self.cache, distinct[:, 0]), inverse
        return self.policy.decode_next(distinct[:, 1], self.cache, t)[inverse]


def member_unique(keys: th.Tensor, n_members: int = 1) -> tuple[th.Tensor, th.Tensor]:
    """``th.unique(keys, dim=0, return_inverse=True)`` within each member of member-major rows ``[N, k]``.

    One member: exactly ``th.unique``. Several: each member's distinct rows in sorted order, padded with
    copies of its first distinct row to the largest member's count M, so that the distinct rows are
    ``n_members`` equal blocks ``[S*M, k]`` (what a population's forward needs), with each row's index
    into them; rows of different members are never merged.
    """
    if n_members == 1:
        return unique_rows(keys)
    device = keys.device
    member = member_of_rows(len(keys), n_members, device)
    distinct, inverse = unique_rows(th.cat([member.unsqueeze(1), keys], dim=1))
    owner = distinct[:, 0]
    counts = th.bincount(owner, minlength=n_members)
    width = int(counts.max())
    starts = th.cumsum(counts, 0) - counts
    slots = owner * width + th.arange(len(distinct), device=device) - starts[owner]
    source = starts.repeat_interleave(width)  # padding: the member's first distinct row
    source[slots] = th.arange(len(distinct), device=device)
    return distinct[source, 1:], slots[inverse]


INTEGER_KEYS = (th.int64, th.int32, th.int16, th.int8, th.uint8)
"""Key dtypes :func:`unique_rows` codes as integers (others go to ``th.unique(dim=0)``)."""


def unique_rows(keys: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """``th.unique(keys, dim=0, return_inverse=True)`` of integer rows ``[N, k]``: the distinct rows in
    lexicographic order and each row's index into them.

    Rows whose columns' ranges multiply to less than 2**62 are read as one mixed-radix integer each
    (column j a digit in base ``max_j - min_j + 1``), whose numeric order is the rows' lexicographic
    order, and made unique in one dimension: the same result, without ``unique(dim=0)``'s per-row work
    (``[1600, 3]`` keys: 0.06 vs 1.6 ms, one thread). Wider keys go to ``th.unique(dim=0)``.
    """
    if keys.dim() != 2 or len(keys) == 0 or keys.dtype not in INTEGER_KEYS:
        return th.unique(keys, dim=0, return_inverse=True)
    low, high = keys.min(0).values, keys.max(0).values
    spans = [top - bottom + 1 for top, bottom in zip(high.tolist(), low.tolist(), strict=True)]  # Python ints
    if math.prod(spans) >= 2**62:
        return th.unique(keys, dim=0, return_inverse=True)
    weights = [math.prod(spans[j + 1 :]) for j in range(len(spans))]
    place = th.tensor(weights, dtype=th.int64, device=keys.device)
    codes, inverse = th.unique(((keys.long() - low) * place).sum(1), return_inverse=True)
    span = th.tensor(spans, dtype=th.int64, device=keys.device)
    distinct = (codes.unsqueeze(1) // place) % span + low
    return distinct.to(keys.dtype), inverse


def _members(policy: ActionPolicy) -> int:
    """The policy's number of members (a population's rows are member-major equal blocks)."""
    return int(getattr(policy, "n_members", 1))


def _as_tensor(x: np.ndarray, device: th.device) -> th.Tensor:
    return th.as_tensor(np.array(x), device=device)


def _final_token_rewards(infos: dict) -> np.ndarray | None:
    """The env's per-position rewards of the finished episodes (``final_info["token_rewards"]``), if any."""
    final = infos.get("final_info")
    if isinstance(final, dict) and "token_rewards" in final:
        return np.asarray(final["token_rewards"], dtype=np.float32)
    return None


def _context_ids(env: VectorEnv, n: int, group_size: int) -> np.ndarray:
    contexts = getattr(env.unwrapped, "contexts", None)
    if contexts is not None and np.ndim(contexts) == 1:
        return np.asarray(contexts, dtype=np.int64)
    return np.repeat(np.arange(n // group_size), group_size)


def _prompts(env: VectorEnv) -> np.ndarray | None:
    prompts = getattr(env.unwrapped, "prompts", None)
    return None if prompts is None else np.asarray(prompts, dtype=np.int64)


def _run_episodes(
    env: VectorEnv,
    obs: np.ndarray,
    policy: ActionPolicy,
    n_candidates: int,
    on_step: StepHook | None,
) -> dict[str, th.Tensor] | None:
    """Step every sub-env to the end of its episode; at each state draw ``n_candidates`` actions,
    let the env score them when there is more than one, and take candidate 0.

    Returns the stacked ``obs, candidates, scores, old_log_probs, token_rewards, returns`` (time on
    axis 1), or None when ``on_step`` stops collection. All sub-envs of a ``tpo_gym`` env have the
    same episode length, so every episode ends at the same step.
    """
    device, n = policy.device, env.num_envs
    step_log_probs = _StepLogProbs(policy, _prompts(env))
    steps: dict[str, list] = {"obs": [], "candidates": [], "scores": [], "old_log_probs": [], "rewards": []}
    taken, token_rewards, finished = None, None, False
    while not finished:
        obs_t = _as_tensor(obs, device)
        log_probs = step_log_probs(obs_t, taken)
        candidates = sample_actions(log_probs, n_candidates, getattr(policy, "member_generators", None))
        taken = candidates[:, 0]
        if n_candidates > 1:
            steps["scores"].append(_as_tensor(env.score_candidates(candidates.cpu().numpy()), device).float())
        obs, rewards, terminated, truncated, infos = env.step(taken.cpu().numpy())
        for key, value in (("obs", obs_t), ("candidates", candidates), ("old_log_probs", log_probs)):
            steps[key].append(value)
        steps["rewards"].append(np.asarray(rewards, dtype=np.float32))
        if on_step is not None and not on_step(n):
            return None
        done = np.logical_or(terminated, truncated)
        finished = bool(done.all())
        if finished:
            token_rewards = _final_token_rewards(infos)
        elif done.any():
            raise RuntimeError("sub-envs of a grouped env must finish their episodes together")
    step_rewards = np.stack(steps.pop("rewards"), axis=1)
    batch = {key: stack_steps(values) for key, values in steps.items() if values}
    batch["token_rewards"] = _as_tensor(
        step_rewards if token_rewards is None else token_rewards, device
    ).float()
    batch["returns"] = _as_tensor(step_rewards.sum(axis=1), device).float()
    return batch


def stack_steps(values: list[th.Tensor]) -> th.Tensor:
    """``th.stack(values, dim=1)``: per-step ``[N, ..., A]`` tensors as ``[N, T, ..., A]``, in the steps'
    layout where they are action-major (:func:`tpo_agents.layout.is_action_major`: the log-probabilities of
    a policy with few actions), so that the batch's sums over A round as the steps' own."""
    if not is_action_major(values[0]):
        return th.stack(values, dim=1)
    return th.stack([value.movedim(-1, 0) for value in values], dim=2).movedim(0, -1)


@th.no_grad()
def collect_episodes(
    env: VectorEnv, policy: ActionPolicy, group_size: int, on_step: StepHook | None = None
) -> Episodes | None:
    """Run one episode in every sub-env, blocks of ``group_size`` sub-envs sharing a context.

    Returns ``None`` when ``on_step`` asks to stop.
    """
    obs, _ = env.reset(options={"group_size": group_size})
    contexts, prompts = _context_ids(env, env.num_envs, group_size), _prompts(env)
    steps = _run_episodes(env, obs, policy, 1, on_step)
    if steps is None:
        return None
    return Episodes(
        obs=steps["obs"],
        actions=steps["candidates"][..., 0],
        old_log_probs=steps["old_log_probs"],
        token_rewards=steps["token_rewards"],
        returns=steps["returns"],
        contexts=_as_tensor(contexts, policy.device),
        n_contexts=env.num_envs // group_size,
        group_size=group_size,
        prompts=None if prompts is None else _as_tensor(prompts, policy.device),
    )


@th.no_grad()
def collect_token_groups(
    env: VectorEnv, policy: ActionPolicy, group_size: int, on_step: StepHook | None = None
) -> TokenGroups | None:
    """One behaviour trajectory per sub-env with ``group_size`` scored next-token candidates per state."""
    obs, _ = env.reset()
    prompts = _prompts(env)
    steps = _run_episodes(env, obs, policy, group_size, on_step)
    if steps is None:
        return None
    return TokenGroups(
        obs=steps["obs"],
        actions=steps["candidates"][..., 0],
        candidates=steps["candidates"],
        scores=steps["scores"],
        old_log_probs=steps["old_log_probs"],
        token_rewards=steps["token_rewards"],
        returns=steps["returns"],
        prompts=None if prompts is None else _as_tensor(prompts, policy.device),
    )


@th.no_grad()
def collect_exact(
    env: VectorEnv, policy: ActionPolicy, exhaustive: bool, n_members: int = 1
) -> ExactBatch:
    """Score every action at each sub-env's context exactly (no sampling of actions, no stepping).

    ``exhaustive``: each member's contexts are ``0..num_envs/n_members - 1`` (a tabular env);
    otherwise fresh contexts are drawn (e.g. MNIST images for the supervised oracle).
    """
    device = policy.device
    options = {"contexts": np.tile(np.arange(env.num_envs // n_members), n_members)} if exhaustive else None
    obs, _ = env.reset(options=options)
    n_actions = int(env.single_action_space.n)
    all_actions = np.ascontiguousarray(np.broadcast_to(np.arange(n_actions), (env.num_envs, n_actions)))
    obs_t = _as_tensor(obs, device)
    old_log_probs = policy.action_log_probs(obs_t)
    # the rewards in the log-probs' memory layout (an action-major table's), so that the losses'
    # elementwise ops and reductions over the actions run in one layout
    rewards = th.empty_like(old_log_probs).copy_(_as_tensor(env.score_candidates(all_actions), device))
    return ExactBatch(obs=obs_t, rewards=rewards, old_log_probs=old_log_probs)


def distinct_sequences(episodes: Episodes | TokenGroups, n_members: int = 1) -> tuple[th.Tensor, th.Tensor]:
    """(distinct rows of [prompt, actions], inverse index) of a token batch, computed once per batch
    (per member of a population: :func:`member_unique`).

    With small vocabularies many of the K completions of a prompt repeat (V = 2, H = 5, K = 32 has at
    most 32 distinct ones); scoring each distinct sequence once and gathering is exact.
    """
    if episodes.distinct is None:
        sequences = th.cat([episodes.prompts, episodes.actions], dim=1)
        episodes.distinct = member_unique(sequences, n_members)
    return episodes.distinct


def episode_log_probs(policy: ActionPolicy, episodes: Episodes | TokenGroups) -> th.Tensor:
    """Current-policy log pi(.|x_t) for every recorded state, [N, T, A], with gradients.

    A :class:`SequencePolicy` (the transformer) re-scores each distinct sequence with one
    teacher-forced forward (exact under the causal mask), encoding a prompt shared by several
    sequences once (a population: within each member); others re-score the recorded observations.
    """
    if episodes.prompts is not None and isinstance(policy, SequencePolicy):
        members = _members(policy)
        rows, inverse = distinct_sequences(episodes, members)
        horizon = episodes.prompts.shape[1]
        prompts, owner = member_unique(rows[:, :horizon], members)
        if len(prompts) < len(rows):
            log_probs = policy.grouped_completion_log_probs(prompts, owner, rows[:, horizon:])
        else:
            log_probs = policy.completion_log_probs(rows[:, :horizon], rows[:, horizon:])
        return log_probs[inverse]
    n, t = episodes.actions.shape
    return policy.action_log_probs(episodes.obs.flatten(0, 1)).reshape(n, t, -1)
