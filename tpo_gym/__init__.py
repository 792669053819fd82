"""``tpo_gym``: Gymnasium environments for group-based RL (TPO and its peers).

Importing the package registers these ids (namespace ``TPO``), each with a single-env
``entry_point`` and a natively batched ``vector_entry_point`` (``gymnasium.make_vec``):

* ``TPO/KArmedBandit-v0``, ``TPO/MultiContextBandit-v0``, ``TPO/MNISTBandit-v0``;
* ``TPO/TokenCopy-v0``, ``TPO/TokenFlip-v0``, ``TPO/TokenReversal-v0`` (reverse copy),
  ``TPO/TokenReverseFlip-v0``: kwargs ``reward``, ``sequence_length``, ``vocab_size``.

No ``max_episode_steps`` is registered: every episode has a fixed length and the env terminates
it itself, which stays correct for any ``sequence_length``. Without importing the package,
``gymnasium.make("tpo_gym:TPO/TokenCopy-v0")`` imports it first.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__version__ = "0.1.0"

_TOKENS = "tpo_gym.envs.tokens"
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

ENV_IDS: tuple[str, ...] = ("TPO/KArmedBandit-v0", "TPO/MultiContextBandit-v0", "TPO/MNISTBandit-v0",
                            *(f"TPO/{name}-v0" for name in _TOKEN_TASKS))

__all__ = ["ENV_IDS", "__version__"]
