"""One optimizer step of ``TargetPOTrainer`` on the tiny test model with fixed completions, for the
one-process vs two-process (accelerate, gloo) comparison in
``tests/tpo_agents/integrations/test_trl_integration.py``.

``python tests/trl_group_run.py MODEL_DIR OUT_FILE PER_DEVICE_BATCH`` (under ``torchrun`` or
``accelerate launch`` for several processes) trains on prompts x K = 2 completions for one SGD step
(``PER_DEVICE_BATCH`` = 1: each of 2 processes holds half of a group) and rank 0 saves the trained
parameters to ``OUT_FILE``. Completions come from :func:`fixed_rollout`, a pure
function of the prompt and of the completion's index in its group, so every process layout trains on
the same data.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

K = 2
N_PROMPTS = 4


def fixed_rollout(prompts: list[str], trainer: Any) -> dict[str, list]:
    """Completion j of a prompt is ``"ab" * (j + 1)`` + the prompt's last character; reward: its length.

    j is the completion's index in its group over every process: a group spanning processes (fewer
    rows per process than K) starts its count at this process's share.
    """
    tokenizer = trainer.processing_class
    span = K // len(prompts) if len(prompts) < K else 1
    first = (trainer.accelerator.process_index % span) * len(prompts)
    seen: dict[str, int] = {}
    prompt_ids, completion_ids = [], []
    for prompt in prompts:
        j = seen[prompt] = seen.get(prompt, first - 1) + 1
        prompt_ids.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        completion_ids.append(tokenizer("ab" * (j + 1) + prompt[-1], add_special_tokens=False)["input_ids"])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def length_reward(completions: list[str], **_: Any) -> list[float]:
    return [float(len(text)) for text in completions]


def main(model_dir: str, out_file: str, per_device_batch: int) -> None:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tpo_agents.integrations.trl import TargetPOConfig, TargetPOTrainer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    dataset = Dataset.from_dict({"prompt": [f"question {i}: {'xyzw'[i]}" for i in range(N_PROMPTS)]})
    args = TargetPOConfig(
        output_dir=out_file + ".trainer", use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        per_device_train_batch_size=per_device_batch, num_generations=K, max_completion_length=16,
        max_steps=1, optim="sgd", learning_rate=0.5, seed=0, logscore="mean", disable_tqdm=True,
    )  # fmt: skip
    trainer = TargetPOTrainer(
        model=model, reward_funcs=length_reward, args=args, train_dataset=dataset,
        processing_class=tokenizer, rollout_func=fixed_rollout,
    )  # fmt: skip
    trainer.train()
    if trainer.accelerator.is_main_process:
        state = trainer.accelerator.unwrap_model(trainer.model).state_dict()
        torch.save({name: value.detach().cpu() for name, value in state.items()}, out_file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
