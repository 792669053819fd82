"""``python -m experiments.agent_tasks``: a multi-turn env measured on a model before training (the tiny test
model here), its shortcut, and one-line errors."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from experiments import agent_tasks  # noqa: E402
from tpo_gym.envs.multiturn import best_constant_answer, reply_blind_success_rate  # noqa: E402

torch.set_num_threads(1)


def test_shortcuts_are_the_env_s() -> None:
    assert agent_tasks.shortcut("GuessNumber", {"max_number": 8, "max_turns": 3}) == (
        "reply-blind guesses", reply_blind_success_rate(8, 3))
    answer, rate = best_constant_answer(2)
    assert agent_tasks.shortcut("Calculator", {"digits": 2}) == (f"constant answer {answer}", rate)


def test_the_row_counts_the_conversations_of_one_batch(tiny_llm_dir: str) -> None:
    policy = {"model": tiny_llm_dir, "max_new_tokens": 4, "prefill": "<guess>", "stop": "</guess>"}
    row = agent_tasks.measure("GuessNumber", {"max_number": 2, "max_turns": 2}, policy, 3, 4, seed=0)
    assert row["size"] == "3 x 4" and 0 <= row["pass@1"] <= row["pass@4"] <= 1
    assert 1 <= row["turns"] <= 2 and 0 <= row["format"] <= 1 and 0 <= row["cut"] <= 1
    assert row["shortcut"] == "reply-blind guesses (1)"  # 2 numbers in 2 turns: guessing 1 then 2 always wins
    table = agent_tasks.markdown_table([row]).splitlines()
    assert len(table) == 3
    assert table[2].startswith("| `TPO/GuessNumber-v0` | max_number=2, max_turns=2 | 3 x 4 |")


@pytest.mark.parametrize(("argv", "message"), [
    (["--env", "Chess"], "--env Chess: use one of GuessNumber, Calculator"),
    (["--env", "Calculator", "--samples", "1"], "--samples 1: use an integer >= 2"),
    (["--env", "GuessNumber", "--env-kwargs", "max_turns"], "--env-kwargs 'max_turns': write key:value"),
    (["--env", "GuessNumber", "--env-kwargs", "max_turns:0"], "max_turns must be an integer >= 1, got 0"),
])  # fmt: skip
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_tasks.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and len(err.splitlines()) == 1
