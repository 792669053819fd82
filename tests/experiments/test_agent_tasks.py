"""``python -m experiments.agent_tasks``: a multi-turn env measured on a model before training (the tiny test
model here), its shortcut, and one-line errors."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from experiments import agent_tasks, zoo  # noqa: E402
from tpo_gym.envs.multiturn import best_constant_answer, reply_blind_success_rate  # noqa: E402

torch.set_num_threads(1)


def test_shortcuts_are_the_env_s() -> None:
    guess = agent_tasks.env_task("GuessNumber", {"max_number": 8, "max_turns": 3})
    assert agent_tasks.shortcut(guess) == ("reply-blind guesses", reply_blind_success_rate(8, 3))
    answer, rate = best_constant_answer(2)
    calculator = agent_tasks.env_task("Calculator", {"digits": 2})
    assert agent_tasks.shortcut(calculator) == (f"constant answer {answer}", rate)


def test_the_row_counts_the_conversations_of_one_batch(tiny_llm_dir: str) -> None:
    policy = {"model": tiny_llm_dir, "max_new_tokens": 4, "prefill": "<guess>", "stop": "</guess>"}
    row = agent_tasks.measure("GuessNumber", {"max_number": 2, "max_turns": 2}, policy, 3, 4, seed=0)
    assert row["size"] == "3 x 4" and 0 <= row["pass@1"] <= row["pass@4"] <= 1
    assert 1 <= row["turns"] <= 2 and 0 <= row["format"] <= 1 and 0 <= row["cut"] <= 1
    assert row["shortcut"] == "reply-blind guesses (1)"  # 2 numbers in 2 turns: guessing 1 then 2 always wins
    table = agent_tasks.markdown_table([row]).splitlines()
    assert len(table) == 3
    assert table[2].startswith("| `TPO/GuessNumber-v0` | max_number=2, max_turns=2 | 3 x 4 |")
    assert row["transcripts"] == []


def test_the_batch_is_seeded(tiny_llm_dir: str) -> None:
    """The same seed plays the same tasks and turns (the env's first reset takes the seed, as in ``learn``);
    another seed other tasks."""
    policy = {"model": tiny_llm_dir, "max_new_tokens": 3, "prefill": ["<calc>", "<answer>"]}

    def play(seed: int) -> list[str]:
        row = agent_tasks.measure("Calculator", {"digits": 1}, policy, 3, 2, seed=seed, n_transcripts=6)
        return row["transcripts"]

    first = play(0)
    assert play(0) == first and play(1) != first


def test_transcripts_are_the_batch_s_conversations(tiny_llm_dir: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    policy = {"model": tiny_llm_dir, "max_new_tokens": 4, "prefill": "<guess>", "stop": "</guess>"}
    row = agent_tasks.measure("GuessNumber", {"max_number": 2, "max_turns": 2}, policy, 2, 2, seed=0,
                              n_transcripts=3)
    assert [text.split(":")[0] for text in row["transcripts"]] == ["--- task 0", "--- task 0", "--- task 1"]
    for text in row["transcripts"]:
        head, body = text.split("\n", 1)
        turns = int(head.split(", ")[-1].split(" ")[0])
        assert body.count("<|im_start|>user") == turns - 1  # the env's replies between the model's turns
    assert agent_tasks.main(["--env", "GuessNumber", "--tasks", "1", "--samples", "2", "--transcripts", "1",
                             "--env-kwargs", "max_number:2", "max_turns:2",
                             "--config", f"model:{tiny_llm_dir}", "max_new_tokens:4"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- task 0: ") == 1 and out.index("| `TPO/GuessNumber-v0`") < out.index("--- task 0")


def test_the_env_kwargs_start_from_the_zoo_entry_s(tiny_llm_dir: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The zoo's Calculator entry sets ``show_call``; ``--env-kwargs`` adds to it and overrides it."""
    assert zoo.zoo_env_kwargs("tpo", "TPO/Calculator-v0") == {"digits": 2, "show_call": True}
    assert zoo.zoo_env_kwargs("tpo", "TPO/GuessNumber-v0") == {}
    base = ["--env", "Calculator", "--tasks", "1", "--samples", "2", "--config", f"model:{tiny_llm_dir}",
            "max_new_tokens:2", "--env-kwargs", "digits:1", "max_turns:2"]
    assert agent_tasks.main(base) == 0
    row = "| `TPO/Calculator-v0` | digits=1, show_call=True, max_turns=2 | 1 x 2 |"
    assert row in capsys.readouterr().out
    assert agent_tasks.main([*base, "show_call:False"]) == 0
    assert "| digits=1, show_call=False, max_turns=2 |" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--env", "Chess"], "--env Chess: use one of GuessNumber, Calculator"),
    (["--env", "Calculator", "--samples", "1"], "--samples 1: use an integer >= 2"),
    (["--env", "Calculator", "--transcripts", "-1"], "--transcripts -1: use an integer >= 0"),
    (["--env", "GuessNumber", "--env-kwargs", "max_turns"], "--env-kwargs 'max_turns': write key:value"),
    (["--env", "GuessNumber", "--env-kwargs", "max_turns:0"], "max_turns must be an integer >= 1, got 0"),
])  # fmt: skip
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_tasks.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------------------------------- evaluations
POLICY = {"max_new_tokens": 4, "prefill": "<guess>", "stop": "</guess>"}
GUESS = {"max_number": 8, "max_turns": 3}


@pytest.mark.filterwarnings("ignore:2 of 2 batches had no signal")
def test_agent_evaluations_leave_training_unchanged(tiny_llm_dir: str) -> None:
    """The evaluations play on envs of their own with torch's RNG restored: a run with them has the batches,
    RNG state and weights of a run without."""
    from experiments.recorders import AgentEvalRecorder, CurveRecorder
    from tpo_agents import TPO

    errors, states, weights = [], [], []
    evaluating = AgentEvalRecorder("TPO/GuessNumber-v0", GUESS, 1, n_tasks=8, n_samples=2)
    for recorder in (CurveRecorder(), evaluating):
        model = TPO("LLMPolicy", "TPO/GuessNumber-v0", env_kwargs=GUESS, batch_size=2, group_size=2,
                    n_epochs=1, seed=3, learning_rate=1e-2, policy_kwargs={"model": tiny_llm_dir, **POLICY})
        model.learn(total_timesteps=8, callback=recorder, log_interval=0)
        errors.append(recorder.arrays()["update/error"])
        states.append(torch.random.get_rng_state())
        weights.append(torch.cat([p.detach().flatten() for p in model.policy.parameters()]))
    torch.testing.assert_close(errors[0], errors[1], rtol=0, atol=0)
    assert torch.equal(states[0], states[1]) and torch.equal(weights[0], weights[1])
    arrays = evaluating.arrays()
    assert list(arrays["eval/x"]) == [0, 1, 2]
    assert evaluating.contexts.tolist() == list(range(8))  # every hidden number
    for key in ("eval/error", "eval/greedy_error", "eval/format_rate"):
        assert all(0 <= value <= 1 for value in arrays[key])
    assert 1 <= arrays["eval/turns"].min() and arrays["eval/turns"].max() <= 3
    assert arrays["eval/shortcut_error"][0] == pytest.approx(1 - 3 / 8)


def test_agent_recorder_settings() -> None:
    import gymnasium as gym

    from experiments.recorders import AgentEvalRecorder

    many = AgentEvalRecorder("TPO/Calculator-v0", {"digits": 2}, 10, n_tasks=16, n_samples=2, seed=1)
    assert len(many.contexts) == 16 and many.contexts.max() < 90 * 90  # 16 of the 8,100 questions
    again = AgentEvalRecorder("TPO/Calculator-v0", {"digits": 2}, 10, n_tasks=16, n_samples=2, seed=1)
    assert many.contexts.tolist() == again.contexts.tolist()
    with pytest.raises(ValueError, match="n_samples=0; use an integer >= 1"):
        AgentEvalRecorder("TPO/GuessNumber-v0", GUESS, 1, n_tasks=4, n_samples=0)
    # a split's evaluation: distinct tasks of that split only
    held_out = AgentEvalRecorder("TPO/Calculator-v0", {"digits": 2, "split": "test"}, 10, n_tasks=64,
                                 n_samples=2, seed=1)
    task = gym.make("TPO/Calculator-v0", digits=2, split="test").unwrapped.task
    assert len(set(held_out.contexts.tolist())) == 64 and list(held_out.contexts) == sorted(held_out.contexts)
    assert {task.split_of(int(c)) for c in held_out.contexts} == {"test"}
    with pytest.raises(ValueError, match="n_tasks=20: the env's 'test' split gave 7 distinct tasks in 2000"):
        AgentEvalRecorder("TPO/Calculator-v0", {"digits": 1, "split": "test"}, 10, n_tasks=20, n_samples=2)
    with pytest.raises(ValueError, match="eval_every=0"):
        AgentEvalRecorder("TPO/GuessNumber-v0", GUESS, 0, n_tasks=4, n_samples=2)


# ------------------------------------------------------------------------------------------- agents_grid
def test_agents_grid_is_matched() -> None:
    from experiments.definitions.agents import AGENT_ENVS, AGENTS_GRID
    from experiments.definitions.llm import GRID_LEARNING_RATES, rate_label

    grid = AGENTS_GRID.build(AGENTS_GRID.full.updates, False)
    assert set(grid) == {f"{v}/{rate_label(r)}" for v in AGENT_ENVS for r in GRID_LEARNING_RATES}
    for variant, cell in grid.items():
        tpo, grpo = cell["tpo"], cell["grpo"]
        assert set(cell) == {"tpo", "grpo"} and tpo.env_id == grpo.env_id == AGENT_ENVS[variant.split("/")[0]]
        assert tpo.recorder == grpo.recorder == "agent_eval" and tpo.recorder_kwargs == grpo.recorder_kwargs
        for key in ("policy_kwargs", "learning_rate", "batch_size", "group_size", "n_epochs", "max_grad_norm",
                    "group_mode"):
            assert tpo.kwargs[key] == grpo.kwargs[key], key
        assert rate_label(tpo.kwargs["learning_rate"]) == variant.rsplit("/", 1)[1]
        assert tpo.kwargs["group_mode"] == "multiturn"
        assert tpo.n_updates % tpo.recorder_kwargs["eval_every"] == 0
        assert tpo.env_kwargs == grpo.env_kwargs
        if variant.startswith("calculator/"):  # 3 digits, trained on the train split, tuned on validation
            assert tpo.env_kwargs == {"digits": 3, "show_call": True, "split": "train"}
            assert tpo.recorder_kwargs["env_kwargs"] == {**tpo.env_kwargs, "split": "validation"}
        else:  # no splits: every hidden number is evaluated, none is shown to the policy
            assert "split" not in tpo.env_kwargs and tpo.recorder_kwargs["env_kwargs"] == tpo.env_kwargs


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*batches had no signal")
def test_agents_grid_smoke_on_the_tiny_model(tiny_llm_dir: str, tmp_path) -> None:
    from dataclasses import replace

    from experiments.core import load_seed, seed_path
    from experiments.definitions.agents import AGENTS_GRID
    from experiments.jobs import Task, run_job

    variant = "guess_number/lr1e-05"
    spec = AGENTS_GRID.build(AGENTS_GRID.smoke.updates, True)[variant]["tpo"]
    policy = {**spec.kwargs["policy_kwargs"], "model": tiny_llm_dir, "max_new_tokens": 3}
    spec = replace(spec, kwargs={**spec.kwargs, "policy_kwargs": policy})
    path = seed_path(tmp_path, AGENTS_GRID.name, variant, "tpo", 0)
    run_job((Task(AGENTS_GRID.name, variant, 0, spec, str(path), per_seed=True, curves=AGENTS_GRID.curves),))
    arrays, meta = load_seed(path)
    assert list(arrays["eval/x"]) == [0, 1, 2] and arrays["update/error"].shape == (2,)
    assert arrays["eval/shortcut_error"][0] == pytest.approx(0.75)  # 5 reply-blind guesses of 20 numbers
    assert meta["spec"]["recorder"] == "agent_eval"


# ------------------------------------------------------------------------------------------- agents_study
def test_agents_study_rates_are_the_grids_choice() -> None:
    """The rates fixed in ``agents_study`` are those ``experiments.lr_choice`` chooses from the committed
    ``agents_grid`` runs, for every variant of the study and both methods."""
    from pathlib import Path

    from experiments.definitions.agents import AGENTS_GRID, STUDY_LEARNING_RATES
    from experiments.lr_choice import chosen_rates, grid_rows
    from experiments.runs import load_runs

    root = Path(__file__).resolve().parents[2] / "results" / "paper"
    grid = AGENTS_GRID.rate_grid
    chosen = chosen_rates(grid_rows(load_runs(root, AGENTS_GRID.name), grid.tasks, grid.rates, grid.label))
    assert {variant: chosen[variant] for variant in STUDY_LEARNING_RATES} == STUDY_LEARNING_RATES


def test_agents_study_is_matched_and_evaluated_on_held_out_tasks() -> None:
    from experiments.definitions.agents import AGENTS_GRID, AGENTS_STUDY, STUDY_LEARNING_RATES
    from experiments.definitions.llm import MAX_GRAD_NORM, rate_label

    study = AGENTS_STUDY.build(AGENTS_STUDY.full.updates, False)
    grid = AGENTS_GRID.build(AGENTS_GRID.full.updates, False)
    assert AGENTS_STUDY.full.seeds >= 5 and AGENTS_STUDY.full.updates >= 100
    assert set(study) == set(STUDY_LEARNING_RATES)
    for variant, cell in study.items():
        tpo, grpo = cell["tpo"], cell["grpo"]
        assert set(cell) == {"tpo", "grpo"}
        assert tpo.env_kwargs == grpo.env_kwargs and tpo.recorder_kwargs == grpo.recorder_kwargs
        for algo in ("tpo", "grpo"):
            rate = STUDY_LEARNING_RATES[variant][algo]
            assert cell[algo].kwargs["learning_rate"] == rate
            assert cell[algo].kwargs["max_grad_norm"] == MAX_GRAD_NORM
            tuned = grid[f"{variant}/{rate_label(rate)}"][algo]  # the grid's run at the chosen rate
            assert cell[algo].kwargs == tuned.kwargs and cell[algo].env_kwargs == tuned.env_kwargs
        evaluation = tpo.recorder_kwargs
        assert evaluation["n_tasks"] == 64 and evaluation["n_samples"] == 2
        if "split" in tpo.env_kwargs:  # trained on train, tuned on validation, reported on test
            assert tpo.env_kwargs["split"] == "train" and evaluation["env_kwargs"]["split"] == "test"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*batches had no signal")
def test_agents_study_smoke_on_the_tiny_model(tiny_llm_dir: str, tmp_path) -> None:
    """Calculator's study cell runs end to end: trained on the train split, evaluated on the test split."""
    from dataclasses import replace

    from experiments.core import load_seed, seed_path
    from experiments.definitions.agents import AGENTS_STUDY
    from experiments.jobs import Task, run_job

    spec = AGENTS_STUDY.build(AGENTS_STUDY.smoke.updates, True)["calculator"]["grpo"]
    policy = {**spec.kwargs["policy_kwargs"], "model": tiny_llm_dir, "max_new_tokens": 3}
    spec = replace(spec, kwargs={**spec.kwargs, "policy_kwargs": policy})
    path = seed_path(tmp_path, AGENTS_STUDY.name, "calculator", "grpo", 0)
    run_job((Task(AGENTS_STUDY.name, "calculator", 0, spec, str(path), per_seed=True,
                  curves=AGENTS_STUDY.curves),))
    arrays, meta = load_seed(path)
    assert list(arrays["eval/x"]) == [0, 1, 2] and arrays["update/error"].shape == (2,)
    assert meta["spec"]["env_kwargs"]["split"] == "train"
    assert meta["spec"]["recorder_kwargs"]["env_kwargs"]["split"] == "test"
