"""Generation backends of :class:`~tpo_agents.policies.llm.LLMPolicy`: Hugging Face ``generate`` and vLLM.

A backend turns left-padded prompt ids ``[P, Lp]`` into ``n`` completions per prompt, returned as
right-padded ids ``[P*n, Lc]`` and their lengths ``[P*n]`` (rows ``i*n .. i*n+n-1`` belong to prompt
``i``), or, given :class:`Continuations`, ``n`` completions of each row ``prompt[owner[r]] + ids[r]`` (a
multi-turn conversation after its task's prompt). A completion's length counts every token up to and
including the first EOS, or up to the token that completes the stop string; the policy turns ids and
lengths into :class:`Completions`.

transformers, peft and vllm are imported inside the functions that need them, so that importing
:mod:`tpo_agents.policies` stays cheap and works without the ``llm`` extra.
"""

from __future__ import annotations

import inspect
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "CompletionStop", "Completions", "Continuations", "HFGenerator", "VLLMGenerator", "completion_lengths",
    "pad_rows",
]


@dataclass
class Completions:
    """``n`` sampled completions for each of ``P`` prompts.

    :param prompt_ids: ``[P, Lp]`` prompt tokens (chat template and prefill applied), left-padded
    :param prompt_mask: ``[P, Lp]`` 1 on prompt tokens, 0 on the left padding
    :param completion_ids: ``[P*n, Lc]`` completion tokens, right-padded; rows ``i*n .. i*n+n-1`` belong
        to prompt ``i``
    :param completion_mask: ``[P*n, Lc]`` 1 up to and including the first EOS (or the token that completes
        the stop string), 0 after
    :param owner: ``[P*n]`` prompt index of each completion row
    :param texts: the ``P*n`` decoded completions: the prefill string, then the completion's text with
        special tokens skipped and the stop string kept
    :param n_generated_tokens: ``sum(completion_mask)``
    :param seconds: wall-clock time of the generation (tokenization and decoding included)
    :param truncated: ``[P*n]`` bool, completions that ended neither with EOS nor with the stop string
        (cut by ``max_new_tokens``); with ``mask_truncated_completions`` their mask is all zero
    :param action_mask: ``[P*n, Lc]`` 1 on the tokens the policy wrote, 0 on the tokens between its turns
        that the environment wrote (a multi-turn episode: context, never scored); None: every completion
        token is the policy's
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    owner: Tensor
    texts: list[str]
    n_generated_tokens: int
    seconds: float
    truncated: Tensor | None = None
    action_mask: Tensor | None = None

    @property
    def loss_mask(self) -> Tensor:
        """``[P*n, Lc]`` the tokens every loss and log-score reads: :attr:`action_mask`, else
        :attr:`completion_mask`."""
        return self.completion_mask if self.action_mask is None else self.action_mask


@dataclass
class Continuations:
    """Rows that continue shared prompts: row ``r`` is prompt ``owner[r]`` followed by the tokens of
    ``ids[r]`` that ``mask[r]`` marks (``[R, L]``, any padding; a multi-turn conversation so far after its
    task's prompt)."""

    owner: Tensor
    ids: Tensor
    mask: Tensor

    def rows(self, prompt_ids: Tensor, prompt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """The whole rows ``[R, Lp + L]``, left-padded (:func:`right_align`)."""
        return right_align(torch.cat([prompt_ids[self.owner], self.ids], 1),
                           torch.cat([prompt_mask[self.owner], self.mask], 1))


def right_align(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Rows ``ids [N, L]`` with their tokens (``mask`` 1) moved to the right end in order, the padding to
    the left (a stable sort of each row by its mask): ``(ids, mask)`` left-padded."""
    order = torch.argsort(mask, dim=1, stable=True)
    return ids.gather(1, order), mask.gather(1, order)


def mask_positions(mask: Tensor) -> Tensor:
    """Position ids of rows with attention mask ``mask``: ``cumsum(mask) - 1``, 0 on the padding, so that
    padding (left, or between a cached prompt and the rest of a row) does not shift them (as in
    ``generate``)."""
    return (mask.cumsum(1) - 1).clamp(min=0)


def cache_keyword(model: nn.Module) -> str:
    """The name of a causal LM's key-value cache, as the keyword of ``forward`` and ``generate`` and as an
    output field: ``cache`` from transformers 5.2x on (``past_key_values`` deprecated), ``past_key_values``
    before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model's own
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def gathered_prompt_cache(model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor,
                          rows: Tensor) -> tuple[Tensor, Any]:
    """One forward of the prompts ``[P, Lp]`` (left-padded, positions :func:`mask_positions`): the logits of
    their last position ``[P, 1, V]`` and their key-value cache gathered to the rows (``rows[r]``: row r's
    prompt), the context on which the rows' further tokens are forwarded or generated."""
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=mask_positions(prompt_mask),
                logits_to_keep=1, use_cache=True)
    cache = getattr(out, cache_keyword(model))
    cache.batch_select_indices(rows)
    return out.logits, cache


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device,
             left: bool = False) -> tuple[Tensor, Tensor]:
    """Right-pad (``left``: left-pad, as generation takes contexts) token lists into ``(ids [N, max len],
    lengths [N])`` (at least one column)."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    width = max(1, int(lengths.max()))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        columns = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, columns] = torch.tensor(row, dtype=torch.long)
    return ids.to(device), lengths.to(device)


def stop_strings(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """The stop strings of a policy's ``stop``: none, one string, or several (a completion ends at the
    first of them); each a non-empty ``str``."""
    stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    if not all(isinstance(text, str) and text for text in stops):
        raise ValueError(f"stop={stop!r}: use None, a non-empty string or a list of them")
    return stops


def has_stop(text: str, stops: Sequence[str]) -> bool:
    """Whether ``text`` contains any of ``stops``."""
    return any(stop in text for stop in stops)


def completion_lengths(
    ids: Tensor, eos_ids: Sequence[int], stop: str | Sequence[str] | None, tokenizer: PreTrainedTokenizerBase
) -> Tensor:
    """Length ``[N]`` of each generated row ``ids [N, L]``: the shorter of the two ends below.

    * EOS end: index of the first EOS token + 1 (the EOS is part of the completion), ``L`` without one;
    * stop end: the smallest ``k`` such that the decoded ``ids[:k]`` contains ``stop`` (any of them, for a
      list; found by bisection, since containment only grows with ``k``); this is where ``generate``'s
      stopping criterion stops.

    Positions after the end hold whatever the generator padded with (pad may equal EOS), so the end must
    be computed, not read off the pad token.
    """
    length = ids.shape[1]
    is_eos = torch.isin(ids, torch.tensor(list(eos_ids), device=ids.device))
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(ids[:, 0], length))
    stops = stop_strings(stop)
    if not stops:
        return ends
    rows = ids.tolist()
    for i, row in enumerate(rows):
        end = int(ends[i])
        if not has_stop(tokenizer.decode(row[:end], skip_special_tokens=True), stops):
            continue
        low, high = 1, end  # invariant: a stop string is in row[:high], none in row[:low - 1]
        while low < high:
            mid = (low + high) // 2
            if has_stop(tokenizer.decode(row[:mid], skip_special_tokens=True), stops):
                high = mid
            else:
                low = mid + 1
        ends[i] = high
    return ends


class CompletionStop:
    """``generate`` stopping criterion: a row is done once its *completion* (the tokens after the
    ``prompt_length`` prompt columns) contains ``stop`` (any of them), decoded as :func:`completion_lengths`
    decodes.

    transformers' ``stop_strings`` also match a stop string that starts in the prompt's tail (``"\n\n"``
    after a template ending ``assistant\n``): generation then stops where no completion ends, and the
    padding written after it (EOS when pad = EOS) would be trained as the row's last token. vLLM matches in
    the output text only, like this criterion.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, stop: str | Sequence[str], prompt_length: int
    ) -> None:
        self.tokenizer = tokenizer
        self.stops = stop_strings(stop)
        self.prompt_length = prompt_length

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: Any) -> Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_length :], skip_special_tokens=True)
        done = [has_stop(text, self.stops) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class HFGenerator:
    """Batched sampling with ``model.generate`` (KV cache), the default backend.

    The rows (the prompts, or the :class:`Continuations` of them) are repeated ``n`` times
    (``repeat_interleave``) and decoded in ONE ``generate`` call: ``do_sample = not greedy``,
    ``temperature``, ``top_p`` and ``top_k = 0`` (so that sampling at temperature 1, top-p 1 draws from the
    model's own distribution; transformers' default top-k is 50), ``max_new_tokens``, and
    :class:`CompletionStop` for ``stop`` (matched inside the completion only). Sampling uses torch's global
    RNG. The model is put in eval mode for the call and restored after. The generator reads the live
    model, so there is nothing to synchronise after an update.

    A prompt that starts several rows is read once: its tokens but the last are forwarded once per
    prompt and their key-value cache, gathered to the rows, is ``generate``'s cache, so that ``generate``
    reads only each row's last prompt token and the rest of the row (the padding between them masked,
    positions ``cumsum(mask) - 1``): what one left-padded row gives, up to float rounding, for a share of
    the prompt's cost (K samples of a prompt, K conversations of a task at every turn). Rows that share
    no prompt run as one left-padded batch.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        eos_ids: Sequence[int],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: str | Sequence[str] | None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.stop = stop

    @torch.no_grad()
    def generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, greedy: bool,
        continuations: Continuations | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``(completion ids [R*n, Lc] right-padded, lengths [R*n])`` for left-padded prompts ``[P, Lp]``
        (R = P), or for their ``continuations`` (R rows)."""
        if continuations is None:
            continuations = Continuations(torch.arange(len(prompt_ids), device=prompt_ids.device),
                                          prompt_ids[:, :0], prompt_mask[:, :0])
        was_training = self.model.training
        self.model.eval()
        try:
            ids, mask, cache = self._inputs(prompt_ids, prompt_mask, n, continuations)
            kwargs: dict[str, Any] = {"do_sample": not greedy, "max_new_tokens": self.max_new_tokens, **cache}
            if not greedy:
                kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
            if stop_strings(self.stop):  # not stop_strings: HF matches those across the prompt's tail too
                from transformers import StoppingCriteriaList

                criterion = CompletionStop(self.tokenizer, self.stop, ids.shape[1])
                kwargs.update(stopping_criteria=StoppingCriteriaList([criterion]))
            sequences = self.model.generate(input_ids=ids, attention_mask=mask, eos_token_id=self.eos_ids,
                                            pad_token_id=self.tokenizer.pad_token_id, **kwargs)
        finally:
            self.model.train(was_training)
        ids = sequences[:, ids.shape[1] :]
        lengths = completion_lengths(ids, self.eos_ids, self.stop, self.tokenizer)
        ids = ids[:, : int(lengths.max())]
        padding = torch.arange(ids.shape[1], device=ids.device) >= lengths[:, None]
        return ids.masked_fill(padding, self.tokenizer.pad_token_id), lengths

    def _inputs(self, prompt_ids: Tensor, prompt_mask: Tensor, n: int,
                continuations: Continuations) -> tuple[Tensor, Tensor, dict[str, Any]]:
        """``generate``'s rows ``[R*n, W]``, their mask, and its cache keyword: where a prompt starts several
        rows, the used prompts but their last token forwarded once, the cache gathered to the rows, each
        row that head then its last prompt token and continuation (left-padded); else the whole rows,
        left-padded, and no cache."""
        owner = continuations.owner.repeat_interleave(n)
        used, inverse = torch.unique(owner, return_inverse=True)
        if len(used) == len(owner) or prompt_ids.shape[1] == 1:
            ids, mask = continuations.rows(prompt_ids, prompt_mask)
            return ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0), {}
        head_ids, head_mask = prompt_ids[used, :-1], prompt_mask[used, :-1]
        _, cache = gathered_prompt_cache(self.model, head_ids, head_mask, inverse)
        tail_ids, tail_mask = right_align(
            torch.cat([prompt_ids[owner, -1:], continuations.ids.repeat_interleave(n, 0)], 1),
            torch.cat([prompt_mask[owner, -1:], continuations.mask.repeat_interleave(n, 0)], 1))
        ids = torch.cat([head_ids[inverse], tail_ids], 1)
        return ids, torch.cat([head_mask[inverse], tail_mask], 1), {cache_keyword(self.model): cache}

    def sync_weights(self) -> None:
        """Nothing to do: ``generate`` runs on the trained model itself."""


class VLLMGenerator:
    """Colocated vLLM engine (``backend="vllm"``). NOT run in this repository's tests: it needs a CUDA GPU.

    ``vllm.LLM(model=model_path, gpu_memory_utilization, dtype)`` lives in the training process, as in
    TRL's colocate mode (``distributed_executor_backend="external_launcher"``, so that the engine's model
    is reachable in-process for weight loading). Sampling: ``SamplingParams(n, temperature, top_p,
    max_tokens, stop=[stop], include_stop_str_in_output=True, seed)`` with the seed drawn from torch's
    global RNG (greedy: temperature 0); completion ids are the outputs' ``token_ids``, which end with the
    EOS or with the token that completes the stop string. No log-probs are requested (``logprobs`` unset):
    the text mode's pi_old is the trainer's teacher-forced forward of these ids at theta_old, the first
    epoch's (:class:`~tpo_agents.modes.text.TextMode`), so the loss compares log-probs of one model and one
    numerics; the engine's sampling distribution may differ from it by its kernels and dtype (docs/llm.md).

    :meth:`sync_weights` pushes the trainer's current weights into the engine the way TRL 1.16 does
    (``trl/generation/vllm_generation.py``: ``_iter_named_params`` + ``sync_weights``): with LoRA,
    ``merge_adapter()``, stream every base weight under its plain name (``base_model.model.`` prefix and
    ``.base_layer`` removed, ``lora_`` tensors skipped), ``unmerge_adapter()`` and copy the saved base
    weights back (W + BA - BA is not W in bf16: without the copy the frozen base drifts at every sync);
    without LoRA, stream ``named_parameters()``; each tensor goes through the engine model's
    ``load_weights``; then ``reset_prefix_cache()`` so that no KV block computed with the old weights is
    reused.
    """

    def __init__(
        self,
        model: nn.Module,
        model_path: str,
        pad_id: int,
        dtype: torch.dtype,
        gpu_memory_utilization: float,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop: str | Sequence[str] | None,
    ) -> None:
        from vllm import LLM

        for key, value in (
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "localhost"),
        ):
            os.environ.setdefault(key, value)
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as sock:
                sock.bind(("localhost", 0))
                os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
        self.model = model
        self.pad_id = pad_id
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.stop = stop
        self.llm = LLM(
            model=model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=str(dtype).removeprefix("torch."),
            distributed_executor_backend="external_launcher",
        )

    @torch.no_grad()
    def generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, greedy: bool,
        continuations: Continuations | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``(completion ids [R*n, Lc] right-padded, lengths [R*n])`` for left-padded prompts ``[P, Lp]``
        (R = P), or for their ``continuations`` (R rows; the engine's prefix cache shares the prompts)."""
        from vllm import SamplingParams

        if continuations is not None:
            prompt_ids, prompt_mask = continuations.rows(prompt_ids, prompt_mask)

        params = SamplingParams(
            n=n,
            temperature=0.0 if greedy else self.temperature,
            top_p=1.0 if greedy else self.top_p,
            max_tokens=self.max_new_tokens,
            stop=list(stop_strings(self.stop)) or None,
            include_stop_str_in_output=True,
            seed=int(torch.randint(2**31 - 1, ())),
        )
        prompts = [
            {"prompt_token_ids": row[mask.bool()].tolist()}
            for row, mask in zip(prompt_ids, prompt_mask, strict=True)
        ]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        rows = [list(sample.token_ids) for output in outputs for sample in output.outputs]
        return pad_rows(rows, self.pad_id, prompt_ids.device)

    def _named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """The current weights under vLLM's names, LoRA merged in (TRL's ``_iter_named_params``)."""
        model = self.model
        if not hasattr(model, "merge_adapter"):
            for name, param in model.named_parameters():
                yield name, param.data
            return
        # W + BA - BA != W in bf16: keep the adapted base weights and put them back after unmerging, so
        # that the frozen base (the KL reference, and the next merge) stays bit-identical over every sync.
        originals = {
            name: param.data.clone() for name, param in model.named_parameters() if ".base_layer." in name
        }
        model.merge_adapter()
        try:
            for name, param in model.named_parameters():
                if model.prefix in name:
                    continue
                yield name.removeprefix("base_model.model.").replace(".base_layer", ""), param.data
        finally:
            model.unmerge_adapter()
            params = dict(model.named_parameters())
            for name, value in originals.items():
                params[name].data.copy_(value)

    def sync_weights(self) -> None:
        """Load the trainer's current (LoRA-merged) weights into the engine and drop its prefix cache."""
        engine_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        for name, param in self._named_weights():
            engine_model.load_weights([(name, param)])
        self.llm.reset_prefix_cache()
