"""Text RLVR tasks from reasoning-gym: the observation is a prompt, the action is a completion.

One step per episode: ``reset`` shows the prompt of a dataset item (its ``question`` plus
:data:`FORMAT_INSTRUCTION`, no chat template: that belongs to the policy), ``step(completion)``
scores the completion with the item's own verifier and ends the episode.

Scoring (:func:`score_completion`): the answer is the text inside the last
``<answer>...</answer>`` of the completion, whitespace stripped. Without such a tag the format was
not followed and the reward is 0.0; otherwise the reward is the dataset's ``score_answer(answer,
entry)`` in [0, 1] (``reward="native"``). Many native scores give partial credit (the default
verifier gives ``len(gold) / len(answer)`` when the gold string is a substring of the answer, so
gold "3" answered "1234" scores 0.25: digit spam pays). ``reward="binary"`` is the honest reward:
1.0 if the native score is >= 0.99, else 0.0.

Splits (:mod:`tpo_gym.envs.splits`): ``"train"`` (``size`` items), ``"validation"`` and ``"test"``
(``eval_size`` items each) share no question: the split of an item is a stable hash of its question and
the dataset seed (each held-out split owns 10% of the question space), the generator's items
(``reasoning_gym.create_dataset(name, seed=seed, **config)``) are read in index order until every split
is full, and each held-out question is kept once. A config whose question space is too small to hold
out ``eval_size`` questions is a ``ValueError`` (two one-digit terms give 121 questions: widen the
config). The same seed gives the same items in the same order. A context is the index of an item
*within its split*, ``0..num_items-1``. Every item is generated when the env is built (the charset
needs every prompt), which is quick for most datasets and a few seconds for slow generators
(``knights_knaves`` ~1.5 ms an item).

reasoning-gym is imported lazily, when an env is built, so ``import tpo_gym`` does not need it.

``dataset="gsm8k"`` (``TPO/GSM8K-v0``) reads GSM8K from ``data_file=`` or the Hugging Face cache instead
(:mod:`tpo_gym.envs.gsm8k`: ``size``/``eval_size`` cap the splits, None = all; the score is the exact
match of the answer's final number). Its answers are read as verl's GSM8K reward reads them by default
(``answer_format="strict"``: ``#### N``; ``"flexible"``: the last number), with verl's prompt
instruction; its splits are ``"train"`` and ``"test"`` (GSM8K's own, or ``eval_size`` items after the
train items of one file), it has no ``"validation"`` split; ``answer_format="tag"`` uses the tags and
:data:`FORMAT_INSTRUCTION` above.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from tpo_gym.envs.gsm8k import GSM8K, VERL_INSTRUCTION, GSM8KDataset, load_items, read_answer
from tpo_gym.envs.splits import MAX_DRAWS_PER_ITEM, SPLITS, disjoint_splits
from tpo_gym.vector import (
    GroupedVectorEnv,
    _with_masks,
    check_choice,
    check_int,
    check_int_array,
    readonly,
    reset_context,
    uniform_ints,
)

__all__ = ["FORMAT_INSTRUCTION", "REWARDS", "SPLITS", "SUCCESS_THRESHOLD", "ReasoningGymTask", "TextEnv",
           "TextVectorEnv", "answer_reader", "extract_answer", "extract_tag", "score_completion"]

FORMAT_INSTRUCTION = "\n\nThink briefly, then give only the final answer inside <answer></answer> tags."
REWARDS = ("native", "binary")
SUCCESS_THRESHOLD = 0.99
MISSING_REASONING_GYM = "the text envs need reasoning-gym: pip install 'tpo-gym[llm]'"



def import_reasoning_gym() -> Any:
    """The ``reasoning_gym`` module, or ``ModuleNotFoundError`` saying how to install it."""
    try:
        import reasoning_gym
    except ImportError as err:
        raise ModuleNotFoundError(MISSING_REASONING_GYM) from err
    return reasoning_gym


@functools.cache
def _tag_re(tag: str) -> re.Pattern[str]:
    """``<tag>body</tag>`` whose body holds no other opening ``<tag>`` (so an unclosed earlier ``<tag>``
    does not swallow the real one); for ``answer`` otherwise as reasoning_gym.utils.extract_answer."""
    tag = re.escape(tag)
    return re.compile(rf"<{tag}>((?:(?!<{tag}>).)*?)</{tag}>", re.DOTALL)


def extract_tag(text: str, tag: str) -> str | None:
    """The stripped text inside the last ``<tag>...</tag>`` of ``text``, or ``None``."""
    matches = _tag_re(tag).findall(text)
    return matches[-1].strip() if matches else None


def extract_answer(completion: str) -> str | None:
    """The stripped text inside the last ``<answer>...</answer>`` of ``completion``, or ``None``."""
    return extract_tag(completion, "answer")


def answer_reader(dataset: Any) -> tuple[str, Callable[[str], str | None]]:
    """``(instruction appended to each question, answer reader)`` of a dataset: :data:`FORMAT_INSTRUCTION`
    and :func:`extract_answer`, except for GSM8K read as verl reads it (``answer_format`` ``"strict"`` or
    ``"flexible"``: verl's instruction and :func:`tpo_gym.envs.gsm8k.read_answer`)."""
    if isinstance(dataset, GSM8KDataset) and dataset.answer_format != "tag":
        fmt = dataset.answer_format
        return VERL_INSTRUCTION, lambda completion: read_answer(completion, fmt)
    return FORMAT_INSTRUCTION, extract_answer


def score_completion(dataset: Any, entry: dict[str, Any], completion: str,
                     reward: str = "native") -> tuple[float, str | None, bool]:
    """Score one completion against one reasoning-gym item: ``(score, answer, format_ok)``.

    ``answer`` is the completion's answer as the dataset's :func:`answer_reader` reads it
    (:func:`extract_answer`: the last ``<answer>`` tag; GSM8K: ``#### N`` by default); ``format_ok`` is
    whether it has one (if not, the score is 0.0). ``score`` is ``dataset.score_answer(answer, entry)``
    for ``reward="native"``, or 1.0 / 0.0 as that score is >= ``SUCCESS_THRESHOLD`` or not for
    ``reward="binary"``. A verifier that raises on a malformed answer scores it 0.0.
    """
    check_choice("reward", reward, REWARDS)
    answer = answer_reader(dataset)[1](completion)
    if answer is None:
        return 0.0, None, False
    try:
        score = float(dataset.score_answer(answer, entry))
    except Exception:  # a verifier crashing on model output must not stop training
        score = 0.0
    if reward == "binary":
        score = 1.0 if score >= SUCCESS_THRESHOLD else 0.0
    return score, answer, True


def _object_array(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (never split into more dims, even for list values)."""
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def _check_completions(completions: Any, n: int) -> list[str]:
    if isinstance(completions, (str, bytes)) or not hasattr(completions, "__len__"):
        raise ValueError(f"completions must be a sequence of {n} strings, got {type(completions).__name__}")
    if np.ndim(completions) > 1 or len(completions) != n:
        raise ValueError(f"expected {n} completions, got {len(completions)}")
    completions = list(completions)
    for i, completion in enumerate(completions):
        if not isinstance(completion, str):
            raise ValueError(f"completions[{i}] must be a str, got {type(completion).__name__}")
    return completions


def _create_dataset(name: Any, size: int, seed: int, config: dict[str, Any]) -> Any:
    """``reasoning_gym.create_dataset`` with one-line ``ValueError``s for bad names and configs."""
    reasoning_gym = import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    if not isinstance(name, str) or name not in DATASETS:
        names = sorted(DATASETS)
        close = difflib.get_close_matches(str(name), names, n=3)
        examples = close or ["basic_arithmetic", "chain_sum", "graph_color", "gsm_symbolic", "knights_knaves"]
        hint = "dataset=<name> is required" if name is None else f"unknown reasoning-gym dataset {name!r}"
        raise ValueError(f"{hint}; valid names include {', '.join(examples)} ({len(names)} in "
                         f"reasoning_gym.factory.DATASETS)")
    config_fields = {field.name for field in dataclasses.fields(DATASETS[name][1])} - {"size", "seed"}
    unknown = sorted(set(config) - config_fields)
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(unknown)} for reasoning-gym dataset {name!r}; "
                         f"valid keys: {', '.join(sorted(config_fields))}")
    try:
        return reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except (AssertionError, TypeError, ValueError) as err:
        message = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(f"invalid config {config!r} for reasoning-gym dataset {name!r}: {message}") from err


class ReasoningGymTask:
    """One split of a reasoning-gym dataset: prompts, verifier, spaces and batched scoring.

    Arguments are those of :class:`TextEnv`. Attributes: ``dataset`` (the reasoning-gym
    ``ProceduralDataset`` the splits were drawn from), ``name``, ``split``, ``reward``,
    ``num_items`` (items in the split),
    ``charset`` (str), ``observation_space`` and ``action_space`` (``spaces.Text``).
    """

    def __init__(self, dataset: str | None = None, split: str = "train", size: int = 1000,
                 eval_size: int = 200, seed: int = 0, reward: str = "native", max_prompt_chars: int = 4096,
                 max_completion_chars: int = 4096, **dataset_kwargs: Any) -> None:
        self.split = check_choice("split", split, SPLITS)
        self.reward = check_choice("reward", reward, REWARDS)
        seed = check_int("seed", seed, 0)
        max_prompt_chars = check_int("max_prompt_chars", max_prompt_chars, 1)
        max_completion_chars = check_int("max_completion_chars", max_completion_chars, 1)
        if dataset == GSM8K:  # read from a file or the HF cache, not generated (tpo_gym.envs.gsm8k)
            if split == "validation":
                raise ValueError("split='validation': GSM8K has a train and a test split only")
            fmt = dataset_kwargs.pop("answer_format", "strict")
            self.dataset = GSM8KDataset(*load_items(size, eval_size, **dataset_kwargs), fmt)
            items = self.dataset.items
            splits = {"train": items[:self.dataset.n_train], "test": items[self.dataset.n_train:]}
            if not splits[split]:
                raise ValueError(f"the GSM8K {split} split has no items (size={size}, eval_size={eval_size})")
        else:
            size = check_int("size", size, 1)
            eval_size = check_int("eval_size", eval_size, 1 if split != "train" else 0)
            draws = MAX_DRAWS_PER_ITEM * (size + 2 * eval_size)
            self.dataset = _create_dataset(dataset, draws, seed, dataset_kwargs)
            splits = disjoint_splits(self.dataset.__getitem__, draws, size, eval_size, seed, dataset)
        self.name: str = dataset  # type: ignore[assignment]
        self._items = splits[split]
        self.num_items = len(self._items)
        # Every item of every split: the charset, and so the spaces, are the same for any split.
        every_item = [entry for items in splits.values() for entry in items]
        instruction = answer_reader(self.dataset)[0]
        self._texts = [item["question"] + instruction for item in self._items]
        longest = max(len(item["question"] + instruction) for item in every_item)
        if longest > max_prompt_chars:
            raise ValueError(f"the longest prompt of dataset {dataset!r} has {longest} characters, more than "
                             f"max_prompt_chars={max_prompt_chars}; raise max_prompt_chars")
        chars = set(string.printable).union(*(set(item["question"] + instruction) for item in every_item))
        self.charset = "".join(sorted(chars))
        self.observation_space = spaces.Text(max_length=max_prompt_chars, charset=self.charset)
        self.action_space = spaces.Text(max_length=max_completion_chars, min_length=0, charset=self.charset)

    def entry(self, context: int) -> dict[str, Any]:
        """The reasoning-gym item (``question``, ``answer``, ``metadata``) of a context."""
        return self._items[int(context)]

    def prompt(self, context: int) -> str:
        """The prompt of a context: the item's question plus its format's instruction (:func:`answer_reader`:
        ``FORMAT_INSTRUCTION``, or verl's for GSM8K)."""
        return self._texts[int(context)]

    def prompts_of(self, contexts: np.ndarray) -> np.ndarray:
        """Object array [n] of the prompts of contexts [n]."""
        return _object_array([self.prompt(c) for c in contexts])

    def ground_truths_of(self, contexts: np.ndarray) -> np.ndarray:
        """Object array [n] of the items' ``answer`` fields (``None`` for tasks without one)."""
        return _object_array([self.entry(c)["answer"] for c in contexts])

    def sample_contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` item indices of the split, uniform with replacement, int64 [n]."""
        return uniform_ints(rng, self.num_items, n)

    def check_contexts(self, contexts: Any) -> np.ndarray:
        """Validate a 1-d batch of item indices and return a fresh int64 array."""
        return check_int_array("contexts", contexts, self.num_items, 1)

    def score_completions(self, contexts: Any, completions: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Score completions [n] at contexts [n]: ``(scores float32, answers object, format_ok bool)``."""
        scores, answers, format_ok = self._score(self.check_contexts(contexts), completions)
        return scores.astype(np.float32), answers, format_ok

    def _score(self, contexts: np.ndarray, completions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        completions = _check_completions(completions, len(contexts))
        results = [score_completion(self.dataset, self.entry(c), text, self.reward)
                   for c, text in zip(contexts, completions, strict=True)]
        scores = np.array([r[0] for r in results], dtype=np.float64)
        return scores, _object_array([r[1] for r in results]), np.array([r[2] for r in results], dtype=bool)

    def final_info(self, contexts: np.ndarray, completions: Sequence[str]) -> dict[str, np.ndarray]:
        """Step info of completions [n] at contexts [n], as arrays (see :class:`TextVectorEnv`)."""
        scores, answers, format_ok = self._score(contexts, completions)
        return {"answer": answers, "format_ok": format_ok, "ground_truth": self.ground_truths_of(contexts),
                "score": scores.astype(np.float32), "is_success": scores >= SUCCESS_THRESHOLD,
                "context": contexts.copy()}


class TextEnv(gym.Env):
    """Answer one reasoning-gym question per episode (text RLVR, a single step).

    Observation: ``spaces.Text(max_length=max_prompt_chars, charset=task.charset)``, the item's
    ``question`` + :data:`FORMAT_INSTRUCTION` (GSM8K: its format's, :func:`answer_reader`). The
    charset is ``string.printable`` plus every character in the prompts of the dataset (every split),
    so every prompt and any printable completion fit. Action:
    ``spaces.Text(max_length=max_completion_chars, min_length=0)``, the completion; ``step`` scores
    any ``str`` in full, including characters outside the charset and text beyond
    ``max_completion_chars`` (the limit only bounds the space).
    Reward: :func:`score_completion` (native or binary). Termination: after the one step
    (``terminated=True``, never truncated); the observation returned by ``step`` is the same prompt.
    Info: reset holds ``context`` (item index in the split); step holds ``answer`` (str, or
    ``None`` when the format was not followed), ``format_ok``, ``ground_truth`` (the item's ``answer``),
    ``score`` (= the reward), ``is_success`` (score >= 0.99) and ``context``.
    ``reset(options={"context": i})`` replays item ``i``; otherwise an item of the split is drawn
    uniformly from ``self.np_random``. ``score_completions(contexts, completions)`` scores
    without stepping.

    Arguments: ``dataset`` (a reasoning-gym name, required), ``split`` in ``SPLITS``, ``size``
    (train items, default 1000), ``eval_size`` (items of the validation and of the test split, default
    200), ``seed`` (dataset seed,
    default 0), ``reward`` in ``REWARDS``, ``max_prompt_chars`` and ``max_completion_chars``
    (default 4096); any other keyword is a config field of the dataset (e.g. ``min_terms=2``).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, dataset: str | None = None, split: str = "train", size: int = 1000,
                 eval_size: int = 200, seed: int = 0, reward: str = "native", max_prompt_chars: int = 4096,
                 max_completion_chars: int = 4096, **dataset_kwargs: Any) -> None:
        self.task = ReasoningGymTask(dataset, split, size, eval_size, seed, reward, max_prompt_chars,
                                     max_completion_chars, **dataset_kwargs)
        self.observation_space = self.task.observation_space
        self.action_space = self.task.action_space
        self._context: int | None = None
        self._done = False

    @property
    def context(self) -> int | None:
        """Item index of the current episode (``None`` before the first reset)."""
        return self._context

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on a uniformly drawn item, or on ``options["context"]``."""
        super().reset(seed=seed)
        context = reset_context(options, self.np_random, self.task.num_items)
        self._context, self._done = context, False
        return self.task.prompt(self._context), {"context": self._context}

    def step(self, completion: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Score ``completion``: ``(prompt, reward, True, False, info)``."""
        if self._context is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode ended after its one step; call reset()")
        (completion,) = _check_completions([completion], 1)
        entry = self.task.entry(self._context)
        score, answer, format_ok = score_completion(self.task.dataset, entry, completion, self.task.reward)
        self._done = True
        info = {"answer": answer, "format_ok": format_ok, "ground_truth": entry["answer"], "score": score,
                "is_success": score >= SUCCESS_THRESHOLD, "context": self._context}
        return self.task.prompt(self._context), score, True, False, info

    def score_completions(self, contexts: Any, completions: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Batched scoring without stepping; see :meth:`ReasoningGymTask.score_completions`."""
        return self.task.score_completions(contexts, completions)


class TextVectorEnv(GroupedVectorEnv):
    """``num_envs`` :class:`TextEnv` episodes as one batch, with groups and same-step autoreset.

    ``reset`` returns ``(obs, infos)``: obs an object array [n] of prompt strings, infos a dict of
    arrays with ``context`` (int64 [n]) and its ``_context`` mask. ``step(completions)`` takes a
    sequence of ``num_envs`` strings and returns ``(obs, rewards float32 [n], terminated (all
    True), truncated (all False), infos)``: every episode ends, and (``SAME_STEP`` autoreset) obs
    already holds the prompts of the next items, ``infos["context"]`` their indices,
    ``infos["final_obs"]`` the prompts just answered and ``infos["final_info"]`` a dict of arrays
    (``answer``, ``format_ok``, ``ground_truth``, ``score``, ``is_success``, ``context``), each key
    with its ``_`` mask.

    Groups: the resets of :class:`tpo_gym.vector.GroupedVectorEnv` (``options={"group_size": G}``
    or ``{"contexts": item indices}``; default group size: the ``group_size`` argument).
    ``contexts`` (read-only int64 [n]) are the current item indices;
    ``score_completions(contexts, completions)`` scores without stepping. Other keywords are
    those of :class:`TextEnv`.
    """

    def __init__(self, num_envs: int, group_size: int = 1, max_episode_steps: int | None = None,
                 **kwargs: Any) -> None:
        self.num_envs = check_int("num_envs", num_envs, 1)
        if max_episode_steps is not None:
            check_int("max_episode_steps", max_episode_steps, 1)
        self.default_group_size = self._check_group_size(group_size)
        self.group_size = self.default_group_size
        self.task = ReasoningGymTask(**kwargs)
        self.render_mode = None
        self.single_observation_space = self.task.observation_space
        self.single_action_space = self.task.action_space
        self.observation_space = batch_space(self.task.observation_space, self.num_envs)
        self.action_space = batch_space(self.task.action_space, self.num_envs)
        self._contexts: np.ndarray | None = None

    @property
    def contexts(self) -> np.ndarray:
        """Read-only item indices of the current episodes, int64 [num_envs]."""
        if self._contexts is None:
            raise RuntimeError("call reset() first")
        return readonly(self._contexts)

    def _start(self, contexts: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        self._contexts = contexts
        return self.task.prompts_of(contexts), {"context": contexts.copy()}

    def step(self, completions: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                         dict[str, Any]]:
        """Score one completion per sub-env and autoreset; see the class docstring."""
        if self._contexts is None:
            raise RuntimeError("call reset() before step()")
        n = self.num_envs
        final_info = self.task.final_info(self._contexts, _check_completions(completions, n))
        final_obs = self.task.prompts_of(self._contexts)
        rewards = final_info["score"].copy()
        obs, reset_info = self._begin()
        infos = _with_masks(reset_info, n)
        infos.update(_with_masks({"final_obs": final_obs, "final_info": _with_masks(final_info, n)}, n))
        return obs, rewards, np.ones(n, dtype=bool), np.zeros(n, dtype=bool), infos

    def score_completions(self, contexts: Any, completions: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Batched scoring without stepping; see :meth:`ReasoningGymTask.score_completions`."""
        return self.task.score_completions(contexts, completions)
