"""One completion-level TPO loss in every language-model path: the text mode, TargetPOTrainer (TRL) and
the verl loss give the loss and gradient of :func:`tpo_agents.losses.completion_tpo_loss` on the same
ragged rows, and the same finite log-score spread when a group has no valid row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from tpo_agents import losses as L  # noqa: E402
from tpo_agents.integrations import verl as tv  # noqa: E402
from tpo_agents.modes.text import TextBatch, TextMode, TextPart  # noqa: E402
from tpo_agents.tpo import TPO  # noqa: E402

torch.set_num_threads(1)
K = 4


def rows(seed: int = 0, n_groups: int = 3, width: int = 6,
         random_scores: bool = False) -> dict[str, torch.Tensor]:
    """Ragged completions of n_groups x K rows: log-probs under theta and pi_old, masks, scores (fixed
    ones, or drawn from the same generator with ``random_scores``)."""
    g = torch.Generator().manual_seed(seed)
    n = n_groups * K
    lengths = torch.randint(1, width + 1, (n,), generator=g)
    mask = (torch.arange(width) < lengths[:, None]).float()
    old = -torch.rand(n, width, generator=g).mul(3.0) * mask
    new = (old + 0.3 * torch.randn(n, width, generator=g)) * mask
    if random_scores:
        scores = torch.rand(n, generator=g)
    else:
        scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.2, 0.9, 0.1, 0.3, 0.3, 0.3, 0.3])[:n]
    return {"mask": mask, "old": old, "new": new, "scores": scores}


def text_mode_loss(b: dict, new: torch.Tensor, logscore: str) -> torch.Tensor:
    """The text mode's TPO path: TextMode.group_view of a part holding every row, then TPO.group_loss."""
    n = b["scores"].numel()
    batch = TextBatch(
        prompts=["p"] * (n // K),
        completions=SimpleNamespace(completion_mask=b["mask"].long(), loss_mask=b["mask"].long()),
        scores=b["scores"].reshape(-1, K), advantages=torch.zeros(n), old_token_log_probs=b["old"],
        answers=np.array([None] * n, dtype=object), format_ok=np.zeros(n, dtype=bool), logscore=logscore,
        group_size=K, rows_per_part=n,
    )  # fmt: skip
    view = TextMode.group_view(None, TextPart(batch, torch.arange(n)), new)
    algorithm = TPO("TransformerPolicy", "TPO/TokenCopy-v0", eta=0.7, env_kwargs=dict(sequence_length=3))
    loss, _ = algorithm.group_loss(view)  # the TPO algorithm's loss on the text mode's view
    return loss


def trl_loss(b: dict, new: torch.Tensor, logscore: str) -> torch.Tensor:
    from tpo_agents.integrations.trl import target_po_loss

    return target_po_loss(new, b["old"], b["mask"], b["scores"], K, eta=0.7, logscore=logscore)[0]


def verl_loss(b: dict, new: torch.Tensor, logscore: str) -> torch.Tensor:
    u = L.standardize(b["scores"].reshape(-1, K)).reshape(-1)
    config = {"rollout_n": K, "global_batch_info": {}, "ppo_micro_batch_size_per_gpu": b["scores"].numel(),
              "policy_loss": {"loss_mode": "tpo", "tpo_eta": 0.7, "tpo_logscore": logscore}}
    advantages = u[:, None] * b["mask"]
    return tv.compute_tpo_policy_loss(b["old"], new, advantages, b["mask"], "token-mean", config)[0]


@pytest.mark.parametrize("logscore", ["mean", "sum"])
def test_the_three_paths_give_one_loss_and_gradient(logscore):
    pytest.importorskip("trl")
    b = rows()
    reference_new = b["new"].clone().requires_grad_()
    reference, _ = L.completion_tpo_loss(reference_new, b["old"], b["mask"], b["scores"], K, 0.7, logscore)
    reference.backward()
    for path in (text_mode_loss, trl_loss, verl_loss):
        new = b["new"].clone().requires_grad_()
        loss = path(b, new, logscore)
        loss.backward()
        torch.testing.assert_close(loss, reference, atol=1e-6, rtol=0, msg=path.__name__)
        torch.testing.assert_close(new.grad, reference_new.grad, atol=1e-6, rtol=0, msg=path.__name__)


# ------------------------------------------------------------------------------ log-score spread


def spread_by_hand(old: torch.Tensor, valid: torch.Tensor) -> float:
    """max - min of the valid old log-scores of each group with two or more, averaged over those groups."""
    spreads = [float(o[v].max() - o[v].min()) for o, v in zip(old.reshape(-1, K), valid.reshape(-1, K),
                                                                strict=True) if v.sum() >= 2]
    return sum(spreads) / len(spreads) if spreads else 0.0


def logscore_spread(old: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    groups, valid = old.reshape(-1, k), valid.reshape(-1, k)
    return L.masked_group_diagnostics(groups, groups, torch.zeros_like(groups), valid)["logscore_spread"]


def test_the_spread_skips_groups_without_valid_rows():
    old = torch.tensor([-1.0, -3.0, -2.0, -1.5,   -9.0, -9.0, -9.0, -9.0,   -0.5, -4.0, -2.0, -2.0])
    valid = torch.tensor([True, True, True, True,   False, False, False, False,   True, False, True, False])
    assert logscore_spread(old, valid, K).item() == pytest.approx((2.0 + 1.5) / 2)
    one_each = torch.tensor([True, False, False, False] * 3)
    assert logscore_spread(old, one_each, K).item() == 0.0
    assert logscore_spread(old, torch.zeros(12, dtype=torch.bool), K).item() == 0.0


@pytest.mark.parametrize("logscore", ["mean", "sum"])
def test_trl_spread_is_finite_with_a_group_without_valid_rows(logscore):
    from tpo_agents.integrations.trl import target_po_loss

    b = rows(width=5, random_scores=True)
    b["mask"][K : 2 * K] = 0  # mask_truncated_completions zeroed every row of group 1
    loss, stats = target_po_loss(b["new"], b["old"], b["mask"], b["scores"], K, logscore=logscore)
    old_rows = L.row_logscores(b["old"], b["mask"], logscore)
    assert torch.isfinite(loss) and torch.isfinite(stats["logscore_spread"])
    expected = spread_by_hand(old_rows, b["mask"].bool().any(-1))
    assert stats["logscore_spread"].item() == pytest.approx(expected)
    b["mask"][:] = 0
    _, stats = target_po_loss(b["new"], b["old"], b["mask"], b["scores"], K, logscore=logscore)
    assert stats["logscore_spread"].item() == 0.0


def test_trainer_logs_a_finite_spread_with_an_all_truncated_group(tiny_llm_dir, tmp_path):
    pytest.importorskip("trl")
    from tests.tpo_agents.integrations.test_trl_integration import make_trainer, micro_batch

    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    inputs["completion_mask"][2:] = 0  # group 1 (K = 2) has no valid row
    trainer._compute_loss(trainer.model, inputs)
    spread = trainer._metrics["train"]["tpo/logscore_spread"][-1]
    assert spread == spread and abs(spread) < float("inf")  # finite: neither NaN nor infinite


@pytest.mark.parametrize("logscore", ["mean", "sum"])
def test_verl_spread_is_finite_with_a_group_without_response_tokens(logscore):
    b = rows(width=5, random_scores=True)
    b["mask"][K : 2 * K] = 0
    b["old"][K : 2 * K] = 0
    b["new"][K : 2 * K] = 0
    rewards = torch.zeros_like(b["mask"])
    rewards[:, 0] = b["scores"] * b["mask"].any(-1)
    uids = [f"prompt-{j // K}" for j in range(b["scores"].numel())]
    advantages, _ = tv.compute_tpo_advantage(rewards, b["mask"], None, uids)
    config = {"rollout_n": K, "global_batch_info": {}, "ppo_micro_batch_size_per_gpu": b["scores"].numel(),
              "policy_loss": {"loss_mode": "tpo", "tpo_logscore": logscore}}
    _, metrics = tv.compute_tpo_policy_loss(b["old"], b["new"], advantages, b["mask"], "token-mean", config)
    old_rows = L.row_logscores(b["old"], b["mask"], logscore)
    expected = spread_by_hand(old_rows, b["mask"].bool().any(-1))
    assert metrics["actor/tpo_logscore_spread"] == pytest.approx(expected)
    assert metrics["actor/tpo_dropped_rows"] == K
