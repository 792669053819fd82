"""What a collection mode asks of a policy, declared as protocols rather than probed with ``hasattr``.

* :class:`ActionPolicy`: every policy: ``log pi(. | obs)`` over a discrete action set.
* :class:`TextPolicy`: a language model that samples K completions per prompt and log-scores them
  with a teacher-forced forward (the text mode).
* :class:`SequencePolicy`: a policy over token sequences (the transformer) that decodes incrementally
  with a KV cache and re-scores whole completions with one teacher-forced forward. The token and
  sequence collectors use it when the policy has it; any :class:`ActionPolicy` still works, by
  re-reading the observations.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["ActionPolicy", "SequencePolicy", "TextPolicy"]


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


@runtime_checkable
class TextPolicy(Protocol):
    """A language model over prompt strings (``tpo_agents.policies.LLMPolicy``)."""

    logscore: str
    micro_batch_size: int

    def generate(self, prompts: list[str], n: int, greedy: bool = False) -> Any:
        """``n`` completions of each prompt (a ``Completions``: ids, masks, texts, counts, seconds)."""
        ...

    def token_log_probs(self, completions: Any, rows: Tensor) -> Tensor:
        """log pi(y_t | prompt, y_<t) of the completion tokens of ``rows``, ``[R, T]`` (0 on padding)."""
        ...

    def reference_token_log_probs(self, completions: Any, rows: Tensor) -> Tensor:
        """The same under the frozen reference model, without gradient."""
        ...

    def sync_generator(self) -> None:
        """Load the current weights into the generation engine (after an update)."""
        ...
