"""Multi-turn mode: K whole conversations per task as one group, the environment's tokens in the context and
never in a loss (tiny random model, ``TPO/GuessNumber-v0`` and ``TPO/Calculator-v0``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from stable_baselines3.common.logger import Logger  # noqa: E402

from tpo_agents import GRPO, PG, TPO  # noqa: E402

torch.set_num_threads(1)

GUESS = {"max_number": 8, "max_turns": 3}
#: Between two turns, as the tiny model's ChatML template writes it: the end of the policy's turn (unless
#: its last token was the EOS), the reply as a user message, the generation prompt and the prefill.
BETWEEN = re.compile(
    r"(<\|im_end\|>)?\n<\|im_start\|>user\n(.*)<\|im_end\|>\n<\|im_start\|>assistant\n<guess>", re.DOTALL)


def guess_model(tiny: str, algo: type = TPO, policy_kwargs: dict[str, Any] | None = None,
                **kwargs: Any) -> Any:
    policy = {"model": tiny, "prefill": "<guess>", "stop": "</guess>", "max_new_tokens": 4,
              "micro_batch_size": 4, **(policy_kwargs or {})}
    return algo("LLMPolicy", "TPO/GuessNumber-v0", env_kwargs=GUESS, batch_size=2, group_size=4, n_epochs=1,
                learning_rate=1e-3, seed=0, policy_kwargs=policy, **kwargs)


def collected(model: Any) -> Any:
    model.set_logger(Logger(None, []))
    _, callback = model._setup_learn(10**6, None)
    return model.collect(callback)


def segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """``(value, start, stop)`` of each run of equal values of ``mask``."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


@pytest.fixture(scope="module")
def guess(tiny_llm_dir: str) -> tuple[Any, Any]:
    model = guess_model(tiny_llm_dir)
    return model, collected(model)


def test_multi_turn_envs_take_the_multiturn_mode(tiny_llm_dir: str) -> None:
    assert TPO.natural_mode("TPO/GuessNumber-v0") == GRPO.natural_mode("TPO/Calculator-v0") == "multiturn"
    with pytest.raises(ValueError, match="text"):
        guess_model(tiny_llm_dir, group_mode="text")


def test_a_conversation_is_the_policy_s_turns_and_the_env_s_replies(guess: tuple[Any, Any]) -> None:
    """Each row after its prompt: the policy's turns (action mask 1, decoding to the actions the env read)
    and between them the env's reply as the chat template writes it (action mask 0)."""
    model, batch = guess
    tokenizer, completions = model.policy.tokenizer, batch.completions
    assert completions.action_mask is not None and batch.scores.shape == (2, 4)
    assert torch.equal(completions.owner, torch.arange(2).repeat_interleave(4))
    for row, episode in enumerate(batch.conversations):
        length = int(completions.completion_mask[row].sum())
        assert length == len(episode.tokens) and completions.completion_mask[row, length:].eq(0).all()
        written = completions.action_mask[row, :length].tolist()
        assert written == episode.written and written[0] == 1 and written[-1] == 1
        runs = segments(written)
        turns = [(start, stop) for value, start, stop in runs if value == 1]
        assert len(turns) == episode.turns and 1 <= episode.turns <= GUESS["max_turns"]
        transcript = completions.texts[row]
        for value, start, stop in runs:
            ids = completions.completion_ids[row, start:stop].tolist()
            if value == 1:
                action = "<guess>" + tokenizer.decode(ids, skip_special_tokens=True)
                assert f"You: {action}\nReply: " in transcript
            else:
                between = BETWEEN.fullmatch(tokenizer.decode(ids))
                assert between is not None and f"\nReply: {between.group(2)}" in transcript
                assert (between.group(1) is None) == (completions.completion_ids[row, start - 1] in
                                                      model.policy.eos_ids)
        assert episode.reward == float(episode.success) == float(batch.scores.reshape(-1)[row])
        assert episode.turn_limit == (not episode.success and episode.turns == GUESS["max_turns"])


def test_the_log_score_reads_the_policy_s_tokens_only(guess: tuple[Any, Any]) -> None:
    """L of an episode = the mean over the policy's tokens of log pi(y_t | prompt, conversation before t),
    from one plain forward of the whole conversation."""
    model, batch = guess
    policy, completions = model.policy, batch.completions
    rows = torch.arange(8)
    with torch.no_grad():
        logscores = policy.logscores(policy.token_log_probs(completions, rows), batch.mask)
        for row in range(8):
            prompt = completions.prompt_ids[row // 4][completions.prompt_mask[row // 4].bool()]
            tokens = torch.tensor(batch.conversations[row].tokens)
            ids = torch.cat([prompt, tokens])[None]
            log_probs = policy.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
            taken = log_probs.gather(-1, tokens[:, None]).squeeze(-1)
            written = torch.tensor(batch.conversations[row].written, dtype=torch.bool)
            torch.testing.assert_close(logscores[row], taken[written].mean(), rtol=0, atol=2e-5)


@pytest.mark.parametrize("algo", [TPO, GRPO, PG])
def test_no_gradient_reaches_an_environment_token(tiny_llm_dir: str, guess: tuple[Any, Any],
                                                  algo: type) -> None:
    """The update's gradient on the log-prob of every environment token is exactly zero: the teacher-forced
    log-probs there are constant zeros, and the loss (TPO's and GRPO's group view, PG's sample view) gives
    the token log-probs of every conversation token a gradient only where the policy wrote them."""
    _, batch = guess
    model = guess_model(tiny_llm_dir, algo=algo)
    batch = dataclasses.replace(batch, scores=torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]))
    policy, rows = model.policy, torch.arange(8)
    environment = (batch.completions.completion_mask - batch.completions.action_mask).bool()
    assert environment.any()
    log_probs = policy.token_log_probs(batch.completions, rows)
    assert log_probs[environment].eq(0).all()
    params = [p for p in policy.parameters() if p.requires_grad]
    grads = torch.autograd.grad(log_probs[environment].sum(), params, allow_unused=True)
    assert all(g is None or g.eq(0).all() for g in grads)
    # every conversation token scored, then the mode's view and the algorithm's loss
    every = dataclasses.replace(batch.completions, action_mask=None)
    scored = policy.token_log_probs(every, rows).detach().requires_grad_()
    assert scored[environment].ne(0).all()
    batch.old_token_log_probs = scored.detach().clone()
    batch.advantages = batch.scores.reshape(-1) - batch.scores.mean()
    for part, weight in model.mode.parts(batch):
        loss, _ = model.loss(model.mode.view(model._view, part, scored[part.rows]), diagnostics=False)
        (weight * loss).backward()
    assert scored.grad[environment].eq(0).all()
    assert scored.grad[batch.completions.action_mask.bool()].ne(0).any()


def test_a_cut_turn_takes_the_episode_out_of_the_loss(tiny_llm_dir: str) -> None:
    """With ``mask_truncated_completions``, an episode with a turn cut by ``max_new_tokens`` keeps its
    tokens as context and has no action token."""
    model = guess_model(tiny_llm_dir, policy_kwargs={"mask_truncated_completions": True, "max_new_tokens": 2})
    batch = collected(model)
    cut = torch.tensor([episode.cut_turns > 0 for episode in batch.conversations])
    assert cut.any() and torch.equal(batch.completions.truncated, cut)
    assert batch.completions.action_mask[cut].eq(0).all()
    assert batch.completions.action_mask[~cut].sum(-1).gt(0).all()
    assert batch.completions.completion_mask[cut].sum(-1).gt(0).all()


def test_rollout_logs_turns_and_endings(guess: tuple[Any, Any]) -> None:
    model, batch = guess
    logger = Logger(None, [])
    model.mode.log_rollout(logger, batch)
    values, episodes = logger.name_to_value, batch.conversations
    assert values["rollout/turns"] == pytest.approx(sum(e.turns for e in episodes) / 8)
    assert values["rollout/turn_limit_frac"] == pytest.approx(sum(e.turn_limit for e in episodes) / 8)
    written = batch.completions.action_mask.sum()
    every = batch.completions.completion_mask.sum()
    assert values["rollout/policy_token_frac"] == pytest.approx(float(written / every))
    assert 0 <= values["rollout/format_rate"] <= 1 and 0 <= values["rollout/cut_turn_frac"] <= 1
    table = model.mode.sample_table(batch).splitlines()
    assert table[0] == "| prompt | conversation | turns | return |" and len(table) == 2 + 4


def test_learns_on_both_envs(tiny_llm_dir: str) -> None:
    """TPO and GRPO (group and sample view) run whole updates on both multi-turn envs."""
    for algo, env, env_kwargs in ((TPO, "TPO/GuessNumber-v0", GUESS), (GRPO, "TPO/Calculator-v0",
                                                                        {"digits": 2, "max_turns": 2})):
        model = algo("LLMPolicy", env, env_kwargs=env_kwargs, batch_size=1, group_size=2, n_epochs=1, seed=0,
                     policy_kwargs={"model": tiny_llm_dir, "max_new_tokens": 4})
        before = [p.detach().clone() for p in model.policy.parameters()]
        with pytest.warns(UserWarning, match="had no signal"):
            model.learn(total_timesteps=4)
        assert model.num_timesteps == 4 and model.mode.name == "multiturn"
        assert all(torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))


def test_reply_ids_without_a_template_and_a_template_without_eos(tiny_llm_dir: str) -> None:
    policy = guess_model(tiny_llm_dir).policy
    tokenizer = policy.tokenizer
    closed = tokenizer.decode(policy.reply_ids("lower", closed=True))
    assert closed == "\n<|im_start|>user\nlower<|im_end|>\n<|im_start|>assistant\n<guess>"
    assert tokenizer.decode(policy.reply_ids("lower", closed=False)) == "<|im_end|>" + closed
    template = tokenizer.chat_template
    try:
        tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
        with pytest.raises(ValueError, match="does not end an assistant message with the EOS"):
            policy.reply_ids("lower", closed=True)
        tokenizer.chat_template = None
        assert tokenizer.decode(policy.reply_ids("lower", closed=False)) == "\nlower\n<guess>"
    finally:
        tokenizer.chat_template = template


def test_a_prefill_per_turn_starts_each_turn_with_its_own(tiny_llm_dir: str) -> None:
    """``prefill=["<calc>", "<answer>"]``: the prompt ends with the first, every reply with the second (turn
    t >= 1), and each action the env reads starts with its turn's prefill."""
    model = TPO("LLMPolicy", "TPO/Calculator-v0", env_kwargs={"digits": 1, "max_turns": 3}, batch_size=2,
                group_size=2, n_epochs=1, seed=0,
                policy_kwargs={"model": tiny_llm_dir, "prefill": ["<calc>", "<answer>"], "max_new_tokens": 3})
    policy, batch = model.policy, collected(model)
    tokenizer, completions = policy.tokenizer, batch.completions
    assert policy.format_prompt("q").endswith("assistant\n<calc>")
    assert tokenizer.decode(policy.reply_ids("r", closed=True, turn=1)).endswith("assistant\n<answer>")
    assert [policy.turn_prefill(t) for t in range(4)] == ["<calc>", "<answer>", "<answer>", "<answer>"]
    assert max(episode.turns for episode in batch.conversations) == 3
    for row, episode in enumerate(batch.conversations):
        written = completions.action_mask[row, :len(episode.tokens)].tolist()
        turns = [(start, stop) for value, start, stop in segments(written) if value == 1]
        for index, (start, stop) in enumerate(turns):
            action = tokenizer.decode(completions.completion_ids[row, start:stop], skip_special_tokens=True)
            prefill = "<calc>" if index == 0 else "<answer>"
            assert f"You: {prefill}{action}" in completions.texts[row]
            if index:
                between = tokenizer.decode(completions.completion_ids[row, turns[index - 1][1]:start])
                assert between.endswith("assistant\n<answer>")


@pytest.mark.parametrize("prefill", [[], ["<a>", 3], 7])
def test_a_bad_prefill_is_refused_before_the_model_loads(prefill: Any) -> None:
    from gymnasium import spaces

    from tpo_agents.policies.llm import LLMPolicy

    with pytest.raises(ValueError, match=r"prefill=.*a string or a non-empty list of strings"):
        LLMPolicy(spaces.Text(8), spaces.Text(8), lambda _: 1e-3, model="/no/such/model", prefill=prefill)


def test_verl_s_tpo_loss_on_a_conversation_s_response_mask_equals_the_zoo_s(guess: tuple[Any, Any]) -> None:
    """verl's multi-turn agent loop marks the environment's tokens 0 in ``response_mask``; the plugin's loss
    on the same conversations (log-probs of every token, that mask, the estimator's u) has the zoo's TPO
    loss and gradient, and none on an environment token."""
    from tpo_agents.integrations import verl as tv

    model, batch = guess
    batch = dataclasses.replace(batch, scores=torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]))
    every = dataclasses.replace(batch.completions, action_mask=None)
    with torch.no_grad():
        token_log_probs = model.policy.token_log_probs(every, torch.arange(8))
    batch.old_token_log_probs = token_log_probs - 0.1 * every.completion_mask  # an older policy
    mask = batch.completions.action_mask
    rewards = torch.zeros_like(token_log_probs)
    last = mask.shape[1] - 1 - mask.flip(-1).float().argmax(-1)  # each row's last policy token
    rewards[torch.arange(8), last] = batch.scores.reshape(-1)
    uids = np.repeat(np.array(["task-0", "task-1"], dtype=object), 4)
    advantages, _ = tv.compute_tpo_advantage(rewards, mask, None, uids)
    config = {"rollout_n": 4, "use_dynamic_bsz": False, "shuffle": False, "ppo_micro_batch_size_per_gpu": 8,
              "global_batch_info": {}, "policy_loss": {"loss_mode": "tpo", "tpo_logscore": "mean"}}
    verl_log_probs = token_log_probs.clone().requires_grad_()
    loss, _ = tv.compute_tpo_policy_loss(batch.old_token_log_probs, verl_log_probs, advantages, mask.bool(),
                                         "token-mean", config)
    loss.backward()
    zoo_log_probs = token_log_probs.clone().requires_grad_()
    zoo_loss = sum(weight * model.loss(model.mode.view("group", part, zoo_log_probs[part.rows]), False)[0]
                   for part, weight in model.mode.parts(batch))
    zoo_loss.backward()
    torch.testing.assert_close(loss, zoo_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(verl_log_probs.grad, zoo_log_probs.grad, atol=1e-7, rtol=0)
    environment = (batch.completions.completion_mask - mask).bool()
    assert verl_log_probs.grad[environment].eq(0).all() and verl_log_probs.grad[mask.bool()].ne(0).any()
