"""The multi-turn ``TPO/`` envs as verl tools: verl's ``ToolAgentLoop`` plays them turn by turn.

verl 0.9.1's ``ToolAgentLoop`` creates and releases a ``BaseTool`` instance around every single call and
hands ``execute`` the trajectory's ``AgentData``, whose ``extra_fields`` it carries to the reward function.
So the episode of a trajectory lives there, under :data:`~.reward.EPISODE`, as plain values: ``{"env_id",
"context", "calls": [[tool, arguments], ...], "return", "done"}``. Each call of an :class:`EnvTool` resets
the env's tool set (:mod:`tpo_agents.integrations.env_tools`, the same one TRL uses) to the context, replays
the earlier calls (an env's replies depend only on its context and the actions) and plays its own; the
tool's reply is the env's. A call whose arguments the tool does not take raises, which verl turns into an
error reply; the episode does not change. :func:`episode_score` (the reward function, in :mod:`.reward`)
returns the episode's return.

Tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``), as
``python -m tpo_agents.integrations.verl export --env GuessNumber`` writes it::

    tools:
      - class_name: tpo_agents.integrations.verl.tools.EnvTool
        config: {type: native, env_id: TPO/GuessNumber-v0, tool: guess, env_kwargs: {}}

The schema is the tool method's (its type hints and docstring, read by ``transformers.utils.get_json_schema``
as TRL reads them). Each row gives its task in ``extra_info.tools_kwargs.<tool>.create_kwargs.context``.
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from tpo_agents.integrations.env_tools import TOOL_SETS, MultiTurnTools

from .reward import EPISODE

__all__ = ["EnvTool"]


class EnvTool(BaseTool):
    """One tool of a multi-turn env's tool set, for verl's ``ToolAgentLoop``.

    :param config: ``env_id`` (a key of :data:`~tpo_agents.integrations.env_tools.TOOL_SETS`), ``tool`` (one
        of its tools) and ``env_kwargs`` (the env's keyword arguments, as the exported rows' env was made)
    :param tool_schema: verl's schema; None (the default): the tool method's
    :raises ValueError: an env without a tool set, or a tool it does not have
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        env_id, tool = config.get("env_id"), config.get("tool")
        if env_id not in TOOL_SETS:
            raise ValueError(f"env_id={env_id!r}: a verl tool needs a multi-turn env, one of "
                             f"{', '.join(TOOL_SETS)}")
        tools_class = TOOL_SETS[env_id]
        if tool not in tools_class.tools:
            raise ValueError(f"tool={tool!r}: {env_id} has the tools {', '.join(tools_class.tools)}")
        self.env_id, self.tool = env_id, tool
        self._tools: MultiTurnTools = tools_class(**dict(config.get("env_kwargs") or {}))
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The tool method's JSON schema: its name, docstring and typed arguments."""
        from transformers.utils import get_json_schema

        return OpenAIFunctionToolSchema.model_validate(get_json_schema(getattr(self._tools, self.tool)))

    async def execute(self, instance_id: str, parameters: dict[str, Any],
                      **kwargs: Any) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Play one turn of the trajectory's episode with ``parameters``; the reply is the env's.

        Reads and writes ``kwargs["agent_data"].extra_fields[EPISODE]`` (started from the row's context in
        ``agent_data.tools_kwargs`` at the first call). The step reward is 0.0: the return is the reward
        function's (:func:`~tpo_agents.integrations.verl.reward.episode_score`).
        """
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            raise ValueError("EnvTool.execute needs agent_data (verl's ToolAgentLoop passes it)")
        episode = agent_data.extra_fields.get(EPISODE) or self._new_episode(agent_data.tools_kwargs)
        tools = self._tools
        tools.reset(episode["context"])
        for name, arguments in episode["calls"]:
            getattr(tools, name)(**arguments)
        reply = getattr(tools, self.tool)(**parameters)
        calls = [*episode["calls"], [self.tool, dict(parameters)]]
        agent_data.extra_fields[EPISODE] = {**episode, "calls": calls, "return": tools.get_reward(),
                                            "done": tools.done}
        return ToolResponse(text=reply), 0.0, {}

    def _new_episode(self, tools_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The episode of a trajectory's first call: the row's context, no calls yet."""
        context = (tools_kwargs.get(self.name) or {}).get("create_kwargs", {}).get("context")
        if context is None:
            raise ValueError(f"the row gives no context for tool {self.name!r} (extra_info.tools_kwargs."
                             f"{self.name}.create_kwargs.context): export the data with `python -m "
                             f"tpo_agents.integrations.verl export`")
        return {"env_id": self.env_id, "context": int(context), "calls": [], "return": 0.0, "done": False}
