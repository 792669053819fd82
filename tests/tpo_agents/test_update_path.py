"""The update path reads one way: collection writes every field the losses read (pi_old included), the
learn loop asks the mode for a typed view and calls the algorithm's loss in code (no method name built
from a string), the modes never import the algorithms, and the learn loop does not import the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch as th

from tests.test_layers import imports
from tpo_agents import DG, GRPO, TPO
from tpo_agents.modes import ExactView, GroupView, SampleView

th.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
LEARN_LOOP_AND_MODES = [ROOT / "tpo_agents" / "learn_loop.py", ROOT / "tpo_agents" / "base_class.py",
                        ROOT / "tpo_agents" / "mode_choice.py",
                        *sorted((ROOT / "tpo_agents" / "modes").glob("*.py"))]  # fmt: skip


def string_built_lookups(path: Path) -> list[int]:
    """Lines of ``path`` that look an attribute up by a name built from strings at run time
    (``getattr(x, f"{kind}_loss")``, ``getattr(x, kind + "_view")``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr", "setattr"} and len(node.args) >= 2
                and isinstance(node.args[1], ast.JoinedStr | ast.BinOp)):  # fmt: skip
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", LEARN_LOOP_AND_MODES, ids=lambda p: p.name)
def test_no_method_dispatch_by_string(path: Path) -> None:
    assert string_built_lookups(path) == []


def test_the_finder_finds_one(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text('def f(self, kind):\n    getattr(self, f"{kind}_loss")\n'
                                   '    return getattr(self, kind + "_view"), getattr(self, "eta")\n')
    assert string_built_lookups(tmp_path / "x.py") == [2, 3]


def test_the_modes_never_import_the_algorithms_and_the_learn_loop_not_the_fast_collectors() -> None:
    algorithms = {"tpo_agents.learn_loop", "tpo_agents.base_class", "tpo_agents.fast_collectors"}
    for path in (ROOT / "tpo_agents" / "modes").glob("*.py"):
        assert not algorithms & imports(path), path
    learn_loop = imports(ROOT / "tpo_agents" / "learn_loop.py")
    assert not any(name.startswith("tpo_agents.fast_collectors") for name in learn_loop)


@pytest.mark.parametrize(("algo", "views"), [(TPO, ("group",)), (GRPO, ("group", "sample", "exact")),
                                             (DG, ("sample", "exact"))])  # fmt: skip
def test_loss_views_are_the_losses_defined(algo: type, views: tuple[str, ...]) -> None:
    assert algo.loss_views() == views


def tiny_tpo(**kwargs) -> TPO:
    return TPO("TransformerPolicy", "TPO/TokenReversal-v0", env_kwargs=dict(sequence_length=3),
               batch_size=4, group_size=2, policy_kwargs=dict(d_model=8, n_layers=1, n_heads=2), seed=0,
               **kwargs)  # fmt: skip


def test_pi_old_is_the_first_forward_written_once_and_reading_log_probs_writes_nothing() -> None:
    model = tiny_tpo(n_epochs=2)
    _, callback = model._setup_learn(10**6, None)
    batch = model.collect(callback)
    assert batch.old_log_probs is None and batch.distinct is not None  # no graph kept from collection
    with th.no_grad():
        at_collection = model.mode.log_probs(model.policy, batch)
    for _ in range(2):
        model.mode.log_probs(model.policy, batch)
        assert batch.old_log_probs is None
    model.train(batch)
    assert th.equal(batch.old_log_probs, at_collection)  # the first epoch's forward at theta_old
    assert not batch.old_log_probs.requires_grad
    moved = model.mode.log_probs(model.policy, batch).detach()
    assert not th.equal(moved, at_collection)
    model.mode.keep_old_log_probs(batch, moved)  # written once: a later forward does not replace it
    assert th.equal(batch.old_log_probs, at_collection)


def test_the_view_is_typed_and_the_loss_is_chosen_by_its_kind() -> None:
    model = tiny_tpo()
    _, callback = model._setup_learn(10**6, None)
    batch = model.collect(callback)
    log_probs = model.mode.log_probs(model.policy, batch)
    model.mode.keep_old_log_probs(batch, log_probs)
    view = model.mode.view("group", batch, log_probs)
    assert isinstance(view, GroupView) and view.kind == "group" and view.n_seeds == 1
    th.testing.assert_close(model.loss(view)[0], model.group_loss(view)[0], atol=0, rtol=0)
    with pytest.raises(ValueError, match="view 'exact': token mode offers group"):
        model.mode.view("exact", batch, view.logscores)
    assert not isinstance(view, SampleView | ExactView)
