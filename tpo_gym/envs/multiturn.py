"""Multi-turn text tasks: the policy talks with the environment for several turns before the reward.

A turn: the policy writes a text (the action), the environment reads it and replies. The observation is
the whole transcript so far, the task's prompt followed by one :data:`TURN_FORMAT` block per turn
(``"\\n\\nYou: <action>\\nReply: <reply>"``), so a policy that sees only the observation sees the whole
conversation; ``info["reply"]`` holds the latest reply alone, for a policy that keeps its own chat
messages (the prompt is the observation of ``reset``).

* ``TPO/GuessNumber-v0`` (:class:`GuessNumberEnv`): find a hidden whole number from 1 to ``max_number`` in
  at most ``max_turns`` guesses ``<guess>N</guess>``; the replies are ``higher``, ``lower`` and ``correct``.
  A context is the hidden number minus 1.
* ``TPO/Calculator-v0`` (:class:`CalculatorEnv`): what is ``a * b`` for two ``digits``-digit numbers? The
  policy may call a calculator, ``<calc>expression</calc>`` (:func:`tpo_gym.envs.arithmetic.calculate`,
  whose result is the reply), and answers with ``<answer>N</answer>``. A context ``c`` is the question
  ``a = lo + c // span``, ``b = lo + c % span`` with ``lo = 10^(digits-1)``, ``span = 9 lo``.

Held-out splits: a task whose contexts are questions (Calculator) takes ``split``: ``"all"`` (the
default: every context), or ``"train"``, ``"validation"`` or ``"test"``, which share no question: the split
of a context is :func:`tpo_gym.envs.splits.split_of` of its :meth:`MultiTurnTask.question` (Calculator:
``"a * b"`` with ``a <= b``, so ``a * b`` and ``b * a`` fall in one split), each held-out split owning 10%
of the questions. An env of a split draws its contexts there, and a context given to ``reset`` or to a
vector reset must lie there (``ValueError`` naming it and its split otherwise). GuessNumber has no
splits: its context, the hidden number, is never shown to the policy.

Every turn counts toward ``max_turns``, also a bad one (over ``max_action_chars`` characters, without a
tag, a guess out of range, a calculator error): it gets a reply that says what was wrong, reward 0.0,
``info["format_ok"] = False``, never an exception. Reward: 1.0 on the turn that solves the task (the
right guess, the right answer), else 0.0. ``terminated``: the task is solved or an answer is given (the
calculator's episode ends at its answer, right or wrong); ``truncated``: the ``max_turns``-th turn ended
without that. Step info: ``context``, ``turn`` (turns taken, 1..max_turns), ``max_turns``, ``reply``,
``format_ok``, ``is_success``, and on the last turn ``ground_truth`` (the hidden number, the product).
Reset info: ``context``, ``turn`` (0), ``max_turns``.

Shortcuts (the success rates a policy reaches without the skill): :func:`reply_blind_success_rate`
(guessing without reading the replies) against :func:`binary_search_success_rate`, and
:func:`best_constant_answer` (one answer for every question, no calculator). A new task subclasses
:class:`MultiTurnTask` (``prompt``, ``respond``, ``ground_truth``) and gets its env and vector env from
:class:`MultiTurnEnv` and :class:`MultiTurnVectorEnv`.
"""

from __future__ import annotations

import dataclasses
import re
import string
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from tpo_gym.envs.arithmetic import CalculatorError, calculate
from tpo_gym.envs.splits import SPLITS, split_of
from tpo_gym.envs.text import _check_completions, _object_array, extract_answer, extract_tag
from tpo_gym.vector import (
    GroupedVectorEnv,
    check_choice,
    check_int,
    check_int_array,
    readonly,
    reset_context,
    uniform_ints,
)

__all__ = ["CHARSET", "MAX_REPLY_CHARS", "SPLIT_SEED", "TASK_SPLITS", "TURN_FORMAT", "CalculatorEnv",
           "CalculatorTask", "CalculatorVectorEnv", "Episode", "GuessNumberEnv", "GuessNumberTask",
           "GuessNumberVectorEnv", "MultiTurnEnv", "MultiTurnTask", "MultiTurnVectorEnv", "Turn",
           "best_constant_answer", "binary_search_success_rate", "operand_range", "reply_blind_guesses",
           "reply_blind_success_rate"]

TURN_FORMAT = "\n\nYou: {action}\nReply: {reply}"
MAX_REPLY_CHARS = 200
CHARSET = string.printable
TOO_LONG = "Your turn is longer than {limit} characters and was not read."
_INTEGER_RE = re.compile(r"[+-]?[0-9]{1,18}")
TASK_SPLITS = ("all", *SPLITS)
"""The ``split`` values of a task with held-out splits: ``"all"`` contexts, or one of the three splits."""
SPLIT_SEED = 0
"""The seed of :func:`tpo_gym.envs.splits.split_of` for the multi-turn tasks' questions."""
_DRAWS_PER_CHUNK = 64


def _parse_int(text: str) -> int | None:
    """``text`` as an int if it is a whole number of at most 18 digits (an optional sign), else ``None``."""
    return int(text) if _INTEGER_RE.fullmatch(text) else None


class Turn(NamedTuple):
    """The environment's side of one turn: the reply, whether the action followed the format, whether it
    ends the episode (the task solved, an answer given) and whether the task is solved."""

    reply: str
    format_ok: bool
    final: bool = False
    success: bool = False


@dataclasses.dataclass
class Episode:
    """One conversation: its context, the transcript so far (the observation), the turns taken, whether it
    has ended."""

    context: int
    transcript: str
    turn: int = 0
    done: bool = False


class MultiTurnTask(ABC):
    """The rules of a multi-turn text task, shared by its single and vector envs.

    A subclass sets its own attributes, then calls ``super().__init__(num_contexts, max_turns,
    max_action_chars, split)``, and implements :meth:`prompt`, :meth:`respond` and :meth:`ground_truth`
    (they may read ``self.max_turns``: the base sets it before it calls ``prompt(0)``); contexts are
    ``0..num_contexts-1``, drawn uniformly from those of ``split`` (a task with splits implements
    :meth:`question`; ``"all"``, the default, draws from every context as ``uniform_ints`` does). No
    prompt may be longer than ``prompt(0)`` and no reply longer than :data:`MAX_REPLY_CHARS` characters:
    the observation space (``spaces.Text`` over :data:`CHARSET`) holds the longest transcript,
    ``len(prompt(0)) + max_turns * (len(TURN_FORMAT.format(action="", reply="")) + max_action_chars +
    MAX_REPLY_CHARS)``. The transcript holds each action cut to ``max_action_chars``; ``step`` takes any
    ``str``, so an action outside the action space can give an observation outside the observation
    space.
    """

    def __init__(self, num_contexts: int, max_turns: int, max_action_chars: int, split: str = "all") -> None:
        self.num_contexts = num_contexts
        self.split = check_choice("split", split, TASK_SPLITS)
        self.max_turns = check_int("max_turns", max_turns, 1)
        self.max_action_chars = check_int("max_action_chars", max_action_chars, 1)
        per_turn = len(TURN_FORMAT.format(action="", reply="")) + self.max_action_chars + MAX_REPLY_CHARS
        self.observation_space = spaces.Text(max_length=len(self.prompt(0)) + self.max_turns * per_turn,
                                             charset=CHARSET)
        self.action_space = spaces.Text(max_length=self.max_action_chars, min_length=0, charset=CHARSET)

    @abstractmethod
    def prompt(self, context: int) -> str:
        """The task statement of a context: the first observation."""

    @abstractmethod
    def respond(self, context: int, action: str) -> Turn:
        """The environment's side of a turn whose action has at most ``max_action_chars`` characters."""

    @abstractmethod
    def ground_truth(self, context: int) -> int:
        """The solution of a context (shown in the info of the episode's last turn)."""

    def question(self, context: int) -> str:
        """The question a context asks, the text whose hash puts it into a split; a task with splits
        overrides it."""
        raise NotImplementedError(f"{type(self).__name__} has no held-out splits")

    def split_of(self, context: int) -> str:
        """The split of a context: :func:`tpo_gym.envs.splits.split_of` of its :meth:`question`."""
        return split_of(self.question(context), SPLIT_SEED)

    def sample_contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` contexts of the task's split drawn uniformly with replacement, int64 [n]: with ``"all"``,
        ``uniform_ints(rng, num_contexts, n)``; else the draws of ``rng`` in chunks of 64 that lie in the
        split, the first ``n`` of them."""
        if self.split == "all":
            return uniform_ints(rng, self.num_contexts, n)
        kept: list[int] = []
        while len(kept) < n:
            kept += [int(c) for c in uniform_ints(rng, self.num_contexts, _DRAWS_PER_CHUNK)
                     if self.split_of(int(c)) == self.split]
        return np.array(kept[:n], dtype=np.int64)

    def check_contexts(self, contexts: Any) -> np.ndarray:
        """Validate a 1-d batch of contexts of the task's split and return a fresh int64 array."""
        checked = check_int_array("contexts", contexts, self.num_contexts, 1)
        if self.split != "all":
            for context in checked:
                if (found := self.split_of(int(context))) != self.split:
                    raise ValueError(f"context {int(context)} ({self.question(int(context))!r}) is in the "
                                     f"{found} split, not in this env's {self.split} split")
        return checked

    def reset_info(self, context: int) -> dict[str, Any]:
        """The info of an episode's start: ``context``, ``turn`` (0), ``max_turns``."""
        return {"context": context, "turn": 0, "max_turns": self.max_turns}

    def begin(self, context: int) -> Episode:
        """A new episode of ``context``: its transcript is the prompt."""
        return Episode(context, self.prompt(context))

    def step(self, episode: Episode, action: str) -> tuple[float, bool, bool, dict[str, Any]]:
        """Play one turn of ``episode`` (updated in place): ``(reward, terminated, truncated, info)``.

        An action over ``max_action_chars`` characters is not read (reply :data:`TOO_LONG`); reward
        ``1.0`` if the turn solves the task, else ``0.0``; terminated when the turn is final;
        truncated when it is not and it was turn ``max_turns``.
        """
        if len(action) > self.max_action_chars:
            turn = Turn(TOO_LONG.format(limit=self.max_action_chars), format_ok=False)
        else:
            turn = self.respond(episode.context, action)
        episode.turn += 1
        episode.transcript += TURN_FORMAT.format(action=action[:self.max_action_chars], reply=turn.reply)
        truncated = not turn.final and episode.turn == self.max_turns
        episode.done = turn.final or truncated
        info = {"context": episode.context, "turn": episode.turn, "max_turns": self.max_turns,
                "reply": turn.reply, "format_ok": turn.format_ok, "is_success": turn.success}
        if episode.done:
            info["ground_truth"] = self.ground_truth(episode.context)
        return float(turn.success), turn.final, truncated, info


class MultiTurnEnv(gym.Env):
    """One episode of a :class:`MultiTurnTask` (see the module docstring for turns, rewards and infos).

    ``reset(options={"context": i})`` replays context ``i`` (one of the task's split); otherwise a context
    of the split is drawn uniformly from ``self.np_random``. The observation is the transcript; ``step``
    after the episode ended raises ``RuntimeError`` (call ``reset``).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, task: MultiTurnTask) -> None:
        self.task = task
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self._episode: Episode | None = None

    @property
    def context(self) -> int | None:
        """Context of the current episode (``None`` before the first reset)."""
        return None if self._episode is None else self._episode.context

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on a uniformly drawn context, or on ``options["context"]``."""
        super().reset(seed=seed)
        context = reset_context(options, self.np_random, self.task.num_contexts, self.task.sample_contexts)
        if options and options.get("context") is not None:  # a drawn context is of the split already
            self.task.check_contexts([context])
        self._episode = self.task.begin(context)
        return self._episode.transcript, self.task.reset_info(context)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one turn: ``(transcript, reward, terminated, truncated, info)``."""
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        if self._episode.done:
            raise RuntimeError("the episode has ended; call reset()")
        (action,) = _check_completions([action], 1)
        reward, terminated, truncated, info = self.task.step(self._episode, action)
        return self._episode.transcript, reward, terminated, truncated, info


class MultiTurnVectorEnv(GroupedVectorEnv):
    """``num_envs`` episodes of a :class:`MultiTurnTask` as one batch, with groups and same-step autoreset.

    ``step(actions)`` takes ``num_envs`` strings and returns ``(obs, rewards float32 [n], terminated,
    truncated, infos)``, obs an object array of transcripts. Episodes end at different turns; a sub-env
    whose episode ends starts its next one in the same step (``SAME_STEP``, as Gymnasium's
    ``SyncVectorEnv``): its obs is the new prompt, ``infos["final_obs"]`` and ``infos["final_info"]`` hold
    the transcript and the step info of the episode that ended, and its entries of the top-level infos are
    the new episode's reset info; every key has its ``_`` mask. Infos also hold ``episode`` (int64), the
    sub-env's episode index since the last ``reset``.

    Groups: the resets of :class:`tpo_gym.vector.GroupedVectorEnv` (``options={"group_size": G}`` or
    ``{"contexts": cs}``; default group size: the ``group_size`` argument). The ``e``-th episodes of the
    ``G`` sub-envs of a group share one context, autoresets included: the context of a group's next
    episode is drawn from ``self.np_random`` when its first sub-env starts it. ``contexts`` (read-only
    int64 [n]) are the current contexts.
    """

    def __init__(self, task: MultiTurnTask, num_envs: int, group_size: int = 1,
                 max_episode_steps: int | None = None) -> None:
        self.num_envs = check_int("num_envs", num_envs, 1)
        limit = task.max_turns
        if max_episode_steps is not None and check_int("max_episode_steps", max_episode_steps, 1) < limit:
            raise ValueError(f"episodes end after at most max_turns={limit} turns; max_episode_steps must be "
                             f"None or >= {limit}, got {max_episode_steps}")
        self.default_group_size = self._check_group_size(group_size)
        self.group_size = self.default_group_size
        self.task = task
        self.render_mode = None
        self.single_observation_space = task.observation_space
        self.single_action_space = task.action_space
        self.observation_space = batch_space(task.observation_space, self.num_envs)
        self.action_space = batch_space(task.action_space, self.num_envs)
        self._episodes: list[Episode] = []
        self._episode_index = np.zeros(self.num_envs, dtype=np.int64)
        self._group_contexts: list[dict[int, int]] = []

    @property
    def contexts(self) -> np.ndarray:
        """Read-only contexts of the current episodes, int64 [num_envs]."""
        if not self._episodes:
            raise RuntimeError("call reset() first")
        return readonly(np.array([episode.context for episode in self._episodes], dtype=np.int64))

    def _start(self, contexts: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n = self.num_envs
        self._episodes = [self.task.begin(int(context)) for context in contexts]
        self._episode_index = np.zeros(n, dtype=np.int64)
        self._group_contexts = [{0: int(contexts[start])} for start in range(0, n, self.group_size)]
        info = {"context": contexts.copy(), "turn": np.zeros(n, dtype=np.int64),
                "max_turns": np.full(n, self.task.max_turns, dtype=np.int64),
                "episode": np.zeros(n, dtype=np.int64)}
        return self._observe(), info

    def _observe(self) -> np.ndarray:
        return _object_array([episode.transcript for episode in self._episodes])

    def _next_episode(self, index: int) -> dict[str, Any]:
        """Start the next episode of sub-env ``index`` on its group's context for that episode index (drawn
        now if no sub-env of the group has started it yet); return its reset info."""
        group = index // self.group_size
        self._episode_index[index] += 1
        episode = int(self._episode_index[index])
        contexts = self._group_contexts[group]
        if episode not in contexts:
            contexts[episode] = int(self.task.sample_contexts(self.np_random, 1)[0])
        context = contexts[episode]
        oldest = int(self._episode_index[group * self.group_size:(group + 1) * self.group_size].min())
        for started in [e for e in contexts if e < oldest]:
            del contexts[started]
        self._episodes[index] = self.task.begin(context)
        return {**self.task.reset_info(context), "episode": episode}

    def step(self, actions: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                     dict[str, Any]]:
        """Play one turn in every sub-env and autoreset the ended episodes; see the class docstring."""
        if not self._episodes:
            raise RuntimeError("call reset() before step()")
        n = self.num_envs
        actions = _check_completions(actions, n)
        rewards = np.zeros(n, dtype=np.float32)
        terminated, truncated = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        for i, action in enumerate(actions):
            episode = self._episodes[i]
            rewards[i], terminated[i], truncated[i], info = self.task.step(episode, action)
            info["episode"] = int(self._episode_index[i])
            if episode.done:
                infos = self._add_info(infos, {"final_obs": episode.transcript, "final_info": info}, i)
                info = self._next_episode(i)
            infos = self._add_info(infos, info, i)
        return self._observe(), rewards, terminated, truncated, infos


# --------------------------------------------------------------------------------------------- GuessNumber

GUESS_PROMPT = ("I am thinking of a whole number from 1 to {max_number}. Find it in at most {max_turns} "
                "guesses. Write one guess per turn as <guess>N</guess>; I reply higher if my number is "
                "higher than your guess, lower if it is lower, and correct if you found it.")
NO_GUESS = "No guess found: write <guess>N</guess> with N a whole number from 1 to {max_number}."
OUT_OF_RANGE = "Your guess must be a whole number from 1 to {max_number}."


def reply_blind_guesses(max_number: int, max_turns: int) -> tuple[int, ...]:
    """The best guesses of a policy that ignores the replies: ``1, 2, ..., min(T, R)`` (``T`` turns, hidden
    number uniform in ``1..R``). Such a policy plays one fixed sequence (or a mixture of them, no better);
    it wins when the hidden number is in it, so any ``min(T, R)`` distinct numbers are optimal."""
    return tuple(range(1, min(max_turns, max_number) + 1))


def reply_blind_success_rate(max_number: int, max_turns: int) -> float:
    """Exact success rate of :func:`reply_blind_guesses`, the best of any reply-blind policy:
    ``min(T, R) / R``. A success rate above it shows that a policy reads the replies."""
    return min(max_turns, max_number) / max_number


def binary_search_success_rate(max_number: int, max_turns: int) -> float:
    """Exact success rate of binary search (guess the middle of the numbers still possible), the best of
    any policy: ``min(R, 2^T - 1) / R``. A strategy is a binary tree of guesses (the reply picks the
    child); it finds exactly the numbers on its nodes, at most ``2^T - 1`` in ``T`` turns, and the
    halving tree holds ``min(R, 2^T - 1)`` of them."""
    return min(max_number, 2**max_turns - 1) / max_number


class GuessNumberTask(MultiTurnTask):
    """Find a hidden number from 1 to ``max_number`` (context + 1) in at most ``max_turns`` guesses.

    ``respond`` reads the last ``<guess>N</guess>`` of an action: ``higher`` / ``lower`` if the hidden
    number is higher / lower than ``N``, ``correct`` (final, success) if it is ``N``; without a guess tag,
    or with ``N`` not a whole number from 1 to ``max_number``, a reply saying so (``format_ok`` False).
    """

    def __init__(self, max_number: int = 20, max_turns: int = 5, max_action_chars: int = 1024) -> None:
        self.max_number = check_int("max_number", max_number, 1)
        super().__init__(self.max_number, max_turns, max_action_chars)

    def prompt(self, context: int) -> str:
        """The same statement for every hidden number."""
        return GUESS_PROMPT.format(max_number=self.max_number, max_turns=self.max_turns)

    def ground_truth(self, context: int) -> int:
        """The hidden number, ``context + 1``."""
        return int(context) + 1

    def respond(self, context: int, action: str) -> Turn:
        """Compare the action's guess with the hidden number."""
        body = extract_tag(action, "guess")
        if body is None:
            return Turn(NO_GUESS.format(max_number=self.max_number), format_ok=False)
        guess = _parse_int(body)
        if guess is None or not 1 <= guess <= self.max_number:
            return Turn(OUT_OF_RANGE.format(max_number=self.max_number), format_ok=False)
        target = self.ground_truth(context)
        if guess == target:
            return Turn("correct", format_ok=True, final=True, success=True)
        return Turn("higher" if target > guess else "lower", format_ok=True)


class GuessNumberEnv(MultiTurnEnv):
    """``TPO/GuessNumber-v0``: :class:`GuessNumberTask` as a Gymnasium env (kwargs: ``max_number`` 20,
    ``max_turns`` 5, ``max_action_chars`` 1024)."""

    def __init__(self, max_number: int = 20, max_turns: int = 5, max_action_chars: int = 1024) -> None:
        super().__init__(GuessNumberTask(max_number, max_turns, max_action_chars))


class GuessNumberVectorEnv(MultiTurnVectorEnv):
    """``num_envs`` :class:`GuessNumberEnv` episodes (see :class:`MultiTurnVectorEnv`); other keywords
    are those of :class:`GuessNumberTask`."""

    def __init__(self, num_envs: int, group_size: int = 1, max_episode_steps: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(GuessNumberTask(**kwargs), num_envs, group_size, max_episode_steps)


# ---------------------------------------------------------------------------------------------- Calculator

CALC_PROMPT = ("What is {a} * {b}? You have a calculator: write <calc>expression</calc>, e.g. "
               "<calc>12 * (3 + 4)</calc>, and its result is the reply. Give the final answer as "
               "<answer>N</answer>; answering ends the episode. You have {max_turns} turns.")
CALC_PROMPT_SHOWN = ("What is {a} * {b}? You have a calculator: write <calc>{a} * {b}</calc> and its result "
                     "is the reply. Then give the final answer as <answer>result</answer>; answering ends "
                     "the episode. You have {max_turns} turns.")
"""The prompt with ``show_call=True``: the call that answers the question written out, so what is left to
learn is to make that call and to answer with its reply."""
NO_ACTION = "No calculator call or answer found: write <calc>expression</calc> or <answer>N</answer>."
CALC_ERROR = "calculator error: {error}"
_WINDOW = 1 << 22  # products counted per pass of best_constant_answer


def operand_range(digits: int) -> tuple[int, int]:
    """The smallest and largest ``digits``-digit number: ``(10^(digits-1), 10^digits - 1)``."""
    return 10 ** (digits - 1), 10**digits - 1


def best_constant_answer(digits: int) -> tuple[int, float]:
    """The best answer of a policy that neither calls the calculator nor reads the numbers, and its exact
    success rate on :class:`CalculatorTask` (operands uniform over the ``digits``-digit numbers): the most
    frequent product ``v`` (the smallest of ties), with rate ``#{(a, b): a b = v} / span^2``.

    Counts the products window by window: for each ``a``, the products ``a b`` in a window are one strided
    slice (``O(span^2)`` additions, ``O(_WINDOW)`` memory: ~10 ms for 3 digits, ~1 s for 4, 100 times
    more for each further digit).
    """
    digits = check_int("digits", digits, 1, CalculatorTask.MAX_OPERAND_DIGITS)
    low, high = operand_range(digits)
    best, best_count = 0, 0
    for start in range(low * low, high * high + 1, _WINDOW):
        stop = min(start + _WINDOW, high * high + 1)
        counts = np.zeros(stop - start, dtype=np.int32)
        for a in range(low, high + 1):
            first, last = max(low, -(-start // a)), min(high, (stop - 1) // a)
            if first <= last:
                counts[a * first - start:a * last - start + 1:a] += 1
        index = int(counts.argmax())
        if counts[index] > best_count:
            best, best_count = start + index, int(counts[index])
    return best, best_count / (high - low + 1) ** 2


class CalculatorTask(MultiTurnTask):
    """``a * b`` for two ``digits``-digit numbers, with a calculator tool; the answer is scored exactly.

    ``respond``: an action with an ``<answer>`` tag is the final answer (any ``<calc>`` beside it is not
    run): ``correct`` (success) if the last answer is the product as a whole number, else ``incorrect``
    (``format_ok`` False when the answer is not a whole number); otherwise the last
    ``<calc>expression</calc>`` is run by :func:`tpo_gym.envs.arithmetic.calculate` and its exact result
    (``56088``, ``7/2``) is the reply, or ``calculator error: ...`` (``format_ok`` False); with neither
    tag, a reply naming both. ``show_call``: the prompt writes out the call for its own question
    (:data:`CALC_PROMPT_SHOWN`) instead of a generic example. ``split``: ``"all"`` questions, or those of
    ``"train"``, ``"validation"`` or ``"test"`` (:meth:`question`; see the module docstring).
    """

    MAX_OPERAND_DIGITS = 9

    def __init__(self, digits: int = 3, max_turns: int = 3, max_action_chars: int = 1024,
                 show_call: bool = False, split: str = "all") -> None:
        if not isinstance(show_call, bool):
            raise ValueError(f"show_call={show_call!r}: use True or False")
        self.show_call = show_call
        self.digits = check_int("digits", digits, 1, self.MAX_OPERAND_DIGITS)
        self.low, high = operand_range(self.digits)
        self.span = high - self.low + 1
        super().__init__(self.span**2, max_turns, max_action_chars, split)

    def operands(self, context: int) -> tuple[int, int]:
        """``(a, b)`` of a context: ``(lo + c // span, lo + c % span)``."""
        return self.low + int(context) // self.span, self.low + int(context) % self.span

    def question(self, context: int) -> str:
        """``"a * b"`` with the smaller operand first: a product and its mirror are one question."""
        a, b = sorted(self.operands(context))
        return f"{a} * {b}"

    def prompt(self, context: int) -> str:
        """The question and the formats; the same length for every context."""
        a, b = self.operands(context)
        template = CALC_PROMPT_SHOWN if self.show_call else CALC_PROMPT
        return template.format(a=a, b=b, max_turns=self.max_turns)

    def ground_truth(self, context: int) -> int:
        """The product ``a * b``."""
        a, b = self.operands(context)
        return a * b

    def respond(self, context: int, action: str) -> Turn:
        """Score an answer, or run a calculator call."""
        answer = extract_answer(action)
        if answer is not None:
            value = _parse_int(answer)
            success = value == self.ground_truth(context)
            return Turn("correct" if success else "incorrect", format_ok=value is not None, final=True,
                        success=success)
        expression = extract_tag(action, "calc")
        if expression is None:
            return Turn(NO_ACTION, format_ok=False)
        try:
            return Turn(str(calculate(expression)), format_ok=True)
        except CalculatorError as error:
            return Turn(CALC_ERROR.format(error=error), format_ok=False)


class CalculatorEnv(MultiTurnEnv):
    """``TPO/Calculator-v0``: :class:`CalculatorTask` as a Gymnasium env (kwargs: ``digits`` 3,
    ``max_turns`` 3, ``max_action_chars`` 1024, ``show_call`` False, ``split`` ``"all"``)."""

    def __init__(self, digits: int = 3, max_turns: int = 3, max_action_chars: int = 1024,
                 show_call: bool = False, split: str = "all") -> None:
        super().__init__(CalculatorTask(digits, max_turns, max_action_chars, show_call, split))


class CalculatorVectorEnv(MultiTurnVectorEnv):
    """``num_envs`` :class:`CalculatorEnv` episodes (see :class:`MultiTurnVectorEnv`); other keywords are
    those of :class:`CalculatorTask`."""

    def __init__(self, num_envs: int, group_size: int = 1, max_episode_steps: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(CalculatorTask(**kwargs), num_envs, group_size, max_episode_steps)
