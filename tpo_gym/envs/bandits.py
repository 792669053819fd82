"""One-step bandits of the paper (paper Secs. 3.1 and 3.2): a K-armed bandit and a multi-context bandit.

Both are the same task: a context ``c`` (always 0 for the K-armed bandit) is drawn uniformly at
reset, the agent pulls one arm ``a`` and gets ``r = 1[a = y*_c]``; the episode then ends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from tpo_gym.vector import (
    BatchedTask,
    BatchedTaskEnv,
    BatchedTaskVectorEnv,
    check_int,
    check_int_array,
    readonly,
    uniform_ints,
)


class BanditTask(BatchedTask):
    """Batched one-step bandit with ``n_contexts`` contexts, ``n_arms`` arms, one correct arm each.

    ``correct_arm`` is one arm for every context or a sequence of ``n_contexts`` arms.
    """

    horizon = 1

    def __init__(self, n_contexts: int, n_arms: int, correct_arm: Any = 0) -> None:
        super().__init__()
        self.n_contexts = check_int("n_contexts", n_contexts, 1)
        self.n_arms = check_int("n_arms", n_arms, 2)
        if np.ndim(correct_arm) == 0:
            arm = check_int("correct_arm", correct_arm, 0, self.n_arms - 1)
            self.correct_arms = np.full(self.n_contexts, arm, dtype=np.int64)
        else:
            self.correct_arms = check_int_array("correct_arm", correct_arm, self.n_arms, 1)
            if len(self.correct_arms) != self.n_contexts:
                raise ValueError(f"correct_arm must be one arm or {self.n_contexts} arms (one per "
                                 f"context), got {len(self.correct_arms)}")
        self.observation_space = spaces.Discrete(self.n_contexts)
        self.action_space = spaces.Discrete(self.n_arms)

    def sample_contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return uniform_ints(rng, self.n_contexts, n)

    def check_contexts(self, contexts: Any) -> np.ndarray:
        return check_int_array("context", contexts, self.n_contexts, 1)

    def _start(self, contexts: np.ndarray) -> dict[str, np.ndarray]:
        self.targets = self.correct_arms[contexts]
        self.hits = np.zeros(len(contexts), dtype=bool)
        self.actions = np.full(len(contexts), -1, dtype=np.int64)
        return {}

    def _observe(self) -> np.ndarray:
        return self.contexts.copy()

    def _advance(self, actions: np.ndarray) -> np.ndarray:
        self.actions = actions.copy()
        self.hits = actions == self.targets
        return self.hits

    def _final_info(self) -> dict[str, np.ndarray]:
        return {"correct_action": self.targets.copy(), "is_success": self.hits.copy()}

    def _score(self, candidates: np.ndarray) -> np.ndarray:
        return candidates == self.targets[:, None]

    def render_text(self, index: int) -> str:
        """``context c | action a | correct arm y* | reward r`` (action and reward ``-`` before the pull)."""
        head = f"context {self.contexts[index]} | "
        arm = f"correct arm {self.targets[index]}"
        if self.step_index == 0:
            return head + f"action - | {arm} | reward -"
        hit = bool(self.hits[index])
        verdict = "right" if hit else "wrong"
        return head + f"action {self.actions[index]} | {arm} | reward {float(hit):g} ({verdict})"


class KArmedBanditEnv(BatchedTaskEnv):
    """Single-context K-armed bandit (paper Sec. 3.1), ``TPO/KArmedBandit-v0``.

    Observation: ``Discrete(1)``, always 0 (one context). Action: ``Discrete(n_arms)``, the arm
    pulled. Reward: ``r = 1[a = y*]`` with ``y* = correct_arm`` (default 0). Termination: every
    episode is one step (``terminated=True``); never truncated. Info: reset holds ``context`` (0);
    the final step holds ``correct_action`` (``y*``) and ``is_success`` (``r == 1``).
    Grouped use: ``score_candidates(cands [K]) -> 1[cand = y*]`` without stepping.
    Rendering: ``render_mode="ansi"``: ``render()`` returns one line with the context, the arm pulled,
    the correct arm and the reward.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, n_arms: int = 100, correct_arm: int = 0, render_mode: str | None = None) -> None:
        super().__init__(BanditTask(1, n_arms, correct_arm), render_mode)


class MultiContextBanditEnv(BatchedTaskEnv):
    """Multi-context bandit (paper Sec. 3.2), ``TPO/MultiContextBandit-v0``.

    Observation: ``Discrete(n_contexts)``, the context index ``c`` drawn uniformly at reset.
    Action: ``Discrete(n_arms)``, the arm pulled. Reward: ``r = 1[a = y*_c]`` with ``y*_c =
    correct_arm`` (one arm for every context, default 0, or a sequence of ``n_contexts`` arms).
    Termination: every episode is one step (``terminated=True``); never truncated. Info: reset
    holds ``context``; the final step holds ``correct_action`` (``y*_c``) and ``is_success``.
    Grouped use: ``score_candidates(cands [K]) -> 1[cand = y*_c]`` without stepping;
    ``reset(options={"context": c})`` replays context ``c``.
    Rendering: ``render_mode="ansi"``: ``render()`` returns one line with the context, the arm pulled,
    the correct arm and the reward.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, n_contexts: int = 100, n_arms: int = 10, correct_arm: Any = 0,
                 render_mode: str | None = None) -> None:
        super().__init__(BanditTask(n_contexts, n_arms, correct_arm), render_mode)


class KArmedBanditVectorEnv(BatchedTaskVectorEnv):
    """``num_envs`` K-armed bandits as one numpy batch (see ``KArmedBanditEnv`` and
    ``BatchedTaskVectorEnv``); ``correct_arm`` is the correct arm."""

    def __init__(self, num_envs: int, n_arms: int = 100, correct_arm: int = 0, group_size: int = 1,
                 max_episode_steps: int | None = None, n_seeds: int = 1) -> None:
        super().__init__(BanditTask(1, n_arms, correct_arm), num_envs, group_size, max_episode_steps,
                         n_seeds)

    @property
    def correct_arm(self) -> int:
        """The correct arm ``y*``."""
        return int(self.task.correct_arms[0])


class MultiContextBanditVectorEnv(BatchedTaskVectorEnv):
    """``num_envs`` multi-context bandits as one numpy batch (see ``MultiContextBanditEnv`` and
    ``BatchedTaskVectorEnv``); ``contexts`` [n] are the current context indices."""

    def __init__(self, num_envs: int, n_contexts: int = 100, n_arms: int = 10, correct_arm: Any = 0,
                 group_size: int = 1, max_episode_steps: int | None = None, n_seeds: int = 1) -> None:
        super().__init__(BanditTask(n_contexts, n_arms, correct_arm), num_envs, group_size,
                         max_episode_steps, n_seeds)

    @property
    def correct_arms(self) -> np.ndarray:
        """Read-only correct arm of every context, shape [n_contexts]."""
        return readonly(self.task.correct_arms)
