"""The paper's optimizers, written for PyTorch (paper Sec. 3, 3.1).

* :class:`NormalizedStep`: the tabular bandits' update ``z <- z + alpha * g / ||g||`` (paper Sec. 3.1), with a
  global L2 norm over every parameter of the optimizer.
* :class:`MuonAdam`: optax 0.2.8 ``contrib.muon`` with its defaults (paper Sec. 3), as ONE torch optimizer
  with two kinds of parameter groups: ``kind="muon"`` for parameters that are exactly 2-D and
  ``kind="adam"`` (a Nesterov Adam without weight decay) for everything else.

``torch.optim.Muon`` (torch >= 2.9) is not used because it differs from optax's Muon in five ways:
it runs Newton-Schulz in bfloat16, has no bias correction of the Nesterov momentum, normalizes by
``max(||X||_F, 1e-7)`` instead of ``||X||_F + 1e-8``, scales by ``sqrt(max(1, rows/cols))`` (the torch
``(out, in)`` convention; on a flax ``(in, out)`` parameter that is the inverse factor), and defaults to a
weight decay of 0.1. It also handles 2-D parameters only, so it cannot be the Adam part.

Both are :class:`EagerOptimizer` s: torch's ``Optimizer`` without the ``torch.compile`` guards of its
bookkeeping methods, whose first call imports ``torch._dynamo`` (about 2 s, more than a small bandit
run's whole update loop).

Both optimizers keep one step counter per parameter group (``group["step"]``); every call of
:meth:`step` advances the counters of all groups together, so the counter is effectively per optimizer
(as optax's ``count``), and it is saved by ``state_dict()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = [
    "EagerOptimizer", "MuonAdam", "NormalizedStep", "newton_schulz", "newton_schulz_all", "split_muon_adam",
]

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def _without_compile_guard(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as written, without the ``torch._disable_dynamo`` wrapper it is decorated with (the
    wrapper keeps the function's ``__wrapped__``; a method without one is returned as it is)."""
    return getattr(method, "__wrapped__", method)


class EagerOptimizer(Optimizer):
    """torch's ``Optimizer`` whose ``add_param_group``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` run as written: torch wraps them in ``torch._disable_dynamo``, which imports
    ``torch._dynamo`` on first call (about 2 s per process: building an optimizer, or one
    ``zero_grad``). The guards only keep ``torch.compile`` from tracing into these methods; this
    project's optimizers run eagerly."""

    add_param_group = _without_compile_guard(Optimizer.add_param_group)
    zero_grad = _without_compile_guard(Optimizer.zero_grad)
    state_dict = _without_compile_guard(Optimizer.state_dict)
    load_state_dict = _without_compile_guard(Optimizer.load_state_dict)

    n_seeds: int = 1
    """The members S that the parameters hold on their leading axis (a population)."""

    def __getstate__(self) -> dict[str, Any]:
        """torch's pickled state (defaults, state, parameter groups) and ``n_seeds``, so that an optimizer
        pickled whole (a job's checkpoint, ``experiments.checkpoints``) steps its members as before."""
        return {**super().__getstate__(), "n_seeds": self.n_seeds}


class NormalizedStep(EagerOptimizer):
    """Normalized gradient step: ``p <- p - lr * grad / sqrt(sum(grad**2) + eps)``.

    The sum runs over **all** gradients of the optimizer (every group), so the whole parameter vector
    moves by exactly ``lr`` in L2 norm (for a single group). With a loss whose negative gradient is an
    ascent direction ``g`` this is the reference's ``z <- z + alpha * g / ||g||``.

    :param params: parameters (or parameter groups)
    :param lr: the step length alpha
    :param eps: added under the square root (1e-30 in the reference)
    :param n_seeds: the parameters hold S independent members on their leading axis (a population,
        ``GroupPolicy(n_seeds=S)``); each member is normalised by its own norm
    """

    def __init__(
        self, params: Iterable[Any], lr: float = 0.1, eps: float = 1e-30, n_seeds: int = 1
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        self.n_seeds = n_seeds
        super().__init__(params, {"lr": lr, "eps": eps, "step": 0})

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        for group in self.param_groups:
            group["step"] += 1
        if not grads:
            return loss
        members = self.n_seeds
        sq = sum(_squared_norm(g, members > 1) for g in grads)
        eps = self.param_groups[0]["eps"]
        inv_norm = 1.0 / torch.sqrt(sq + eps)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                scale = (group["lr"] * inv_norm).to(p.dtype)
                if members > 1:
                    scale = scale.reshape(members, *[1] * (p.dim() - 1))
                p.addcmul_(p.grad, scale, value=-1.0)
        return loss


def _squared_norm(g: Tensor, per_member: bool) -> Tensor:
    """``sum(g**2)`` in float64 (exact squares of float32 values, float64 sums), squared in place in a
    float64 copy (never in ``g``): a scalar, or with ``per_member`` one sum per member ``[S]`` over every
    axis after the leading one (a ``[S]`` parameter is its own squares: ``sum(())`` would sum them all)."""
    squares = g.to(torch.float64, copy=True).square_()
    if not per_member:
        return squares.sum()
    return squares.sum(tuple(range(1, g.dim()))) if g.dim() > 1 else squares


def newton_schulz(
    x: Tensor,
    steps: int = 5,
    eps: float = 1e-8,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
) -> Tensor:
    """Approximate orthogonalization of a 2-D tensor (optax ``orthogonalize_via_newton_schulz``); a
    ``[S, rows, cols]`` tensor is S matrices, each orthogonalized on its own (batched matmuls).

    ``X`` is transposed if it has more rows than columns, divided by ``||X||_F + eps``, iterated
    ``steps`` times as ``A = X X^T; X <- a X + (b A + c A^2) X``, and transposed back.
    """
    if x.ndim not in (2, 3):
        raise ValueError(f"newton_schulz needs a 2-D tensor (or [S, rows, cols]), got shape {tuple(x.shape)}")
    a, b, c = coefficients
    transpose = x.shape[-2] > x.shape[-1]
    if transpose:
        x = x.mT
    norm = torch.linalg.matrix_norm(x) if x.ndim == 2 else torch.linalg.matrix_norm(x, keepdim=True)
    x = x / (norm + eps)
    fused = torch.addmm if x.ndim == 2 else torch.baddbmm  # beta * x + alpha * (y @ z) in one call
    for _ in range(steps):
        gram = x @ x.mT
        x = fused(x, fused(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if transpose else x


SMALL_MATRIX = 4096
"""Matrices of at most this many elements are orthogonalized together with the others of their shape."""


def newton_schulz_all(
    matrices: list[Tensor],
    steps: int = 5,
    eps: float = 1e-8,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
) -> list[Tensor]:
    """:func:`newton_schulz` of each of ``matrices`` (2-D, or ``[S, rows, cols]`` stacks of S), the small
    ones (at most :data:`SMALL_MATRIX` elements) of one shape, after transposing those with more rows than
    columns, in one batched call: the same iteration, each matrix on its own, in fewer calls. A transformer's
    nine small Muon parameters (embeddings, head, attention biases) are three such calls; larger matrices
    go alone (stacked, they outgrow the cache: four ``[2, 64, 256]`` took 3.6 ms together, 2.8 alone)."""
    transposed = [x.shape[-2] > x.shape[-1] for x in matrices]
    oriented = [x.mT if flip else x for x, flip in zip(matrices, transposed, strict=True)]
    batches: dict[Any, list[int]] = {}
    for i, x in enumerate(oriented):
        rows, cols = x.shape[-2:]
        batches.setdefault((rows, cols) if rows * cols <= SMALL_MATRIX else i, []).append(i)
    out: list[Tensor] = list(matrices)
    for indices in batches.values():
        stacks = [oriented[i].reshape(-1, *oriented[i].shape[-2:]) for i in indices]
        result = newton_schulz(torch.cat(stacks) if len(stacks) > 1 else stacks[0], steps, eps, coefficients)
        for i, part in zip(indices, result.split([len(x) for x in stacks]), strict=True):
            x = part.reshape(oriented[i].shape)
            out[i] = x.mT if transposed[i] else x
    return out


def split_muon_adam(
    params: Iterable[Any],
    is_muon: Callable[[str, Tensor], bool] | None = None,
    n_seeds: int = 1,
) -> list[dict[str, Any]]:
    """Partition parameters into a ``kind="muon"`` group and a ``kind="adam"`` group.

    ``params`` holds tensors or ``(name, tensor)`` pairs (as ``module.named_parameters()``). The default
    rule is optax's: exactly 2-D arrays go to Muon, everything else to Adam (with ``n_seeds > 1``, the
    shape after the leading member axis). Empty groups are dropped.
    """
    member_axes = int(n_seeds > 1)
    rule = is_muon if is_muon is not None else (lambda _name, p: p.ndim - member_axes == 2)
    groups: dict[str, dict[str, list[Any]]] = {
        "muon": {"params": [], "param_names": []},
        "adam": {"params": [], "param_names": []},
    }
    named = True
    for i, item in enumerate(params):
        if isinstance(item, tuple):
            name, p = item
        else:
            name, p, named = str(i), item, False
        kind = "muon" if rule(name, p) else "adam"
        groups[kind]["params"].append(p)
        groups[kind]["param_names"].append(name)
    out = []
    for kind, group in groups.items():
        if group["params"]:
            entry: dict[str, Any] = {"params": group["params"], "kind": kind}
            if named:
                entry["param_names"] = group["param_names"]
            out.append(entry)
    return out


class MuonAdam(EagerOptimizer):
    """optax 0.2.8 ``contrib.muon`` (defaults) as one PyTorch optimizer.

    Muon part (groups with ``kind="muon"``; parameters must be 2-D in the flax ``(fan_in, fan_out)``
    layout), at step t = 1, 2, ...::

        m_t   = beta m_{t-1} + (1 - beta) g_t                                  (beta = 0.95)
        m_hat = beta m_t / (1 - beta^(t+1)) + (1 - beta) g_t / (1 - beta^t)      (Nesterov, bias-corrected)
        X     = newton_schulz(m_hat, 5 steps, eps 1e-8) * sqrt(max(1, fan_out / fan_in))
        p    <- p - lr (X + weight_decay p)

    Adam part (``kind="adam"``): ``optax.adamw(nesterov=True, weight_decay=0)``::

        m_t, v_t as in Adam (b1 = 0.9, b2 = 0.999)
        m_hat = b1 m_t / (1 - b1^(t+1)) + (1 - b1) g_t / (1 - b1^t);  v_hat = v_t / (1 - b2^t)
        p    <- p - lr (m_hat / (sqrt(v_hat + eps_root) + eps) + weight_decay p)

    :param params: tensors or ``(name, tensor)`` pairs, partitioned by :func:`split_muon_adam`, or
        explicit parameter groups that each carry ``kind`` ("muon" or "adam")
    :param lr: learning rate of both parts (1e-3 in the reference)
    :param adam_lr: learning rate of the Adam part if it should differ (default: ``lr``)
    :param beta: Muon momentum
    :param ns_steps: Newton-Schulz iterations
    :param ns_coefficients: the (a, b, c) of the quintic iteration
    :param eps: Muon's Frobenius-norm epsilon
    :param nesterov: Nesterov momentum for Muon
    :param weight_decay: decoupled weight decay of the Muon part
    :param adam_betas: (b1, b2) of the Adam part
    :param adam_eps: epsilon of the Adam part (outside the square root)
    :param adam_eps_root: epsilon inside the square root
    :param adam_nesterov: Nesterov momentum for the Adam part
    :param adam_weight_decay: decoupled weight decay of the Adam part
    :param n_seeds: the parameters hold S independent members on their leading axis (a population):
        Muon orthogonalizes each member's matrix on its own; Adam is elementwise anyway
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        adam_lr: float | None = None,
        beta: float = 0.95,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
        eps: float = 1e-8,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        adam_betas: tuple[float, float] = (0.9, 0.999),
        adam_eps: float = 1e-8,
        adam_eps_root: float = 0.0,
        adam_nesterov: bool = True,
        adam_weight_decay: float = 0.0,
        n_seeds: int = 1,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        self.n_seeds = n_seeds
        params = list(params)
        if params and isinstance(params[0], dict):
            groups = params
            for group in groups:
                if group.get("kind") not in ("muon", "adam"):
                    raise ValueError("every explicit parameter group needs kind='muon' or kind='adam'")
        else:
            groups = split_muon_adam(params, n_seeds=n_seeds)
        adam_lr = lr if adam_lr is None else adam_lr
        for group in groups:
            if group["kind"] == "adam" and "lr" not in group:
                group["lr"] = adam_lr
        defaults = {
            "lr": lr,
            "beta": beta,
            "ns_steps": ns_steps,
            "ns_coefficients": tuple(ns_coefficients),
            "eps": eps,
            "nesterov": nesterov,
            "weight_decay": weight_decay,
            "adam_betas": tuple(adam_betas),
            "adam_eps": adam_eps,
            "adam_eps_root": adam_eps_root,
            "adam_nesterov": adam_nesterov,
            "adam_weight_decay": adam_weight_decay,
            "step": 0,
        }
        super().__init__(groups, defaults)
        matrix_dims = 2 + int(n_seeds > 1)
        for group in self.param_groups:
            if group["kind"] == "muon":
                for p in group["params"]:
                    if p.ndim != matrix_dims:
                        raise ValueError(f"Muon parameters must be 2-D, got shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            group["step"] += 1
            t = group["step"]
            if group["kind"] == "muon":
                self._muon_group(group, t)
            else:
                self._adam_group(group, t)
        return loss

    def _state_and_grads(self, group: dict[str, Any], *names: str) -> tuple[list[Tensor], ...]:
        """The group's parameters that take a step, their gradients and their state tensors ``names``
        (created as zeros on the first step): optax treats a missing gradient as zero; a parameter
        that never had one is left alone."""
        params, grads, states = [], [], [[] for _ in names]
        for p in group["params"]:
            state = self.state[p]
            if p.grad is None and not state:
                continue
            if not state:
                state.update({name: torch.zeros_like(p) for name in names})
            params.append(p)
            grads.append(p.grad if p.grad is not None else torch.zeros_like(p))
            for values, name in zip(states, names, strict=True):
                values.append(state[name])
        return params, grads, *states

    def _muon_group(self, group: dict[str, Any], t: int) -> None:
        beta, lr = group["beta"], group["lr"]
        params, grads, momenta = self._state_and_grads(group, "momentum")
        if not params:
            return
        torch._foreach_mul_(momenta, beta)
        torch._foreach_add_(momenta, grads, alpha=1.0 - beta)
        if group["nesterov"]:
            directions = torch._foreach_mul(momenta, beta / (1.0 - beta ** (t + 1)))
            torch._foreach_add_(directions, torch._foreach_mul(grads, (1.0 - beta) / (1.0 - beta**t)))
        else:
            directions = torch._foreach_div(momenta, 1.0 - beta**t)
        orthogonal = newton_schulz_all(directions, group["ns_steps"], group["eps"], group["ns_coefficients"])
        for p, x in zip(params, orthogonal, strict=True):
            fan_in, fan_out = p.shape[-2:]
            x = x * math.sqrt(max(1.0, fan_out / fan_in))
            if group["weight_decay"]:
                x = x + group["weight_decay"] * p
            p.add_(x, alpha=-lr)

    def _adam_group(self, group: dict[str, Any], t: int) -> None:
        b1, b2 = group["adam_betas"]
        params, grads, ms, vs = self._state_and_grads(group, "exp_avg", "exp_avg_sq")
        if not params:
            return
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, grads, alpha=1.0 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, grads, grads, value=1.0 - b2)
        if group["adam_nesterov"]:
            updates = torch._foreach_mul(ms, b1 / (1.0 - b1 ** (t + 1)))
            torch._foreach_add_(updates, torch._foreach_mul(grads, (1.0 - b1) / (1.0 - b1**t)))
        else:
            updates = torch._foreach_div(ms, 1.0 - b1**t)
        denominators = torch._foreach_div(vs, 1.0 - b2**t)
        torch._foreach_add_(denominators, group["adam_eps_root"])
        torch._foreach_sqrt_(denominators)
        torch._foreach_add_(denominators, group["adam_eps"])
        torch._foreach_div_(updates, denominators)
        if group["adam_weight_decay"]:
            torch._foreach_add_(updates, params, alpha=group["adam_weight_decay"])
        torch._foreach_add_(params, updates, alpha=-group["lr"])
