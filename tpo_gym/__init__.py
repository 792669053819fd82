"""``tpo_gym``: Gymnasium environments for group-based RL (TPO and its peers).

Importing the package registers these ids (namespace ``TPO``), each with a single-env
``entry_point`` and a natively batched ``vector_entry_point`` (``gymnasium.make_vec``):

* ``TPO/KArmedBandit-v0``, ``TPO/MultiContextBandit-v0``, ``TPO/MNISTBandit-v0``;
* ``TPO/TokenCopy-v0``, ``TPO/TokenFlip-v0``, ``TPO/TokenReversal-v0`` (reverse copy),
  ``TPO/TokenReverseFlip-v0``: kwargs ``reward``, ``sequence_length``, ``vocab_size``;
* text RLVR on reasoning-gym tasks (``tpo_gym.envs.text``; observation a prompt string, action a
  completion string, one step per episode; needs ``pip install 'tpo-gym[llm]'``, imported only
  when such an env is built): ``TPO/ReasoningGym-v0`` (kwarg ``dataset`` required),
  ``TPO/GraphColor-v0``, ``TPO/KnightsKnaves-v0``, ``TPO/GSMSymbolic-v0``; kwargs ``split``,
  ``size``, ``eval_size``, ``seed``, ``reward``, ``max_prompt_chars``, ``max_completion_chars``,
  and the dataset's own config keys; ``TPO/GSM8K-v0`` (GSM8K read from ``data_file=`` or the Hugging
  Face cache, never downloaded; scored as verl's GSM8K reward: ``#### N``, kwarg ``answer_format``
  ``"strict"``, ``"flexible"`` or ``"tag"``). Their ids are in ``TEXT_ENV_IDS``,
  not ``ENV_IDS``
  (whose envs have numpy observations and discrete actions);
* multi-turn text tasks (``tpo_gym.envs.multiturn``; observation the transcript so far, action the
  next turn's text, several turns per episode; no extra dependency): ``TPO/GuessNumber-v0`` (find a
  hidden number from the replies higher / lower; kwargs ``max_number``, ``max_turns``,
  ``max_action_chars``) and ``TPO/Calculator-v0`` (a product of two numbers with a calculator tool;
  kwargs ``digits``, ``max_turns``, ``max_action_chars``). Their ids are in ``MULTITURN_ENV_IDS``.

No ``max_episode_steps`` is registered: every episode has a fixed length, or at most ``max_turns``
turns for the multi-turn tasks, and the env ends it itself, which stays correct for any
``sequence_length`` or ``max_turns``. Without importing the package,
``gymnasium.make("tpo_gym:TPO/TokenCopy-v0")`` imports it first.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__version__ = "0.1.0"

_TOKENS = "tpo_gym.envs.tokens"
_TEXT = "tpo_gym.envs.text"
_MULTITURN = "tpo_gym.envs.multiturn"
_TEXT_PRESETS = {"GraphColor": "graph_color", "KnightsKnaves": "knights_knaves",
                 "GSMSymbolic": "gsm_symbolic"}
_TOKEN_TASKS = {"TokenCopy": "copy", "TokenFlip": "flip", "TokenReversal": "reverse_copy",
                "TokenReverseFlip": "reverse_flip"}


def _register(env_id: str, module: str, env_class: str, kwargs: dict[str, Any] | None = None) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=f"{module}:{env_class}Env",
                     vector_entry_point=f"{module}:{env_class}VectorEnv", kwargs=kwargs or {})


_register("TPO/KArmedBandit-v0", "tpo_gym.envs.bandits", "KArmedBandit")
_register("TPO/MultiContextBandit-v0", "tpo_gym.envs.bandits", "MultiContextBandit")
_register("TPO/MNISTBandit-v0", "tpo_gym.envs.mnist", "MNISTBandit")
for _name, _logic in _TOKEN_TASKS.items():
    _register(f"TPO/{_name}-v0", _TOKENS, "TokenTask", {"logic": _logic})

_register("TPO/ReasoningGym-v0", _TEXT, "Text")
for _name, _dataset in _TEXT_PRESETS.items():
    _register(f"TPO/{_name}-v0", _TEXT, "Text", {"dataset": _dataset})
_register("TPO/GSM8K-v0", _TEXT, "Text", {"dataset": "gsm8k", "size": None, "eval_size": None})
_register("TPO/GuessNumber-v0", _MULTITURN, "GuessNumber")
_register("TPO/Calculator-v0", _MULTITURN, "Calculator")

ENV_IDS: tuple[str, ...] = ("TPO/KArmedBandit-v0", "TPO/MultiContextBandit-v0", "TPO/MNISTBandit-v0",
                            *(f"TPO/{name}-v0" for name in _TOKEN_TASKS))
TEXT_ENV_IDS: tuple[str, ...] = ("TPO/ReasoningGym-v0", *(f"TPO/{name}-v0" for name in _TEXT_PRESETS),
                                 "TPO/GSM8K-v0")
MULTITURN_ENV_IDS: tuple[str, ...] = ("TPO/GuessNumber-v0", "TPO/Calculator-v0")

__all__ = ["ENV_IDS", "MULTITURN_ENV_IDS", "TEXT_ENV_IDS", "__version__"]
