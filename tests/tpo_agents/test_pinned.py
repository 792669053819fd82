"""Behaviour kept through refactors: the first updates of every mode and algorithm, as pinned.

``tests/data/pinned_updates.json`` holds, per run of :mod:`tests.pinned_runs`, the task error before
each of the first ``N_PINNED`` updates, the loss and the first epoch's gradient norm; the same seeds
must reproduce them on any CPU (within ``tolerance(update)``, see :mod:`tests.pinned_runs`), and the
same seed twice must give bitwise identical numbers over ``N_UPDATES`` updates.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.pinned_runs import ATOL, N_PINNED, N_UPDATES, PINNED, RUNS, run, tolerance

EXPECTED = json.loads(PINNED.read_text())
#: One run per (policy, mode) pair, plus PPO's clipped ratio: the determinism runs.
DETERMINISM_RUNS = ("token/ppo", "token/tpo", "sequence/tpo", "mnist/grpo", "bandit/tpo", "exact/grpo")


def test_every_run_is_pinned():
    assert sorted(EXPECTED) == sorted(RUNS)
    assert all(len(values) == N_PINNED for pinned in EXPECTED.values() for values in pinned.values())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_first_updates_reproduce(name):
    got = run(name)
    assert sorted(got) == sorted(EXPECTED[name])
    for key, values in EXPECTED[name].items():
        for update, (value, pinned) in enumerate(zip(got[key], values, strict=True)):
            np.testing.assert_allclose(value, pinned, rtol=tolerance(update), atol=ATOL,
                                       err_msg=f"{name} {key} update {update}")


@pytest.mark.slow
@pytest.mark.parametrize("name", DETERMINISM_RUNS)
def test_same_seed_same_numbers(name):
    first, second = run(name, n_updates=N_UPDATES), run(name, n_updates=N_UPDATES)
    assert first == second
    other_seed = run(name, seed=1, n_updates=2)
    assert other_seed != {key: values[:2] for key, values in first.items()}
