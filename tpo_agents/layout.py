"""CPU memory layout of categorical log-probabilities: action-major tensors and the softmaxes over them.

A policy with few actions (the logit table, the MLP's logits) keeps its log-probabilities action-major in
memory, the actions axis outermost, where torch's CPU kernels along a short last axis are slow; the
functions here compute over the last axis K in either layout, with the same values up to rounding. The
module imports nothing of the project: the losses and the policies both read it.
"""

from collections.abc import Callable

import torch

#: Policies with at most this many actions keep their log-probabilities action-major in memory (the
#: actions axis outermost: the logit table, the MLP's logits), where torch's CPU softmax along a short
#: last axis is slow (:func:`log_softmax_last`): measured 2-10x faster for 2 to 10 actions, equal at
#: 16, slower beyond.
ACTION_MAJOR_MAX_ACTIONS = 10


def is_action_major(x: torch.Tensor) -> bool:
    """Whether ``x`` [..., K] lies in memory with its last axis outermost (``x.movedim(-1, 0)`` is
    contiguous) and has more than one row (one row, ``[1, K]``, is in both layouts and counts as
    row-major): the layout of a logit table with few actions (``TabularSoftmaxPolicy``) and of the MLP's
    log-probabilities (``MlpSoftmaxPolicy``)."""
    return (x.dim() > 1 and x.shape[-1] > 1 and x.numel() > x.shape[-1]
            and x.movedim(-1, 0).is_contiguous())


def _along_last(op: Callable[[torch.Tensor, int], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``op(x, -1)``, computed as ``op`` over the outermost memory axis when ``x`` is action-major
    (:func:`is_action_major`); the result has ``x``'s layout."""
    if is_action_major(x):
        return op(x.movedim(-1, 0), 0).movedim(0, -1)
    return op(x, -1)


def as_action_major(x: torch.Tensor) -> torch.Tensor:
    """``x`` [..., K] with its last axis outermost in memory (:func:`is_action_major`): ``x`` itself where it
    already is (or has one axis), else a copy of the same shape and values. Softmaxes and reductions
    over K of the result take the fast outer-axis kernels (:func:`log_softmax_last`)."""
    if x.dim() < 2 or x.shape[-1] < 2 or is_action_major(x):
        return x
    return x.movedim(-1, 0).contiguous().movedim(0, -1)


def log_softmax_last(x: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` over the last axis K, computed over the outermost memory axis when ``x`` is
    action-major (:func:`is_action_major`): on the CPU torch's kernel along a short contiguous last axis
    (K = 2..10) is 2-10x slower than along an outer axis. Same values up to rounding, same layout
    as ``x``; any other tensor takes ``torch.log_softmax(x, -1)``."""
    return _along_last(torch.log_softmax, x)


def softmax_last(x: torch.Tensor) -> torch.Tensor:
    """``softmax`` over the last axis K, as :func:`log_softmax_last` computes it."""
    return _along_last(torch.softmax, x)


def argmax_last(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(-1)``: the first index of each maximum over the last axis K. For an action-major
    ``x`` (:func:`is_action_major`), whose strided argmax is about 20x slower, it is read from
    ``m = max_K x`` as ``K - max_k (K - k) [x_k = m]`` (reductions over the outer axis); NaN rows take
    ``torch.argmax``'s answer."""
    if not is_action_major(x):
        return x.argmax(-1)
    n = x.shape[-1]
    best = x.amax(-1, keepdim=True)
    if torch.isnan(best).any():
        return x.contiguous().argmax(-1)
    first_weight = torch.arange(n, 0, -1, device=x.device)  # K - k
    return n - ((x == best) * first_weight).amax(-1)
