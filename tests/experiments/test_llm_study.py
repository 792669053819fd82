"""The language-model study (docs/llm.md): the task measurement of ``experiments.llm_tasks`` (pass@k,
the best constant answer on hand-made data, the whole command on the tiny model), the held-out
evaluations of ``LLMEvalRecorder``, the held-out splits of the study's tasks and the ``llm_grid``
experiment at smoke size on the tiny model."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

from experiments import llm_tasks  # noqa: E402
from experiments.core import load_seed, seed_path  # noqa: E402
from experiments.definitions.llm import (  # noqa: E402
    GRID_LEARNING_RATES,
    LLM_GRID,
    LLM_STUDY,
    MAX_GRAD_NORM,
    STUDY_LEARNING_RATES,
    STUDY_TASKS,
    TRL_GRPO,
    TRL_TASK,
    rate_label,
)
from experiments.jobs import Task, run_job  # noqa: E402
from experiments.runs import load_runs  # noqa: E402
from tpo_gym.envs.text import SUCCESS_THRESHOLD, score_completion  # noqa: E402

torch.set_num_threads(1)


# ------------------------------------------------------------------------------------------- pass@k
def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of the k-subsets of n samples (the first c correct) holding a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(8, 0, 1), (8, 8, 8), (8, 1, 1), (5, 2, 2), (4, 3, 2), (6, 2, 3)])
def test_pass_at_k_matches_counting_subsets(n: int, c: int, k: int) -> None:
    assert llm_tasks.pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_hand_values() -> None:
    assert llm_tasks.pass_at_k(8, 1, 1) == pytest.approx(1 / 8)
    assert llm_tasks.pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert llm_tasks.pass_at_k(4, 3, 2) == 1.0  # one wrong sample cannot fill two draws
    assert llm_tasks.pass_at_k(8, 0, 8) == 0.0
    correct = np.array([[True, False, False, False], [False, False, False, False], [True, True, True, True]])
    assert llm_tasks.mean_pass_at_k(correct, 1) == pytest.approx((0.25 + 0 + 1) / 3)
    assert llm_tasks.mean_pass_at_k(correct, 4) == pytest.approx(2 / 3)


@pytest.mark.parametrize(("n", "c", "k", "message"), [(4, 1, 0, "k=0"), (4, 1, 5, "k=5"), (4, 5, 1, "c=5"),
                                                      (4, -1, 1, "c=-1"), (4.0, 1, 1, "integers")])
def test_pass_at_k_refuses_bad_counts(n: Any, c: Any, k: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        llm_tasks.pass_at_k(n, c, k)


def test_mean_pass_at_k_refuses_non_boolean() -> None:
    with pytest.raises(ValueError, match="boolean"):
        llm_tasks.mean_pass_at_k(np.ones((2, 3)), 1)


# ------------------------------------------------------------------------------------------- constants
class HandDataset:
    """Hand-made items scored as reasoning-gym's default verifier: 1 for the exact answer, len(gold) /
    len(answer) when the gold string lies inside the answer, else 0."""

    def __init__(self, answers: list[str]) -> None:
        self.items = [{"question": f"q{i}", "answer": a, "metadata": {}} for i, a in enumerate(answers)]

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        gold = entry["answer"]
        if not answer:
            return 0.0
        return 1.0 if answer == gold else (len(gold) / len(answer) if gold in answer else 0.0)


class HandTask:
    """The part of ``ReasoningGymTask`` that the constant-answer functions read, on hand-made items."""

    name = "hand"
    reward = "native"

    def __init__(self, answers: list[str]) -> None:
        self.dataset = HandDataset(answers)

    def score_completions(self, contexts: np.ndarray, completions: list[str]
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        results = [score_completion(self.dataset, self.dataset.items[int(c)], text, "native")
                   for c, text in zip(contexts, completions, strict=True)]
        scores = np.array([r[0] for r in results], dtype=np.float32)
        return scores, np.array([r[1] for r in results], object), np.array([r[2] for r in results])


def test_best_constant_on_hand_made_answers() -> None:
    task = HandTask(["1", "1", "2", "12"])
    contexts = np.arange(4)
    np.testing.assert_allclose(llm_tasks.constant_scores(task, contexts, "12"), [0.5, 0.5, 0.5, 1.0])
    best = llm_tasks.best_constant(task, contexts, ["2", "1", "12"])
    assert best["binary"] == ("1", 0.5)  # exact on two of four items
    assert best["native"] == ("12", pytest.approx(0.625))  # (0.5 + 0.5 + 0.5 + 1) / 4: partial credit pays
    # ties go to the earlier candidate
    assert llm_tasks.best_constant(task, np.array([2, 3]), ["2", "12"])["binary"] == ("2", 0.5)
    with pytest.raises(ValueError, match="candidate"):
        llm_tasks.best_constant(task, contexts, [])


def test_candidate_answers_and_entropy() -> None:
    # distinct answers by frequency (ties in order of appearance), then each length's modal string
    answers = ["xb", "ad", "ae", "cb", "ad", "q"]
    assert llm_tasks.candidate_answers(answers) == ["ad", "xb", "ae", "cb", "q", "ab"]
    assert llm_tasks.answer_entropy(["a", "a", "b", "b"]) == pytest.approx(1.0)
    assert llm_tasks.answer_entropy(["a", "b", "c", "d"]) == pytest.approx(2.0)
    assert llm_tasks.answer_entropy(["7"] * 5) == 0.0
    with pytest.raises(ValueError, match="at least one"):
        llm_tasks.answer_entropy([])


def test_shortcut_of_letter_counting_is_the_modal_count() -> None:
    env = {"dataset": "letter_counting", "min_words": 1, "max_words": 1, "size": 300, "eval_size": 40}
    contexts = np.arange(40)
    result = llm_tasks.shortcut(env, contexts)
    held_out = llm_tasks.split_task(env, "validation")
    gold = [held_out.entry(c)["answer"] for c in contexts]
    train = llm_tasks.split_task(env, "train")
    modal = max(set(a := [train.entry(c)["answer"] for c in range(300)]), key=a.count)
    assert result["binary"] == (modal, pytest.approx(gold.count(modal) / len(gold)))
    assert result["native"][0] == modal  # partial credit does not beat the modal count here


def test_parse_task_and_config() -> None:
    preset = llm_tasks.CANDIDATES["spell_backward_3"]
    assert llm_tasks.parse_task("spell_backward_3") == ("spell_backward_3", preset)
    label, kwargs = llm_tasks.parse_task("basic_arithmetic:min_terms=2:operators=('+', '-')")
    assert kwargs == {"dataset": "basic_arithmetic", "min_terms": 2, "operators": ("+", "-")}
    assert llm_tasks._split_top_level("a:x=(1,2),b, c", ",") == ["a:x=(1,2)", "b", "c"]
    with pytest.raises(ValueError, match="'min_words' is not key=value"):
        llm_tasks.parse_task("letter_counting:min_words")
    config = llm_tasks.parse_config(["max_new_tokens:16", "model:/a/b"])
    assert config == {"max_new_tokens": 16, "model": "/a/b"}
    with pytest.raises(ValueError, match="'max_new_tokens': write key:value"):
        llm_tasks.parse_config(["max_new_tokens"])


# ------------------------------------------------------------------------------------------- the command
def test_command_on_the_tiny_model(tiny_llm_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    spell = "spell_backward:min_word_len=3:max_word_len=3:eval_size=64"
    status = llm_tasks.main(["--tasks", f"letter_counting_1w,{spell}",
                             "--prompts", "3", "--samples", "4", "--batch-rows", "8",
                             "--config", f"model:{tiny_llm_dir}", "--config", "max_new_tokens:6"])
    assert status == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert len(lines) == 4  # header, rule, two tasks
    assert "pass@4" in lines[0] and "best constant of train, binary" in lines[0]
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells[0] == "`letter_counting_1w`" and cells[2] == "3 x 4"
    assert 0.0 <= float(cells[3]) <= float(cells[4]) <= 1.0  # pass@1 <= pass@K
    assert cells[8].startswith("`1` (")  # one-word letter counting: the shortcut answer is 1
    assert lines[3].split("|")[1].strip() == f"`{spell}`"


def test_measure_matches_its_samples(tiny_llm_dir: str) -> None:
    policy = llm_tasks.build_policy({"model": tiny_llm_dir, "max_new_tokens": 4, "prefill": "<answer>",
                                     "stop": "</answer>"})
    env = {"dataset": "letter_counting", "min_words": 1, "max_words": 1, "size": 50, "eval_size": 10}
    row = llm_tasks.measure(policy, "lc", env, n_prompts=4, n_samples=3, seed=1, batch_rows=6)
    task = llm_tasks.split_task(env, "validation")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        native, _, format_ok = llm_tasks.sample_completions(policy, task, np.arange(4), 3, batch_rows=6)
    assert native.shape == (4, 3)
    assert row["pass@1"] == pytest.approx(float((native >= SUCCESS_THRESHOLD).mean()))
    assert row["native"] == pytest.approx(float(native.mean()))
    assert row["format_rate"] == pytest.approx(float(format_ok.mean()))
    assert row["pass@3"] >= row["pass@1"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--tasks", "no_such_task"], "unknown reasoning-gym dataset 'no_such_task'"),
    (["--tasks", "letter_counting:bogus=1"], "unknown config key(s) bogus"),
    (["--tasks", "letter_counting_1w", "--samples", "0"], "--samples 0"),
    (["--tasks", "letter_counting_1w", "--config", "max_new_tokens"], "write key:value"),
])
def test_command_refuses_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert llm_tasks.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------------------------------- the study
@pytest.mark.parametrize("variant", list(STUDY_TASKS))
def test_study_task_splits_share_no_question(variant: str) -> None:
    """Every task of the study: its validation and test prompts hold no question of the train split (nor
    of each other), each held-out question once, at the study's own sizes."""
    preset, _ = STUDY_TASKS[variant]
    env = llm_tasks.CANDIDATES[preset]
    tasks = {split: llm_tasks.split_task(env, split) for split in ("train", "validation", "test")}
    questions = {split: [task.entry(i)["question"] for i in range(task.num_items)]
                 for split, task in tasks.items()}
    train = set(questions["train"])
    for split in ("validation", "test"):
        assert len(questions[split]) >= 64 and len(set(questions[split])) == len(questions[split])
        assert not train & set(questions[split])
    assert not set(questions["validation"]) & set(questions["test"])


def test_study_tasks_two_sparse_one_partial() -> None:
    rewards = [reward for _, reward in STUDY_TASKS.values()]
    assert len(STUDY_TASKS) >= 3 and rewards.count("binary") >= 2 and "native" in rewards
    for variant, (preset, reward) in STUDY_TASKS.items():
        assert preset in llm_tasks.CANDIDATES
        assert variant.startswith("partial/" if reward == "native" else "exact/")


def test_grid_is_matched() -> None:
    grid = LLM_GRID.build(LLM_GRID.full.updates, False)
    assert set(grid) == {f"{v}/{rate_label(r)}" for v in STUDY_TASKS for r in GRID_LEARNING_RATES}
    assert len(GRID_LEARNING_RATES) >= 3
    for variant, cell in grid.items():
        assert set(cell) == {"tpo", "grpo"}
        tpo, grpo = cell["tpo"], cell["grpo"]
        assert tpo.env_kwargs == grpo.env_kwargs and tpo.recorder_kwargs == grpo.recorder_kwargs
        assert tpo.recorder == "llm_eval" and tpo.n_updates == grpo.n_updates == LLM_GRID.full.updates
        for key in ("policy_kwargs", "learning_rate", "batch_size", "group_size", "n_epochs",
                    "max_grad_norm"):
            assert tpo.kwargs[key] == grpo.kwargs[key], key
        assert rate_label(tpo.kwargs["learning_rate"]) == variant.rsplit("/", 1)[1]
        assert tpo.kwargs["max_grad_norm"] == MAX_GRAD_NORM == 1.0
        assert tpo.recorder_kwargs["env_kwargs"] == tpo.env_kwargs
        assert tpo.recorder_kwargs["split"] == "validation"
        assert tpo.n_updates % tpo.recorder_kwargs["eval_every"] == 0


def test_study_rates_are_the_grids_choice() -> None:
    """The rates fixed in ``llm_study`` are those ``experiments.lr_choice`` chooses from the committed
    ``llm_grid`` seeds, for every task and both methods."""
    from experiments.lr_choice import chosen_rates, grid_rows

    root = Path(__file__).resolve().parents[2] / "results" / "paper"
    rows = grid_rows(load_runs(root, LLM_GRID.name), STUDY_TASKS, GRID_LEARNING_RATES, rate_label)
    assert chosen_rates(rows) == STUDY_LEARNING_RATES
    assert set(STUDY_LEARNING_RATES) == set(STUDY_TASKS)


def test_study_is_matched_and_reports_on_test_prompts() -> None:
    study = LLM_STUDY.build(LLM_STUDY.full.updates, False)
    assert set(study) == set(STUDY_TASKS) and LLM_STUDY.full.seeds >= 5 and LLM_STUDY.full.updates >= 100
    for variant, cell in study.items():
        assert set(cell) == ({"tpo", "grpo", "grpo_trl"} if variant == TRL_TASK else {"tpo", "grpo"})
        tpo, grpo = cell["tpo"], cell["grpo"]
        assert tpo.env_kwargs == grpo.env_kwargs and tpo.recorder_kwargs == grpo.recorder_kwargs
        assert tpo.recorder_kwargs["split"] == "test" and tpo.recorder_kwargs["n_prompts"] == 64
        for algo in ("tpo", "grpo"):
            assert cell[algo].kwargs["learning_rate"] == STUDY_LEARNING_RATES[variant][algo]
            assert cell[algo].kwargs["max_grad_norm"] == MAX_GRAD_NORM
        for key in ("policy_kwargs", "batch_size", "group_size", "n_epochs"):
            assert tpo.kwargs[key] == grpo.kwargs[key], key
    trl, grpo = study[TRL_TASK]["grpo_trl"], study[TRL_TASK]["grpo"]
    assert trl.algo == grpo.algo and trl.env_kwargs == grpo.env_kwargs
    assert trl.recorder_kwargs == grpo.recorder_kwargs
    assert {k: v for k, v in trl.kwargs.items() if grpo.kwargs.get(k) != v} == TRL_GRPO
    assert trl.kwargs["max_grad_norm"] == 1.0 and trl.kwargs["beta"] == 0.0 and trl.kwargs["n_epochs"] == 1


def test_trl_cell_decays_its_learning_rate(tiny_llm_dir: str) -> None:
    """``grpo_trl``'s ``lin_1e-6`` is built as the zoo's schedule: 1e-6 at the start, 0 at the end."""
    from experiments.jobs import build_model

    spec = _tiny(LLM_STUDY.build(2, True)[TRL_TASK]["grpo_trl"], tiny_llm_dir)
    model = build_model(spec, seed=0)
    assert (model.loss_type, model.advantage_std) == ("dapo", "sample")
    assert model.lr_schedule(1.0) == pytest.approx(1e-6) and model.lr_schedule(0.25) == pytest.approx(2.5e-7)


def _tiny(spec: Any, model: str) -> Any:
    """``spec`` on the tiny model with a small task (the study's settings otherwise)."""
    kwargs = {**spec.kwargs, "policy_kwargs": {**spec.kwargs["policy_kwargs"], "model": model,
                                               "max_new_tokens": 6}}
    env = {**spec.env_kwargs, "size": 60, "eval_size": 8}
    recorder_kwargs = {**spec.recorder_kwargs, "env_kwargs": env}
    return replace(spec, kwargs=kwargs, env_kwargs=env, recorder_kwargs=recorder_kwargs)


@pytest.mark.slow
def test_study_smoke_on_the_tiny_model(tiny_llm_dir: str, tmp_path: Path) -> None:
    grid = LLM_GRID.build(LLM_GRID.smoke.updates, True)
    variant = next(iter(grid))
    for algo in ("tpo", "grpo"):
        spec = _tiny(grid[variant][algo], tiny_llm_dir)
        path = seed_path(tmp_path, LLM_GRID.name, variant, algo, 0)
        run_job((Task(LLM_GRID.name, variant, 0, spec, str(path), per_seed=True, curves=LLM_GRID.curves),))
        arrays, meta = load_seed(path)
        n_evals = 1 + LLM_GRID.smoke.updates // spec.recorder_kwargs["eval_every"]
        every = spec.recorder_kwargs["eval_every"]
        np.testing.assert_array_equal(arrays["eval/x"], np.arange(n_evals) * every)
        for key in ("eval/error", "eval/native_error", "eval/sampled_error", "eval/format_rate",
                    "eval/mode_frac", "eval/shortcut_error"):
            assert arrays[key].shape == (n_evals,) and np.all((arrays[key] >= 0) & (arrays[key] <= 1)), key
        assert np.all(arrays["eval/shortcut_error"] == arrays["eval/shortcut_error"][0])
        assert arrays["update/error"].shape == (LLM_GRID.smoke.updates,)
        assert meta["spec"]["recorder"] == "llm_eval"
    runs = load_runs(tmp_path, LLM_GRID.name)
    assert set(runs[variant]) == {"tpo", "grpo"}
    tpo, grpo = runs[variant]["tpo"], runs[variant]["grpo"]
    # the evaluation before any update sees the same weights and the same RNG: equal values
    assert tpo.arrays["eval/error"][0, 0] == grpo.arrays["eval/error"][0, 0]
    assert tpo.arrays["eval/sampled_error"][0, 0] == grpo.arrays["eval/sampled_error"][0, 0]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:2 of 2 batches had no signal")
def test_evaluation_leaves_training_unchanged(tiny_llm_dir: str) -> None:
    """Evaluating restores torch's RNG: the training samples are those of a run without evaluations (the
    same batch errors, the same RNG state after training) and the weights end the same."""
    from experiments.jobs import build_model
    from experiments.recorders import CurveRecorder, LLMEvalRecorder

    spec = _tiny(next(iter(LLM_GRID.build(2, True).values()))["tpo"], tiny_llm_dir)
    errors, states, weights = [], [], []
    for recorder in (CurveRecorder(), LLMEvalRecorder(**{**spec.recorder_kwargs, "eval_every": 1})):
        model = build_model(spec, seed=3)
        model.learn(n_iterations=2, callback=recorder, log_interval=0)
        errors.append(recorder.arrays()["update/error"])
        states.append(torch.random.get_rng_state())
        weights.append(torch.cat([p.detach().flatten() for p in model.policy.parameters()]))
        if isinstance(recorder, LLMEvalRecorder):
            assert len(recorder.evals["error"]) == 3  # before training and after each update
    np.testing.assert_array_equal(errors[0], errors[1])
    assert torch.equal(states[0], states[1])
    assert torch.equal(weights[0], weights[1])


def test_recorder_refuses_bad_settings() -> None:
    env = {"dataset": "letter_counting", "min_words": 1, "max_words": 1, "size": 20, "eval_size": 5}
    from experiments.recorders import LLMEvalRecorder

    with pytest.raises(ValueError, match="n_prompts=6 is more than the test split's 5 items"):
        LLMEvalRecorder(env, eval_every=1, n_prompts=6)
    with pytest.raises(ValueError, match="split='train'; use one of validation, test"):
        LLMEvalRecorder(env, eval_every=1, n_prompts=2, split="train")
    with pytest.raises(ValueError, match="eval_every=0"):
        LLMEvalRecorder(env, eval_every=0, n_prompts=2)
    assert not math.isnan(LLMEvalRecorder(env, eval_every=1, n_prompts=2).shortcut["binary"][1])
