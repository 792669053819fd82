"""TPO/GSM8K-v0 (tpo_gym/envs/gsm8k.py) on tiny files written here: reading a local file (JSON lines, JSON,
parquet) or the Hugging Face cache's layout, never the network; the one-line error naming both sources;
the splits; exact match of the final number, read as verl reads it (``#### N``, strict or flexible) or from
``<answer>`` tags, in the env, the TRL reward and the verl reward."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tpo_gym
from tpo_gym.envs import gsm8k
from tpo_gym.envs.text import FORMAT_INSTRUCTION

ROWS = [
    {"question": "Ann has 3 apples and buys 4 more. How many apples?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "A book costs $1,200 and a pen $34. Total?", "answer": "1200 + 34 = 1234\n#### 1,234"},
    {"question": "Half of 5?", "answer": "5 / 2 = 2.5\n#### 2.5"},
    {"question": "Temperature 2 degrees, falls 5. Now?", "answer": "2 - 5 = -3\n#### -3"},
]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture
def data_file(tmp_path: Path) -> str:
    return write_jsonl(tmp_path / "gsm8k.jsonl", ROWS)


@pytest.mark.parametrize(("text", "number"), [
    ("so 3 + 4 = 7", "7"), ("The total is 1,234 dollars.", "1234"), ("42.0", "42"), ("-3", "-3"),
    ("12 apples and 5 pears: 5", "5"), ("no number here", None), (None, None), ("x = .5", "0.5"),
])  # fmt: skip
def test_final_number_by_hand(text, number):
    assert gsm8k.final_number(text) == (None if number is None else Decimal(number).normalize())


def test_exact_match_of_the_final_number():
    entry = {"answer": "1234"}
    assert gsm8k.GSM8KDataset.score_answer("so the total is 1,234", entry) == 1.0
    assert gsm8k.GSM8KDataset.score_answer("1234.00", entry) == 1.0
    assert gsm8k.GSM8KDataset.score_answer("1234 or 1235", entry) == 0.0  # the final number counts
    assert gsm8k.GSM8KDataset.score_answer("12345", entry) == 0.0  # no partial credit for digit spam
    assert gsm8k.GSM8KDataset.score_answer("", entry) == 0.0
    assert gsm8k.gold_number("1200 + 34\n#### 1,234") == "1234"


def test_env_reads_a_local_file_and_scores_tagged_answers(data_file):
    assert "TPO/GSM8K-v0" in tpo_gym.TEXT_ENV_IDS
    env = gym.make("TPO/GSM8K-v0", data_file=data_file, size=3, eval_size=1, answer_format="tag")
    prompt, info = env.reset(options={"context": 1})
    assert prompt.startswith(ROWS[1]["question"]) and "<answer></answer>" in prompt
    _, reward, terminated, _, info = env.step("1200 + 34 = 1234. <answer>1,234</answer>")
    assert reward == 1.0 and terminated and info["ground_truth"] == "1234" and info["format_ok"]
    env.reset(options={"context": 1})
    assert env.step("The total is 1234")[1] == 0.0  # no <answer> tag: format not followed
    evaluation = gym.make("TPO/GSM8K-v0", data_file=data_file, size=3, eval_size=1, split="test").unwrapped
    assert evaluation.task.num_items == 1 and evaluation.task.entry(0)["answer"] == "-3"
    with pytest.raises(Exception, match="options\\['context'\\]"):
        env.reset(options={"context": 3})  # the train split holds items 0..2


def test_vector_env_and_batched_scoring(data_file):
    envs = gym.make_vec("TPO/GSM8K-v0", num_envs=4, data_file=data_file, eval_size=0, answer_format="tag")
    obs, _ = envs.reset(options={"contexts": np.array([0, 1, 2, 3])})
    completions = [f"<answer>{answer}</answer>" for answer in ("7", "1234", "2.50", "3")]
    _, rewards, *_ = envs.step(completions)
    np.testing.assert_array_equal(rewards, [1.0, 1.0, 1.0, 0.0])
    assert len(obs) == 4


def test_json_parquet_and_eval_file(tmp_path, data_file):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "rows.json").write_text(json.dumps(ROWS))
    pq.write_table(pa.Table.from_pylist(ROWS[:2]), tmp_path / "test.parquet")
    train, evals = gsm8k.load_items(data_file=str(tmp_path / "rows.json"),
                                    eval_data_file=str(tmp_path / "test.parquet"))
    assert [item["answer"] for item in train] == ["7", "1234", "2.5", "-3"]
    assert [item["answer"] for item in evals] == ["7", "1234"]
    train, evals = gsm8k.load_items(size=2, eval_size=1, data_file=data_file)
    assert len(train) == 2 and len(evals) == 1 and evals[0]["answer"] == "2.5"


def test_reads_the_hugging_face_cache_layout(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "hub" / "datasets--openai--gsm8k" / "snapshots" / "abc123" / "main"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS[:3]), folder / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[3:]), folder / "test-00000-of-00001.parquet")
    monkeypatch.setattr(gsm8k, "_hub_cache", lambda: str(tmp_path / "hub"))
    env = gym.make("TPO/GSM8K-v0").unwrapped
    assert env.task.num_items == 3 and env.task.dataset.n_eval == 1
    assert env.task.entry(0)["metadata"]["source"] == "openai/gsm8k:train"


def test_neither_source_is_one_line_naming_both(tmp_path, monkeypatch):
    monkeypatch.setattr(gsm8k, "_hub_cache", lambda: str(tmp_path / "empty-hub"))
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", str(tmp_path / "empty-datasets"))
    with pytest.raises(ValueError) as info:
        gym.make("TPO/GSM8K-v0")
    message = str(info.value)
    assert "\n" not in message and "data_file=" in message and "openai/gsm8k" in message
    assert str(tmp_path / "empty-hub") in message


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(data_file="missing.jsonl"), "data_file='missing.jsonl': no such file"),
    (dict(eval_data_file="x.jsonl"), "needs data_file="),
    (dict(size=10, eval_size=1), "has 4 items, fewer than size=10"),
    (dict(size=-1), "size=-1: must be an integer >= 0 or None"),
])  # fmt: skip
def test_bad_sources_are_one_line(data_file, kwargs, message):
    if "data_file" not in kwargs and "eval_data_file" not in kwargs:
        kwargs = {"data_file": data_file, **kwargs}
    with pytest.raises(ValueError, match=message):
        gsm8k.load_items(**kwargs)


def test_bad_rows_and_extensions(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q"}])
    with pytest.raises(ValueError, match="row 0 of .* lacks the GSM8K columns"):
        gsm8k.load_items(data_file=bad)
    no_gold = write_jsonl(tmp_path / "nogold.jsonl", [{"question": "q", "answer": "7"}])
    with pytest.raises(ValueError, match="has no '#### <number>' line"):
        gsm8k.load_items(data_file=no_gold)
    (tmp_path / "rows.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="use a .jsonl, .json or .parquet file"):
        gsm8k.load_items(data_file=str(tmp_path / "rows.csv"))


def test_verl_rows_and_trl_reward_score_gsm8k(data_file):
    from tpo_agents.integrations import verl as tv

    kwargs = {"data_file": data_file, "size": 3, "eval_size": 1, "answer_format": "tag"}
    rows = tv.dataset_rows("TPO/GSM8K-v0", kwargs)
    assert len(rows["train"]) == 3 and len(rows["test"]) == 1
    row = rows["train"][1]
    assert row["data_source"] == "tpo_gym/gsm8k" and row["reward_model"]["ground_truth"] == "1234"
    score = tv.compute_score(row["data_source"], "<answer>1,234</answer>", "1234", row["extra_info"])
    assert score["score"] == 1.0
    pytest.importorskip("trl")
    from tpo_agents.integrations.trl import text_env_reward

    reward = text_env_reward("TPO/GSM8K-v0", **kwargs)
    assert reward(["<answer>7</answer>", "<answer>8</answer>"], context=[0, 0]) == [1.0, 0.0]


VERL_ANSWERS = ["#### 18", "so 9 * 2 = 18\n#### 18", "\\boxed{18}", "The answer is 18.", "The answer is 18",
                "<answer>18</answer>", "#### 1,8", "####18", "#### 17\nno, 18", "#### 18.0", "18 or 17"]
#: (strict, flexible, tag) score of each answer above for the gold number 18.
VERL_SCORES = [(1, 1, 0), (1, 1, 0), (0, 1, 0), (0, 1, 0), (0, 1, 0),
               (0, 1, 1), (1, 1, 0), (0, 1, 0), (0, 1, 0), (1, 1, 0), (0, 0, 0)]


@pytest.mark.parametrize(("completion", "scores"), list(zip(VERL_ANSWERS, VERL_SCORES, strict=True)))
def test_answers_are_read_as_verl_reads_them(tmp_path, completion, scores):
    """strict: the number after the last "#### " (verl's pattern); flexible: the last number; tag: the
    <answer> tags. Numbers compare as decimals with commas removed."""
    path = write_jsonl(tmp_path / "one.jsonl", [{"question": "Twice 9?", "answer": "9 * 2\n#### 18"}])
    for answer_format, expected in zip(gsm8k.ANSWER_FORMATS, scores, strict=True):
        env = gym.make("TPO/GSM8K-v0", data_file=path, answer_format=answer_format)
        env.reset(options={"context": 0})
        _, reward, _, _, info = env.step(completion)
        assert reward == expected, answer_format
        assert info["format_ok"] == (info["answer"] is not None)


def test_the_default_is_verls_strict_format_and_prompt(data_file):
    env = gym.make("TPO/GSM8K-v0", data_file=data_file, eval_size=0).unwrapped
    assert env.task.dataset.answer_format == "strict"
    prompt, _ = env.reset(options={"context": 0})
    verl_instruction = " Let's think step by step and output the final answer after \"####\"."
    assert prompt == ROWS[0]["question"] + verl_instruction
    _, reward, _, _, info = env.step("3 + 4 = 7\n#### 7")
    assert reward == 1.0 and info["answer"] == "7" and info["format_ok"]
    env.reset(options={"context": 0})
    _, reward, _, _, info = env.step("The answer is 7")  # strict: no "#### N", the format was not followed
    assert reward == 0.0 and info["answer"] is None and not info["format_ok"]
    flexible = gym.make("TPO/GSM8K-v0", data_file=data_file, eval_size=0, answer_format="flexible").unwrapped
    assert flexible.task.prompt(0) == prompt
    assert gym.make("TPO/GSM8K-v0", data_file=data_file, answer_format="tag").unwrapped.task.prompt(0) == (
        ROWS[0]["question"] + FORMAT_INSTRUCTION)


def test_read_answer_by_hand():
    assert gsm8k.read_answer("#### 5 then #### -6") == "-6"
    assert gsm8k.read_answer("####6") is None
    assert gsm8k.read_answer("\\boxed{1,234}.", "flexible") == "1,234"
    assert gsm8k.read_answer("no number", "flexible") is None
    with pytest.raises(ValueError, match="answer_format='tag': read_answer reads 'strict' or 'flexible'"):
        gsm8k.read_answer("x", "tag")


def test_an_unknown_answer_format_is_one_line(data_file):
    message = "^unknown answer_format 'boxed'; allowed values: strict, flexible, tag$"
    with pytest.raises(ValueError, match=message):
        gym.make("TPO/GSM8K-v0", data_file=data_file, answer_format="boxed")


def test_trl_and_verl_rewards_score_verls_format_by_default(data_file):
    from tpo_agents.integrations import verl as tv

    kwargs = {"data_file": data_file, "size": 3, "eval_size": 1}
    row = tv.dataset_rows("TPO/GSM8K-v0", kwargs)["train"][0]
    assert row["prompt"][-1]["content"].endswith('final answer after "####".')
    for completion, expected in (("4 = 7\n#### 7", 1.0), ("\\boxed{7}", 0.0), ("<answer>7</answer>", 0.0)):
        assert tv.compute_score(row["data_source"], completion, "7", row["extra_info"])["score"] == expected
    flexible = tv.dataset_rows("TPO/GSM8K-v0", {**kwargs, "answer_format": "flexible"})["train"][0]
    score = tv.compute_score(flexible["data_source"], "\\boxed{7}", "7", flexible["extra_info"])
    assert score["score"] == 1.0
    pytest.importorskip("trl")
    from tpo_agents.integrations.trl import text_env_reward

    reward = text_env_reward("TPO/GSM8K-v0", **kwargs)
    assert reward(["#### 7", "The answer is 7", "<answer>7</answer>"], context=[0, 0, 0]) == [1.0, 0.0, 0.0]
    flexible_reward = text_env_reward("TPO/GSM8K-v0", answer_format="flexible", **kwargs)
    assert flexible_reward(["#### 7", "The answer is 7", "\\boxed{8}"], context=[0, 0, 0]) == [1.0, 1.0, 0.0]
