"""The multi-turn ``TPO/`` envs as tool sets, one definition for TRL and verl: each tool is one turn of a
:class:`tpo_gym.envs.multiturn.MultiTurnEnv`, written in the env's own tags.

TRL 1.16's ``environment_factory`` (``GRPOTrainer(environment_factory=...)`` and
:class:`~tpo_agents.integrations.trl.TargetPOTrainer`) builds one of these per rollout, exposes its public
methods as tools (JSON schemas from their type hints and docstrings), calls ``reset(**row)`` with the
dataset row before each rollout and ``get_reward()`` once the rollout is over, and masks each tool's reply
out of the loss (``tool_mask``; :class:`TargetPOTrainer` reads it as GRPO does). verl's ``ToolAgentLoop``
calls the same methods through :class:`tpo_agents.integrations.verl.tools.EnvTool`.

* :class:`GuessNumberTools` (``TPO/GuessNumber-v0``): ``guess(number)`` plays ``<guess>number</guess>``;
* :class:`CalculatorTools` (``TPO/Calculator-v0``): ``calculate(expression)`` plays
  ``<calc>expression</calc>`` and ``answer(value)`` plays ``<answer>value</answer>``, which ends the episode.

The reply of a tool is the env's reply (``higher``, ``56088``, ``correct``, or what was wrong); a tool
called after the episode ended changes nothing and says so. ``get_reward`` is the episode's return so far
(1.0 once solved). :func:`environment_dataset` gives the prompts: one row per task, the env's prompt and
a line on the tools as the user message, and the task's ``context`` (``reset`` replays it), drawn from a
seed. TRL parses tool calls for the chat templates it knows (Qwen2.5, Qwen3, Llama 3.1, ...), not
SmolLM2's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

import tpo_gym  # noqa: F401  (registers the envs)
from tpo_gym.envs.multiturn import MultiTurnEnv

ENDED = "The episode has ended; nothing was played."
"""A tool's reply after the episode ended."""


class MultiTurnTools:
    """One episode of a multi-turn ``TPO/`` env for TRL (a subclass adds the env's tools).

    :param env_kwargs: the env's keyword arguments (``max_turns``, ...)
    """

    env_id: ClassVar[str]
    #: The names of the methods that are tools (each plays one turn).
    tools: ClassVar[tuple[str, ...]]
    #: Appended to the env's prompt in :func:`environment_dataset`: the env's prompt names its tags.
    instruction: ClassVar[str]

    def __init__(self, **env_kwargs: Any) -> None:
        env = gym.make(self.env_id, **env_kwargs).unwrapped
        if not isinstance(env, MultiTurnEnv):
            raise TypeError(f"{self.env_id} is not a multi-turn env")
        self._env = env
        self._reward = 0.0
        self._done = True

    def reset(self, context: int, **row: Any) -> None:
        """Start the episode of task ``context`` (a dataset column); the prompt is the dataset's."""
        self._env.reset(options={"context": int(context)})
        self._reward, self._done = 0.0, False

    def get_reward(self) -> float:
        """The episode's return so far: 1.0 once the task is solved, else 0.0."""
        return self._reward

    @property
    def done(self) -> bool:
        """Whether the episode has ended (solved, answered or at its turn limit)."""
        return self._done

    def _play(self, action: str) -> str:
        """One turn of the env with ``action``; its reply."""
        if self._done:
            return ENDED
        _, reward, terminated, truncated, info = self._env.step(action)
        self._reward += float(reward)
        self._done = terminated or truncated
        return str(info["reply"])


class GuessNumberTools(MultiTurnTools):
    """``TPO/GuessNumber-v0`` for TRL: one tool, :meth:`guess`."""

    env_id = "TPO/GuessNumber-v0"
    tools = ("guess",)
    instruction = "Play each guess by calling the guess tool."

    def guess(self, number: int) -> str:
        """Guess the hidden number; the reply is higher, lower or correct.

        Args:
            number: a whole number in the range the task gives
        """
        return self._play(f"<guess>{number}</guess>")


class CalculatorTools(MultiTurnTools):
    """``TPO/Calculator-v0`` for TRL: :meth:`calculate` and :meth:`answer`."""

    env_id = "TPO/Calculator-v0"
    tools = ("calculate", "answer")
    instruction = "Call the calculate tool to compute and the answer tool to answer."

    def calculate(self, expression: str) -> str:
        """Compute an arithmetic expression exactly; the reply is its value.

        Args:
            expression: whole numbers, + - * / ^ and parentheses, e.g. 12 * (3 + 4)
        """
        return self._play(f"<calc>{expression}</calc>")

    def answer(self, value: int) -> str:
        """Give the final answer, which ends the episode; the reply is correct or incorrect.

        Args:
            value: the product asked for
        """
        return self._play(f"<answer>{value}</answer>")


TOOL_SETS: dict[str, type[MultiTurnTools]] = {tools.env_id: tools
                                              for tools in (GuessNumberTools, CalculatorTools)}
"""The tool set of each multi-turn env, by env id."""


def task_prompts(tools: type[MultiTurnTools], n: int, seed: int = 0,
                 **env_kwargs: Any) -> list[tuple[int, str]]:
    """``n`` tasks of ``tools``' env drawn with ``seed``: each its context and its prompt, the env's
    prompt then ``tools.instruction``."""
    env = gym.make(tools.env_id, **env_kwargs).unwrapped
    contexts = env.task.sample_contexts(np.random.default_rng(seed), n)
    return [(int(c), f"{env.task.prompt(int(c))}\n\n{tools.instruction}") for c in contexts]


def environment_dataset(tools: type[MultiTurnTools], n: int, seed: int = 0, **env_kwargs: Any) -> Any:
    """A ``datasets.Dataset`` of :func:`task_prompts`: ``prompt`` (one user message) and ``context`` (the
    task, which ``reset`` replays)."""
    from datasets import Dataset

    tasks = task_prompts(tools, n, seed, **env_kwargs)
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": text}] for _, text in tasks],
                              "context": [context for context, _ in tasks]})
