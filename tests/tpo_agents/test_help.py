"""The shared hyperparameters show on every algorithm: in its signature (``help``, IDEs) and docstring."""

from __future__ import annotations

import inspect
import pydoc

import pytest

from tpo_agents import CE, DG, GRPO, PG, PPO, TPO, GroupPG
from tpo_agents.base_class import GroupBaseAlgorithm

SHARED = [name for name in inspect.signature(GroupBaseAlgorithm.__init__).parameters
          if name not in ("self", "policy", "env") and not name.startswith("_")]


@pytest.mark.parametrize("algo", [TPO, GRPO, DG, PPO, PG, GroupPG, CE])
def test_help_lists_own_and_shared_hyperparameters(algo):
    params = inspect.signature(algo).parameters
    assert list(params)[:2] == ["policy", "env"]
    assert set(SHARED) <= set(params) and "kwargs" not in params
    text = pydoc.render_doc(algo, renderer=pydoc.plaintext)
    assert all(f":param {name}:" in text for name in ("batch_size", "n_epochs", "group_mode", "n_seeds"))


def test_own_defaults_stay_and_an_unknown_keyword_is_still_refused():
    assert inspect.signature(TPO).parameters["eta"].default == 1.0
    assert inspect.signature(GRPO).parameters["beta"].default == 0.04
    with pytest.raises(TypeError, match="batch_sise"):
        TPO("TransformerPolicy", "TPO/TokenReversal-v0", batch_sise=4)
