"""``examples/tpo_token_reversal.py``, the one-file TPO, pinned to the library's TPO (token mode): from the
same parameters and the same collected batch (prompts, behaviour actions, K candidates per prefix and
their scores) both updates give the same parameters, and stay equal over three updates.

The attention key biases are left out of the comparison (as in
``tests/tpo_agents/test_reference_updates.py``): they change no output (every logit of a query over the
keys shifts by q . b_k, which the softmax removes), so their gradient is rounding noise, which Muon (they
are (heads, head_dim) matrices) scales to a full step in a direction of its own in each code.

Precision: in float64 the two updates agree to ~1e-15 (both codes, library and example, run in float64 for
that check: the same formulas, rounded alike). In float32, the paper's precision, every parameter agrees to
~2e-7 but for the rare element whose gradient nearly cancels (~4e-8 where the tensor's largest is ~3e-3):
the two codes' orders of summation round it differently (~1e-9, a few percent of it), and Adam's first
step g / (|g| + 1e-8) turns that into ~1% of a step of lr = 1e-3, ~1e-5.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.logger import Logger

import tpo_agents

torch.set_num_threads(1)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpo_token_reversal.py"
H, V, B, K = 4, 2, 6, 4
MODEL = dict(d_model=8, n_heads=2, n_layers=2, ffn_mult=4)
ATOL = 1e-6
#: float32: the few elements Adam normalises from a near-cancelling gradient (module docstring)
ATOL_FLOAT32_FEW, MAX_FRACTION_BEYOND_ATOL = 5e-5, 0.01


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tpo_token_reversal", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def library_model() -> tpo_agents.TPO:
    model = tpo_agents.TPO(
        "TransformerPolicy", "TPO/TokenReversal-v0", group_mode="token", batch_size=B, group_size=K,
        n_epochs=4, learning_rate=1e-3, seed=0, policy_kwargs=MODEL,
        env_kwargs=dict(reward="bag_of_tokens", sequence_length=H, vocab_size=V),
    )  # fmt: skip
    model.set_logger(Logger(None, []))
    model._setup_learn(10**6, None, True, "run", False)
    return model


def collect(model: tpo_agents.TPO, callback: CallbackList):
    """One batch collected by the library (pi_old is written by the update's first forward)."""
    batch = model.collect(callback)
    assert batch is not None
    return batch


def assert_equal_parameters(library: torch.nn.Module, example: torch.nn.Module, message: str) -> None:
    """Equal within ``ATOL`` (float32: all within ``ATOL_FLOAT32_FEW``, at most 1% beyond ``ATOL``), but
    for the attention key biases."""
    ours = dict(example.named_parameters())
    float32 = next(library.parameters()).dtype == torch.float32
    beyond, total = 0, 0
    for name, value in library.named_parameters():
        if name.endswith("attn.key.bias"):
            continue
        difference = (ours[name].detach() - value.detach()).abs()
        beyond, total = beyond + int((difference > ATOL).sum()), total + difference.numel()
        torch.testing.assert_close(ours[name].detach(), value.detach(),
                                   atol=ATOL_FLOAT32_FEW if float32 else ATOL, rtol=0,
                                   msg=lambda m, name=name: f"{message}: {name}: {m}")
    assert beyond <= MAX_FRACTION_BEYOND_ATOL * total, f"{message}: {beyond} of {total} beyond {ATOL}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_example_s_update_equals_the_library_s_on_the_same_batch(dtype):
    example = load_example()
    model = library_model()
    model.policy.to(dtype)
    callback = CallbackList([])
    callback.init_callback(model)
    policy = model.policy.model
    ours = example.CausalTransformer(V, 2 * H, **MODEL).to(dtype)
    assert sorted(n for n, _ in ours.named_parameters()) == sorted(n for n, _ in policy.named_parameters())
    for name, p in ours.named_parameters():
        assert p.shape == policy.get_parameter(name).shape, name
    ours.load_state_dict(policy.state_dict())  # by name
    optimizer = example.MuonAdam(list(ours.parameters()), lr=1e-3)
    moved = 0.0
    for update in range(3):
        batch = collect(model, callback)
        assert bool((batch.scores.std(-1) > 0).any()), "a batch without signal would test nothing"
        fields = {"prompts": batch.prompts, "actions": batch.actions, "candidates": batch.candidates,
                  "scores": batch.scores}
        before = [p.detach().clone() for p in policy.parameters()]
        example.update(ours, optimizer, fields, n_epochs=4, eta=1.0)
        model.train(batch)
        assert batch.old_log_probs.dtype == dtype
        moved = max(moved, max(float((p.detach() - b).abs().max())
                               for p, b in zip(policy.parameters(), before, strict=True)))
        assert_equal_parameters(policy, ours, f"{dtype}, after update {update + 1}")
    assert moved > 1e-4  # the updates moved the parameters (Muon steps of ~lr)


@pytest.mark.parametrize("mode", ["token", "sequence"])
@pytest.mark.parametrize("anchor", [True, False])
@pytest.mark.parametrize("eta", [0.5, 1.0, 2.0])
def test_the_example_s_loss_and_gradient_on_the_log_scores_equal_the_library_s(mode, anchor, eta):
    """The example's target, loss and gradient on the group log-scores (before any optimizer) equal the
    library's TPO loss and its autograd gradient, on a collected token batch ([B, H, K] groups) and a
    sequence batch ([B, K] groups of whole episodes), at log-scores moved away from L_old."""
    example = load_example()
    model = tpo_agents.TPO(
        "TransformerPolicy", "TPO/TokenReversal-v0", group_mode=mode, batch_size=B, group_size=K, eta=eta,
        anchor=anchor, seed=1, policy_kwargs=MODEL,
        env_kwargs=dict(reward="bag_of_tokens", sequence_length=H, vocab_size=V),
    )  # fmt: skip
    model.policy.to(torch.float64)
    model.set_logger(Logger(None, []))
    _, callback = model._setup_learn(10**6, None)
    batch = model.collect(callback)
    log_probs = model.mode.log_probs(model.policy, batch)
    model.mode.keep_old_log_probs(batch, log_probs)
    view = model.mode.view("group", batch, log_probs)
    assert view.logscores.shape == ((B, H, K) if mode == "token" else (B, K))
    assert bool((view.scores.std(-1) > 0).any()), "a batch without signal would test nothing"
    generator = torch.Generator().manual_seed(0)
    logscores = (view.logscores.detach() + 0.3 * torch.randn(view.logscores.shape, generator=generator,
                                                            dtype=torch.float64)).requires_grad_()
    loss, _ = model.loss(dataclasses.replace(view, logscores=logscores), diagnostics=False)
    loss.backward()
    target = example.tpo_target(view.old_logscores, view.scores, eta, anchor)
    example_loss, example_gradient = example.tpo_loss_and_gradient(logscores, target)
    torch.testing.assert_close(loss.detach(), example_loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(logscores.grad, example_gradient, atol=1e-15, rtol=0)
    assert float(example_gradient.abs().max()) > 1e-3  # a gradient that is not ~0


@pytest.mark.slow
def test_the_example_runs_and_prints_the_task_error():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--updates", "2", "--batch-size", "4", "--sequence-length", "4",
         "--d-model", "16", "--log-every", "1"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "task_error" in line]
    assert len(lines) == 2
    error = float(lines[-1].split("task_error")[1].split()[0])
    assert 0.0 <= error <= 1.0
