"""Episodes of T steps: the batch of the sequence and single modes (:class:`Episodes`), its collection
(:func:`collect_episodes`), and the base of the modes that step whole episodes (token, sequence, single):
their interactions and logging."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents.modes.base import CollectionMode, StepHook
from tpo_agents.policies.decoding import episode_log_probs
from tpo_agents.policies.protocols import ActionPolicy
from tpo_agents.rollout import as_tensor, context_ids, distinct_for, env_prompts, run_episodes


@dataclass
class Episodes:
    """``n_contexts * group_size`` episodes of ``T`` steps, context-major (rows bK..bK+K-1 share context b).

    ``token_rewards`` are the per-step rewards r_t (paper Sec. 3.4; for the token tasks the env's
    ``info["token_rewards"]``; terminal reward copies the exact-match flag to every position).
    """

    obs: th.Tensor  # [N, T, *obs_shape] observation before each action
    actions: th.Tensor  # [N, T]
    old_log_probs: th.Tensor | None  # [N, T, A] log pi_old(.|x_t), full action set (None: the update's)
    token_rewards: th.Tensor  # [N, T]
    returns: th.Tensor  # [N] episode returns as the env paid them
    contexts: th.Tensor  # [N] integer context id when the env has one, else the row's group index
    n_contexts: int
    group_size: int
    prompts: th.Tensor | None = None  # [N, H] for the token tasks (teacher-forced re-scoring)
    #: the distinct rows of [prompt, actions] and the inverse index, where a sequence policy re-scores them
    #: (``tpo_agents.policies.decoding.distinct_sequences``)
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)
    #: log pi_theta with gradient from the forward a fast collector sampled from (the MLP on MNIST), handed to
    #: the update's first epoch (``CollectionMode.log_probs``); None: the update forwards itself.
    first_forward: th.Tensor | None = field(default=None, repr=False)

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta(.|x_t) at every step ``[N, T, A]``, with gradient
        (:func:`~tpo_agents.policies.decoding.episode_log_probs`)."""
        return episode_log_probs(policy, self)

    def per_sample(self, log_probs: th.Tensor) -> th.Tensor:
        """Log-probs ``[N, T, A]`` as this batch holds them, one row per sample (they are)."""
        return log_probs

    def taken(self, log_probs: th.Tensor) -> th.Tensor:
        """log pi of the taken actions ``[N, T]``."""
        return log_probs.gather(-1, self.actions.unsqueeze(-1)).squeeze(-1)

    def taken_actions(self) -> th.Tensor:
        """The taken actions ``[N, T]``."""
        return self.actions

    #: Whether the log-probs hold one row per member (:class:`TableSamples`) rather than per sample.
    one_row_per_member: ClassVar[bool] = False


@th.no_grad()
def collect_episodes(
    env: VectorEnv, policy: ActionPolicy, group_size: int, on_step: StepHook | None = None
) -> Episodes | None:
    """Run one episode in every sub-env, blocks of ``group_size`` sub-envs sharing a context.

    Returns ``None`` when ``on_step`` asks to stop.
    """
    obs, _ = env.reset(options={"group_size": group_size})
    contexts, prompts = context_ids(env, env.num_envs, group_size), env_prompts(env)
    steps = run_episodes(env, obs, policy, 1, on_step)
    if steps is None:
        return None
    actions = steps["candidates"][..., 0]
    prompts_t = None if prompts is None else as_tensor(prompts, policy.device)
    return Episodes(
        obs=steps["obs"],
        actions=actions,
        old_log_probs=None,
        token_rewards=steps["token_rewards"],
        returns=steps["returns"],
        contexts=as_tensor(contexts, policy.device),
        n_contexts=env.num_envs // group_size,
        group_size=group_size,
        prompts=prompts_t,
        distinct=distinct_for(policy, prompts_t, actions),
    )


class EpisodeMode(CollectionMode):
    """A mode whose batches are episodes of ``T`` steps (:class:`Episodes`, or the token mode's
    ``TokenGroups``: their ``token_rewards``, ``returns`` and ``prompts`` are read alike)."""

    def steps_per_collect(self, env: VectorEnv) -> int:
        return self.n_envs * int(env.unwrapped.task.horizon)

    def rollout_metrics(self, batch: Any) -> dict[str, th.Tensor]:
        """Task error = 1 - mean per-token reward of the behaviour episodes (paper Sec. 3.4), and
        the episode return, success rate (every token right) and length."""
        token_rewards = self.member_rows(batch.token_rewards)
        return {
            "task_error": 1 - token_rewards.flatten(1).mean(1),
            "ep_rew_mean": self.member_rows(batch.returns).mean(1),
            "success_rate": (token_rewards.min(-1).values > 0).float().mean(1),
            "ep_len_mean": th.full((self.n_seeds,), float(token_rewards.shape[-1]),
                                   device=token_rewards.device),
        }

    def episode_rows(self, batch: Any) -> dict[str, Any]:
        """``r``, ``l``, ``is_success`` and, on the token tasks, ``token_error`` of each episode."""
        token_rewards = batch.token_rewards.cpu().numpy()
        rows: dict[str, Any] = {
            "r": batch.returns.cpu().numpy(),
            "l": np.full(len(token_rewards), token_rewards.shape[-1]),
            "is_success": token_rewards.min(-1) > 0,
        }
        if batch.prompts is not None:
            rows["token_error"] = 1 - token_rewards.mean(-1)
        return rows
