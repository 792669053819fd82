"""Text RLVR envs on reasoning-gym tasks (``tpo_gym.envs.text``): scoring, splits, groups, autoreset."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import tpo_gym
from tpo_gym.envs.splits import HELD_OUT_SHARE, split_of
from tpo_gym.envs.text import (
    FORMAT_INSTRUCTION,
    TextEnv,
    TextVectorEnv,
    extract_answer,
    score_completion,
)

pytest.importorskip("reasoning_gym")

SMALL = {"size": 40, "eval_size": 10}
ARITH = {"dataset": "basic_arithmetic", "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
         **SMALL}


def tagged(answer: str) -> str:
    return f"Let me think. <answer> {answer} </answer>"


@pytest.fixture(scope="module")
def arith() -> TextEnv:
    return TextEnv(**ARITH)


def test_import_is_light() -> None:
    code = ("import sys, tpo_gym, tpo_gym.envs.text; "
            "print([m for m in ('reasoning_gym', 'transformers', 'tpo_agents', 'torch')"
            " if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_extract_answer_takes_the_last_tag() -> None:
    assert extract_answer("<answer>1</answer> no, <answer> 2 </answer>") == "2"
    assert extract_answer("<answer>1 <answer>2</answer>") == "2"
    assert extract_answer("<answer>\n  multi\nline </answer>") == "multi\nline"
    assert extract_answer("the answer is 2") is None
    assert extract_answer("<answer>2") is None


def test_right_wrong_and_unformatted_answers(arith: TextEnv) -> None:
    prompt, info = arith.reset(seed=0)
    entry = arith.task.entry(info["context"])
    assert prompt == entry["question"] + FORMAT_INSTRUCTION
    right = str(int(eval(entry["metadata"]["expression"])))  # 1-digit terms, exact division
    assert right == entry["answer"]
    _, reward, terminated, truncated, step_info = arith.step(tagged(right))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert step_info == {"answer": right, "format_ok": True, "ground_truth": right, "score": 1.0,
                         "is_success": True, "context": info["context"]}
    arith.reset(options={"context": info["context"]})
    _, reward, *_, step_info = arith.step(tagged("nope"))
    assert reward == 0.0 and step_info["format_ok"] and not step_info["is_success"]
    arith.reset(options={"context": info["context"]})
    _, reward, *_, step_info = arith.step(f"The answer is {right}.")
    assert reward == 0.0 and step_info["answer"] is None and not step_info["format_ok"]
    with pytest.raises(RuntimeError, match="call reset"):
        arith.step(tagged(right))


def test_last_answer_tag_wins(arith: TextEnv) -> None:
    _, info = arith.reset(seed=1)
    gold = arith.task.entry(info["context"])["answer"]
    _, reward, *_ = arith.step(f"<answer>{gold}</answer> wait, no: <answer>{gold}9</answer>")
    assert reward < 1.0
    arith.reset(options={"context": info["context"]})
    _, reward, *_ = arith.step(f"<answer>{gold}9</answer> wait, no: <answer>{gold}</answer>")
    assert reward == 1.0


def test_binary_vs_native_partial_credit() -> None:
    native, binary = TextEnv(reward="native", **ARITH), TextEnv(reward="binary", **ARITH)
    entry = {**native.task.entry(0), "answer": "3"}
    assert score_completion(native.task.dataset, entry, tagged("1234")) == (0.25, "1234", True)
    assert score_completion(native.task.dataset, entry, tagged("1234"), "binary") == (0.0, "1234", True)
    assert score_completion(native.task.dataset, entry, tagged("3"), "binary") == (1.0, "3", True)
    # through the envs, on a real item: the gold answer with a digit appended is partial credit
    native.reset(options={"context": 0})
    binary.reset(options={"context": 0})
    spam = tagged(native.task.entry(0)["answer"] + "7")
    assert 0.0 < native.step(spam)[1] < 1.0
    assert binary.step(spam)[1] == 0.0


def test_graph_color_valid_and_invalid() -> None:
    env = gym.make("TPO/GraphColor-v0", **SMALL).unwrapped
    _, info = env.reset(seed=0)
    entry = env.task.entry(info["context"])
    valid = json.dumps({str(k): v for k, v in entry["metadata"]["possible_answer"].items()})
    assert env.step(tagged(valid))[1] == 1.0
    env.reset(options={"context": info["context"]})
    invalid = json.dumps({str(v): 1 for v in entry["metadata"]["puzzle"]["vertices"]})
    assert entry["metadata"]["puzzle"]["edges"]  # one colour for all cannot be valid
    _, reward, *_, step_info = env.step(tagged(invalid))
    assert reward == pytest.approx(0.01) and not step_info["is_success"]
    env.reset(options={"context": info["context"]})
    assert env.step(tagged("red, green"))[1] == 0.0


def test_splits_disjoint_and_reproducible() -> None:
    kwargs = {"dataset": "basic_arithmetic", "size": 30, "eval_size": 10}

    def questions(split: str, seed: int = 0) -> list[str]:
        env = TextEnv(split=split, seed=seed, **kwargs)
        return [env.task.entry(i)["question"] for i in range(env.task.num_items)]

    train, validation, test = questions("train"), questions("validation"), questions("test")
    assert (len(train), len(validation), len(test)) == (30, 10, 10)
    assert not set(train) & set(validation) and not set(train) & set(test) and not set(validation) & set(test)
    assert len(set(validation)) == 10 and len(set(test)) == 10  # each held-out question once
    assert questions("train") == train and questions("test") == test
    assert questions("train", seed=1) != train
    for split, held_out in (("validation", validation), ("test", test)):
        assert all(split_of(question, 0) == split for question in held_out)
    assert all(split_of(question, 0) == "train" for question in train)


def test_split_of_is_a_stable_partition() -> None:
    questions = [f"Calculate {a} + {b}." for a in range(40) for b in range(40)]
    splits = [split_of(question, 0) for question in questions]
    assert splits == [split_of(question, 0) for question in questions]
    shares = {split: splits.count(split) / len(splits) for split in ("train", "validation", "test")}
    assert shares["test"] == pytest.approx(HELD_OUT_SHARE, abs=0.02)
    assert shares["validation"] == pytest.approx(HELD_OUT_SHARE, abs=0.02)
    assert [split_of(question, 1) for question in questions] != splits  # the seed draws another partition


def test_a_question_space_too_small_to_hold_out_is_refused() -> None:
    one_digit = {"dataset": "basic_arithmetic", "min_terms": 2, "max_terms": 2, "min_digits": 1,
                 "max_digits": 1, "operators": ("+",), "allow_parentheses": False, "allow_negation": False}
    with pytest.raises(ValueError, match=r"distinct questions of the (validation|test) split .* fewer than "
                                         r"eval_size=64; its question space is too small") as err:
        TextEnv(split="train", size=100, eval_size=64, **one_digit)
    assert "\n" not in str(err.value)
    small = TextEnv(split="test", size=100, eval_size=5, **one_digit)  # 121 questions hold out 5
    assert small.task.num_items == 5


def test_reset_replays_and_draws_uniformly(arith: TextEnv) -> None:
    prompt, info = arith.reset(seed=3)
    assert arith.reset(options={"context": info["context"]}) == (prompt, info)
    assert arith.reset(seed=3) == (prompt, info)
    drawn = {arith.reset()[1]["context"] for _ in range(200)}
    assert drawn <= set(range(40)) and len(drawn) > 30
    with pytest.raises(ValueError, match="options\\['context'\\].*\\[0, 39\\]"):
        arith.reset(options={"context": 40})


def test_charset_covers_prompts_and_any_completion_is_scored() -> None:
    env = TextEnv(dataset="gsm_symbolic", **SMALL)
    assert {"£", "€"} & set(env.task.charset)  # non-printable-ASCII characters of the prompts
    prompt, info = env.reset(seed=0)
    assert env.observation_space.contains(prompt)
    gold = env.task.entry(info["context"])["answer"]
    completion = "→ ✓ " + tagged(gold)
    assert not env.action_space.contains(completion)
    assert env.step(completion)[1] == 1.0


def test_vector_group_resets_and_explicit_contexts() -> None:
    env = TextVectorEnv(8, group_size=4, **ARITH)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, infos = env.reset(seed=0)
    assert obs.shape == (8,) and obs.dtype == object and isinstance(obs[0], str)
    ctx = infos["context"]
    assert infos["_context"].all() and ctx.dtype == np.int64
    assert (ctx[:4] == ctx[0]).all() and (ctx[4:] == ctx[4]).all()
    assert (obs[:4] == obs[0]).all()
    np.testing.assert_array_equal(env.contexts, ctx)
    with pytest.raises(ValueError):
        env.contexts[0] = 1
    obs, infos = env.reset(options={"group_size": 2, "contexts": [5, 6, 7, 8]})
    np.testing.assert_array_equal(infos["context"], [5, 5, 6, 6, 7, 7, 8, 8])
    assert obs[0] == env.task.prompt(5) and obs[7] == env.task.prompt(8)
    with pytest.raises(ValueError, match="expected 4 contexts"):
        env.reset(options={"group_size": 2, "contexts": [1, 2]})
    with pytest.raises(ValueError, match="divisible by group_size=3"):
        env.reset(options={"group_size": 3})


def test_vector_step_same_step_autoreset() -> None:
    env = TextVectorEnv(4, group_size=2, **ARITH)
    obs, infos = env.reset(seed=0, options={"contexts": [1, 2]})
    golds = [env.task.entry(c)["answer"] for c in infos["context"]]
    completions = [tagged(golds[0]), tagged("x"), "no tag", tagged(golds[3])]
    next_obs, rewards, terminated, truncated, infos = env.step(completions)
    assert rewards.dtype == np.float32
    np.testing.assert_array_equal(rewards, [1.0, 0.0, 0.0, 1.0])
    assert terminated.all() and not truncated.any()
    assert infos["_final_obs"].all() and infos["_final_info"].all()
    np.testing.assert_array_equal(infos["final_obs"], obs)
    final = infos["final_info"]
    assert set(final) == {"answer", "format_ok", "ground_truth", "score", "is_success", "context",
                          "_answer", "_format_ok", "_ground_truth", "_score", "_is_success", "_context"}
    assert list(final["answer"]) == [golds[0], "x", None, golds[3]]
    np.testing.assert_array_equal(final["format_ok"], [True, True, False, True])
    assert list(final["ground_truth"]) == golds
    np.testing.assert_array_equal(final["is_success"], [True, False, False, True])
    np.testing.assert_array_equal(final["context"], [1, 1, 2, 2])
    # the autoreset keeps the group size: the next items come in blocks of 2
    ctx = infos["context"]
    assert ctx[0] == ctx[1] and ctx[2] == ctx[3]
    np.testing.assert_array_equal(env.contexts, ctx)
    assert list(next_obs) == [env.task.prompt(c) for c in ctx]
    with pytest.raises(ValueError, match="expected 4 completions, got 3"):
        env.step(completions[:3])
    with pytest.raises(ValueError, match="sequence of 4 strings"):
        env.step("one string")


def test_score_completions_equals_stepping() -> None:
    env = TextVectorEnv(6, group_size=3, **ARITH)
    _, infos = env.reset(seed=4)
    contexts = infos["context"]
    golds = [env.task.entry(c)["answer"] for c in contexts]
    completions = [tagged(golds[0]), tagged(golds[1] + "1"), "none", tagged(golds[3]), "<answer></answer>",
                   tagged("12")]
    scores, answers, format_ok = env.score_completions(contexts, completions)
    assert scores.dtype == np.float32 and answers.dtype == object and format_ok.dtype == bool
    np.testing.assert_array_equal(env.contexts, contexts)  # nothing changed
    _, rewards, _, _, infos = env.step(completions)
    np.testing.assert_array_equal(scores, rewards)
    np.testing.assert_array_equal(scores, infos["final_info"]["score"])
    assert list(answers) == list(infos["final_info"]["answer"])
    np.testing.assert_array_equal(format_ok, infos["final_info"]["format_ok"])
    single = TextEnv(**ARITH)
    for context, completion, score in zip(contexts, completions, scores, strict=True):
        single.reset(options={"context": int(context)})
        assert single.step(completion)[1] == pytest.approx(float(score))
    with pytest.raises(ValueError, match="expected 6 completions, got 2"):
        env.score_completions(contexts, completions[:2])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dataset": "basic_arithmetc"}, "unknown reasoning-gym dataset 'basic_arithmetc'.*basic_arithmetic"),
    ({}, "dataset=<name> is required"),
    ({"dataset": "basic_arithmetic", "min_termz": 2}, "min_termz.*'basic_arithmetic'"),
    ({"dataset": "basic_arithmetic", "min_terms": 5, "max_terms": 2}, "invalid config.*'basic_arithmetic'"),
    ({"dataset": "basic_arithmetic", "split": "eval"}, "split 'eval'.*train, validation, test"),
    ({"dataset": "basic_arithmetic", "reward": "dense"}, "reward 'dense'.*native, binary"),
    ({"dataset": "basic_arithmetic", "size": 0}, "size"),
    ({"dataset": "basic_arithmetic", "split": "test", "eval_size": 0}, "eval_size"),
    ({"dataset": "gsm_symbolic", "max_prompt_chars": 50}, "max_prompt_chars=50"),
])
def test_bad_kwargs_raise_one_line_value_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        TextEnv(**{**SMALL, **kwargs})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("env_id", tpo_gym.TEXT_ENV_IDS)
def test_registered_ids_pass_check_env_and_make_vec(env_id: str, tmp_path) -> None:
    kwargs = {**SMALL, **({"dataset": "basic_arithmetic"} if env_id == "TPO/ReasoningGym-v0" else {})}
    if env_id == "TPO/GSM8K-v0":  # read from a file (tests/tpo_gym/test_gsm8k_env.py), not generated
        rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1\n#### {i + 1}"} for i in range(8)]
        (tmp_path / "gsm8k.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        kwargs = {"data_file": str(tmp_path / "gsm8k.jsonl"), "size": 6, "eval_size": 2}
    env = gym.make(env_id, **kwargs)
    check_env(env.unwrapped, skip_render_check=True)
    vec = gym.make_vec(env_id, num_envs=4, vectorization_mode="vector_entry_point", group_size=2, **kwargs)
    assert isinstance(vec.unwrapped, TextVectorEnv)
    obs, infos = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)
    _, rewards, terminated, _, infos = vec.step(["<answer>0</answer>"] * 4)
    assert rewards.shape == (4,) and terminated.all() and "final_info" in infos


def test_presets_pass_dataset_config_through() -> None:
    env = gym.make("TPO/GraphColor-v0", num_colors=4, **SMALL).unwrapped
    assert env.task.name == "graph_color" and env.task.dataset.config.num_colors == 4
    with pytest.raises(ValueError, match="bogus.*'knights_knaves'"):
        gym.make("TPO/KnightsKnaves-v0", bogus=1, **SMALL)
