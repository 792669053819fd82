"""The completion-level TPO loss of ``tpo_agents.losses`` (:func:`completion_tpo_loss` and its parts), against
values computed by hand: masked standardisation, masked group softmax, dropped (empty or truncated)
rows, groups with fewer than two valid rows, the float32 rule and the reference-KL terms."""

from __future__ import annotations

import math

import pytest
import torch

from tpo_agents import losses as L

torch.set_num_threads(1)


def hand_target(p_old: list[float], scores: list[float], eta: float = 1.0) -> list[float]:
    """q_i = p_i exp(u_i / eta) / Z with the population z-score u, written out."""
    k = len(scores)
    mean = sum(scores) / k
    sigma = math.sqrt(sum((s - mean) ** 2 for s in scores) / k)
    u = [(s - mean) / sigma if sigma > 1e-6 else s - mean for s in scores]
    w = [p * math.exp(ui / eta) for p, ui in zip(p_old, u, strict=True)]
    return [x / sum(w) for x in w]


def test_masked_standardize_by_hand():
    s = torch.tensor([[1.0, 0.0, 0.0, 7.0]])
    u = L.masked_standardize(s, torch.tensor([[True, True, True, False]]))
    r2 = math.sqrt(2.0)
    torch.testing.assert_close(u, torch.tensor([[r2, -1 / r2, -1 / r2, 0.0]]), atol=1e-6, rtol=0)
    # affine invariance: z-scores in give the same u as raw scores
    z = L.standardize(s)
    torch.testing.assert_close(L.masked_standardize(z, torch.tensor([[True, True, True, False]])), u)


def test_masked_log_softmax_by_hand_and_no_nan_for_an_empty_group():
    x = torch.tensor([[0.0, math.log(3.0), 5.0], [1.0, 2.0, 3.0]], requires_grad=True)
    valid = torch.tensor([[True, True, False], [False, False, False]])
    out = L.masked_log_softmax(x, valid)
    expected = torch.tensor([[math.log(0.25), math.log(0.75), 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad[0, 2] == 0 and (x.grad[1] == 0).all()


def test_masked_tpo_loss_by_hand():
    p_old = [0.5, 0.25, 0.25]
    q = hand_target(p_old, [1.0, 0.0, 0.0])
    old = torch.tensor([[math.log(p) for p in p_old]])
    new = old.clone().requires_grad_(True)
    loss, target = L.masked_tpo_loss(new, old, torch.tensor([[1.0, 0.0, 0.0]]))
    torch.testing.assert_close(target, torch.tensor([q]), atol=1e-6, rtol=0)
    cross_entropy = -sum(qi * math.log(p) for qi, p in zip(q, p_old, strict=True))
    assert loss.item() == pytest.approx(cross_entropy, abs=1e-6)
    loss.backward()  # gradient on the group logits: p - q
    torch.testing.assert_close(new.grad, torch.tensor([p_old]) - torch.tensor([q]), atol=1e-6, rtol=0)


def test_all_valid_equals_tpo_loss_and_target():
    g = torch.Generator().manual_seed(0)
    new = torch.randn(5, 4, generator=g, requires_grad=True)
    old, s = torch.randn(5, 4, generator=g), torch.rand(5, 4, generator=g)
    loss, target = L.masked_tpo_loss(new, old, s, eta=0.5)
    torch.testing.assert_close(target, L.tpo_target(old, s, eta=0.5), atol=1e-6, rtol=0)
    torch.testing.assert_close(loss, L.tpo_loss(new, L.tpo_target(old, s, eta=0.5)), atol=1e-6, rtol=0)
    no_anchor, _ = L.masked_tpo_loss(new, old, s, anchor=False)
    torch.testing.assert_close(no_anchor, L.tpo_loss(new, L.tpo_target(old, s, anchor=False)), atol=1e-6,
                               rtol=0)


def rows(lengths: list[int], values: list[float], width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Completions whose tokens all have log-prob ``values[i]`` (so the mean log-score is values[i])."""
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).float()
    return torch.tensor(values)[:, None] * mask, mask


def test_a_truncated_row_with_a_zeroed_mask_leaves_the_group_softmax():
    # TRL's mask_truncated_completions zeroes row 3: without dropping it, L = 0 takes p_old = 0.56.
    lp, mask = rows([2, 3, 1, 0], [-1.2, -1.6, -1.3, 0.0])
    naive = torch.softmax(L.sequence_logscores(lp, mask, "mean"), -1)
    assert naive[3].item() == pytest.approx(0.56, abs=0.01)
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    new = lp.clone().requires_grad_(True)
    loss, stats = L.completion_tpo_loss(new, lp, mask, scores, 4)
    three = lp[:3].clone().requires_grad_(True)
    loss3, _ = L.completion_tpo_loss(three, lp[:3], mask[:3], scores[:3], 3)
    torch.testing.assert_close(loss, loss3, atol=1e-6, rtol=0)
    loss.backward()
    loss3.backward()
    torch.testing.assert_close(new.grad[:3], three.grad, atol=1e-6, rtol=0)
    assert (new.grad[3] == 0).all()
    assert stats["dropped_rows"].item() == 1 and stats["dropped_frac"].item() == 0.25


def test_valid_flags_drop_rows_and_a_group_below_two_rows_gives_no_gradient():
    lp, mask = rows([2, 3, 1, 2, 4, 4, 1, 1], [-1.0, -2.0, -0.5, -1.5, -1.0, -3.0, -2.0, -1.0])
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.5, 0.2])
    valid = torch.tensor([True, True, True, False, True, False, False, False])
    new = lp.clone().requires_grad_(True)
    loss, stats = L.completion_tpo_loss(new, lp, mask, scores, 4, valid=valid)
    loss.backward()
    assert (new.grad[3:] == 0).all() and new.grad[:3].abs().sum() > 0  # group 1 has one valid row
    first, _ = L.completion_tpo_loss(lp[:3], lp[:3], mask[:3], scores[:3], 3)
    assert loss.item() == pytest.approx(first.item() / 2, abs=1e-6)  # mean over both groups
    assert stats["unusable_group_frac"].item() == 0.5 and stats["dropped_rows"].item() == 4


def test_all_truncated_group_is_finite_and_zero():
    lp, mask = rows([0, 0, 0, 0], [0.0, 0.0, 0.0, 0.0])
    new = lp.clone().requires_grad_(True)
    loss, stats = L.completion_tpo_loss(new, lp, mask, torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    loss.backward()
    assert loss.item() == 0 and (new.grad == 0).all() and stats["unusable_group_frac"].item() == 1


def test_sum_and_mean_logscores_by_hand():
    lp = torch.tensor([[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(L.completion_logscores(lp, mask, 2, "sum"), torch.tensor([[-3.0, -3.0]]))
    torch.testing.assert_close(L.completion_logscores(lp, mask, 2, "mean"), torch.tensor([[-1.5, -3.0]]))


def test_bf16_log_probs_are_promoted_to_float32():
    g = torch.Generator().manual_seed(1)
    lp = (-torch.rand(8, 5, generator=g) * 3).to(torch.bfloat16)
    mask = torch.ones(8, 5)
    scores = torch.rand(8, generator=g)
    loss16, stats = L.completion_tpo_loss(lp, lp, mask, scores, 4, logscore="sum")
    loss32, _ = L.completion_tpo_loss(lp.float(), lp.float(), mask, scores, 4, logscore="sum")
    assert loss16.dtype == torch.float32 and stats["effective_group_size"].dtype == torch.float32
    assert loss16.item() == loss32.item()


def test_diagnostics_by_hand():
    old = torch.tensor([[math.log(0.5), math.log(0.5), 3.0]])
    valid = torch.tensor([[True, True, False]])
    stats = L.masked_group_diagnostics(old, old, torch.tensor([[0.5, 0.5, 0.0]]), valid)
    assert stats["effective_group_size"].item() == pytest.approx(2.0, abs=1e-6)
    assert stats["logscore_spread"].item() == pytest.approx(0.0, abs=1e-6)
    assert stats["mean_abs_p_minus_q"].item() == pytest.approx(0.0, abs=1e-6)
    assert stats["dropped_frac"].item() == pytest.approx(1 / 3)


def test_zero_variance_groups_count_and_give_q_equal_p_old():
    lp, mask = rows([2, 3, 1, 2], [-1.0, -2.0, -0.5, -1.5])
    loss, stats = L.completion_tpo_loss(lp, lp, mask, torch.full((4,), 0.3), 4)
    assert stats["zero_variance_frac"].item() == 1 and stats["mean_abs_p_minus_q"].item() == pytest.approx(0)


def test_reference_kl_terms_by_hand():
    logp = torch.tensor([[math.log(0.25)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.5)]])
    k3 = L.reference_kl_terms(ref, logp)
    assert k3.item() == pytest.approx(1 - math.log(2.0), abs=1e-6)
    old = torch.tensor([[math.log(0.5)]])
    corrected = L.reference_kl_terms(ref, logp, old, bias_correction=True)
    assert corrected.item() == pytest.approx(0.5 * (1 - math.log(2.0)), abs=1e-6)
    with pytest.raises(ValueError, match="old_token_log_probs"):
        L.reference_kl_terms(ref, logp, bias_correction=True)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: L.completion_logscores(torch.zeros(6, 2), torch.ones(6, 2), 4), "6 completions"),
        (lambda: L.completion_logscores(torch.zeros(4, 2), torch.ones(4, 3), 4), "must both be"),
        (lambda: L.completion_tpo_loss(torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(4, 2),
                                       torch.zeros(3), 4), "scores"),
        (lambda: L.completion_tpo_loss(torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(4, 2), torch.zeros(4),
                                       4, logscore="max"), "logscore"),
        (lambda: L.masked_tpo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([[0.0, float("nan")]])),
         "finite"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
