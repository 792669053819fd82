"""Behaviour kept through refactors: the first 20 updates of every mode and algorithm, as pinned.

``tests/data/pinned_updates.json`` holds, per run of :mod:`tests.pinned_runs`, the task error before
each update, the loss and the first epoch's gradient norm; the same seeds must reproduce them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.pinned_runs import PINNED, RUNS, run

EXPECTED = json.loads(PINNED.read_text())


def test_every_run_is_pinned():
    assert sorted(EXPECTED) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_first_updates_reproduce(name):
    got = run(name)
    assert sorted(got) == sorted(EXPECTED[name])
    for key, values in EXPECTED[name].items():
        np.testing.assert_allclose(got[key], values, rtol=2e-5, atol=1e-6, err_msg=f"{name} {key}")
