"""Batched stepping of a ``tpo_gym`` vector env with a policy, for the modes (``tpo_agents.modes``):
:func:`run_episodes` steps every sub-env to the end of its episode, drawing K candidates at each state
(the first is taken; the env scores them when K > 1), and returns the steps as tensors.

Everything is batched: one policy forward per time step for all contexts x K (each shared prefix decoded
once, :mod:`tpo_agents.policies.decoding`), numpy env steps, no Python loop over sub-envs, candidates or
groups.
Each mode builds its batch from them (:func:`tpo_agents.modes.episodes.collect_episodes`,
:func:`tpo_agents.modes.token.collect_token_groups`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents.layout import is_action_major
from tpo_agents.policies.base import multinomial_rows
from tpo_agents.policies.decoding import StepLogProbs, distinct_sequences, rescored_by_sequence
from tpo_agents.policies.protocols import ActionPolicy

StepHook = Callable[[int], bool]
"""Called after every env step with the number of interactions it made; False stops collection."""


def sample_actions(log_probs: th.Tensor, n: int, generators: list[th.Generator] | None = None) -> th.Tensor:
    """``n`` i.i.d. draws (with replacement) from each row of ``log_probs`` [..., A] -> [..., n];
    ``generators``: one per member of a member-major batch (None: torch's global generator)."""
    return multinomial_rows(log_probs, n, generators).reshape(*log_probs.shape[:-1], n)


def as_tensor(x: np.ndarray, device: th.device) -> th.Tensor:
    return th.as_tensor(np.array(x), device=device)


def final_token_rewards(infos: dict) -> np.ndarray | None:
    """The env's per-position rewards of the finished episodes (``final_info["token_rewards"]``), if any."""
    final = infos.get("final_info")
    if isinstance(final, dict) and "token_rewards" in final:
        return np.asarray(final["token_rewards"], dtype=np.float32)
    return None


def context_ids(env: VectorEnv, n: int, group_size: int) -> np.ndarray:
    contexts = getattr(env.unwrapped, "contexts", None)
    if contexts is not None and np.ndim(contexts) == 1:
        return np.asarray(contexts, dtype=np.int64)
    return np.repeat(np.arange(n // group_size), group_size)


def env_prompts(env: VectorEnv) -> np.ndarray | None:
    prompts = getattr(env.unwrapped, "prompts", None)
    return None if prompts is None else np.asarray(prompts, dtype=np.int64)


def run_episodes(
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
    forward (:mod:`tpo_agents.modes.base`). All sub-envs of a ``tpo_gym`` env have the
    same episode length, so every episode ends at the same step.
    """
    device, n = policy.device, env.num_envs
    step_log_probs = StepLogProbs(policy, env_prompts(env))
    steps: dict[str, list] = {"obs": [], "candidates": [], "scores": [], "rewards": []}
    taken, token_rewards, finished = None, None, False
    while not finished:
        obs_t = as_tensor(obs, device)
        log_probs = step_log_probs(obs_t, taken)
        candidates = sample_actions(log_probs, n_candidates, getattr(policy, "member_generators", None))
        taken = candidates[:, 0]
        if n_candidates > 1:
            steps["scores"].append(as_tensor(env.score_candidates(candidates.cpu().numpy()), device).float())
        obs, rewards, terminated, truncated, infos = env.step(taken.cpu().numpy())
        steps["obs"].append(obs_t)
        steps["candidates"].append(candidates)
        steps["rewards"].append(np.asarray(rewards, dtype=np.float32))
        if on_step is not None and not on_step(n):
            return None
        done = np.logical_or(terminated, truncated)
        finished = bool(done.all())
        if finished:
            token_rewards = final_token_rewards(infos)
        elif done.any():
            raise RuntimeError("sub-envs of a grouped env must finish their episodes together")
    step_rewards = np.stack(steps.pop("rewards"), axis=1)
    batch = {key: stack_steps(values) for key, values in steps.items() if values}
    batch["token_rewards"] = as_tensor(
        step_rewards if token_rewards is None else token_rewards, device
    ).float()
    batch["returns"] = as_tensor(step_rewards.sum(axis=1), device).float()
    return batch


def distinct_for(policy: ActionPolicy, prompts: th.Tensor | None,
              actions: th.Tensor) -> tuple[th.Tensor, th.Tensor] | None:
    """The batch's distinct sequences where the policy re-scores by them (once per batch), else None."""
    if not rescored_by_sequence(policy, prompts):
        return None
    return distinct_sequences(prompts, actions, int(getattr(policy, "n_seeds", 1)))


def stack_steps(values: list[th.Tensor]) -> th.Tensor:
    """``th.stack(values, dim=1)``: per-step ``[N, ..., A]`` tensors as ``[N, T, ..., A]``, in the steps'
    layout where they are action-major (:func:`tpo_agents.layout.is_action_major`: the log-probabilities of
    a policy with few actions), so that the batch's sums over A round as the steps' own."""
    if not is_action_major(values[0]):
        return th.stack(values, dim=1)
    return th.stack([value.movedim(-1, 0) for value in values], dim=2).movedim(0, -1)
