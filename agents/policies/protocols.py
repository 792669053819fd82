"""What a collection mode asks of a policy, declared as protocols rather than probed with ``hasattr``.

* :class:`ActionPolicy`: every policy: ``log pi(. | obs)`` over a discrete action set.
* :class:`SequencePolicy`: a policy over token sequences (the transformer) that decodes incrementally
  with a KV cache and re-scores whole completions with one teacher-forced forward. The token and
  sequence collectors use it when the policy has it; any :class:`ActionPolicy` still works, by
  re-reading the observations.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["ActionPolicy", "SequencePolicy"]


@runtime_checkable
class ActionPolicy(Protocol):
    """A categorical policy: ``action_log_probs(obs) -> [N, A]`` on ``device``."""

    device: torch.device

    def action_log_probs(self, obs: Tensor) -> Tensor: ...


@runtime_checkable
class SequencePolicy(ActionPolicy, Protocol):
    """A categorical policy over the output tokens of a prompt, with incremental decoding."""

    def decode_start(self, prompts: Tensor) -> tuple[Tensor, Any]:
        """``(log pi(. | prompt) [N, V], cache)`` for prompts ``[N, H]``."""
        ...

    def decode_next(self, tokens: Tensor, cache: Any, t: int) -> Tensor:
        """Append output token ``t`` (``[N]``) to ``cache``; the next log-probs ``[N, V]``."""
        ...

    def select_cache(self, cache: Any, rows: Tensor) -> Any:
        """The cache of the sequences ``rows``."""
        ...

    def completion_log_probs(self, prompts: Tensor, completions: Tensor) -> Tensor:
        """Teacher-forced ``log pi(. | prompt, completion_<t)`` for every t, ``[N, H, V]``."""
        ...

    def grouped_completion_log_probs(self, prompts: Tensor, owner: Tensor, completions: Tensor) -> Tensor:
        """``completion_log_probs(prompts[owner], completions)`` with each prompt encoded once."""
        ...
