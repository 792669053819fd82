"""The multi-turn envs as TRL environments (tpo_agents/integrations/env_tools.py): each tool is
one turn of the env; through ``environment_factory`` TRL's tool loop plays them, masks their replies
(``tool_mask``) and scores each rollout with ``get_reward``, for ``TargetPOTrainer`` and stock
``GRPOTrainer`` alike."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")

import trl  # noqa: E402

from tpo_agents.integrations import trl as tpo_trl  # noqa: E402
from tpo_agents.integrations.env_tools import (  # noqa: E402
    ENDED,
    CalculatorTools,
    GuessNumberTools,
    environment_dataset,
)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
GUESS = {"max_number": 8, "max_turns": 3}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_a_tool_call_is_one_turn_of_the_env() -> None:
    """The tools' replies are the env's replies to the same actions in its tags; after the end, nothing."""
    tools, env = GuessNumberTools(**GUESS), gym.make("TPO/GuessNumber-v0", **GUESS)
    tools.reset(context=4, prompt="ignored")
    env.reset(options={"context": 4})
    for number in (3, 9, 5):
        reply = tools.guess(number)
        assert reply == env.step(f"<guess>{number}</guess>")[4]["reply"]
    assert reply == "correct" and tools.get_reward() == 1.0 and tools.guess(5) == ENDED
    tools.reset(context=0)
    assert tools.get_reward() == 0.0 and [tools.guess(2) for _ in range(4)] == ["lower"] * 3 + [ENDED]

    calculator = CalculatorTools(digits=2, max_turns=3)
    calculator.reset(context=0)  # 10 * 10
    assert calculator.calculate("10 * 10") == "100"
    assert calculator.calculate("1/0").startswith("calculator error")
    assert calculator.answer(100) == "correct" and calculator.get_reward() == 1.0
    calculator.reset(context=0)
    assert calculator.answer(99) == "incorrect" and calculator.get_reward() == 0.0


def test_dataset_rows_are_tasks_the_reset_replays() -> None:
    rows = environment_dataset(CalculatorTools, 6, seed=3, digits=2)
    again = environment_dataset(CalculatorTools, 6, seed=3, digits=2)
    assert rows["context"] == again["context"] and len(set(rows["context"])) > 1
    env = gym.make("TPO/Calculator-v0", digits=2).unwrapped
    for row in rows:
        text = f"{env.task.prompt(row['context'])}\n\n{CalculatorTools.instruction}"
        assert row["prompt"] == [{"role": "user", "content": text}]
    with pytest.raises(TypeError, match="not a multi-turn env"):
        type("Bad", (GuessNumberTools,), {"env_id": "TPO/ReasoningGym-v0"})(dataset="letter_counting")
    held_out = environment_dataset(CalculatorTools, 8, seed=3, digits=2, split="test")
    assert {env.task.split_of(context) for context in held_out["context"]} == {"test"}


def tool_trainer(trainer_class: type, model_dir: str, tmp_path: Path) -> Any:
    """A trainer on ``TPO/GuessNumber-v0`` through ``environment_factory``: the tiny model with TRL's Qwen2.5
    chat template (one TRL parses tool calls of), 2 tasks x K = 2."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.config.max_position_embeddings = 4096  # the tool schemas make the prompts longer than its 256
    config = tpo_trl.TargetPOConfig if trainer_class is tpo_trl.TargetPOTrainer else trl.GRPOConfig
    args = config(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                  save_strategy="no", per_device_train_batch_size=4, num_generations=2,
                  max_completion_length=256, max_steps=1, learning_rate=1e-2, seed=0, disable_tqdm=True)
    return trainer_class(model=model, reward_funcs=None, args=args, processing_class=tokenizer,
                         train_dataset=environment_dataset(GuessNumberTools, 2, **GUESS),
                         environment_factory=lambda: GuessNumberTools(**GUESS))  # fmt: skip


@pytest.mark.parametrize("trainer_class", [tpo_trl.TargetPOTrainer, trl.GRPOTrainer])
def test_trl_plays_the_env_through_tool_calls(tiny_llm_dir: str, tmp_path: Path, trainer_class: type) -> None:
    """With scripted turns (a tool call, then a closing message): TRL runs the tool, puts the env's reply
    between the turns with ``tool_mask`` 0 on exactly its tokens, and the rollout's reward is the env's."""
    trainer = tool_trainer(trainer_class, tiny_llm_dir, tmp_path)
    assert [tool.__name__ for tool in trainer.tools] == ["guess"]
    rows = [trainer.train_dataset[i] for i in (0, 0, 1, 1)]
    hidden = [row["context"] + 1 for row in rows]
    guesses = [hidden[0], hidden[1] % 8 + 1, hidden[2] % 8 + 1, hidden[3]]  # right, wrong, wrong, right
    tokenizer = trainer.processing_class
    turns = []

    def scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        first = not turns
        turns.append(len(prompt_ids))
        texts = ([f'<tool_call>\n{{"name": "guess", "arguments": {{"number": {g}}}}}\n</tool_call><|im_end|>'
                  for g in guesses] if first else ["done<|im_end|>"] * len(prompt_ids))
        return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts], None

    trainer._generate_single_turn = scripted
    batch = trainer._generate_and_score_completions(rows)
    assert turns == [4, 4]
    for row, guess in enumerate(guesses):
        present = batch["completion_mask"][row].bool()
        ids, tool = batch["completion_ids"][row][present], batch["tool_mask"][row][present].bool()
        reply = "correct" if guess == hidden[row] else "higher" if hidden[row] > guess else "lower"
        between = (f"\n<|im_start|>user\n<tool_response>\n{reply}\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n")
        assert tokenizer.decode(ids[~tool]) == between
        assert tokenizer.decode(ids[tool]).endswith("</tool_call><|im_end|>done<|im_end|>")
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    if trainer_class is tpo_trl.TargetPOTrainer:
        torch.testing.assert_close(batch["scores"], rewards)
        trainer.current_gradient_accumulation_steps = 1
        trainer.model.train()
        trainer._compute_loss(trainer.model, batch).backward()
        assert any(p.grad is not None and p.grad.ne(0).any() for p in trainer.model.parameters())
    else:  # GRPO's advantages of the same rewards: (r - mean) / Bessel std of each group of two
        expected = torch.tensor([1.0, -1.0, -1.0, 1.0]) * 0.5 / 0.5**0.5
        torch.testing.assert_close(batch["advantages"], expected, rtol=0, atol=1e-3)
