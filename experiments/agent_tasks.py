"""Measure a multi-turn env on a language model before training on it (docs/agents.md).

``python -m experiments.agent_tasks --env GuessNumber [--tasks 8] [--samples 8] [--env-kwargs key:value ...]
[--config key:value ...] [--transcripts N]``.

The base model plays ``--tasks`` tasks x ``--samples`` whole conversations of the env
(``TPO/<env>-v0``), prompted and sampled as the zoo's ``tpo`` entry of that env says
(``zoo_configs/tpo.yml``: model, prefill, stop, ``max_new_tokens``, the env's kwargs; ``--config key:value``
overrides a ``policy_kwargs`` entry, e.g. ``model:DIR``, ``--env-kwargs key:value`` an env kwarg),
collected by the ``multiturn`` mode as one training batch would be (torch and the env seeded with
``--seed``; no update). It prints one Markdown table row: the
success rate (pass@1 over the conversations), pass@K (:func:`experiments.llm_tasks.pass_at_k` per task,
K = ``--samples``), the share of tasks whose K conversations do not all end the same (the groups TPO and
GRPO learn from), turns per conversation, the share ended by the turn limit, the share of turns in the
env's format and of turns cut by ``max_new_tokens``, the wall and CPU seconds of the batch, and the env's
shortcut: the best success rate of a
policy that ignores the replies (GuessNumber, :func:`tpo_gym.envs.multiturn.reply_blind_success_rate`) or
of one constant answer without the calculator (Calculator,
:func:`~tpo_gym.envs.multiturn.best_constant_answer`). ``--transcripts N`` also prints the first N
conversations as the model saw them after the prompt (its turns and the env's replies, in the chat
template's text), to see why a setting has no success.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

ENVS = ("GuessNumber", "Calculator")


def env_task(env: str, env_kwargs: dict[str, Any]) -> Any:
    """The :class:`~tpo_gym.envs.multiturn.MultiTurnTask` of ``TPO/<env>-v0`` with ``env_kwargs`` (the
    env's own error for bad kwargs)."""
    import gymnasium as gym

    import tpo_gym  # noqa: F401  (registers the envs)

    return gym.make(f"TPO/{env}-v0", **env_kwargs).unwrapped.task


def shortcut(task: Any) -> tuple[str, float]:
    """A multi-turn task's shortcut: (what it is, its exact success rate)."""
    from tpo_gym.envs import multiturn

    if isinstance(task, multiturn.GuessNumberTask):
        return "reply-blind guesses", multiturn.reply_blind_success_rate(task.max_number, task.max_turns)
    answer, rate = multiturn.best_constant_answer(task.digits)
    return f"constant answer {answer}", rate


def measure(env: str, env_kwargs: dict[str, Any], policy_kwargs: dict[str, Any], n_tasks: int,
            n_samples: int, seed: int, n_transcripts: int = 0) -> dict[str, Any]:
    """One batch of ``n_tasks`` x ``n_samples`` conversations of the base model: the row's values, and
    under ``"transcripts"`` the first ``n_transcripts`` conversations (:func:`transcript`)."""
    import torch

    from experiments.llm_tasks import mean_pass_at_k
    from tpo_agents import TPO

    torch.manual_seed(seed)
    model = TPO("LLMPolicy", f"TPO/{env}-v0", env_kwargs=env_kwargs, batch_size=n_tasks,
                group_size=n_samples, n_epochs=1, seed=seed, policy_kwargs=policy_kwargs)
    model.env.reset()  # the env's first reset takes the seed, as ``learn`` does
    start, cpu_start = time.perf_counter(), time.process_time()
    batch = model.collector()(lambda n: True)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    episodes = batch.conversations
    success = np.array([episode.success for episode in episodes]).reshape(n_tasks, n_samples)
    turns = np.array([episode.turns for episode in episodes], dtype=float)
    name, rate = shortcut(model.vector_env.unwrapped.task)
    return {
        "env": env, "env_kwargs": env_kwargs, "size": f"{n_tasks} x {n_samples}",
        "pass@1": float(success.mean()), f"pass@{n_samples}": mean_pass_at_k(success, n_samples),
        "signal": float((success.any(1) & ~success.all(1)).mean()), "turns": float(turns.mean()),
        "turn_limit": float(np.mean([episode.turn_limit for episode in episodes])),
        "format": 1 - sum(episode.bad_turns for episode in episodes) / turns.sum(),
        "cut": sum(episode.cut_turns for episode in episodes) / turns.sum(),
        "shortcut": f"{name} ({rate:.3g})", "seconds": seconds, "cpu_seconds": cpu_seconds,
        "transcripts": [transcript(model.policy.tokenizer, episode, i // n_samples)
                        for i, episode in enumerate(episodes[:n_transcripts])],
    }  # fmt: skip


def transcript(tokenizer: Any, conversation: Any, task: int) -> str:
    """A conversation of the batch as text: a heading (its task, success, turns) and its tokens after the
    prompt (which ends with the first turn's prefill), decoded with the special tokens: the model's turns
    and the env's replies."""
    head = (f"--- task {task}: {'success' if conversation.success else 'no success'}, "
            f"{conversation.turns} turn(s)")
    return f"{head}\n{tokenizer.decode(conversation.tokens)}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as one Markdown table."""
    k = next(key for key in rows[0] if key.startswith("pass@") and key != "pass@1")
    head = ["env", "kwargs", "tasks x samples", "pass@1", k, "tasks with signal", "turns", "turn limit",
            "format rate", "cut turns", "shortcut (success rate)", "seconds", "CPU s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        kwargs = ", ".join(f"{key}={value}" for key, value in row["env_kwargs"].items()) or "defaults"
        cells = [f"`TPO/{row['env']}-v0`", kwargs, row["size"], f"{row['pass@1']:.3f}", f"{row[k]:.3f}",
                 f"{row['signal']:.0%}", f"{row['turns']:.2f}", f"{row['turn_limit']:.0%}",
                 f"{row['format']:.0%}", f"{row['cut']:.0%}", row["shortcut"], f"{row['seconds']:.0f}",
                 f"{row['cpu_seconds']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from experiments.llm_tasks import parse_config, zoo_policy_kwargs
    from experiments.zoo import zoo_env_kwargs

    parser = argparse.ArgumentParser(prog="python -m experiments.agent_tasks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, help=f"one of {', '.join(ENVS)}")
    parser.add_argument("--tasks", type=int, default=8, help="tasks (groups) in the batch (default 8)")
    parser.add_argument("--samples", type=int, default=8, help="conversations per task, K (default 8)")
    parser.add_argument("--env-kwargs", nargs="*", default=[], metavar="KEY:VALUE",
                        help="env kwargs over the zoo entry's (e.g. digits:2 show_call:False)")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY:VALUE",
                        help="policy_kwargs over the zoo entry's (e.g. model:DIR max_new_tokens:16)")
    parser.add_argument("--seed", type=int, default=0, help="torch's and the env's seed (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--transcripts", type=int, default=0,
                        help="print the first N conversations after the table (default 0)")
    args = parser.parse_args(argv)
    try:
        if args.env not in ENVS:
            raise ValueError(f"--env {args.env}: use one of {', '.join(ENVS)}")
        for name, low in (("tasks", 1), ("samples", 2), ("transcripts", 0)):
            if getattr(args, name) < low:
                raise ValueError(f"--{name} {getattr(args, name)}: use an integer >= {low}")
        env_kwargs = {**zoo_env_kwargs("tpo", f"TPO/{args.env}-v0"),
                      **parse_config(args.env_kwargs, "--env-kwargs")}
        env_task(args.env, env_kwargs)  # the env builds with these kwargs
        policy_kwargs = zoo_policy_kwargs("tpo", f"TPO/{args.env}-v0", parse_config(args.config))
    except (TypeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    row = measure(args.env, env_kwargs, policy_kwargs, args.tasks, args.samples, args.seed, args.transcripts)
    print(markdown_table([row]))
    for text in row["transcripts"]:
        print(f"\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
