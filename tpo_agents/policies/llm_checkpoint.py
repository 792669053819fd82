"""Checkpoints of language-model policies people can use: a ``save_pretrained`` folder beside a small zip.

:func:`save_llm` writes ``<name>.zip`` (SB3's zip of the algorithm: settings, spaces, counters, the
policy's constructor arguments; no weights) and ``<name>.hf/`` (:meth:`LLMPolicy.save_pretrained`: the
whole model and its tokenizer, or the LoRA adapter). The zip records the folder as the policy's
``checkpoint``, so ``TPO.load("<name>.zip")`` (and ``python -m tpo_agents.evaluate``) rebuild the policy
from ``model`` with the folder's weights, and ``AutoModelForCausalLM.from_pretrained("<name>.hf")``
loads the folder alone. The optimizer's moments are saved only with ``optimizer=True`` (they weigh
twice the weights); without them a resumed run restarts AdamW's moments. The reference of the KL stays
the original ``model``'s weights.
"""

from __future__ import annotations

import os
from typing import IO, Any

from .llm import LLMPolicy

__all__ = ["FOLDER_SUFFIX", "checkpoint_folder", "is_llm_algorithm", "save_llm"]

#: The folder beside ``<name>.zip``: ``<name>.hf``.
FOLDER_SUFFIX = ".hf"


def is_llm_algorithm(algorithm: Any) -> bool:
    """Whether ``algorithm`` trains an :class:`LLMPolicy` (the policies :func:`save_llm` is for)."""
    return isinstance(getattr(algorithm, "policy", None), LLMPolicy)


def checkpoint_folder(zip_path: str | os.PathLike[str]) -> str:
    """The weights folder beside a model zip: ``run/TPO-GraphColor-v0.zip`` -> ``run/TPO-GraphColor-v0.hf``
    (absolute)."""
    path = os.path.abspath(os.fspath(zip_path))
    return (path[: -len(".zip")] if path.endswith(".zip") else path) + FOLDER_SUFFIX


def save_llm(
    algorithm: Any,
    path: str | os.PathLike[str] | IO[bytes],
    folder: str | None = None,
    optimizer: bool = False,
) -> str:
    """Save an algorithm with an :class:`LLMPolicy` as ``folder`` (weights, ``save_pretrained``) and the
    SB3 zip ``path`` (everything else; a path, or an open binary file with ``folder`` given).

    ``folder`` defaults to :func:`checkpoint_folder` of ``path``; ``optimizer=True`` keeps AdamW's state in
    the zip. Returns the folder.
    """
    if not is_llm_algorithm(algorithm):
        kind = type(getattr(algorithm, "policy", None)).__name__
        raise ValueError(f"save_llm saves algorithms with an LLMPolicy; got a {kind}")
    if folder is None:
        if not isinstance(path, str | os.PathLike):
            raise ValueError("save_llm to an open file needs folder= (where the weights go)")
        folder = checkpoint_folder(path)
    policy: LLMPolicy = algorithm.policy
    folder = policy.save_pretrained(os.path.abspath(folder))
    kwargs_before, checkpoint_before = algorithm.policy_kwargs, policy.checkpoint
    optimizer_state = policy.optimizer.state_dict
    algorithm.policy_kwargs = {**(kwargs_before or {}), "checkpoint": folder}
    policy.checkpoint = folder
    object.__setattr__(policy, "_weights_elsewhere", True)
    if not optimizer:  # the param groups (learning rate, betas) without the moments
        policy.optimizer.state_dict = lambda: {**optimizer_state(), "state": {}}  # type: ignore[method-assign]
    try:
        algorithm.save(path)
    finally:
        algorithm.policy_kwargs, policy.checkpoint = kwargs_before, checkpoint_before
        object.__setattr__(policy, "_weights_elsewhere", False)
        if not optimizer:
            del policy.optimizer.state_dict
    return folder
