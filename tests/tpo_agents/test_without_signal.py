"""The one warning of a run whose steps mostly had no signal (``tpo_agents.without_signal``), shared by the
learn loop, TargetPOTrainer and verl's plugin: a step's kind read from the TPO loss's diagnostics, an
optimizer step's micro-batches counted as one step, and at most one warning until a new run."""

from __future__ import annotations

import warnings

import pytest
import torch

from tpo_agents import losses as L
from tpo_agents.without_signal import StepsWithoutSignal, loss_signal, warn_without_signal

torch.set_num_threads(1)
K = 2


def _stats(scores: list[float], mask_rows: list[int]) -> dict[str, torch.Tensor]:
    """The diagnostics of ``completion_tpo_loss`` on two groups of K rows of 3 tokens, rows masked by 0/1."""
    mask = torch.tensor(mask_rows, dtype=torch.float32).unsqueeze(-1).expand(-1, 3)
    log_probs = -torch.rand(len(scores), 3, generator=torch.Generator().manual_seed(0))
    return L.completion_tpo_loss(log_probs, log_probs, mask, torch.tensor(scores), K)[1]


def _messages(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "had no signal" in str(w.message)]


def _counter() -> StepsWithoutSignal:
    return StepsWithoutSignal("optimizer steps", "tpo/zero_variance_frac = 1", "raise max_completion_length")


@pytest.mark.parametrize(("scores", "mask_rows", "expected"), [
    ([1.0, 0.0, 0.5, 0.5], [1, 1, 1, 1], (True, True)),  # group 0 differs
    ([1.0, 1.0, 0.5, 0.5], [1, 1, 1, 1], (False, True)),  # equal scores in every group
    ([1.0, 0.0, 0.5, 0.2], [0, 1, 1, 0], (False, False)),  # no group keeps two rows
    ([1.0, 0.0, 0.5, 0.5], [0, 1, 1, 1], (False, True)),  # the group left with two rows is flat
])  # fmt: skip
def test_loss_signal_reads_the_loss_diagnostics(scores, mask_rows, expected):
    assert loss_signal(_stats(scores, mask_rows)) == expected


def test_loss_signal_of_processes_gathered_is_any_process():
    gathered = {"unusable_group_frac": torch.tensor([1.0, 0.5]),
                "zero_variance_frac": torch.tensor([0.0, 0.0])}
    assert loss_signal(gathered) == (True, True)
    gathered["zero_variance_frac"] = torch.tensor([0.0, 1.0])  # process 0 has no usable group, process 1 flat
    assert loss_signal(gathered) == (False, True)


def test_micro_batches_of_one_step_count_once_and_signal_in_one_is_enough():
    counter = _counter()
    counter.add(False, False, step=0)
    counter.add(True, True, step=0)  # step 0: one micro-batch with signal
    counter.add(False, False, step=1)
    counter.add(False, True, step=1)  # step 1: a flat group, none with signal
    counter.add(False, False, step=2)  # step 2: every row dropped, still open
    assert (counter.steps, counter.flat, counter.dropped) == (2, 1, 0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert counter.warn()
    assert (counter.steps, counter.flat, counter.dropped) == (3, 1, 1)
    (message,) = _messages(record)
    assert message.startswith("2 of 3 optimizer steps had no signal")
    assert "1 with equal scores in every group" in message and "tpo/zero_variance_frac = 1" in message
    assert "1 with no group of two completions left" in message and "raise max_completion_length" in message


def test_it_warns_once_until_reset_and_not_for_half_or_fewer():
    counter = _counter()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for step in range(4):
            counter.add(step % 2 == 0, True)  # a step of its own each: 2 of 4 flat, not more than half
            assert not counter.warn()
        for _ in range(4):
            counter.add(False, True)
        assert counter.warn(min_steps=20) is False  # too few steps yet
        assert counter.warn() and counter.warn()
        assert len(_messages(record)) == 1
        counter.reset()
        assert not counter.warn()  # a new run: nothing counted
        counter.add(False, False)
        assert counter.warn()
    assert [m.split(",")[0] for m in _messages(record)] == ["6 of 8 optimizer steps had no signal",
                                                            "1 of 1 optimizer steps had no signal"]


def test_warn_without_signal_words_the_learn_loop_warning():
    with pytest.warns(UserWarning, match="3 of 4 batches had no signal") as record:
        assert warn_without_signal(4, 3, stacklevel=1)
    assert "train/batches_without_signal counts them" in str(record[0].message)
    assert record[0].filename == __file__  # stacklevel 1: the caller's line
    assert not warn_without_signal(4, 2) and not warn_without_signal(0, 0)
