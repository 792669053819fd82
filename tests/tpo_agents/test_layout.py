"""Tests of tpo_agents/layout.py: the action-major layout and the softmaxes over its last axis."""

import math

import pytest
import torch

from tpo_agents.layout import argmax_last, as_action_major, log_softmax_last, softmax_last


def action_major(x: torch.Tensor) -> torch.Tensor:
    """The same values with the last axis outermost in memory (a small logit table's layout)."""
    out = as_action_major(x)
    assert out.movedim(-1, 0).is_contiguous()
    torch.testing.assert_close(out, x, rtol=0, atol=0, equal_nan=True)
    return out


def test_as_action_major_copies_only_what_is_not_action_major() -> None:
    table = torch.randn(6, 3)
    moved = as_action_major(table)
    assert moved.data_ptr() != table.data_ptr() and moved.stride() == (1, 6)
    assert as_action_major(moved) is moved  # already action-major: itself
    for one_axis in (torch.randn(5), torch.randn(4, 1)):
        assert as_action_major(one_axis) is one_axis


@pytest.mark.parametrize("shape", [(5, 3), (4, 6, 10), (2, 1)])
def test_last_axis_softmax_helpers_equal_torch_in_either_layout(shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape, dtype=torch.float64)
    for layout in (x, action_major(x)):
        assert torch.allclose(log_softmax_last(layout), torch.log_softmax(x, -1), atol=1e-12)
        assert torch.allclose(softmax_last(layout), torch.softmax(x, -1), atol=1e-12)
        assert softmax_last(layout).stride() == layout.stride()  # the input's layout
    assert torch.allclose(softmax_last(torch.tensor([[0.0, math.log(3.0)]])), torch.tensor([[0.25, 0.75]]))


def test_last_axis_softmax_helpers_give_the_gradient_of_torch() -> None:
    x = torch.randn(3, 4, 5)
    weights = torch.randn(3, 4, 5)
    grads = []
    for layout in (x, action_major(x)):
        leaf = layout.clone().requires_grad_()
        (log_softmax_last(leaf) * weights).sum().backward()
        grads.append(leaf.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_argmax_last_is_the_first_maximum_in_either_layout() -> None:
    x = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.0, 1.0], [-1.0, -3.0, -2.0], [0.0, 0.0, 5.0]])
    for layout in (x, action_major(x)):
        assert argmax_last(layout).tolist() == [1, 0, 0, 2]
    with_nan = action_major(torch.tensor([[0.0, float("nan"), 1.0], [3.0, 1.0, 2.0]]))
    assert argmax_last(with_nan).tolist() == [1, 0]  # NaN counts as the largest, as in torch
