"""The multi-turn envs in verl (tpo_agents/integrations/verl/tools.py, data.py, reward.py): the exported rows
and tool config, the episode's reward, and, with verl installed (``.ci/verl``), verl's own ``ToolAgentLoop``
playing whole episodes through :class:`EnvTool` with a scripted server, its ``response_mask`` 0 on exactly
the env's tokens, and verl's naive reward manager scoring them with :func:`episode_score`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from tpo_agents.integrations.env_tools import ENDED, GuessNumberTools
from tpo_agents.integrations.verl import cli, environment_rows, episode_score, tools_config

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:.* engine is not available:UserWarning")
needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                reason="verl is not installed (extra verl, see .ci/verl)")
needs_pyarrow = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None,
                                   reason="pyarrow is not installed")
GUESS = {"max_number": 8, "max_turns": 3}


def test_rows_give_every_tool_the_task_and_replay_the_env_prompt() -> None:
    rows = environment_rows("GuessNumber", GUESS, tasks=5)
    assert rows == environment_rows("TPO/GuessNumber-v0", GUESS, tasks=5)  # seeded
    task = gym.make("TPO/GuessNumber-v0", **GUESS).unwrapped.task
    for split in ("train", "test"):
        assert [row["extra_info"]["index"] for row in rows[split]] == list(range(5))
        for row in rows[split]:
            info = row["extra_info"]
            context = info["context"]
            assert row["agent_name"] == "tool_agent" and row["data_source"] == "tpo_gym/GuessNumber"
            assert row["prompt"] == [{"role": "user",
                                      "content": f"{task.prompt(context)}\n\n{GuessNumberTools.instruction}"}]
            assert row["reward_model"]["ground_truth"] == str(context + 1)  # the hidden number
            assert info["tools_kwargs"] == {"guess": {"create_kwargs": {"context": context}}}
            assert (info["split"], info["env_id"], json.loads(info["env_kwargs"])) == (
                split, "TPO/GuessNumber-v0", {**gym.spec("TPO/GuessNumber-v0").kwargs, **GUESS})
    contexts = {split: [row["extra_info"]["context"] for row in rows[split]] for split in rows}
    assert contexts["train"] != contexts["test"]
    system = environment_rows("Calculator", {"digits": 2}, "Use the tools.", tasks=1)["train"][0]
    assert system["prompt"][0] == {"role": "system", "content": "Use the tools."}
    assert set(system["extra_info"]["tools_kwargs"]) == {"calculate", "answer"}


def test_tool_config_names_one_env_tool_per_tool() -> None:
    config = tools_config("Calculator", {"digits": 2})
    assert [tool["config"]["tool"] for tool in config["tools"]] == ["calculate", "answer"]
    for tool in config["tools"]:
        assert tool["class_name"] == "tpo_agents.integrations.verl.tools.EnvTool"
        assert tool["config"]["type"] == "native" and tool["config"]["env_id"] == "TPO/Calculator-v0"
        assert tool["config"]["env_kwargs"]["digits"] == 2


def test_episode_score_is_the_episode_s_return() -> None:
    info = {"env_id": "TPO/GuessNumber-v0", "context": 3}
    assert episode_score("tpo_gym/GuessNumber", "no tool call", "4", info) == {
        "score": 0.0, "is_success": 0.0, "env_turns": 0.0}
    episode = {"env_id": "TPO/GuessNumber-v0", "context": 3, "calls": [["guess", {"number": 2}],
               ["guess", {"number": 4}]], "return": 1.0, "done": True}
    assert episode_score("tpo_gym/GuessNumber", "", "4", {**info, "tpo_episode": episode}) == {
        "score": 1.0, "is_success": 1.0, "env_turns": 2.0}
    with pytest.raises(ValueError, match="lacks env_id or context .* export --env"):
        episode_score("tpo_gym/GuessNumber", "", "4", {"split": "train"})
    with pytest.raises(ValueError, match="GuessNumber-v0 task 3, the row of TPO/GuessNumber-v0 task 5"):
        episode_score("tpo_gym/GuessNumber", "", "6", {**info, "context": 5, "tpo_episode": episode})


@needs_pyarrow
def test_export_writes_rows_and_tools_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    assert cli.main(["export", "--env", "GuessNumber", "--out", str(tmp_path), "--tasks", "4",
                     "--env-kwargs", "max_number:8", "max_turns:3"]) == 0
    names = ("train.parquet", "test.parquet", "tools.yaml")
    assert capsys.readouterr().out.split() == [word for name in names
                                               for word in (f"{name.split('.')[0]}:", str(tmp_path / name))]
    rows = environment_rows("GuessNumber", GUESS, tasks=4)
    assert pq.read_table(tmp_path / "train.parquet").to_pylist() == rows["train"]
    assert yaml.safe_load((tmp_path / "tools.yaml").read_text()) == tools_config("GuessNumber", GUESS)


def test_the_validator_asks_env_tools_for_the_episode_reward(tmp_path: Path) -> None:
    from tpo_agents.integrations.verl import config_errors, load_config

    config = Path(__file__).resolve().parents[3] / "configs" / "verl" / "tpo_qwen3_1.7b.yaml"
    tools = tmp_path / "tools.yaml"
    tools.write_text(yaml.safe_dump(tools_config("GuessNumber")))
    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"

    def errors(*overrides: str) -> list[str]:
        return config_errors(load_config([str(config), *overrides], use_hydra=False))

    assert errors(f"{key}={tools}", "reward.custom_reward_function.name=episode_score") == []
    (message,) = errors(f"{key}={tools}", "reward.custom_reward_function.name=compute_score")
    assert message.startswith("reward.custom_reward_function.name='compute_score': the tools of")
    assert "set it to 'episode_score'" in message
    (message,) = errors(f"{key}={tmp_path / 'missing.yaml'}")
    assert message.endswith("missing.yaml': cannot read it as a verl tool config (FileNotFoundError)")
    tools.write_text(yaml.safe_dump({"tools": [{"class_name": "my.Tool", "config": {"type": "native"}}]}))
    assert errors(f"{key}={tools}") == []  # other tools: their reward is the user's


@pytest.mark.parametrize(("argv", "message"), [
    (["--env", "TokenReversal"], "--env 'TokenReversal' is neither a text env nor a multi-turn env"),
    (["--env", "GuessNumber", "--tasks", "0"], "--tasks 0: expected an integer >= 1"),
    (["--env", "GuessNumber", "--env-kwargs", "max_turns:0"], "max_turns"),
    (["--env", "GraphColor", "--tasks", "4"], "--tasks 4: only a multi-turn env (TPO/GuessNumber-v0, "),
])
def test_export_refuses_bad_input_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 argv: list[str], message: str) -> None:
    out = tmp_path / "out"
    assert cli.main(["export", "--out", str(out), *argv]) == 1
    assert message in capsys.readouterr().err and not out.exists()


# ----------------------------------------------------------------------------- verl's own agent loop
#: A ChatML template with hermes tool calls (what verl's ``format=hermes`` parser reads), for the tiny
#: character tokenizer: tools in a system message, tool replies as ``<tool_response>`` user turns.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ call.function.name }}\", "
    "\"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def call(name: str, **arguments: Any) -> str:
    """An assistant turn that calls one tool, in the hermes format."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    from tests.llm_fixtures import build_tiny_llm

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_llm(tmp_path_factory.mktemp("tiny")))
    tokenizer.chat_template = TOOL_TEMPLATE
    return tokenizer


def first_row(env: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The first train row of ``env``'s export, the one :func:`play` plays."""
    return environment_rows(env, env_kwargs, tasks=1)["train"][0]


def play(tokenizer: Any, env: str, env_kwargs: dict[str, Any], turns: list[str], max_turns: int = 5) -> tuple:
    """verl's ``ToolAgentLoop`` on the first train row of ``env``, its tools loaded by verl's tool registry
    from the exported ``tools.yaml``, the assistant's turns scripted (each ends with EOS). Returns the
    loop's output and the row."""
    import tempfile

    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.tool_registry import initialize_tools_from_config
    from verl.workers.rollout.replica import TokenOutput

    class ScriptedServer:
        async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any):
            ids = tokenizer.encode(script.pop(0), add_special_tokens=False)
            return TokenOutput(token_ids=[*ids, tokenizer.eos_token_id])

    script = list(turns)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tools.yaml"
        path.write_text(yaml.safe_dump(tools_config(env, env_kwargs)))
        tools = initialize_tools_from_config(str(path))
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "multi_turn": {"max_user_turns": max_turns, "max_assistant_turns": max_turns, "max_parallel_calls": 1,
                       "max_tool_response_length": 256, "tool_response_truncate_side": "middle",
                       "format": "hermes"},
        "prompt_length": 2048, "response_length": 2048, "full_determinism": False}}})
    loop = ToolAgentLoop(trainer_config=DictConfigWrap(config), server_manager=ScriptedServer(),
                         tokenizer=tokenizer, processor=None, dataset_cls=None,
                         data_config=DictConfigWrap(OmegaConf.create({})), tools=ToolListWrap(tools))
    row = first_row(env, env_kwargs)
    output = loop.loop.run_until_complete(loop.run({}, raw_prompt=row["prompt"], extra_info=row["extra_info"],
                                                   tools_kwargs=row["extra_info"]["tools_kwargs"]))
    assert not script, "the loop stopped before the script's last turn"
    return output, row


def split_by_mask(tokenizer: Any, output: Any) -> tuple[str, str]:
    """The response's text where ``response_mask`` is 1 (the policy's) and where it is 0 (the env's)."""
    ids, mask = np.array(output.response_ids), np.array(output.response_mask)
    return tokenizer.decode(ids[mask == 1].tolist()), tokenizer.decode(ids[mask == 0].tolist())


@needs_verl
def test_verl_s_tool_agent_loop_plays_guess_number(tokenizer: Any) -> None:
    hidden = int(first_row("GuessNumber", GUESS)["reward_model"]["ground_truth"])
    low = 1 if hidden > 1 else 2
    turns = [call("guess", number=low), call("guess", value=3), call("guess", number=hidden), "Found it."]
    output, row = play(tokenizer, "GuessNumber", GUESS, turns)
    episode = output.extra_fields["tpo_episode"]
    assert episode == {"env_id": "TPO/GuessNumber-v0", "context": hidden - 1, "return": 1.0, "done": True,
                       "calls": [["guess", {"number": low}], ["guess", {"number": hidden}]]}
    policy_text, env_text = split_by_mask(tokenizer, output)
    assert policy_text == "".join(turn + "<|im_end|>" for turn in turns)
    first, error, last = [line for line in env_text.split("\n") if line and "<" not in line]
    assert (first, last) == ("higher" if hidden > low else "lower", "correct")
    assert error.startswith("Error executing tool 'guess'")  # bad arguments: a reply, not a turn of the env
    assert episode_score(row["data_source"], policy_text, row["reward_model"]["ground_truth"],
                         {**row["extra_info"], **output.extra_fields})["score"] == 1.0


@needs_verl
def test_a_call_after_the_end_changes_nothing_and_calculator_answers(tokenizer: Any) -> None:
    row = first_row("Calculator", {"digits": 1})
    context, answer = row["extra_info"]["context"], int(row["reward_model"]["ground_truth"])
    a, b = gym.make("TPO/Calculator-v0", digits=1).unwrapped.task.operands(context)
    turns = [call("calculate", expression=f"{a} * {b}"), call("answer", value=answer),
             call("answer", value=answer + 1), "Done."]
    output, row = play(tokenizer, "Calculator", {"digits": 1}, turns)
    episode = output.extra_fields["tpo_episode"]
    assert (episode["context"], episode["return"], episode["done"]) == (context, 1.0, True)
    assert [name for name, _ in episode["calls"]] == ["calculate", "answer", "answer"]
    _, env_text = split_by_mask(tokenizer, output)
    assert env_text.count(ENDED) == 1 and f"\n{answer}\n" in env_text and "\ncorrect\n" in env_text


@needs_verl
def test_verl_s_reward_manager_scores_the_episode(tokenizer: Any) -> None:
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    hidden = int(first_row("GuessNumber", GUESS)["reward_model"]["ground_truth"])
    scores = []
    for turns in ([call("guess", number=hidden), "Yes."], ["I will not play."]):
        output, row = play(tokenizer, "GuessNumber", GUESS, turns)
        prompts, responses = torch.tensor([output.prompt_ids]), torch.tensor([output.response_ids])
        mask = torch.ones(1, prompts.shape[1] + responses.shape[1], dtype=torch.long)
        data = DataProto.from_dict(
            tensors={"prompts": prompts, "responses": responses, "attention_mask": mask},
            non_tensors={"data_source": np.array([row["data_source"]], dtype=object),
                         "reward_model": np.array([row["reward_model"]], dtype=object),
                         "extra_info": np.array([dict(row["extra_info"])], dtype=object),
                         "tool_extra_fields": np.array([output.extra_fields], dtype=object)})
        manager = NaiveRewardManager(OmegaConf.create({}), tokenizer, episode_score)
        result = manager.loop.run_until_complete(manager.run_single(data))
        scores.append((result["reward_score"], result["reward_extra_info"]["env_turns"]))
    assert scores == [(1.0, 1.0), (0.0, 0.0)]


@needs_verl
def test_env_tool_schema_is_the_method_s_and_bad_configs_fail() -> None:
    from tpo_agents.integrations.verl.tools import EnvTool

    tool = EnvTool({"type": "native", "env_id": "TPO/Calculator-v0", "tool": "answer", "env_kwargs": {}})
    schema = tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    assert tool.name == "answer" and schema["function"]["parameters"]["required"] == ["value"]
    assert schema["function"]["parameters"]["properties"]["value"]["type"] == "integer"
    with pytest.raises(ValueError, match="env_id='TPO/TokenReversal-v0': a verl tool needs a multi-turn env"):
        EnvTool({"type": "native", "env_id": "TPO/TokenReversal-v0", "tool": "guess"})
    with pytest.raises(ValueError, match="tool='guess': TPO/Calculator-v0 has the tools calculate, answer"):
        EnvTool({"type": "native", "env_id": "TPO/Calculator-v0", "tool": "guess"})
