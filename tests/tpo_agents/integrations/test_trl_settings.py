"""TargetPOConfig refuses the ``GRPOConfig`` settings that TPO's update does not read, when the config is
built and on the command line, and every setting GRPO's loss reads is honoured or refused (a TRL upgrade
that adds one fails here)."""

from __future__ import annotations

import inspect
import re

import pytest

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
