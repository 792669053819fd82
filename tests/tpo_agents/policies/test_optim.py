"""Optimizers: MuonAdam against optax's formulas written out in numpy, NormalizedStep (paper Sec. 3.1)."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from tpo_agents.policies.optim import (
    MuonAdam,
    NormalizedStep,
    newton_schulz,
    newton_schulz_all,
    split_muon_adam,
)

torch.set_num_threads(1)

LR = 0.1


def ns_reference(m: np.ndarray) -> np.ndarray:
    """Newton-Schulz as optax's ``contrib.muon`` computes it, in float64 numpy."""
    x = np.array(m, dtype=np.float64)
    transpose = x.shape[0] > x.shape[1]
    if transpose:
        x = x.T
    x = x / (np.sqrt((x**2).sum()) + 1e-8)
    for _ in range(5):
        a = x @ x.T
        x = 3.4445 * x + (-4.7750 * a + 2.0315 * a @ a) @ x
    return x.T if transpose else x


def muon_reference(p0: np.ndarray, grads: list[np.ndarray], lr: float = LR) -> np.ndarray:
    """Muon (optax 0.2.8 defaults) over several steps, from its formulas."""
    p, m = p0.copy(), np.zeros_like(p0)
    fan_in, fan_out = p0.shape
    for t, g in enumerate(grads, start=1):
        m = 0.95 * m + 0.05 * g
        m_hat = 0.95 * m / (1 - 0.95 ** (t + 1)) + 0.05 * g / (1 - 0.95**t)
        p = p - lr * ns_reference(m_hat) * math.sqrt(max(1.0, fan_out / fan_in))
    return p


def adam_reference(p0: np.ndarray, grads: list[np.ndarray], lr: float = LR) -> np.ndarray:
    """optax.adamw(nesterov=True, weight_decay=0) from its formulas."""
    p, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
    for t, g in enumerate(grads, start=1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g**2
        m_hat = 0.9 * m / (1 - 0.9 ** (t + 1)) + 0.1 * g / (1 - 0.9**t)
        v_hat = v / (1 - 0.999**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + 1e-8)
    return p


def run_steps(opt: torch.optim.Optimizer, params: list[torch.Tensor], grads: list[list[np.ndarray]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = torch.as_tensor(g)
        opt.step()


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4)])
@pytest.mark.parametrize("n_steps", [1, 2, 3])
def test_muon_matches_spec(shape: tuple[int, int], n_steps: int) -> None:
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=shape)
    grads = [rng.normal(size=shape) for _ in range(n_steps)]
    p = torch.nn.Parameter(torch.as_tensor(p0.copy()))
    opt = MuonAdam([p], lr=LR)
    assert [g["kind"] for g in opt.param_groups] == ["muon"]
    run_steps(opt, [p], [[g] for g in grads])
    np.testing.assert_allclose(p.detach().numpy(), muon_reference(p0, grads), rtol=0, atol=1e-12)


def test_muon_shape_factor_and_transpose() -> None:
    # one step from zero momentum: the update is -lr * NS(g) * sqrt(max(1, cols/rows))
    rng = np.random.default_rng(1)
    for shape, factor in [((3, 5), math.sqrt(5 / 3)), ((5, 3), 1.0), ((2, 32), 4.0)]:
        g = rng.normal(size=shape)
        p = torch.nn.Parameter(torch.zeros(shape, dtype=torch.float64))
        opt = MuonAdam([p], lr=LR)
        p.grad = torch.as_tensor(g)
        opt.step()
        np.testing.assert_allclose(p.detach().numpy(), -LR * factor * ns_reference(g), atol=1e-12)
    # newton_schulz itself, and its near-orthogonality (singular values in roughly [0.5, 1.5])
    g = rng.normal(size=(5, 3))
    x = newton_schulz(torch.as_tensor(g))
    np.testing.assert_allclose(x.numpy(), ns_reference(g), atol=1e-12)
    sv = np.linalg.svd(x.numpy(), compute_uv=False)
    assert np.all((sv > 0.5) & (sv < 1.5))


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4)])
def test_adam_part_matches_spec(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(2)
    p0 = rng.normal(size=shape)
    grads = [rng.normal(size=shape) for _ in range(3)]
    p = torch.nn.Parameter(torch.as_tensor(p0.copy()))
    opt = MuonAdam([p], lr=LR)
    assert [g["kind"] for g in opt.param_groups] == ["adam"]
    p.grad = torch.as_tensor(grads[0])
    opt.step()
    # first step: |update| = lr * (0.9 * 0.1 / (1 - 0.81) + 1) = 1.4737 lr per element
    np.testing.assert_allclose(np.abs(p.detach().numpy() - p0), LR * (0.09 / 0.19 + 1.0), rtol=1e-6)
    assert abs((0.09 / 0.19 + 1.0) - 1.474) < 1e-3
    run_steps(opt, [p], [[g] for g in grads[1:]])
    np.testing.assert_allclose(p.detach().numpy(), adam_reference(p0, grads), rtol=0, atol=1e-12)


def test_mixed_groups_share_the_step_counter() -> None:
    rng = np.random.default_rng(3)
    shapes = [(4, 6), (6,), (2, 2, 3)]
    p0 = [rng.normal(size=s) for s in shapes]
    grads = [[rng.normal(size=s) for s in shapes] for _ in range(2)]
    params = [torch.nn.Parameter(torch.as_tensor(x.copy())) for x in p0]
    opt = MuonAdam([("w", params[0]), ("b", params[1]), ("k", params[2])], lr=LR)
    assert {g["kind"]: g["param_names"] for g in opt.param_groups} == {"muon": ["w"], "adam": ["b", "k"]}
    run_steps(opt, params, grads)
    assert all(g["step"] == 2 for g in opt.param_groups)
    np.testing.assert_allclose(
        params[0].detach().numpy(), muon_reference(p0[0], [g[0] for g in grads]), atol=1e-12
    )
    for i in (1, 2):
        ref = adam_reference(p0[i], [g[i] for g in grads])
        np.testing.assert_allclose(params[i].detach().numpy(), ref, atol=1e-12)


def test_muon_adam_state_dict_round_trip() -> None:
    rng = np.random.default_rng(4)
    shapes = [(3, 5), (5,), (2, 3, 2)]
    p0 = [rng.normal(size=s) for s in shapes]
    grads = [[rng.normal(size=s) for s in shapes] for _ in range(4)]
    a = [torch.nn.Parameter(torch.as_tensor(x.copy())) for x in p0]
    opt_a = MuonAdam(a, lr=LR)
    run_steps(opt_a, a, grads[:2])
    saved = copy.deepcopy(opt_a.state_dict())  # state_dict() returns live tensors
    b = [torch.nn.Parameter(x.detach().clone()) for x in a]
    opt_b = MuonAdam(b, lr=0.5)
    opt_b.load_state_dict(saved)
    assert [g["step"] for g in opt_b.param_groups] == [2, 2]
    assert [g["lr"] for g in opt_b.param_groups] == [LR, LR]
    run_steps(opt_a, a, grads[2:])
    run_steps(opt_b, b, grads[2:])
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_muon_group_rejects_non_matrix() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError):
        MuonAdam([{"params": [p], "kind": "muon"}])
    groups = split_muon_adam([torch.zeros(2, 2), torch.zeros(2)])
    assert [g["kind"] for g in groups] == ["muon", "adam"]


def test_normalized_step_moves_by_alpha_in_global_norm() -> None:
    rng = np.random.default_rng(5)
    a = torch.nn.Parameter(torch.as_tensor(rng.normal(size=(3, 4))))
    b = torch.nn.Parameter(torch.as_tensor(rng.normal(size=(5,))))
    opt = NormalizedStep([{"params": [a]}, {"params": [b]}], lr=0.1)
    before = torch.cat([a.detach().flatten(), b.detach().flatten()]).clone()
    ga, gb = rng.normal(size=(3, 4)), rng.normal(size=(5,))
    a.grad, b.grad = torch.as_tensor(ga), torch.as_tensor(gb)
    opt.step()
    assert np.array_equal(a.grad.numpy(), ga) and np.array_equal(b.grad.numpy(), gb)  # float64: not squared
    after = torch.cat([a.detach().flatten(), b.detach().flatten()])
    delta = (after - before).numpy()
    g = np.concatenate([ga.ravel(), gb.ravel()])
    np.testing.assert_allclose(np.linalg.norm(delta), 0.1, rtol=1e-12)
    np.testing.assert_allclose(delta, -0.1 * g / np.sqrt((g**2).sum() + 1e-30), atol=1e-15)
    # a zero gradient does not produce NaNs
    a.grad, b.grad = torch.zeros_like(a), torch.zeros_like(b)
    opt.step()
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    # state_dict round trip keeps the lr and the counter
    opt2 = NormalizedStep([{"params": [a]}, {"params": [b]}], lr=1.0)
    opt2.load_state_dict(opt.state_dict())
    assert [g["lr"] for g in opt2.param_groups] == [0.1, 0.1]
    assert [g["step"] for g in opt2.param_groups] == [2, 2]


def th_equal_grads(grad: torch.Tensor, values: np.ndarray) -> bool:
    return bool(torch.equal(grad, torch.as_tensor(values, dtype=grad.dtype)))


def test_normalized_step_normalises_each_member_in_any_memory_layout() -> None:
    """Population mode: member m moves by lr in its own norm over all its parameters, also for a
    table stored action-major (strides of a transposed tensor) and a parameter of one number per member."""
    rng = np.random.default_rng(6)
    table = torch.nn.Parameter(torch.as_tensor(rng.normal(size=(3, 5, 4)), dtype=torch.float32)
                               .permute(2, 0, 1).contiguous().permute(1, 2, 0))  # [S, C, A], A outermost
    scalar = torch.nn.Parameter(torch.as_tensor(rng.normal(size=3), dtype=torch.float32))
    g_table, g_scalar = rng.normal(size=(3, 5, 4)), rng.normal(size=3)
    table.grad = torch.as_tensor(g_table, dtype=torch.float32).permute(2, 0, 1).contiguous().permute(1, 2, 0)
    scalar.grad = torch.as_tensor(g_scalar, dtype=torch.float32)
    before_table, before_scalar = table.detach().clone(), scalar.detach().clone()
    NormalizedStep([table, scalar], lr=0.5, n_seeds=3).step()
    assert th_equal_grads(table.grad, g_table) and th_equal_grads(scalar.grad, g_scalar)  # left as they were
    g_table, g_scalar = table.grad.double().numpy(), scalar.grad.double().numpy()  # the float32 gradients
    norms = np.sqrt((g_table**2).sum((1, 2)) + g_scalar**2 + 1e-30)
    np.testing.assert_allclose((table.detach() - before_table).numpy(),
                               -0.5 * g_table / norms[:, None, None], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose((scalar.detach() - before_scalar).numpy(), -0.5 * g_scalar / norms,
                               rtol=1e-5, atol=1e-7)


def test_an_optimizer_pickled_whole_keeps_its_members() -> None:
    """torch pickles an optimizer's defaults, state and groups only; ours keep ``n_seeds`` too, so that an
    unpickled population optimizer (a job's checkpoint) steps each member as before."""
    import pickle

    params = [torch.nn.Parameter(torch.ones(2, 3))]
    for optimizer in (NormalizedStep(params, lr=0.5, n_seeds=2), MuonAdam(params, n_seeds=2),
                      NormalizedStep(params)):
        again = pickle.loads(pickle.dumps(optimizer))
        assert again.n_seeds == optimizer.n_seeds and again.defaults["lr"] == optimizer.defaults["lr"]


@pytest.mark.slow
def test_a_tabular_run_never_imports_the_compiler() -> None:
    """Our optimizers skip torch's compile guards, whose first call imports torch._dynamo (~2 s a process)."""
    code = ("import sys; import tpo_gym; from tpo_agents.zoo.registry import make_agent; "
            "m = make_agent('tpo', 'TabularPolicy', 'TPO/MultiContextBandit-v0', n_seeds=2, seed=0); "
            "m.learn(n_iterations=2); m.policy.optimizer.load_state_dict(m.policy.optimizer.state_dict()); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "False"


def test_newton_schulz_all_equals_each_matrix_alone() -> None:
    """Small matrices of one shape (after transposing tall ones) are orthogonalized in one batched call,
    large ones alone: every result equals that matrix's own ``newton_schulz`` (float32 rounding)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 32), (2, 32), (32, 2), (2, 8, 3), (2, 3, 8), (64, 256), (2, 256, 64), (20, 64)]
    matrices = [torch.randn(shape, generator=gen) for shape in shapes]
    together = newton_schulz_all(matrices)
    for x, result in zip(matrices, together, strict=True):
        assert result.shape == x.shape
        torch.testing.assert_close(result, newton_schulz(x), rtol=1e-5, atol=1e-6)


def test_a_missing_gradient_is_a_zero_gradient_once_a_parameter_has_state() -> None:
    """As optax: after its first step a parameter without a gradient steps as with a zero gradient (its
    momenta carry on); a parameter that never had a gradient is left alone."""
    gen = torch.Generator().manual_seed(3)
    shapes = {"w": (4, 6), "b": (6,)}  # a Muon matrix and an Adam vector
    start = {name: torch.randn(shape, generator=gen) for name, shape in shapes.items()}
    grads = {name: torch.randn(shape, generator=gen) for name, shape in shapes.items()}
    runs = []
    for missing in (True, False):
        params = {name: torch.nn.Parameter(value.clone()) for name, value in start.items()}
        never = torch.nn.Parameter(torch.ones(3, 5))
        opt = MuonAdam([*params.items(), ("never", never)], lr=LR)
        for step in range(3):
            for name, p in params.items():
                p.grad = grads[name].clone() if step == 0 else (None if missing else torch.zeros_like(p))
            opt.step()
        assert torch.equal(never, torch.ones(3, 5)) and not opt.state[never]
        runs.append(params)
    for name in shapes:
        assert torch.equal(runs[0][name], runs[1][name]), name
