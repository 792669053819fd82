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
no Python loop over sub-envs, candidates or groups. The batches are :mod:`tpo_agents.batches`'; the
log-probabilities along them, each shared prefix decoded once, :mod:`tpo_agents.decoding`'s.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents.batches import Episodes, ExactBatch, TokenGroups
from tpo_agents.decoding import StepLogProbs, distinct_sequences, rescored_by_sequence
from tpo_agents.layout import is_action_major
from tpo_agents.policies.base import multinomial_rows
from tpo_agents.policies.protocols import ActionPolicy

StepHook = Callable[[int], bool]
"""Called after every env step with the number of interactions it made; False stops collection."""


def sample_actions(log_probs: th.Tensor, n: int, generators: list[th.Generator] | None = None) -> th.Tensor:
    """``n`` i.i.d. draws (with replacement) from each row of ``log_probs`` [..., A] -> [..., n];
    ``generators``: one per member of a member-major batch (None: torch's global generator)."""
    return multinomial_rows(log_probs, n, generators).reshape(*log_probs.shape[:-1], n)


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

    Returns the stacked ``obs, candidates, scores, token_rewards, returns`` (time on axis 1), or None
    when ``on_step`` stops collection. The sampling log-probs are not kept: pi_old is the update's first
    forward (:mod:`tpo_agents.batches`). All sub-envs of a ``tpo_gym`` env have the
    same episode length, so every episode ends at the same step.
    """
    device, n = policy.device, env.num_envs
    step_log_probs = StepLogProbs(policy, _prompts(env))
    steps: dict[str, list] = {"obs": [], "candidates": [], "scores": [], "rewards": []}
    taken, token_rewards, finished = None, None, False
    while not finished:
        obs_t = _as_tensor(obs, device)
        log_probs = step_log_probs(obs_t, taken)
        candidates = sample_actions(log_probs, n_candidates, getattr(policy, "member_generators", None))
        taken = candidates[:, 0]
        if n_candidates > 1:
            steps["scores"].append(_as_tensor(env.score_candidates(candidates.cpu().numpy()), device).float())
        obs, rewards, terminated, truncated, infos = env.step(taken.cpu().numpy())
        steps["obs"].append(obs_t)
        steps["candidates"].append(candidates)
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


def _distinct(policy: ActionPolicy, prompts: th.Tensor | None,
              actions: th.Tensor) -> tuple[th.Tensor, th.Tensor] | None:
    """The batch's distinct sequences where the policy re-scores by them (once per batch), else None."""
    if not rescored_by_sequence(policy, prompts):
        return None
    return distinct_sequences(prompts, actions, int(getattr(policy, "n_members", 1)))


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
    actions = steps["candidates"][..., 0]
    prompts_t = None if prompts is None else _as_tensor(prompts, policy.device)
    return Episodes(
        obs=steps["obs"],
        actions=actions,
        old_log_probs=None,
        token_rewards=steps["token_rewards"],
        returns=steps["returns"],
        contexts=_as_tensor(contexts, policy.device),
        n_contexts=env.num_envs // group_size,
        group_size=group_size,
        prompts=prompts_t,
        distinct=_distinct(policy, prompts_t, actions),
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
    actions = steps["candidates"][..., 0]
    prompts_t = None if prompts is None else _as_tensor(prompts, policy.device)
    return TokenGroups(
        obs=steps["obs"],
        actions=actions,
        candidates=steps["candidates"],
        scores=steps["scores"],
        old_log_probs=None,
        token_rewards=steps["token_rewards"],
        returns=steps["returns"],
        prompts=prompts_t,
        distinct=_distinct(policy, prompts_t, actions),
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
