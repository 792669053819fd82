"""Multi-turn text envs (``tpo_gym.envs.multiturn``): turns, bad actions, baselines, calculator, groups."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import tpo_gym
from tpo_gym.envs.arithmetic import CalculatorError, calculate
from tpo_gym.envs.multiturn import (
    MAX_REPLY_CHARS,
    CalculatorEnv,
    CalculatorVectorEnv,
    GuessNumberEnv,
    GuessNumberVectorEnv,
    best_constant_answer,
    binary_search_success_rate,
    operand_range,
    reply_blind_guesses,
    reply_blind_success_rate,
)
from tpo_gym.envs.text import extract_tag


def play_binary_search(env: GuessNumberEnv, context: int) -> tuple[float, bool, bool, dict]:
    """Halve the numbers still possible until the episode ends; the last step's reward, flags and info."""
    env.reset(options={"context": context})
    low, high = 1, env.task.max_number
    while True:
        guess = (low + high) // 2
        _, reward, terminated, truncated, info = env.step(f"Halving. <guess>{guess}</guess>")
        if terminated or truncated:
            return reward, terminated, truncated, info
        low, high = (guess + 1, high) if info["reply"] == "higher" else (low, guess - 1)


def play_blind(env: GuessNumberEnv, **reset_kwargs) -> bool:
    """Reset, then play :func:`reply_blind_guesses` without reading a reply; solved or not."""
    env.reset(**reset_kwargs)
    for guess in reply_blind_guesses(env.task.max_number, env.task.max_turns):
        _, _, terminated, truncated, info = env.step(f"<guess>{guess}</guess>")
        if terminated or truncated:
            return info["is_success"]
    raise AssertionError("the episode outlived max_turns")


def ask_calculator(env: CalculatorEnv) -> tuple[float, bool, bool, dict]:
    """The scripted tool user: read the question's numbers, call the calculator, answer its result."""
    a, b = env.task.operands(env.context)
    _, _, _, _, info = env.step(f"I use the tool. <calc>{a} * {b}</calc>")
    _, reward, terminated, truncated, info = env.step(f"<answer>{info['reply']}</answer>")
    return reward, terminated, truncated, info


# ------------------------------------------------------------------------------------- registration, spaces

@pytest.mark.parametrize("env_id", tpo_gym.MULTITURN_ENV_IDS)
def test_registered_ids_pass_check_env_and_make_vec(env_id: str) -> None:
    assert env_id not in tpo_gym.ENV_IDS and env_id not in tpo_gym.TEXT_ENV_IDS
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    vec = gym.make_vec(env_id, num_envs=4, vectorization_mode="vector_entry_point", group_size=2)
    assert type(vec.unwrapped).__name__ == type(env.unwrapped).__name__.replace("Env", "VectorEnv")
    assert vec.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, _ = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)
    obs, rewards, terminated, truncated, _ = vec.step(["<answer>1</answer>"] * 4)
    assert vec.observation_space.contains(obs)
    assert rewards.shape == terminated.shape == truncated.shape == (4,)


def test_default_kwargs() -> None:
    guess = gym.make("TPO/GuessNumber-v0").unwrapped.task
    assert (guess.max_number, guess.max_turns, guess.max_action_chars) == (20, 5, 1024)
    calc = gym.make("TPO/Calculator-v0").unwrapped.task
    assert (calc.digits, calc.max_turns, calc.max_action_chars, calc.num_contexts) == (3, 3, 1024, 900**2)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: GuessNumberEnv(max_number=0), "max_number must be an integer >= 1, got 0"),
    (lambda: GuessNumberEnv(max_turns=0), "max_turns must be an integer >= 1, got 0"),
    (lambda: CalculatorEnv(digits=10), r"digits must be an integer in \[1, 9\], got 10"),
    (lambda: CalculatorEnv(max_action_chars=0), "max_action_chars must be an integer >= 1"),
    (lambda: GuessNumberVectorEnv(4, max_episode_steps=3), "max_turns=5 turns; max_episode_steps must be"),
    (lambda: CalculatorVectorEnv(4, group_size=3), "divisible by group_size=3"),
    (lambda: GuessNumberEnv().reset(options={"context": 20}), r"options\['context'\].*\[0, 19\]"),
    (lambda: GuessNumberEnv().reset(options={"hidden": 3}), "unknown reset option"),
])
def test_bad_arguments_raise_one_line_value_errors(make, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_seeded_resets_replay() -> None:
    env = GuessNumberEnv()
    contexts = [env.reset(seed=seed)[1]["context"] for seed in range(40)]
    assert contexts == [GuessNumberEnv().reset(seed=seed)[1]["context"] for seed in range(40)]
    assert len(set(contexts)) > 10
    calc = CalculatorEnv()
    prompt, info = calc.reset(seed=3)
    assert calc.reset(seed=3) == (prompt, info) == calc.reset(options={"context": info["context"]})
    a, b = calc.task.operands(info["context"])
    assert f"What is {a} * {b}?" in prompt and 100 <= min(a, b) and max(a, b) <= 999

    def transcript(seed: int) -> list:
        calc.reset(seed=seed)
        return [calc.step(action) for action in ("<calc>17 * 3</calc>", "hm", "<answer>51</answer>")]

    assert transcript(5) == transcript(5)


def test_extract_tag_takes_the_last_closed_tag() -> None:
    assert extract_tag("<guess>1</guess> no: <guess> 2 </guess>", "guess") == "2"
    assert extract_tag("<guess>1 <guess>2</guess>", "guess") == "2"
    assert extract_tag("<calc>1+1</calc>", "guess") is None
    assert extract_tag("<a.b>x</a.b>", "a.b") == "x" and extract_tag("<axb>x</axb>", "a.b") is None


# ------------------------------------------------------------------------------------------------ GuessNumber

def test_binary_search_finds_every_number_and_ends_the_episode() -> None:
    env = GuessNumberEnv()
    for context in range(20):
        reward, terminated, truncated, info = play_binary_search(env, context)
        assert (reward, terminated, truncated, info["is_success"]) == (1.0, True, False, True)
        assert info["ground_truth"] == context + 1 and info["reply"] == "correct" and info["turn"] <= 5
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("<guess>1</guess>")


@pytest.mark.parametrize(("max_number", "max_turns"), [(20, 5), (40, 5), (7, 2), (1, 1)])
def test_binary_search_success_rate_is_exact(max_number: int, max_turns: int) -> None:
    env = GuessNumberEnv(max_number=max_number, max_turns=max_turns)
    wins = sum(play_binary_search(env, context)[0] for context in range(max_number))
    assert wins / max_number == binary_search_success_rate(max_number, max_turns)


def test_reply_blind_baseline_exact_and_monte_carlo() -> None:
    assert reply_blind_guesses(20, 5) == (1, 2, 3, 4, 5) and reply_blind_success_rate(20, 5) == 0.25
    assert reply_blind_guesses(3, 5) == (1, 2, 3) and reply_blind_success_rate(3, 5) == 1.0
    env = GuessNumberEnv()
    exact = np.mean([play_blind(env, options={"context": c}) for c in range(20)])
    assert exact == reply_blind_success_rate(20, 5)
    episodes = 2000
    wins = play_blind(env, seed=0) + sum(play_blind(env) for _ in range(episodes - 1))
    sd = (0.25 * 0.75 / episodes) ** 0.5
    assert abs(wins / episodes - 0.25) < 4 * sd  # 4 sd: 0.039


def test_turn_limit_truncates() -> None:
    env = GuessNumberEnv(max_turns=3)
    obs, info = env.reset(options={"context": 9})
    assert info == {"context": 9, "turn": 0, "max_turns": 3}
    for turn in (1, 2, 3):
        obs, reward, terminated, truncated, info = env.step("<guess>1</guess>")
        assert (reward, terminated, info["turn"], info["reply"]) == (0.0, False, turn, "higher")
        assert truncated == (turn == 3) and ("ground_truth" in info) == (turn == 3)
    assert info["ground_truth"] == 10 and not info["is_success"]
    assert obs.count("\n\nYou: <guess>1</guess>\nReply: higher") == 3
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("<guess>10</guess>")


@pytest.mark.parametrize(("action", "reply"), [
    ("", "No guess found"), ("I think it is 7.", "No guess found"), ("<guess>7", "No guess found"),
    ("<guess></guess>", "must be a whole number from 1 to 20"), ("<guess>seven</guess>", "must be a whole"),
    ("<guess>7.5</guess>", "must be a whole"), ("<guess>0</guess>", "must be a whole"),
    ("<guess>21</guess>", "must be a whole"), ("<guess>-3</guess>", "must be a whole"),
    pytest.param("<guess>" + "9" * 1000 + "</guess>", "must be a whole", id="1000 digits"),
    ("<guess>\u0667</guess>", "must be a whole"),
    pytest.param("<guess>7</guess>" * 200, "longer than 1024 characters", id="too long"),
])
def test_bad_guesses_get_a_reply_and_count_a_turn(action: str, reply: str) -> None:
    env = GuessNumberEnv(max_number=20, max_turns=2)
    env.reset(options={"context": 6})
    obs, reward, terminated, truncated, info = env.step(action)
    assert reply in info["reply"] and len(info["reply"]) <= MAX_REPLY_CHARS
    assert (reward, terminated, truncated, info["format_ok"], info["turn"]) == (0.0, False, False, False, 1)
    assert obs.endswith("\nReply: " + info["reply"]) and f"You: {action[:1024]}\n" in obs
    if len(action) <= 1024 and env.action_space.contains(action):
        assert env.observation_space.contains(obs)
    _, reward, terminated, _, info = env.step("<guess>7</guess>")
    assert (reward, terminated, info["format_ok"]) == (1.0, True, True)


def test_the_longest_replies_and_transcripts_fit_the_observation_space() -> None:
    nines = "9" * 30
    longest = {GuessNumberEnv(max_number=999_999): ["", "<guess>0</guess>", "<guess>999999</guess>"],
               CalculatorEnv(digits=9): ["", f"<calc>-{nines}/({nines}-1)</calc>", "<answer>0</answer>",
                                         "<calc>" + " " * 99 + "x</calc>"]}
    for env, actions in longest.items():
        for action in actions:
            env.reset(seed=0)
            steps = 0
            while True:  # each action padded to max_action_chars, until the episode ends
                obs, _, terminated, truncated, info = env.step(action + " " * (1024 - len(action)))
                steps += 1
                if terminated or truncated:
                    break
            assert len(info["reply"]) <= MAX_REPLY_CHARS and env.observation_space.contains(obs)
            assert steps == (1 if terminated else env.task.max_turns)
    calc = list(longest)[1]
    calc.reset(seed=0)
    assert calc.step(f"<calc>-{nines}/({nines}-1)</calc>")[-1]["reply"] == f"-{nines}/{nines[:-1]}8"


# ------------------------------------------------------------------------------------------------ Calculator

def test_calculator_then_answer_succeeds() -> None:
    env = CalculatorEnv()
    for seed in range(5):
        env.reset(seed=seed)
        reward, terminated, truncated, info = ask_calculator(env)
        assert (reward, terminated, truncated, info["is_success"]) == (1.0, True, False, True)
        assert info["turn"] == 2
        assert info["reply"] == "correct" and info["ground_truth"] == np.prod(env.task.operands(env.context))


def test_show_call_writes_the_question_s_own_call_into_the_prompt() -> None:
    """``show_call=True``: the prompt holds ``<calc>a * b</calc>`` for its own operands (the same length for
    every context), and playing that call then its reply succeeds; the default prompt has a generic
    example."""
    env = CalculatorEnv(digits=2, show_call=True)
    lengths = set()
    for seed in range(5):
        prompt, info = env.reset(seed=seed)
        a, b = env.task.operands(info["context"])
        assert f"What is {a} * {b}?" in prompt and f"<calc>{a} * {b}</calc>" in prompt
        lengths.add(len(prompt))
        _, _, _, _, info = env.step(f"<calc>{a} * {b}</calc>")
        assert info["reply"] == str(a * b)
        assert env.step(f"<answer>{info['reply']}</answer>")[1] == 1.0
    assert lengths == {len(env.task.prompt(0))}
    prompt, info = CalculatorEnv(digits=2).reset(seed=0)
    assert "<calc>12 * (3 + 4)</calc>" in prompt
    with pytest.raises(ValueError, match="show_call=1: use True or False"):
        CalculatorEnv(show_call=1)
    vec = gym.make_vec("TPO/Calculator-v0", num_envs=2, vectorization_mode="vector_entry_point",
                       show_call=True)
    assert "</calc> and its result" in vec.reset(seed=0)[0][0]


def test_answers_end_the_episode_right_or_wrong() -> None:
    env = CalculatorEnv()
    env.reset(options={"context": 0})  # 100 * 100
    assert env.task.operands(0) == (100, 100) and env.task.operands(900**2 - 1) == (999, 999)
    _, reward, terminated, truncated, info = env.step("<calc>1+1</calc> <answer>10001</answer>")
    assert (reward, terminated, truncated, info["reply"]) == (0.0, True, False, "incorrect")
    assert info["format_ok"] and not info["is_success"]
    env.reset(options={"context": 0})
    _, reward, terminated, _, info = env.step("<answer>ten thousand</answer>")
    assert (reward, terminated, info["format_ok"], info["ground_truth"]) == (0.0, True, False, 10000)
    env.reset(options={"context": 0})
    assert env.step("<answer>10,000</answer>")[1] == 0.0
    env.reset(options={"context": 0})
    assert env.step("<answer>1</answer> no: <answer> 10000 </answer>")[1] == 1.0


def test_calculator_turn_limit_truncates() -> None:
    env = CalculatorEnv(max_turns=2)
    env.reset(seed=0)
    expected = {"context": env.context, "turn": 1, "max_turns": 2, "reply": "6", "format_ok": True,
                "is_success": False}
    assert env.step("<calc>2*3</calc>")[2:] == (False, False, expected)
    obs, reward, terminated, truncated, info = env.step("<calc>(1 + 2) / 4</calc>")
    assert (reward, terminated, truncated, info["reply"]) == (0.0, False, True, "3/4")
    assert obs.endswith("You: <calc>(1 + 2) / 4</calc>\nReply: 3/4")


@pytest.mark.parametrize(("action", "reply"), [
    ("", "No calculator call or answer found"), ("what is it?", "No calculator call or answer found"),
    ("<calc>__import__('os').system('ls')</calc>", "calculator error: unexpected character at position 0;"),
    ("<calc>open('/etc/passwd').read()</calc>", "calculator error: unexpected character"),
    ("<calc>().__class__</calc>", "calculator error: unexpected character at position 2"),
    ("<calc>9**9**9**9</calc>", "calculator error: number too large"),
    ("<calc>10^1000000000</calc>", "calculator error: number too large"),
    ("<calc>2 ^ -100000</calc>", "calculator error: number too large"),
    pytest.param("<calc>" + "9" * 31 + "</calc>", "calculator error: number too large", id="31 digits"),
    pytest.param("<calc>" + "(" * 30 + "1" + ")" * 30 + "</calc>", "calculator error: more than 20 nested",
                 id="30 parentheses"),
    pytest.param("<calc>" + "1+" * 60 + "1</calc>", "calculator error: expression longer than 100 characters",
                 id="121 characters"),
    ("<calc>1/0</calc>", "calculator error: division by zero"), ("<calc>0^-1</calc>", "division by zero"),
    ("<calc>2^(1/2)</calc>", "exponent must be a whole number"), ("<calc>1.5</calc>", "unexpected character"),
    ("<calc>3 x 4</calc>", "unexpected character at position 2"), ("<calc></calc>", "empty expression"),
    ("<calc>(1+2</calc>", "missing ')'"), ("<calc>1 2</calc>", "unexpected number"),
    ("<calc>1 +</calc>", "unexpected end"), ("<calc>)</calc>", "unexpected ')'"),
    pytest.param("<calc>1+1</calc>" * 100, "longer than 1024 characters", id="too long"),
])
def test_bad_actions_and_dangerous_calls_get_a_reply(action: str, reply: str) -> None:
    env = CalculatorEnv()
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["reply"].startswith(reply) or reply in info["reply"]
    assert (reward, terminated, truncated, info["format_ok"], info["turn"]) == (0.0, False, False, False, 1)
    assert len(info["reply"]) <= MAX_REPLY_CHARS
    if len(action) <= 1024:
        assert env.observation_space.contains(obs)
    assert ask_calculator(env)[0] == 1.0  # the episode goes on


@pytest.mark.parametrize(("expression", "value"), [
    ("123*456", 56088), (" 2 * (3 + 4) ", 14), ("-2^2", -4), ("2^3^2", 512), ("2**-2", "1/4"), ("7/2", "7/2"),
    ("10 - 2 - 3", 5), ("12 / 3 / 2", 2), ("-(-(3))", 3), ("+5", 5), ("(-1)^99999999999999999999", -1),
    ("10^29", 10**29), ("1^" + "9" * 30, 1),
])
def test_calculate_is_exact_with_the_usual_precedence(expression: str, value) -> None:
    assert str(calculate(expression)) == str(value)


def test_calculate_refuses_values_over_the_limit() -> None:
    for expression in ("10^30", "2^100", "99999999999999999999 * 99999999999999999999", "1/10^30"):
        with pytest.raises(CalculatorError, match="more than 30 digits"):
            calculate(expression)


def test_best_constant_answer_is_exact() -> None:
    for digits in (1, 2, 3):
        low, high = operand_range(digits)
        operands = np.arange(low, high + 1)
        values, counts = np.unique(np.multiply.outer(operands, operands), return_counts=True)
        assert best_constant_answer(digits) == (values[counts.argmax()], counts.max() / len(operands) ** 2)
    assert best_constant_answer(3) == (110880, 50 / 900**2)
    for digits in (1, 2):  # the reply-blind policy played on every question
        env = CalculatorEnv(digits=digits)
        constant, rate = best_constant_answer(digits)
        wins = 0.0
        for context in range(env.task.num_contexts):
            env.reset(options={"context": context})
            wins += env.step(f"<answer>{constant}</answer>")[1]
        assert wins / env.task.num_contexts == pytest.approx(rate, abs=1e-12)


# ------------------------------------------------------------------------------------------ held-out splits

def test_calculator_splits_share_no_question_and_hold_a_tenth_each() -> None:
    task = CalculatorEnv(digits=2).task
    questions: dict[str, set[str]] = {"train": set(), "validation": set(), "test": set()}
    for context in range(task.num_contexts):
        a, b = task.operands(context)
        question = task.question(context)
        assert question == f"{min(a, b)} * {max(a, b)}"
        questions[task.split_of(context)].add(question)
    assert not (questions["train"] & questions["validation"] or questions["train"] & questions["test"]
                or questions["validation"] & questions["test"])
    n_questions = 90 * 91 // 2  # a <= b
    assert sum(map(len, questions.values())) == n_questions
    for split in ("validation", "test"):
        assert 0.08 < len(questions[split]) / n_questions < 0.12
    # a product and its mirror are one question: both fall in one split
    mirror = (12 - 10) + (34 - 10) * 90
    assert task.operands(mirror) == (34, 12) and task.split_of(mirror) == task.split_of((12 - 10) * 90 + 24)


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_an_env_of_a_split_draws_and_accepts_its_questions_only(split: str) -> None:
    env = CalculatorEnv(digits=2, split=split)
    drawn = [env.reset(seed=seed)[1]["context"] for seed in range(30)]
    assert {env.task.split_of(c) for c in drawn} == {split} and len(set(drawn)) > 20
    vec = CalculatorVectorEnv(8, group_size=2, digits=2, split=split)
    _, infos = vec.reset(seed=0)
    for _ in range(3):  # autoresets draw from the split too
        _, _, _, _, infos = vec.step(["<answer>1</answer>"] * 8)
        assert {vec.task.split_of(int(c)) for c in infos["context"]} == {split}
    other = next(c for c in range(100) if env.task.split_of(c) != split)
    match = rf"context {other} \('.*'\) is in the {env.task.split_of(other)} split, not in this env's {split}"
    with pytest.raises(ValueError, match=match):
        env.reset(options={"context": other})
    with pytest.raises(ValueError, match=match):
        vec.reset(options={"contexts": [drawn[0], drawn[1], drawn[2], other]})


def test_split_all_draws_as_before_and_bad_splits_are_refused() -> None:
    """``"all"`` (the default) draws the contexts of ``uniform_ints``, the stream of the env before splits."""
    env = CalculatorEnv(digits=2)
    assert env.task.split == "all"
    contexts = [env.reset(seed=seed)[1]["context"] for seed in range(5)]
    assert contexts == [int(np.random.default_rng(seed).integers(0, 8100)) for seed in range(5)]
    with pytest.raises(ValueError, match="unknown split 'heldout'; allowed values: all, train, validation"):
        CalculatorEnv(split="heldout")
    with pytest.raises(NotImplementedError, match="GuessNumberTask has no held-out splits"):
        GuessNumberEnv().task.question(0)


# ---------------------------------------------------------------------------------------------- vector envs

def test_vector_group_resets_give_identical_tasks() -> None:
    env = CalculatorVectorEnv(8, group_size=4)
    obs, infos = env.reset(seed=0)
    assert obs.shape == (8,) and obs.dtype == object and isinstance(obs[0], str)
    ctx = infos["context"]
    assert ctx.dtype == np.int64 and infos["_context"].all()
    assert (ctx[:4] == ctx[0]).all() and (ctx[4:] == ctx[4]).all() and (obs[:4] == obs[0]).all()
    for key in ("turn", "episode"):
        assert infos[key].dtype == np.int64 and not infos[key].any()
    np.testing.assert_array_equal(infos["max_turns"], 3)
    np.testing.assert_array_equal(env.contexts, ctx)
    with pytest.raises(ValueError):
        env.contexts[0] = 1
    obs, infos = env.reset(options={"group_size": 2, "contexts": [5, 6, 7, 8]})
    np.testing.assert_array_equal(infos["context"], [5, 5, 6, 6, 7, 7, 8, 8])
    assert obs[0] == env.task.prompt(5) and obs[7] == env.task.prompt(8)
    with pytest.raises(ValueError, match="expected 4 contexts"):
        env.reset(options={"group_size": 2, "contexts": [1, 2]})


def test_vector_autoreset_keeps_groups_on_one_task() -> None:
    env = GuessNumberVectorEnv(4, group_size=2, max_turns=3)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step([""] * 4)
    env.reset(seed=0, options={"contexts": [4, 9]})  # hidden 5, 5, 10, 10
    obs, rewards, terminated, truncated, infos = env.step(["<guess>5</guess>", "<guess>1</guess>", "no guess",
                                                           "<guess>10</guess>"])
    np.testing.assert_array_equal(rewards, [1, 0, 0, 1])
    assert rewards.dtype == np.float32 and terminated.dtype == truncated.dtype == bool
    np.testing.assert_array_equal(terminated, [True, False, False, True])
    assert not truncated.any()
    np.testing.assert_array_equal(infos["_final_obs"], terminated)
    np.testing.assert_array_equal(infos["_final_info"], terminated)
    final = infos["final_info"]
    np.testing.assert_array_equal(final["_is_success"], terminated)
    assert final["is_success"].dtype == bool and final["ground_truth"].dtype == np.int64
    assert list(final["ground_truth"][terminated]) == [5, 10] and final["reply"][0] == "correct"
    assert infos["final_obs"][0].endswith("Reply: correct")
    # ongoing sub-envs report their turn, the restarted ones their new episode (reset info)
    np.testing.assert_array_equal(infos["turn"], [0, 1, 1, 0])
    np.testing.assert_array_equal(infos["episode"], [1, 0, 0, 1])
    np.testing.assert_array_equal(infos["_reply"], [False, True, True, False])
    assert infos["reply"].dtype == object
    assert list(infos["reply"][1:3]) == ["higher", env.task.respond(0, "").reply]
    new_first, new_second = infos["context"][0], infos["context"][3]
    assert obs[0] == obs[3] == env.task.prompt(0)
    # the second members end their first episodes and start the group's second one: the same hidden numbers
    for _ in range(2):
        obs, rewards, terminated, truncated, infos = env.step(["<guess>1</guess>"] * 4)
    assert list(truncated) == [False, True, True, False] and not terminated[1:3].any()
    np.testing.assert_array_equal(infos["context"][1:3], [new_first, new_second])
    np.testing.assert_array_equal(infos["episode"][1:3], [1, 1])
    np.testing.assert_array_equal(env.contexts, [new_first, new_first, new_second, new_second])


def test_vector_of_one_replays_the_single_env() -> None:
    single, vector = GuessNumberEnv(max_turns=3), GuessNumberVectorEnv(1, max_turns=3)
    obs, info = single.reset(seed=7)
    vector_obs, infos = vector.reset(seed=7)
    actions = [f"<guess>{g}</guess>" for g in (10, 5, 15, 2, 19, 11, 3, 12, 8, 8)]
    for action in actions:
        assert vector_obs[0] == obs and infos["context"][0] == info["context"]
        obs, reward, terminated, truncated, info = single.step(action)
        vector_obs, rewards, terminated_, truncated_, infos = vector.step([action])
        assert (rewards[0], terminated_[0], truncated_[0]) == (reward, terminated, truncated)
        if terminated or truncated:
            assert infos["final_obs"][0] == obs and infos["final_info"]["reply"][0] == info["reply"]
            obs, info = single.reset()


def test_vector_step_checks_the_actions() -> None:
    env = GuessNumberVectorEnv(4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="expected 4 completions, got 3"):
        env.step(["<guess>1</guess>"] * 3)
    with pytest.raises(ValueError, match="sequence of 4 strings"):
        env.step("<guess>1</guess>")
