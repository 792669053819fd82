"""GRPO as TRL's ``GRPOTrainer`` runs it by default: ``loss_type="dapo"`` (per-token ratios, one token mean
over the batch) and ``advantage_std="sample"`` (Bessel's std + 1e-4).

Contract: the loss and advantages equal hand-computed values; they equal TRL 1.16's own computation
(``GRPOTrainer._compute_loss`` called on the same per-token tensors, the advantages of
``GRPOTrainer._generate_and_score_completions``, both with ``GRPOConfig``'s defaults); the text mode's
gradient is that of one token mean over the batch whatever the micro-batch size; unsupported combinations
are one-line errors at construction; the paper's GRPO stays the default, and its older zips still load.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path

import pytest
import torch

from tpo_agents import GRPO
from tpo_agents import losses as L
from tpo_agents.checks import HyperparameterError

torch.set_num_threads(1)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


# --------------------------------------------------------------------------- the tiny example, by hand
#: 2 groups x 2 completions x 3 tokens: per-token ratios rho, the 0/1 mask, advantages A per completion.
F64 = torch.float64
RATIOS = torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 3.0], [0.9, 2.0, 2.0], [1.0, 1.3, 0.7]], dtype=F64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=F64)
ADVANTAGES = torch.tensor([1.0, -1.0, -0.5, 0.5], dtype=F64)
OLD = torch.full((4, 3), -1.0, dtype=F64)


def tiny_log_probs() -> torch.Tensor:
    return (OLD + RATIOS.log()).requires_grad_()


def test_dapo_loss_hand_values() -> None:
    # min(rho A, clip(rho, 0.8, 1.2) A) per active token:
    # row 0 (A = 1):    1.2, 0.5, 1.1            row 1 (A = -1): -1.5, -0.8 (third token masked)
    # row 2 (A = -0.5): -0.45 (two masked)       row 3 (A = 0.5): 0.5, 0.6, 0.35
    # sum 1.5 over 9 active tokens
    logp = tiny_log_probs()
    loss = L.dapo_loss(logp, OLD, ADVANTAGES, MASK, clip_range=0.2)
    assert loss.item() == pytest.approx(-1.5 / 9, abs=1e-12)
    loss.backward()
    # d/dlogp of -rho A / 9 where the ratio branch is taken, 0 where clipped or masked
    expected = -torch.tensor([[0.0, 0.5, 1.1], [-1.5, 0.0, 0.0], [-0.45, 0.0, 0.0], [0.5, 0.0, 0.35]],
                             dtype=F64) / 9  # fmt: skip
    torch.testing.assert_close(logp.grad, expected, rtol=0, atol=1e-12)
    # a part of a batch with 18 tokens: its share of that batch's mean
    part = L.dapo_loss(tiny_log_probs(), OLD, ADVANTAGES, MASK, n_tokens=18.0)
    assert part.item() == pytest.approx(-1.5 / 18, abs=1e-12)
    # beta adds beta times the k3 KL to the rollout snapshot, exp(-x) + x - 1 with x = log rho, per token
    k3 = ((1 / RATIOS + RATIOS.log() - 1) * MASK).sum() / 9
    with_kl = L.dapo_loss(tiny_log_probs(), OLD, ADVANTAGES, MASK, beta=0.1)
    assert with_kl.item() == pytest.approx(-1.5 / 9 + 0.1 * k3.item(), abs=1e-12)
    with pytest.raises(ValueError, match=r"^mask \(4, 2\) must be shaped like the token log-probs \(4, 3\)$"):
        L.dapo_loss(tiny_log_probs(), OLD, ADVANTAGES, MASK[:, :2])


def test_sample_std_advantages_hand_values() -> None:
    scores = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    a, b = 0.5 / (math.sqrt(0.5) + 1e-4), 1.0 / (math.sqrt(2.0) + 1e-4)  # Bessel: var = sum c^2 / (K - 1)
    expected = torch.tensor([[a, -a], [-b, b], [0.0, 0.0]])
    torch.testing.assert_close(L.grpo_advantages(scores, "sample"), expected)
    population = torch.tensor([[0.5, -0.5], [-1.0, 1.0], [0.0, 0.0]]) / torch.tensor([[0.5], [1.0], [1.0]])
    torch.testing.assert_close(L.grpo_advantages(scores), population)  # the default: popstd + 1e-8
    with pytest.raises(ValueError, match="std='bessel': use one of 'population', 'sample'"):
        L.grpo_advantages(scores, "bessel")


# ---------------------------------------------------------------------------- TRL's own computation
K_TRL = 4
#: Completion j of each prompt (by its last character); its reward is its number of "b"s. Prompt "y"'s
#: group has equal rewards (A = 0).
COMPLETIONS = {"x": ["a", "b", "bb", "bbbb"], "y": ["b", "b", "b", "b"], "z": ["a", "bbb", "b", "ab"],
               "w": ["bb", "a", "bbb", "b"]}  # fmt: skip


def rollout(prompts: list[str], trainer) -> dict[str, list]:
    tokenizer = trainer.processing_class
    seen: dict[str, int] = {}
    prompt_ids, completion_ids = [], []
    for prompt in prompts:
        j = seen[prompt] = seen.get(prompt, -1) + 1
        prompt_ids.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        completion_ids.append(tokenizer(COMPLETIONS[prompt[-1]][j], add_special_tokens=False)["input_ids"])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def b_count(completions: list[str], **_) -> list[float]:
    return [float(text.count("b")) for text in completions]


@pytest.fixture(scope="module")
def trl_trainer(tiny_llm_dir: str, tmp_path_factory: pytest.TempPathFactory):
    """TRL's ``GRPOTrainer`` with ``GRPOConfig``'s defaults (but the CPU, the batch and the logging)."""
    pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    tokenizer.padding_side = "left"
    config = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl") / "trainer"), use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", per_device_train_batch_size=2 * K_TRL, num_generations=K_TRL,
        max_completion_length=8, max_steps=1, seed=0, disable_tqdm=True,
    )  # fmt: skip
    dataset = datasets.Dataset.from_dict({"prompt": [f"question {i}: {c}" for i, c in enumerate("xyzw")]})
    model = AutoModelForCausalLM.from_pretrained(tiny_llm_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=b_count, args=config, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollout)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


def test_trl_defaults_are_the_ones_documented(trl_trainer) -> None:
    args = trl_trainer.args
    assert (args.loss_type, args.scale_rewards, args.importance_sampling_level) == ("dapo", "group", "token")
    assert (args.beta, args.epsilon, args.epsilon_high, args.delta) == (0.0, 0.2, None, None)
    assert (args.num_iterations, args.steps_per_generation, args.gradient_accumulation_steps) == (1, 1, 1)
    assert (args.learning_rate, args.lr_scheduler_type, args.warmup_steps) == (1e-6, "linear", 0)
    assert (args.max_grad_norm, args.weight_decay, args.top_entropy_quantile) == (1.0, 0.0, 1.0)
    assert args.multi_objective_aggregation == "sum_then_normalize" and not args.use_vllm


def trl_loss(trainer, monkeypatch, logp: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
    """``GRPOTrainer._compute_loss`` with the model's per-token log-probs replaced by ``logp``."""
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies",
                        lambda *args, **kwargs: (logp, torch.zeros_like(logp), None))
    prompt, completion = torch.ones(logp.shape[0], 2, dtype=torch.long), mask.long()
    inputs = {"prompt_ids": prompt, "prompt_mask": prompt, "completion_ids": completion,
              "completion_mask": completion, "advantages": advantages, "old_per_token_logps": old,
              "num_items_in_batch": mask.sum()}  # fmt: skip
    return trainer._compute_loss(trainer.model, inputs)


@pytest.mark.parametrize("example", ["tiny", "random"])
def test_dapo_loss_and_gradient_equal_trls(trl_trainer, monkeypatch, example: str) -> None:
    if example == "tiny":
        logp, old, advantages, mask = tiny_log_probs().float(), OLD.float(), ADVANTAGES.float(), MASK.float()
    else:  # ragged rows, ratios on both sides of the clip range, advantages of both signs
        gen = torch.Generator().manual_seed(0)
        old = -torch.rand(8, 7, generator=gen) * 3
        logp = old + 0.4 * torch.randn(8, 7, generator=gen)
        advantages = torch.randn(8, generator=gen)
        mask = (torch.arange(7) < torch.randint(1, 8, (8, 1), generator=gen)).float()
    theirs_logp = logp.detach().clone().requires_grad_()
    theirs = trl_loss(trl_trainer, monkeypatch, theirs_logp, old, advantages, mask)
    theirs.backward()
    ours_logp = logp.detach().clone().requires_grad_()
    ours = L.dapo_loss(ours_logp, old, advantages, mask, clip_range=0.2)
    ours.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6, abs=1e-7)
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad, rtol=1e-6, atol=1e-8)


def test_sample_std_advantages_equal_trls(trl_trainer) -> None:
    rows = next(iter(trl_trainer.get_train_dataloader()))
    out = trl_trainer._generate_and_score_completions(rows)
    texts = trl_trainer.processing_class.batch_decode(out["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(b_count(texts)).reshape(-1, K_TRL)
    assert rewards.shape[0] >= 2 and (rewards.std(-1) > 0).any()
    ours = L.grpo_advantages(rewards, "sample").reshape(-1)
    torch.testing.assert_close(ours, out["advantages"], rtol=1e-6, atol=1e-7)
    signal = rewards.std(-1).repeat_interleave(K_TRL) > 0
    paper = L.grpo_advantages(rewards).reshape(-1)  # population std: not TRL's
    assert not torch.allclose(paper[signal], out["advantages"][signal])


# ------------------------------------------------------------------------------ the text mode, end to end
def text_grpo(model_dir: str, micro: int, **kwargs) -> GRPO:
    return GRPO("LLMPolicy", "TPO/ReasoningGym-v0",
                env_kwargs=dict(dataset="basic_arithmetic", size=8, eval_size=2, seed=1),
                policy_kwargs=dict(model=model_dir, max_new_tokens=6, micro_batch_size=micro),
                batch_size=4, group_size=4, learning_rate=1e-2, n_epochs=1, group_mode="text", seed=0,
                beta=0.0, loss_type="dapo", advantage_std="sample", device="cpu", **kwargs)  # fmt: skip


def test_text_mode_gradient_is_one_token_mean_whatever_the_micro_batch_size(tiny_llm_dir: str) -> None:
    pytest.importorskip("reasoning_gym")
    from stable_baselines3.common.logger import Logger

    grads, clip_fractions = [], []
    for micro in (16, 4):
        model = text_grpo(tiny_llm_dir, micro)
        model.set_logger(Logger(None, []))
        _, callback = model._setup_learn(10**6, None)
        batch = model.collect(callback)
        batch.scores = torch.tensor([[1.0, 0.0, 0.0, 2.0], [0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0],
                                     [3.0, 0.0, 1.0, 0.0]])  # fmt: skip
        with torch.no_grad():  # pi_old at theta_old, written before theta moves
            for part, _ in model.mode.parts(batch):
                model.mode.keep_old_log_probs(part, model.mode.log_probs(model.policy, part))
        with torch.no_grad():  # move theta away from theta_old: ratios leave the clip range
            gen = torch.Generator().manual_seed(0)
            for param in model.policy.parameters():
                param.add_(0.05 * torch.randn(param.shape, generator=gen))
        model.policy.optimizer.zero_grad()
        stats, _ = model._accumulate_gradients(batch)
        grads.append(torch.cat([p.grad.flatten() for p in model.policy.parameters() if p.grad is not None]))
        clip_fractions.append(stats["clip_fraction"])
        lengths = batch.completions.completion_mask.sum(-1)
        assert lengths.min() < lengths.max()  # ragged rows: per-part token means would weigh them otherwise
    assert len(list(model.mode.parts(batch))) == 4 and clip_fractions[0] > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)
    # ... and that of dapo_loss over the whole batch in one piece
    model.policy.optimizer.zero_grad()
    rows = torch.arange(16)
    advantages = L.grpo_advantages(batch.scores, "sample").reshape(-1)
    L.dapo_loss(model.policy.token_log_probs(batch.completions, rows), batch.old_token_log_probs, advantages,
                batch.mask.float(), clip_range=0.2).backward()
    whole = torch.cat([p.grad.flatten() for p in model.policy.parameters() if p.grad is not None])
    torch.testing.assert_close(grads[1], whole, rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------------------ settings and defaults
def test_the_paper_s_grpo_stays_the_default() -> None:
    model = GRPO("TabularPolicy", "TPO/KArmedBandit-v0", env_kwargs={"n_arms": 4}, batch_size=4)
    assert (model.loss_type, model.advantage_std) == ("group", "population")


TOKENS = {"sequence_length": 3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_type": "bnpo"}, "loss_type='bnpo': must be one of 'group', 'dapo'"),
        ({"loss_type": "dapo"}, "loss_type='dapo': must be 'group' in token mode (a token-level loss needs "
                                "completions' tokens: text mode)"),
        ({"loss_type": "dapo", "group_mode": "sequence"},
         "loss_type='dapo': must be 'group' in sequence mode"),
        ({"advantage_std": "bessel"}, "advantage_std='bessel': must be one of 'population', 'sample'"),
        ({"advantage_std": "sample", "group_mode": "single"},
         "advantage_std='sample': must be 'population' in single mode (it scales group advantages)"),
    ],
)  # fmt: skip
def test_unsupported_settings_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(HyperparameterError) as exc:
        GRPO("TransformerPolicy", "TPO/TokenReversal-v0", env_kwargs=TOKENS, **kwargs)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_dapo_in_text_mode_refuses_masked_groups(tiny_llm_dir: str) -> None:
    pytest.importorskip("reasoning_gym")
    with pytest.raises(HyperparameterError, match=r"^loss_type='dapo': must be 'group' with n_seeds > 1 or "
                                                  r"mask_zero_variance=True$"):  # fmt: skip
        text_grpo(tiny_llm_dir, 16, mask_zero_variance=True)


def test_a_grpo_zip_saved_before_the_settings_loads_with_the_paper_s(tmp_path: Path) -> None:
    path = tmp_path / "grpo.zip"
    GRPO("TabularPolicy", "TPO/KArmedBandit-v0", env_kwargs={"n_arms": 4}, batch_size=4).save(path)
    older = tmp_path / "older.zip"
    with zipfile.ZipFile(path) as new, zipfile.ZipFile(older, "w") as old:
        for item in new.infolist():
            content = new.read(item.filename)
            if item.filename == "data":
                data = json.loads(content)
                for key in ("loss_type", "advantage_std", "algorithm_class"):
                    data.pop(key)
                content = json.dumps(data).encode()
            old.writestr(item, content)
    model = GRPO.load(older)
    assert (model.loss_type, model.advantage_std) == ("group", "population")


def test_the_zoo_runs_grpo_with_trl_s_defaults(tiny_llm_dir: str, tmp_path: Path) -> None:
    pytest.importorskip("reasoning_gym")
    from tpo_agents.zoo.train import train

    argv = ["--algo", "grpo", "--env", "ReasoningGym", "-f", str(tmp_path / "logs"), "--seed", "0",
            "--verbose", "0", "--eval-freq", "-1", "-tb", "", "-n", "16", "-params",
            f"policy_kwargs:dict(model='{tiny_llm_dir}', max_new_tokens=4, micro_batch_size=8)",
            "loss_type:dapo", "advantage_std:sample", "beta:0.0", "learning_rate:lin_1e-6",
            "max_grad_norm:1.0"]  # fmt: skip
    model = train(argv).model
    assert (model.loss_type, model.advantage_std, model.beta) == ("dapo", "sample", 0.0)
    assert model.max_grad_norm == 1.0
    assert model.lr_schedule(1.0) == pytest.approx(1e-6) and model.lr_schedule(0.0) == 0.0
    assert model._n_updates == 1
