"""Token tasks of the paper (paper Secs. 3.4-3.6): copy, flip, reverse copy and reverse flip a random prompt.

A prompt ``x`` of ``H`` tokens is drawn i.i.d. uniform over ``{0..V-1}``; the agent writes ``H``
tokens ``a_0..a_{H-1}``, one per step, and is scored against the target ``y*``:
copy ``y*_t = x_t``; flip ``y*_t = (V-1) - x_t``; reverse copy ``y*_t = x_{H-1-t}``;
reverse flip ``y*_t = (V-1) - x_{H-1-t}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from tpo_gym.vector import (
    BatchedTask,
    BatchedTaskEnv,
    BatchedTaskVectorEnv,
    check_choice,
    check_int,
    check_int_array,
    readonly,
    uniform_ints,
)

LOGICS = ("copy", "flip", "reverse_copy", "reverse_flip")
REWARDS = ("bag_of_tokens", "sequential", "terminal")


class TokenTask(BatchedTask):
    """Batched token task: prompts [n, H], targets [n, H], the 2H token buffers and the rewards."""

    def __init__(self, logic: str, reward: str, sequence_length: int, vocab_size: int) -> None:
        super().__init__()
        self.logic = check_choice("logic", logic, LOGICS)
        self.reward = check_choice("reward", reward, REWARDS)
        self.horizon = check_int("sequence_length", sequence_length, 1)
        self.vocab_size = check_int("vocab_size", vocab_size, 2)
        self.pad = self.vocab_size
        self.observation_space = spaces.MultiDiscrete(np.full(2 * self.horizon, self.vocab_size + 1),
                                                      dtype=np.int64)
        self.action_space = spaces.Discrete(self.vocab_size)

    def sample_contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return uniform_ints(rng, self.vocab_size, (n, self.horizon))

    def check_contexts(self, contexts: Any) -> np.ndarray:
        prompts = check_int_array("prompt", contexts, self.vocab_size, 2)
        if prompts.shape[1] != self.horizon:
            raise ValueError(f"a prompt must hold sequence_length={self.horizon} tokens, "
                             f"got {prompts.shape[1]}")
        return prompts

    def targets_of(self, prompts: np.ndarray) -> np.ndarray:
        """Target sequences y* [n, H] of prompts [n, H] under this task's logic."""
        targets = prompts[:, ::-1] if self.logic.startswith("reverse") else prompts
        return (self.vocab_size - 1) - targets if self.logic.endswith("flip") else targets.copy()

    def _start(self, contexts: np.ndarray) -> dict[str, np.ndarray]:
        n, H = contexts.shape
        self.targets = self.targets_of(contexts)
        self.buffer = np.concatenate([contexts, np.full((n, H), self.pad, dtype=np.int64)], axis=1)
        self.correct = np.zeros((n, H), dtype=bool)
        self.alive = np.ones(n, dtype=bool)
        return {"prompt": contexts.copy(), "target": self.targets.copy()}

    def _observe(self) -> np.ndarray:
        return self.buffer.copy()

    def _advance(self, actions: np.ndarray) -> np.ndarray:
        t, H = self.step_index, self.horizon
        hit = actions == self.targets[:, t]
        self.buffer[:, H + t] = actions
        self.correct[:, t] = hit
        if self.reward == "bag_of_tokens":
            return hit
        if self.reward == "sequential":
            self.alive &= hit
            return self.alive.copy()
        if t < H - 1:
            return np.zeros(len(actions))
        return H * self.correct.all(axis=1)

    def _final_info(self) -> dict[str, np.ndarray]:
        if self.reward == "bag_of_tokens":
            token_rewards = self.correct
        elif self.reward == "sequential":
            token_rewards = np.cumprod(self.correct, axis=1)
        else:
            token_rewards = np.repeat(self.correct.all(axis=1, keepdims=True), self.horizon, axis=1)
        token_rewards = token_rewards.astype(np.float32)
        exact = self.correct.all(axis=1)
        token_error = 1.0 - token_rewards.mean(axis=1, dtype=np.float64)
        return {"token_rewards": token_rewards, "token_error": token_error, "exact_match": exact,
                "is_success": exact.copy()}

    def score_candidates(self, candidates: Any) -> np.ndarray:
        if self.reward == "terminal":
            raise ValueError("score_candidates needs a per-step reward (bag_of_tokens or sequential): the "
                             "terminal reward only scores whole sequences, so use sequence-level groups "
                             "(reset(options={'group_size': K}) and K full episodes per prompt)")
        return super().score_candidates(candidates)

    def _score(self, candidates: np.ndarray) -> np.ndarray:
        hit = candidates == self.targets[:, self.step_index, None]
        return hit & self.alive[:, None] if self.reward == "sequential" else hit

    def return_so_far(self, index: int) -> float:
        """The summed reward of episode ``index`` over the steps taken so far."""
        t, correct = self.step_index, self.correct[index]
        if self.reward == "bag_of_tokens":
            return float(correct[:t].sum())
        if self.reward == "sequential":
            return float(np.cumprod(correct[:t]).sum())
        return float(self.horizon * correct.all()) if t == self.horizon else 0.0

    def render_text(self, index: int) -> str:
        """Prompt, target and the agent's tokens so far (wrong ones in ``[brackets]``, unwritten ``.``)."""
        t, H = self.step_index, self.horizon
        width = len(str(self.vocab_size - 1))

        def cell(text: str, wrong: bool = False) -> str:
            return f"[{text:>{width}}]" if wrong else f" {text:>{width}} "

        written = self.buffer[index, H : H + t]
        agent = [cell(str(a), not ok) for a, ok in zip(written, self.correct[index, :t], strict=True)]
        agent += [cell(".")] * (H - t)
        wrong = int(t - self.correct[index, :t].sum())
        lines = [
            f"{self.logic}, {self.reward} reward: step {t}/{H}, return {self.return_so_far(index):g}",
            "prompt " + "".join(cell(str(x)) for x in self.contexts[index]),
            "target " + "".join(cell(str(y)) for y in self.targets[index]),
            "agent  " + "".join(agent),
            f"{wrong} wrong token{'s' * (wrong != 1)}" + (" (in [brackets])" if wrong else ""),
        ]
        return "\n".join(line.rstrip() for line in lines)


class TokenTaskEnv(BatchedTaskEnv):
    """Write the target sequence of a random prompt, one token per step (paper Secs. 3.4-3.6).

    Observation: ``MultiDiscrete([V+1] * 2H)`` int64, ``[x_0..x_{H-1}, a_0..a_{t-1}, PAD, ...]``
    with ``PAD = V`` in the slots not yet written. Action: ``Discrete(V)``, the next token ``a_t``.
    Reward, with ``c_t = 1[a_t = y*_t]``: ``bag_of_tokens`` ``r_t = c_t``; ``sequential``
    ``r_t = prod_{s<=t} c_s``; ``terminal`` ``r_t = 0`` for ``t < H-1`` and
    ``r_{H-1} = H * prod_s c_s``. For all three, return / H = the paper's sequence score.
    Termination: after ``H`` steps (``terminated=True``); never truncated.
    Info: reset holds ``prompt``, ``target`` and ``context`` (= prompt). The final step holds
    ``token_rewards`` (float32 [H], per position: ``c``, ``cumprod(c)``, or the exact-match flag at
    every position), ``token_error = 1 - mean(token_rewards)``, ``exact_match`` and
    ``is_success`` (= ``exact_match``).
    Grouped use: ``score_candidates(cands [K])`` gives ``1[cand = y*_t]`` (bag) or
    ``alive_t * 1[cand = y*_t]`` (sequential, ``alive_t`` = all taken tokens so far correct)
    and raises ``ValueError`` for terminal reward; ``reset(options={"context": prompt})``
    replays a prompt.
    Rendering: ``render_mode="ansi"``: ``render()`` returns plain text with the prompt, the target and
    the agent's tokens so far (wrong tokens in ``[brackets]``, unwritten ones ``.``), the step and
    the return so far.
    Arguments: ``logic`` in ``LOGICS``, ``reward`` in ``REWARDS``, ``sequence_length`` H >= 1,
    ``vocab_size`` V >= 2, ``render_mode`` None or ``"ansi"``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, logic: str = "copy", reward: str = "bag_of_tokens", sequence_length: int = 10,
                 vocab_size: int = 2, render_mode: str | None = None) -> None:
        super().__init__(TokenTask(logic, reward, sequence_length, vocab_size), render_mode)


class TokenTaskVectorEnv(BatchedTaskVectorEnv):
    """``num_envs`` token-task episodes as one numpy batch (see ``TokenTaskEnv`` and
    ``BatchedTaskVectorEnv``); contexts are the prompts."""

    def __init__(self, num_envs: int, logic: str = "copy", reward: str = "bag_of_tokens",
                 sequence_length: int = 10, vocab_size: int = 2, group_size: int = 1,
                 max_episode_steps: int | None = None, n_seeds: int = 1) -> None:
        super().__init__(TokenTask(logic, reward, sequence_length, vocab_size), num_envs, group_size,
                         max_episode_steps, n_seeds)

    @property
    def prompts(self) -> np.ndarray:
        """Read-only prompts x of the current episodes, [num_envs, H]."""
        return readonly(self.task.contexts)

    @property
    def targets(self) -> np.ndarray:
        """Read-only targets y* of the current episodes, [num_envs, H]."""
        return readonly(self.task.targets)
