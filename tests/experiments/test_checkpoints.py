"""A job's checkpoints (experiments.checkpoints): a stopped job resumes as if it had never stopped."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments import checkpoints
from experiments.core import checkpoint_path, seed_path
from experiments.definitions import get_experiment
from experiments.jobs import ProgressLines, Task, train_job, write_results
from experiments.run import checkpoint_every_s, parse_args

torch.set_num_threads(1)


class Stopped(Exception):
    """Stands for a process killed right after a checkpoint."""


def job_of(experiment: str, variant: str, algo: str, out: Path, seeds: int = 1, updates: int = 4,
           every_s: float | None = 0.0, policy: dict | None = None) -> tuple[Task, ...]:
    """``seeds`` consecutive seeds (0, 1, ...) of one run of ``experiment`` at the smoke size with
    ``updates`` updates, as one job saving a checkpoint every ``every_s`` seconds."""
    definition = get_experiment(experiment)
    spec = definition.build(updates, True)[variant][algo]
    if policy:
        policy = {**spec.kwargs["policy_kwargs"], **policy}
        spec = replace(spec, kwargs={**spec.kwargs, "policy_kwargs": policy})
    return tuple(Task(experiment, variant, seed, spec, str(seed_path(out, experiment, variant, algo, seed)),
                      curves=definition.curves, checkpoint_every_s=every_s) for seed in range(seeds))


def stop_after(monkeypatch: pytest.MonkeyPatch, updates: int) -> None:
    """The job stops (:class:`Stopped`) right after saving its checkpoint at ``updates`` updates done."""
    save = checkpoints.save_checkpoint

    def save_then_stop(path: Path, state: dict) -> None:
        save(path, state)
        if state["recorder"].updates_done == updates:
            raise Stopped

    monkeypatch.setattr(checkpoints, "save_checkpoint", save_then_stop)


def assert_same_curves(first: list, second: list) -> None:
    """Equal curves, but for the timings (seconds, tokens per second)."""
    for (path_a, arrays_a, _), (path_b, arrays_b, _) in zip(first, second, strict=True):
        assert Path(path_a).name == Path(path_b).name and set(arrays_a) == set(arrays_b)
        for key in [key for key in arrays_a if not key.endswith(("seconds", "_per_s"))]:
            np.testing.assert_array_equal(arrays_a[key], arrays_b[key], err_msg=key)


@pytest.mark.parametrize(("experiment", "variant", "algo", "seeds"), [
    ("tabular_multi", "N100_K10", "tpo", 2),  # two seeds as one population
    ("terminal", "prompts/H7", "tpo", 1),  # the transformer, its fast collector
])
def test_a_stopped_job_resumes_from_its_checkpoint_as_if_it_had_never_stopped(
        experiment, variant, algo, seeds, tmp_path, monkeypatch):
    straight, _ = train_job(job_of(experiment, variant, algo, tmp_path / "straight", seeds, every_s=None),
                            code="c")
    job = job_of(experiment, variant, algo, tmp_path / "stopped", seeds)
    saved = checkpoint_path(job[0].path, seeds)
    stop_after(monkeypatch, 2)
    with pytest.raises(Stopped):
        train_job(job, code="c")
    assert saved.exists() and not Path(job[0].path).exists()
    monkeypatch.undo()
    torch.manual_seed(12345)  # a new process: other global RNG states, which the checkpoint restores
    np.random.seed(54321)
    resumed, _ = train_job(job, code="c")
    assert_same_curves(straight, resumed)
    assert [meta["resumed_at"] for _, _, meta in resumed] == [[2]] * seeds
    assert all(meta["cpu_s"] > 0 and "resumed_at" not in meta for _, _, meta in straight)
    write_results(resumed)
    assert not saved.exists() and all(Path(task.path).exists() for task in job)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*batches had no signal")
def test_an_agent_run_resumes_with_its_evaluations_as_if_it_had_never_stopped(tiny_llm_dir, tmp_path,
                                                                              monkeypatch):
    """A language model on a multi-turn env (``agents_grid``), evaluated before training and after
    every update: stopped after its second update and resumed, it records what a run that never stopped
    records, with no second evaluation at the resume."""
    policy = {"model": tiny_llm_dir, "max_new_tokens": 3}
    args = ("agents_grid", "guess_number/lr1e-05", "tpo")
    straight, _ = train_job(job_of(*args, tmp_path / "straight", updates=3, every_s=None, policy=policy),
                            code="c")
    job = job_of(*args, tmp_path / "stopped", updates=3, policy=policy)
    stop_after(monkeypatch, 2)
    with pytest.raises(Stopped):
        train_job(job, code="c")
    monkeypatch.undo()
    torch.manual_seed(12345)
    resumed, _ = train_job(job, code="c")
    assert list(resumed[0][1]["eval/x"]) == [0, 1, 2, 3]
    assert_same_curves(straight, resumed)


def test_a_checkpoint_of_another_run_is_ignored_with_a_line_saying_why(tmp_path, monkeypatch, capsys):
    job = job_of("tabular_single", "K100", "pg", tmp_path)
    stop_after(monkeypatch, 1)
    with pytest.raises(Stopped):
        train_job(job, code="old")
    monkeypatch.undo()
    results, _ = train_job(job, code="new")
    assert "resumed_at" not in results[0][2]
    assert "not resumed, the checkpoint is of another run (code 'old' here 'new')" in capsys.readouterr().err
    saved = checkpoint_path(job[0].path)
    saved.write_bytes(b"not a checkpoint")
    results, _ = train_job(job, code="new")
    assert "resumed_at" not in results[0][2] and "cannot be read" in capsys.readouterr().err


def test_checkpoint_path_names_the_job_s_seeds():
    assert checkpoint_path("out/a/seed_3.npz") == Path("out/a/seed_3.checkpoint.pt")
    assert checkpoint_path("out/a/seed_3.npz", 4) == Path("out/a/seed_3..6.checkpoint.pt")


def test_a_resumed_job_s_progress_counts_from_its_resume():
    stream, now = io.StringIO(), [0.0]
    progress = ProgressLines("job", 10, after_s=0, stream=stream, clock=lambda: now[0], first=4)
    now[0] = 100.0
    progress(5)
    assert stream.getvalue() == "job: update 5/10, 100 s, about 500 s left\n"


def test_checkpoints_by_default_every_15_minutes_with_processes_never_with_ray():
    assert checkpoint_every_s("processes", None) == 900 and checkpoint_every_s("processes", 2.5) == 150
    assert checkpoint_every_s("processes", 0) is None and checkpoint_every_s("ray", None) is None
    with pytest.raises(ValueError, match="--checkpoint-every 5: --launcher ray keeps no checkpoints"):
        checkpoint_every_s("ray", 5)
    assert parse_args(["tabular_single", "--checkpoint-every", "0.5"]).checkpoint_every == 0.5
    with pytest.raises(SystemExit):
        parse_args(["tabular_single", "--checkpoint-every", "-1"])
