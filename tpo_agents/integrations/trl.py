"""TPO on TRL: :class:`TargetPOTrainer`, a ``GRPOTrainer`` whose update is TPO's target and cross-entropy.

TRL's ``GRPOTrainer`` generates K = ``num_generations`` completions per prompt, scores them with reward
functions and, for GRPO, weights token log-probs by z-scored advantages. :class:`TargetPOTrainer` keeps
TRL's generation (transformers or vLLM), reward functions, accelerate/DeepSpeed training and logging and
replaces the update by TPO's (paper, arXiv 2604.06159, Sec. 2), with the maths from :mod:`tpo_agents.losses`:

    L_i = sum_t log pi(y_t | x, y_<t)  (``logscore="sum"``)  or the per-token mean  (``"mean"``)
    q   = softmax_K( log_softmax_K(sg L_old) + u(s) / eta )      u = the within-group z-score of s
    loss = - mean_groups sum_i q_i log softmax_K(L_theta)_i  [+ beta * k3 KL(pi_theta || pi_ref) per token]

``s`` is the weighted sum of the reward functions (as GRPO's), L_old the log-score under the policy
that generated the completions (``old_per_token_logps`` when TRL computes them: ``num_iterations > 1``
or generation not aligned with the optimizer step; otherwise theta = theta_old during the whole
accumulation window and L_old = sg L_theta, exactly).

**Whole groups.** The group softmax needs the K completions of a prompt together. TRL's
``RepeatSampler`` places a prompt's K copies next to each other. With ``per_device_train_batch_size`` (and
the eval batch size, when evaluating) a multiple of K, every process's generation batch and every
micro-batch slice holds whole groups; the trainer shuffles the generation batch by groups (GRPO shuffles
rows) and each micro-batch checks that its groups share one prompt. The update is then the mean over all
groups of the global batch: each micro-batch's loss is its groups' mean divided by the accumulation steps,
and DDP averages the processes' gradients. **A group may also span processes** (K = 16 on 8 GPUs with 2
rows each): with a per-device batch that divides K and ``steps_per_generation=1``, the K / rows consecutive
processes of a group each hold a part of it; every process gathers all rows' log-scores with a
differentiable all-gather and takes the mean over every group, and the all-gather's backward sums each
row's gradient over the processes, so DDP's average is the same update as one process holding the groups.

**Rows, KL, inputs.** The loss is :func:`tpo_agents.losses.completion_tpo_loss`, the function verl's plugin
and our text mode call: a row whose completion mask is empty (``mask_truncated_completions=True`` zeroes
truncated rows) leaves its group's softmax and is counted in ``tpo/dropped_rows``; a group left with
fewer than two rows gives no gradient. With ``beta > 0`` the k3 KL to the reference (weighted by the
importance ratio with ``use_bias_correction_kl``, TRL's default) is a mean over the completion tokens of
the whole accumulation window (``num_items_in_batch``), whatever the micro-batching; a zero-variance group
(u = 0, q = p_old) then gets the KL's gradient only, as in GRPO. Log-probs are TRL's, at the sampling
``temperature`` (logits / T), the rule of our own loop too. Multimodal inputs (``pixel_values``,
``image_grid_thw``, ...) reach the model, and a Mixture-of-Experts router loss is added as GRPO adds it.

**Settings.** ``TargetPOConfig`` refuses, when it is built, a non-default value of every ``GRPOConfig``
setting that only GRPO's loss or advantages read (:data:`GRPO_LOSS_SETTINGS`: ``loss_type``, ``epsilon``,
``scale_rewards``, ``importance_sampling_level``, ...) and of those that would change the update silently
(:data:`REFUSED_SETTINGS`: Liger loss, entropy masks and bonuses, off-policy masks, normalize-then-sum
aggregation). Saved ``*.safetensors`` files get the mode of the other saved files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_pixel_values_by_grid, split_tensor_dict, unsplit_pixel_values_by_grid

from tpo_agents import checks, losses
from tpo_agents.policies.generation import completion_lengths, pad_rows
from tpo_agents.policies.llm import format_prompt, share_saved_weights
from tpo_agents.without_signal import StepsWithoutSignal, loss_signal
from tpo_gym.envs.text import ReasoningGymTask, TextEnv

__all__ = [
    "GRPO_LOSS_SETTINGS",
    "REFUSED_SETTINGS",
    "TargetPOConfig",
    "TargetPOTrainer",
    "check_config",
    "check_settings",
    "shuffle_groups",
    "target_po_loss",
    "text_env_dataset",
    "text_env_task",
    "text_env_reward",
]

LOGSCORES = ("sum", "mean")
#: Model inputs besides the ids that TRL's batches may carry (vision-language models), forwarded to the model.
MODEL_INPUTS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
                "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")
#: ``GRPOConfig`` settings read only by GRPO's loss and advantages (TPO's update reads none of them).
GRPO_LOSS_SETTINGS = ("loss_type", "epsilon", "epsilon_high", "delta", "importance_sampling_level",
                      "scale_rewards", "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_pos",
                      "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "entropy_coef_min",
                      "entropy_coef_max", "entropy_coef_delta", "entropy_target")
#: ``GRPOConfig`` settings that would change TPO's update silently.
REFUSED_SETTINGS = ("use_liger_kernel", "top_entropy_quantile", "off_policy_mask_threshold", "entropy_coef",
                    "use_adaptive_entropy", "multi_objective_aggregation")
_GRPO_DEFAULTS = {item.name: item.default for item in fields(GRPOConfig)}


@dataclass
class TargetPOConfig(GRPOConfig):
    """``GRPOConfig`` plus TPO's two settings. ``beta`` (default 0) weights the k3 KL to the reference.

    :param eta: temperature eta of the target, > 0 (1.0 in every experiment of the paper).
    :param logscore: a completion's log-score L: ``"sum"`` of its token log-probs (its log-probability) or
        their ``"mean"`` (the default: summed log-probs of sampled completions differ by tens of nats, which
        makes the group softmax one-hot and the target equal to p_old).
    :param stop: a stop string (e.g. ``"</answer>"``): each completion is cut after the token that completes
        it, in the completion only (both backends), before it is scored, masked and trained, so tokens
        after the answer do not enter the log-score (TRL's transformers backend has no stop strings).
    """

    eta: float = field(default=1.0, metadata={"help": "temperature eta of the TPO target (> 0)"})
    logscore: str = field(default="mean", metadata={"help": "completion log-score: 'sum' or 'mean'"})
    stop: str | None = field(
        default=None, metadata={"help": "stop string: a completion ends with the token that completes it"}
    )

    def __post_init__(self) -> None:
        checks.check_positive("eta", self.eta)
        checks.check_choice("logscore", self.logscore, LOGSCORES)
        if self.stop is not None and (not isinstance(self.stop, str) or not self.stop):
            raise ValueError(f"stop={self.stop!r}: must be a non-empty string or None")
        super().__post_init__()
        check_settings(self)


def check_settings(args: GRPOConfig) -> None:
    """Raise a one-line ``ValueError`` for a non-default value of a setting TPO's update does not read
    (:data:`GRPO_LOSS_SETTINGS`) or that would change it silently (:data:`REFUSED_SETTINGS`)."""
    for name in GRPO_LOSS_SETTINGS:
        value, default = getattr(args, name), _GRPO_DEFAULTS[name]
        if value != default:
            raise ValueError(f"{name}={value!r}: only GRPO's loss and advantages read it, not "
                             f"TargetPOTrainer's TPO update (allowed: the default {default!r})")
    for name in REFUSED_SETTINGS:
        value, default = getattr(args, name), _GRPO_DEFAULTS[name]
        if value != default:
            raise ValueError(f"{name}={value!r} is not supported by TargetPOTrainer (allowed: {default!r})")
    if args.use_vllm and args.vllm_importance_sampling_correction:
        raise ValueError("use_vllm=True with vllm_importance_sampling_correction=True: TargetPOTrainer's TPO "
                         "update does not apply TRL's vLLM importance weights (pi_old is the trainer's own "
                         "forward); set vllm_importance_sampling_correction=False")


def check_config(args: GRPOConfig) -> None:
    """Raise a one-line ``ValueError`` for settings that split groups or that TPO's update would ignore."""
    if not isinstance(args, TargetPOConfig):
        kind = type(args).__name__
        raise ValueError(f"args is a {kind}; TargetPOTrainer takes a TargetPOConfig (eta, logscore)")
    k = args.num_generations
    train = args.per_device_train_batch_size
    if train % k and (k % train or args.steps_per_generation != 1):
        raise ValueError(
            f"per_device_train_batch_size={train} must be a multiple of num_generations={k} (whole groups in "
            f"each micro-batch), or divide it with steps_per_generation=1 (a group then spans {k} / {train} "
            f"processes); steps_per_generation={args.steps_per_generation}"
        )
    k_eval = args.num_generations_eval or k
    evaluation = args.per_device_eval_batch_size
    if args.eval_strategy != "no" and evaluation % k_eval and k_eval % evaluation:
        raise ValueError(
            f"per_device_eval_batch_size={evaluation} must be a multiple of num_generations_eval={k_eval} "
            f"or divide it when evaluating"
        )
    if args.stop is not None and args.mask_truncated_completions:
        raise ValueError(f"stop={args.stop!r} with mask_truncated_completions=True: a completion cut at its "
                         f"stop has no EOS, which TRL counts as truncated; set one of them")
    check_settings(args)  # again: a setting may have changed since the config was built


def target_po_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    mask: torch.Tensor,
    scores: torch.Tensor,
    group_size: int,
    eta: float = 1.0,
    logscore: str = "mean",
    ref_per_token_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    kl_tokens: float | torch.Tensor | None = None,
    bias_correction_kl: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TPO's loss on ``N = n_groups * K`` completions, rows ``i*K .. i*K+K-1`` being prompt i's group.

    ``per_token_logps``, ``old_per_token_logps``, ``ref_per_token_logps`` and the 0/1 ``mask`` are
    ``[N, T]``; ``scores`` is ``[N]``. The TPO term is :func:`tpo_agents.losses.completion_tpo_loss` (the
    function verl's plugin and the text mode call): a row whose mask is empty (TRL's
    ``mask_truncated_completions`` zeroes truncated rows) leaves its group's softmax. With ``beta > 0``:

        + beta * sum_{rows, t} m_t k_t / kl_tokens,   k_t = :func:`tpo_agents.losses.reference_kl_terms`

    (bias-corrected with ``bias_correction_kl``); ``kl_tokens`` (default: this call's masked tokens) is the
    token count the KL is a mean over, so that summing the calls of one batch gives one batch-wide mean.
    Returns ``(loss, stats)``: the diagnostics of :func:`~tpo_agents.losses.completion_tpo_loss` (finite when
    a group has no valid row), and, with ``beta > 0``, the KL per token of these rows (``kl``).
    """
    n = per_token_logps.shape[0]
    if n % group_size or scores.shape != (n,):
        raise ValueError(
            f"expected N = n_groups * K rows with K = {group_size} and scores [N]; got log-probs "
            f"{tuple(per_token_logps.shape)} and scores {tuple(scores.shape)}"
        )
    loss, stats = losses.completion_tpo_loss(
        per_token_logps, old_per_token_logps, mask, scores, group_size, eta, logscore
    )
    if beta:
        if ref_per_token_logps is None:
            raise ValueError(f"beta={beta!r} needs ref_per_token_logps")
        kl_sum, stats["kl"] = _reference_kl(per_token_logps, old_per_token_logps, mask, ref_per_token_logps,
                                            bias_correction_kl, loss.dtype)
        loss = loss + beta * kl_sum / (mask.sum().clamp(min=1) if kl_tokens is None else kl_tokens)
    return loss, stats


def _reference_kl(
    per_token_logps: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, reference: torch.Tensor,
    bias_correction: bool, dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum of the masked k3 terms, with gradient; their mean per token, detached)``."""
    weights = mask.to(dtype)
    terms = losses.reference_kl_terms(reference.to(dtype), per_token_logps.to(dtype), old.to(dtype),
                                      bias_correction) * weights
    return terms.sum(), (terms.sum() / weights.sum().clamp(min=1)).detach()


def shuffle_groups(batch: dict[str, Any], group_size: int) -> dict[str, Any]:
    """Shuffle a generation batch by whole groups of ``group_size`` consecutive rows (order kept inside).

    Tensors with a batch axis and lists are permuted; 0-d tensors and ``None`` are kept.
    """
    n = len(next(value for value in batch.values() if value is not None and not _is_scalar(value)))
    if n % group_size:
        raise ValueError(f"a batch of {n} rows does not split into groups of K = {group_size}")
    order = (torch.randperm(n // group_size)[:, None] * group_size + torch.arange(group_size)).reshape(-1)

    def permute(value: Any) -> Any:
        if value is None or _is_scalar(value):
            return value
        if isinstance(value, torch.Tensor):
            return value[order.to(value.device)]
        return [value[i] for i in order.tolist()]

    return {key: permute(value) for key, value in batch.items()}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim == 0


class TargetPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with TPO's update (see the module docstring); arguments are GRPOTrainer's.

    ``args`` must be a :class:`TargetPOConfig`. Logged besides TRL's metrics: ``tpo/effective_group_size``,
    ``tpo/logscore_spread``, ``tpo/mean_abs_p_minus_q`` and ``kl`` (with ``beta > 0``). :meth:`train` warns
    once when more than half of its optimizer steps had no signal (every group of equal rewards, or every
    completion truncated and masked).
    """

    def __init__(
        self, model: Any, reward_funcs: Any, args: TargetPOConfig | None = None, **kwargs: Any
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = TargetPOConfig(output_dir=f"{str(name).split('/')[-1]}-TargetPO")
        check_config(args)
        self._gathered_rewards: torch.Tensor | None = None
        self._without_signal = StepsWithoutSignal(
            "optimizer steps", "tpo/zero_variance_frac = 1",
            "raise max_completion_length, or set mask_truncated_completions=False "
            "(tpo/unusable_group_frac = 1)",
        )
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``, then one warning when more than half of its optimizer steps had no signal
        (:class:`~tpo_agents.without_signal.StepsWithoutSignal`: no group carried any on any process)."""
        self._without_signal.reset()
        output = super().train(*args, **kwargs)
        self._without_signal.warn(stacklevel=2)
        return output

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """``Trainer.save_model`` (the final model and every checkpoint), then the saved ``*.safetensors``
        files get the mode of the other saved files (safetensors writes them 0600)."""
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            share_saved_weights(output_dir or self.args.output_dir)

    def _group_size(self) -> int:
        return self.num_generations if self.model.training else self.num_generations_eval

    def _span(self) -> int:
        """Processes a group spans: 1 when each micro-batch holds whole groups, else K / per-device rows."""
        args = self.args
        rows = args.per_device_train_batch_size if self.model.training else args.per_device_eval_batch_size
        return 1 if rows % self._group_size() == 0 else self._group_size() // rows

    def _generate_single_turn(
        self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: int,
        has_tool_images: bool = False,
    ) -> tuple[list[list[int]], Any]:
        """TRL's generation, each completion then cut after the token that completes ``args.stop`` (matched
        inside the completion only, as :func:`tpo_agents.policies.generation.completion_lengths` does)."""
        completion_ids, logprobs = super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )
        if self.args.stop is None or not completion_ids:
            return completion_ids, logprobs
        rows = [list(ids) for ids in completion_ids]
        padded, _ = pad_rows(rows, self.processing_class.pad_token_id or 0, torch.device("cpu"))
        eos = [self.processing_class.eos_token_id]  # TRL's rows already end at their first EOS
        lengths = completion_lengths(padded, eos, self.args.stop, self.processing_class).tolist()
        ends = [min(int(end), len(row)) for end, row in zip(lengths, rows, strict=True)]
        cut = [row[:end] for row, end in zip(rows, ends, strict=True)]
        if logprobs is not None:
            logprobs = [list(lp)[:end] for lp, end in zip(logprobs, ends, strict=True)]
        return cut, logprobs

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids)
        self._gathered_rewards = rewards_per_func  # [global N, n_funcs], every process's rows in order
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """GRPO's generation and scoring, plus ``scores`` (s, [N]) and ``advantages`` = u(s) of TPO."""
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, self._gathered_rewards = self._gathered_rewards, None
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        if unscorable.any():
            row = int(unscorable.nonzero()[0, 0])
            raise ValueError(f"every reward function returned None for completion {row}; TPO needs a score "
                             "for each completion")
        weights = self.reward_weights.to(rewards_per_func.device)
        scores = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        k, n_local = self._group_size(), output["completion_ids"].shape[0]
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)
        output["scores"] = scores[local]
        output["advantages"] = losses.standardize(scores.reshape(-1, k)).reshape(-1)[local]
        return output

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        """GRPO's buffering of a generation batch over ``steps_per_generation`` micro-batches, shuffled by
        whole groups instead of by rows."""
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = split_pixel_values_by_grid(self._generate_and_score_completions(generation_batch))
            if self._span() == 1:  # a spanning group's part is the whole local batch: nothing to shuffle
                batch = shuffle_groups(batch, self.num_generations)
            batches = split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(part) for part in batches]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TPO's loss on a micro-batch of whole groups (:func:`target_po_loss`), scaled for accumulation.

        The model gets the multimodal inputs TRL's ``_prepare_inputs`` carries (``pixel_values``,
        ``image_grid_thw``, ...) as in ``GRPOTrainer``; a Mixture-of-Experts router loss
        (``aux_loss_enabled``) is added as GRPO adds it. The TPO term is each micro-batch's group mean
        divided by the accumulation steps; the KL to the reference (``beta > 0``) is a mean over the
        completion tokens of the whole accumulation window (TRL's ``num_items_in_batch``), whatever the
        micro-batching.
        """
        k = self._group_size()
        train = self.model.training
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        span = self._span()
        if span == 1:
            _check_whole_groups(prompt_ids, prompt_mask, k)
        else:
            self._check_spanning_group(prompt_ids, prompt_mask, span)
        per_token_logps, _, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1),
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in MODEL_INPUTS},
        )
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        accumulation = self.current_gradient_accumulation_steps if train else 1
        old = per_token_logps.detach() if old is None else old
        reference = inputs.get("ref_per_token_logps")
        kl_tokens = self._kl_tokens(inputs)
        if span == 1:
            loss, stats = target_po_loss(
                per_token_logps, old, mask, inputs["scores"], k, eta=self.args.eta,
                logscore=self.args.logscore, ref_per_token_logps=reference, beta=self.beta,
                kl_tokens=kl_tokens, bias_correction_kl=self.args.use_bias_correction_kl,
            )  # fmt: skip
        else:
            scores = inputs["scores"]
            loss, stats = self._spanning_loss(per_token_logps, old, mask, scores, reference, kl_tokens)
        mode = "train" if train else "eval"
        every = {}  # each stat of every process (over every process's groups already, for a spanning group)
        for name, value in stats.items():
            metric = name if name == "kl" else f"tpo/{name}"  # TRL's own name for the KL
            spanning = span > 1 and name != "kl"
            every[name] = value.detach() if spanning else self.accelerator.gather(value.detach())
            total = every[name].sum() if name == "dropped_rows" else every[name].mean()  # a count, or a mean
            self._metrics[mode][metric].append(total.item())
        if train:
            self._without_signal.add(*loss_signal(every), step=self.state.global_step)
        if aux_loss is not None:
            loss = loss + self.router_aux_loss_coef * aux_loss
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather(aux_loss.detach()).mean().item())
        return loss / accumulation

    def _spanning_loss(
        self, per_token_logps: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor,
        reference: torch.Tensor | None, kl_tokens: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """TPO on groups whose K rows sit on consecutive processes (K / per-device rows each): every
        process gathers all rows' log-scores with a differentiable all-gather (rank order = row order),
        takes the loss over every group (:func:`tpo_agents.losses.grouped_tpo_loss`, the mean over all
        groups), and the all-gather's backward sums each row's gradient over the processes, so that DDP's
        average over processes is the gradient of that mean. The KL term stays per process."""
        from torch.distributed.nn.functional import all_gather

        logscore = self.args.logscore
        rows = losses.row_logscores(per_token_logps, mask, logscore)
        every = torch.cat(all_gather(rows))
        gathered = [self.accelerator.gather(value) for value in (
            losses.row_logscores(old.detach(), mask, logscore), scores.to(rows.dtype), mask.bool().any(-1))]
        loss, stats = losses.grouped_tpo_loss(every, *gathered, self._group_size(), self.args.eta)
        if self.beta:
            if reference is None:
                raise ValueError(f"beta={self.beta!r} needs ref_per_token_logps")
            kl_sum, stats["kl"] = _reference_kl(per_token_logps, old, mask, reference,
                                                self.args.use_bias_correction_kl, loss.dtype)
            loss = loss + self.beta * kl_sum / (mask.sum().clamp(min=1) if kl_tokens is None else kl_tokens)
        return loss, stats

    def _check_spanning_group(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, span: int) -> None:
        """Raise unless this process's rows and those of the other ``span - 1`` processes of its block
        share one prompt (one group spread over consecutive processes)."""
        ids = prompt_ids * prompt_mask
        if not (ids == ids[:1]).all():
            raise ValueError(f"a micro-batch part of a group spanning {span} processes holds several prompts")
        kept = prompt_ids[0][prompt_mask[0].bool()].long()
        positions = torch.arange(1, len(kept) + 1, device=kept.device)
        fingerprint = torch.stack([positions[-1:].sum(), kept.sum(), (kept * positions).sum()])
        every = self.accelerator.gather(fingerprint.unsqueeze(0)).reshape(-1, span, 3)
        if not (every == every[:, :1]).all():
            raise ValueError(f"the processes of a group spanning {span} of them hold different prompts: the "
                             f"group was split")

    def _kl_tokens(self, inputs: dict[str, Any]) -> torch.Tensor | None:
        """Tokens per process of one accumulation window, over the accumulation steps: once the loss is
        divided by the steps and averaged over processes, each micro-batch's KL is its share of one mean
        over the window's completion tokens (TRL's ``num_items_in_batch`` counts the generation batch on
        every process, ``steps_per_generation`` micro-batches). None (the micro-batch's own tokens) when the
        inputs do not carry it."""
        total = inputs.get("num_items_in_batch")
        if total is None:
            return None
        tokens = torch.as_tensor(total, dtype=torch.float32).clamp(min=1) / self.accelerator.num_processes
        return tokens / (self.args.steps_per_generation if self.model.training else 1)


def _check_whole_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, k: int) -> None:
    """Raise unless the rows come in groups of ``k`` that share one prompt."""
    if prompt_ids.shape[0] % k:
        raise ValueError(f"a micro-batch of {prompt_ids.shape[0]} completions is not whole groups of K = {k}")
    ids = (prompt_ids * prompt_mask).reshape(-1, k, prompt_ids.shape[1])
    if not (ids == ids[:, :1]).all():
        raise ValueError(f"a micro-batch's groups of K = {k} rows do not share one prompt: groups were split")


# ------------------------------------------------------------------------------------------------ data


def text_env_task(env: str | ReasoningGymTask, env_kwargs: dict[str, Any]) -> ReasoningGymTask:
    """The :class:`ReasoningGymTask` of a text env id made with ``env_kwargs`` (or ``env`` itself)."""
    if isinstance(env, ReasoningGymTask):
        if env_kwargs:
            raise ValueError("pass env kwargs only with an env id, not with a ReasoningGymTask")
        return env
    unwrapped = gym.make(env, **env_kwargs).unwrapped
    if not isinstance(unwrapped, TextEnv):
        raise ValueError(f"env {env!r} is not a text env; use one of tpo_gym.TEXT_ENV_IDS")
    return unwrapped.task


def text_env_dataset(
    env: str | ReasoningGymTask,
    tokenizer: Any = None,
    system_prompt: str | None = None,
    prefill: str = "",
    **env_kwargs: Any,
) -> Any:
    """A ``datasets.Dataset`` of a text env's split for TRL: columns ``prompt`` and ``context``.

    ``env`` is a text env id (``"TPO/GraphColor-v0"``, with ``env_kwargs`` such as ``split``, ``size``,
    ``reward``) or a :class:`ReasoningGymTask`. Without ``tokenizer`` the prompts are conversational
    (``[system?, user]`` messages; TRL applies the chat template). With it, each prompt is the exact text
    our own ``LLMPolicy`` feeds the model, ``format_prompt(tokenizer, question, system_prompt, prefill)``,
    which is how an assistant turn is prefilled (pass the same ``prefill`` to :func:`text_env_reward`),
    without a leading BOS string when the tokenizer adds one itself (TRL tokenizes string prompts with
    ``add_special_tokens=True``, so the model sees one BOS, as in our own loop).
    ``context`` is the item index the reward function scores against.
    """
    from datasets import Dataset

    task = text_env_task(env, env_kwargs)
    if prefill and tokenizer is None:
        raise ValueError(f"prefill={prefill!r} needs the tokenizer (the prompt is then formatted text)")
    prompts = [task.prompt(i) for i in range(task.num_items)]
    if tokenizer is None:
        system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
        column: list[Any] = [[*system, {"role": "user", "content": text}] for text in prompts]
    else:
        column = [_one_bos(tokenizer, format_prompt(tokenizer, text, system_prompt, prefill))
                  for text in prompts]
    return Dataset.from_dict({"prompt": column, "context": list(range(task.num_items))})


def _one_bos(tokenizer: Any, text: str) -> str:
    """``text`` without its leading BOS string when the tokenizer adds a BOS itself: TRL tokenizes string
    prompts with ``add_special_tokens=True``, so a chat template that also writes BOS would give two."""
    bos = tokenizer.bos_token
    if not bos or not text.startswith(bos):
        return text
    adds_bos = tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    return text[len(bos):] if adds_bos else text


def text_env_reward(
    env: str | ReasoningGymTask, prefill: str = "", **env_kwargs: Any
) -> Callable[..., list[float]]:
    """A TRL reward function scoring completions with the text env's verifier (native or binary reward).

    Called by TRL with ``completions`` (strings, or assistant messages) and the dataset column
    ``context``; the score of a completion is ``score_completion`` of ``prefill + completion``. Its
    ``__name__`` (TRL's metric name) is ``"<dataset>_<reward>"``.
    """
    task = text_env_task(env, env_kwargs)

    def reward(completions: Sequence[Any], context: Sequence[int], **_: Any) -> list[float]:
        texts = [prefill + (c[-1]["content"] if isinstance(c, list) else c) for c in completions]
        scores, _, _ = task.score_completions(np.asarray(context, dtype=np.int64), texts)
        return [float(s) for s in scores]

    reward.__name__ = f"{task.name}_{task.reward}"
    return reward
