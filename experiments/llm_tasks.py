"""Measure reasoning-gym tasks for a language-model study before training on them (docs/llm.md).

``python -m experiments.llm_tasks --tasks a,b,c [--prompts 32] [--samples 8] [--config key:value ...]``.

For each task (a preset of :data:`CANDIDATES`, or ``dataset[:key=value[:key=value...]]`` with the
dataset's reasoning-gym config keys; values are Python literals, e.g.
``basic_arithmetic:min_terms=2:operators=('+',)``), on the first ``--prompts`` items of the env's
validation split (``TPO/ReasoningGym-v0``'s ``split="validation"``, which shares no question with the
train split: dataset seed 0, 1,000 train items and 200 items in each held-out split unless the task sets
``size``, ``eval_size`` or ``seed``; :mod:`tpo_gym.envs.splits`):

* the base model, prompted as the zoo prompts it (``zoo_configs/<algo>.yml``, entry ``--env-id``: system
  prompt, prefill, stop string, ``max_new_tokens``, temperature; ``--config key:value`` overrides a
  ``policy_kwargs`` entry, e.g. ``model:DIR`` or ``max_new_tokens:16``), draws K = ``--samples``
  completions of every prompt at its sampling temperature (batched generation, torch seeded with
  ``--seed``), scored by the env's verifier (:func:`tpo_gym.envs.text.score_completion`): pass@1 (= the
  mean binary score, success = native score >= 0.99) and pass@K (:func:`pass_at_k`, the unbiased
  estimator from K samples), the mean native (partial-credit) score, the share of prompts whose K samples
  do not all score the same (binary, native: the groups a group method learns from) and the format rate
  (a closed ``<answer>`` tag);
* without the model, from the task's answers (:func:`shortcut`): for the binary and for the native score,
  the best constant answer on the train split (:func:`best_constant` over :func:`candidate_answers`: the
  most frequent distinct train answers and each answer length's position-wise modal string, a lower
  bound on the best of all strings) and its score on the same held-out prompts: the shortcut a policy
  can learn without the skill, chosen as a user would, on the training data only; beside it the best
  constant of the held-out prompts themselves (chosen on them, :func:`held_out_constant`: what no
  constant beats there); and the entropy (bits) and modal share of the train split's answers.

It prints one Markdown table (a row per task). ``--threads`` torch threads (default 1).
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

CANDIDATES: dict[str, dict[str, Any]] = {
    "letter_counting_1w": {"dataset": "letter_counting", "min_words": 1, "max_words": 1},
    "letter_counting_3w": {"dataset": "letter_counting", "min_words": 3, "max_words": 3},
    "letter_counting_5w": {"dataset": "letter_counting", "min_words": 5, "max_words": 5},
    "basic_arithmetic_add": {"dataset": "basic_arithmetic", "min_terms": 2, "max_terms": 2, "min_digits": 1,
                             "max_digits": 1, "operators": ("+",), "allow_parentheses": False,
                             "allow_negation": False},
    "chain_sum_2x1": {"dataset": "chain_sum", "min_terms": 2, "max_terms": 2, "min_digits": 1,
                      "max_digits": 1},
    "spell_backward_3": {"dataset": "spell_backward", "min_word_len": 3, "max_word_len": 3, "eval_size": 128},
    "spell_backward_4": {"dataset": "spell_backward", "min_word_len": 4, "max_word_len": 4},
    "word_sequence_reversal_2": {"dataset": "word_sequence_reversal", "min_words": 2, "max_words": 2},
    "word_sequence_reversal_3": {"dataset": "word_sequence_reversal", "min_words": 3, "max_words": 3},
    "word_sorting_3": {"dataset": "word_sorting", "min_words": 3, "max_words": 3, "min_word_length": 3,
                       "max_word_length": 6},
    "letter_jumble_3w": {"dataset": "letter_jumble", "min_words": 3, "max_words": 3, "min_word_len": 3,
                         "max_word_len": 6, "min_corruption_level": 0.1, "max_corruption_level": 0.3},
    "basic_arithmetic_add_2d": {"dataset": "basic_arithmetic", "min_terms": 2, "max_terms": 2,
                                "min_digits": 1, "max_digits": 2, "operators": ("+",),
                                "allow_parentheses": False, "allow_negation": False},
    "chain_sum_2x2": {"dataset": "chain_sum", "min_terms": 2, "max_terms": 2, "min_digits": 1,
                      "max_digits": 2},
    "gcd_small": {"dataset": "gcd", "min_value": 1, "max_value": 30},
    "gcd_60": {"dataset": "gcd", "min_value": 1, "max_value": 60},
    "count_bits_small": {"dataset": "count_bits", "min_n": 1, "max_n": 63},
    "count_bits_1023": {"dataset": "count_bits", "min_n": 1, "max_n": 1023, "eval_size": 64},
}
"""Named task configurations (the env's kwargs without ``reward``), measured in docs/llm.md; ``eval_size``
where the question space holds fewer than the default 200 questions per held-out split."""

ENV_ID = "TPO/ReasoningGym-v0"
"""The zoo entry whose prompt settings the measurement uses by default."""
SHORTCUT_CANDIDATES = 200
"""Most frequent distinct train answers :func:`shortcut` tries (besides the position-wise modal strings)."""


# ------------------------------------------------------------------------------------------- statistics
def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct:
    ``1 - C(n - c, k) / C(n, k)`` (the chance that k of the n samples drawn without replacement hold a
    correct one); ``ValueError`` unless ``1 <= k <= n`` and ``0 <= c <= n``."""
    if not all(isinstance(v, int | np.integer) for v in (n, c, k)):
        raise ValueError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must lie in 1..n (n={n} samples)")
    if not 0 <= c <= n:
        raise ValueError(f"c={c} correct samples must lie in 0..n (n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(correct: np.ndarray, k: int) -> float:
    """pass@k averaged over prompts: ``correct`` is a boolean ``[prompts, n]`` array (n samples each)."""
    correct = np.asarray(correct)
    if correct.ndim != 2 or correct.shape[0] == 0 or correct.dtype != bool:
        raise ValueError(f"correct must be a non-empty boolean [prompts, samples] array, got shape "
                         f"{correct.shape} of {correct.dtype}")
    n = correct.shape[1]
    return float(np.mean([pass_at_k(n, int(row.sum()), k) for row in correct]))


def answer_entropy(answers: Sequence[str]) -> float:
    """The entropy in bits of the empirical distribution of ``answers`` (0 for a single value)."""
    if len(answers) == 0:
        raise ValueError("answer_entropy needs at least one answer, got none")
    counts = np.array(list(Counter(answers).values()), dtype=np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum() + 0.0)


def candidate_answers(answers: Sequence[str]) -> list[str]:
    """Constant answers worth trying: the distinct ``answers`` from most to least frequent (ties in order
    of first appearance), then for each answer length L the string whose i-th character is the most
    frequent i-th character of the answers of length L (partial-credit scores that compare positions
    can favour it), each once."""
    if len(answers) == 0:
        raise ValueError("candidate_answers needs at least one answer, got none")
    counts = Counter(answers)
    first = {a: i for i, a in reversed(list(enumerate(answers)))}
    ordered = sorted(counts, key=lambda a: (-counts[a], first[a]))
    by_length: dict[int, list[str]] = {}
    for answer in answers:
        by_length.setdefault(len(answer), []).append(answer)
    modal = ["".join(Counter(a[i] for a in group).most_common(1)[0][0] for i in range(length))
             for length, group in sorted(by_length.items()) if length > 0]
    return list(dict.fromkeys(ordered + modal))


def constant_scores(task: Any, contexts: np.ndarray, answer: str) -> np.ndarray:
    """The native score of answering ``answer`` to every context of ``task`` (a
    :class:`tpo_gym.envs.text.ReasoningGymTask` with ``reward="native"``), as the env scores the
    completion ``<answer>answer</answer>``; float64 ``[len(contexts)]``."""
    from tpo_gym.envs.text import FORMAT_INSTRUCTION, answer_reader

    if answer_reader(task.dataset)[0] != FORMAT_INSTRUCTION:
        raise ValueError(f"task {task.name!r} does not read <answer> tags; constant answers need a tag task")
    if task.reward != "native":
        raise ValueError(f"constant_scores needs a task with reward='native', got reward={task.reward!r}")
    scores, _, _ = task.score_completions(contexts, [f"<answer>{answer}</answer>"] * len(contexts))
    return scores.astype(np.float64)


def best_constant(task: Any, contexts: np.ndarray, candidates: Sequence[str]
                  ) -> dict[str, tuple[str, float]]:
    """The best constant answer among ``candidates`` on ``contexts`` of ``task`` (``reward="native"``) for
    each reward: ``{"binary": (answer, mean binary score), "native": (answer, mean native score)}``; the
    binary score is 1 where the native one is >= :data:`tpo_gym.envs.text.SUCCESS_THRESHOLD`. Ties go
    to the earlier candidate."""
    from tpo_gym.envs.text import SUCCESS_THRESHOLD

    if len(candidates) == 0:
        raise ValueError("best_constant needs at least one candidate answer, got none")
    best: dict[str, tuple[str, float]] = {}
    for answer in candidates:
        native = constant_scores(task, contexts, answer)
        for reward, value in (("native", native.mean()), ("binary", (native >= SUCCESS_THRESHOLD).mean())):
            if reward not in best or value > best[reward][1]:
                best[reward] = (answer, float(value))
    return best


def _constant_candidates(task: Any, contexts: np.ndarray, max_candidates: int) -> list[str]:
    """:func:`candidate_answers` of the answers of ``contexts`` of ``task``, the most frequent distinct
    ones cut to ``max_candidates`` (the position-wise modal strings all kept)."""
    answers = [str(task.entry(c)["answer"]) for c in contexts]
    distinct = len(set(answers))
    candidates = candidate_answers(answers)
    return candidates[:min(max_candidates, distinct)] + candidates[distinct:]


def shortcut(env_kwargs: dict[str, Any], contexts: np.ndarray, split: str = "validation",
             max_candidates: int = SHORTCUT_CANDIDATES) -> dict[str, tuple[str, float]]:
    """The shortcut of a task: for each reward, the constant answer a policy could learn from the train
    split without the skill, and its score on ``contexts`` of the held-out ``split``.

    The constant is :func:`best_constant` on every train item over :func:`candidate_answers` of their
    answers (the ``max_candidates`` most frequent distinct answers and the position-wise modal strings),
    chosen on the training data only, as a user would; its score is then measured on the held-out
    ``contexts``. ``{"binary": (answer, score), "native": (answer, score)}``.
    """
    from tpo_gym.envs.text import SUCCESS_THRESHOLD

    train, held_out = split_task(env_kwargs, "train"), split_task(env_kwargs, split)
    train_contexts = np.arange(train.num_items)
    chosen = best_constant(train, train_contexts, _constant_candidates(train, train_contexts, max_candidates))
    result = {}
    for reward, (answer, _) in chosen.items():
        native = constant_scores(held_out, contexts, answer)
        result[reward] = (answer, float((native >= SUCCESS_THRESHOLD).mean() if reward == "binary"
                                        else native.mean()))
    return result


def held_out_constant(env_kwargs: dict[str, Any], contexts: np.ndarray, split: str = "validation",
                      max_candidates: int = SHORTCUT_CANDIDATES) -> dict[str, tuple[str, float]]:
    """The best constant answer of the held-out prompts themselves: :func:`best_constant` on ``contexts``
    of ``split`` over the candidates of their own answers; fitted to those prompts, it bounds what any
    constant scores there (where the :func:`shortcut` chosen on the train split may fall short)."""
    held_out = split_task(env_kwargs, split)
    return best_constant(held_out, contexts, _constant_candidates(held_out, contexts, max_candidates))


# ------------------------------------------------------------------------------------------- sampling
def sample_completions(policy: Any, task: Any, contexts: np.ndarray, n: int, greedy: bool = False,
                       batch_rows: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` completions of each prompt of ``contexts`` by ``policy`` (an ``LLMPolicy``; greedy or at its
    temperature, torch's global RNG), in generation calls of at most ``batch_rows`` rows, scored by
    ``task`` (``reward="native"``): native scores float64, answers (object, None without a tag) and
    format flags, each ``[len(contexts), n]``."""
    if n < 1 or batch_rows < 1:
        raise ValueError(f"n={n} and batch_rows={batch_rows} must be at least 1")
    per_call = max(1, batch_rows // n)
    scores, answers, format_ok = [], [], []
    for start in range(0, len(contexts), per_call):
        chunk = np.asarray(contexts[start:start + per_call])
        prompts = [str(p) for p in task.prompts_of(chunk)]
        texts = policy.generate(prompts, n, greedy=greedy).texts
        s, a, f = task.score_completions(np.repeat(chunk, n), texts)
        scores.append(s.astype(np.float64).reshape(-1, n))
        answers.append(a.reshape(-1, n))
        format_ok.append(f.reshape(-1, n))
    return np.concatenate(scores), np.concatenate(answers), np.concatenate(format_ok)


def signal_share(scores: np.ndarray) -> float:
    """The share of rows (prompts) of ``scores [prompts, n]`` whose n values are not all equal."""
    scores = np.asarray(scores)
    return float((scores.max(1) > scores.min(1)).mean())


# ------------------------------------------------------------------------------------------- tasks
def _split_top_level(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes, pieces stripped, empty ones dropped."""
    pieces, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == sep and depth == 0:
            pieces.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    pieces.append("".join(current).strip())
    return [p for p in pieces if p]


def _literal(text: str) -> Any:
    """A Python literal (number, tuple, bool, quoted string...), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_task(spec: str) -> tuple[str, dict[str, Any]]:
    """``(label, env kwargs)`` of a task spec: a name of :data:`CANDIDATES`, or
    ``dataset[:key=value[:key=value...]]`` (labelled by the spec itself)."""
    if spec in CANDIDATES:
        return spec, dict(CANDIDATES[spec])
    name, *items = _split_top_level(spec, ":")
    kwargs: dict[str, Any] = {"dataset": name}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"task {spec!r}: {item!r} is not key=value; write dataset:key=value:... or "
                             f"use a preset ({', '.join(CANDIDATES)})")
        kwargs[key.strip()] = _literal(value.strip())
    return spec, kwargs


def parse_config(items: Sequence[str], flag: str = "--config") -> dict[str, Any]:
    """``flag key:value`` items as a dict (values as Python literals where they parse)."""
    config = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon or not key.strip():
            raise ValueError(f"{flag} {item!r}: write key:value (e.g. max_new_tokens:16)")
        config[key.strip()] = _literal(value.strip())
    return config


def zoo_policy_kwargs(algo: str = "tpo", env_id: str = ENV_ID,
                      overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The zoo's ``policy_kwargs`` of ``algo`` on ``env_id`` (``zoo_configs/<algo>.yml``) with
    ``overrides`` on top; ``ValueError`` if that entry's policy is not ``LLMPolicy``."""
    from experiments.zoo import zoo_hyperparams
    from tpo_agents.zoo.hyperparams import algo_kwargs

    values = algo_kwargs(zoo_hyperparams(algo, env_id))
    if values.get("policy") != "LLMPolicy":
        raise ValueError(f"zoo_configs/{algo}.yml, entry {env_id}: policy {values.get('policy')!r}, not "
                         "LLMPolicy; choose an LLM entry (e.g. TPO/ReasoningGym-v0)")
    return {**dict(values.get("policy_kwargs") or {}), **(overrides or {})}


def build_policy(policy_kwargs: dict[str, Any]) -> Any:
    """An ``LLMPolicy`` with ``policy_kwargs`` (as the zoo builds it, without an agent)."""
    from gymnasium import spaces

    from tpo_agents.policies.llm import LLMPolicy

    return LLMPolicy(spaces.Text(1), spaces.Text(1), lambda _: 0.0, **policy_kwargs)


def split_task(env_kwargs: dict[str, Any], split: str = "validation") -> Any:
    """A split (``"train"``, ``"validation"`` or ``"test"``) of the env ``env_kwargs`` describe, as a
    :class:`tpo_gym.envs.text.ReasoningGymTask` scored natively (their ``reward`` and ``split`` are
    ignored)."""
    from tpo_gym.envs.text import ReasoningGymTask

    kwargs = {k: v for k, v in env_kwargs.items() if k not in ("reward", "split")}
    return ReasoningGymTask(split=split, reward="native", **kwargs)


def measure(policy: Any, label: str, env_kwargs: dict[str, Any], n_prompts: int, n_samples: int,
            seed: int = 0, batch_rows: int = 64) -> dict[str, Any]:
    """One row of the table: the base model's scores on the first ``n_prompts`` validation items of the
    task ``env_kwargs`` describe and the task's shortcut (module docstring)."""
    import torch

    start = time.perf_counter()
    task = split_task(env_kwargs, "validation")
    if not 1 <= n_prompts <= task.num_items:
        raise ValueError(f"--prompts {n_prompts}: the validation split of {label!r} has {task.num_items} "
                         "items; use 1..that (or set eval_size)")
    contexts = np.arange(n_prompts)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        native, _, format_ok = sample_completions(policy, task, contexts, n_samples, batch_rows=batch_rows)
    from tpo_gym.envs.text import SUCCESS_THRESHOLD

    correct = native >= SUCCESS_THRESHOLD
    train = split_task(env_kwargs, "train")
    answers = [str(train.entry(i)["answer"]) for i in range(train.num_items)]
    counts = Counter(answers)
    constant = shortcut(env_kwargs, contexts)
    own = held_out_constant(env_kwargs, contexts)
    config = {k: v for k, v in env_kwargs.items() if k != "dataset"}
    return {"task": label, "dataset": env_kwargs["dataset"], "config": config, "prompts": n_prompts,
            "samples": n_samples, "pass@1": mean_pass_at_k(correct, 1),
            f"pass@{n_samples}": mean_pass_at_k(correct, n_samples), "native": float(native.mean()),
            "signal_binary": signal_share(correct.astype(np.float64)), "signal_native": signal_share(native),
            "format_rate": float(format_ok.mean()), "constant_binary": constant["binary"],
            "constant_native": constant["native"], "own_constant_binary": own["binary"],
            "entropy_bits": answer_entropy(answers),
            "mode_share": counts.most_common(1)[0][1] / len(answers), "seconds": time.perf_counter() - start}


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`measure` as one Markdown table."""
    if not rows:
        raise ValueError("markdown_table needs at least one measured task, got none")
    k = rows[0]["samples"]
    head = ["task", "reasoning-gym config", "prompts x samples", "pass@1 (= mean binary)", f"pass@{k}",
            "mean native", "prompts with signal (binary / native)", "format rate",
            "best constant of train, binary: answer (score)",
            "best constant of train, native: answer (score)",
            "held-out prompts' own best constant, binary",
            "train answers: entropy (bits), modal share", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        config = ", ".join(f"{key}={value!r}" for key, value in row["config"].items())
        pass_k = row[f"pass@{row['samples']}"]
        cells = [f"`{row['task']}`", f"`{row['dataset']}` {config}".strip(),
                 f"{row['prompts']} x {row['samples']}",
                 f"{row['pass@1']:.3f}", f"{pass_k:.3f}", f"{row['native']:.3f}",
                 f"{row['signal_binary']:.0%} / {row['signal_native']:.0%}", f"{row['format_rate']:.0%}",
                 f"{_constant(row['constant_binary'])}", f"{_constant(row['constant_native'])}",
                 f"{_constant(row['own_constant_binary'])}",
                 f"{row['entropy_bits']:.2f}, {row['mode_share']:.0%}", f"{row['seconds']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _constant(pair: tuple[str, float]) -> str:
    answer = pair[0].replace("|", "\\|")
    return f"`{answer}` ({pair[1]:.3f})"


def main(argv: list[str] | None = None) -> int:
    """Measure the tasks and print the table; exit status 2 with a one-line error on bad input."""
    parser = argparse.ArgumentParser(prog="python -m experiments.llm_tasks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", required=True,
                        help=f"comma-separated presets ({', '.join(CANDIDATES)}) or dataset:key=value:...")
    parser.add_argument("--prompts", type=int, default=32, help="held-out prompts per task (default 32)")
    parser.add_argument("--samples", type=int, default=8, help="completions per prompt, K (default 8)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY:VALUE",
                        help="override a policy_kwargs entry of the zoo (repeatable), e.g. model:DIR")
    parser.add_argument("--algo", default="tpo", help="the zoo file whose settings prompt (default tpo)")
    parser.add_argument("--env-id", default=ENV_ID, help=f"the zoo entry (default {ENV_ID})")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the sampling (default 0)")
    parser.add_argument("--batch-rows", type=int, default=64,
                        help="most rows per generation call (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    try:
        if args.prompts < 1 or args.samples < 1 or args.batch_rows < 1 or args.threads < 1:
            raise ValueError(f"--prompts {args.prompts}, --samples {args.samples}, --batch-rows "
                             f"{args.batch_rows} and --threads {args.threads} must each be at least 1")
        tasks = [parse_task(spec) for spec in _split_top_level(args.tasks, ",")]
        if not tasks:
            raise ValueError(f"--tasks {args.tasks!r} names no task")
        for _, kwargs in tasks:
            split_task({**kwargs, "size": 1, "eval_size": 1})  # a bad name or config fails before the model
        policy_kwargs = zoo_policy_kwargs(args.algo, args.env_id, parse_config(args.config))
    except (ValueError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    policy = build_policy(policy_kwargs)
    shown = {k: policy_kwargs[k] for k in ("model", "max_new_tokens", "temperature", "prefill", "stop")
             if k in policy_kwargs}
    print(f"policy: {shown}; loaded in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for label, kwargs in tasks:
        rows.append(measure(policy, label, kwargs, args.prompts, args.samples, args.seed, args.batch_rows))
        print(f"measured {label} in {rows[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
