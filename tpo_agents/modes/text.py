"""Text mode (language models): K completions per prompt from a generation backend, scored by a text env,
log-scored by one teacher-forced forward."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from stable_baselines3.common.logger import Logger

from tpo_agents import losses
from tpo_agents.modes.base import CollectionMode, CompletionTokens, GroupView, SampleView, StepHook
from tpo_gym.envs.text import TextEnv, TextVectorEnv

#: Characters of a prompt or completion shown in the TensorBoard sample table.
SAMPLE_CHARS = 400


@dataclass
class TextBatch:
    """B prompts x K completions (rows i*K .. i*K+K-1 belong to prompt i), scored and log-scored."""

    prompts: list[str]
    completions: Any  # the policy's Completions: ids, masks, texts
    scores: th.Tensor  # [B, K] the env's scores
    advantages: th.Tensor  # [B*K] score - baseline over the whole batch (sample view)
    old_token_log_probs: th.Tensor | None  # [B*K, T] log pi_old: the update's first forward (None before)
    answers: np.ndarray  # [B*K] extracted answers (None without an <answer> tag)
    format_ok: np.ndarray  # [B*K]
    logscore: str  # "sum" | "mean"
    group_size: int
    rows_per_part: int
    reference: dict[int, th.Tensor] = field(default_factory=dict)  # first row of a part -> [R, T]
    old_complete: bool = False  # every part's pi_old written

    @property
    def mask(self) -> th.Tensor:
        """``[B*K, T]`` the tokens the losses read (the policy's: ``Completions.loss_mask``)."""
        return self.completions.loss_mask

    def old_logscores(self) -> th.Tensor:
        """L_old of every completion, ``[B, K]``."""
        flat = losses.sequence_logscores(self.old_token_log_probs, self.mask, self.logscore)
        return flat.reshape(-1, self.group_size)


@dataclass
class TextPart:
    """Whole groups of a :class:`TextBatch`: the completion rows ``rows``."""

    batch: TextBatch
    rows: th.Tensor

    @property
    def mask(self) -> th.Tensor:
        return self.batch.mask[self.rows].float()

    @property
    def n_tokens(self) -> th.Tensor:
        """The batch's completion tokens times the part's share w = R / N of the rows (by which the trainer
        multiplies each part's loss): sum_parts w * sum_part terms / n_tokens = sum_batch terms / tokens,
        one token mean over the batch whatever the micro-batch size."""
        return self.batch.mask.sum().clamp(min=1) * (len(self.rows) / self.batch.scores.numel())

    def log_probs(self, policy: Any) -> th.Tensor:
        """Token log-probs ``[R, T]`` of the part's completions, with gradient."""
        return policy.token_log_probs(self.batch.completions, self.rows)


class TextMode(CollectionMode):
    """B prompts x K completions (paper Sec. 3.8): the K completions of a prompt are one group.

    Group view: L = the completion's log-score, ``sum`` or per-token ``mean`` of its token
    log-probs (the policy's ``logscore``), s = the env's score, groups ``[B, K]``; a completion without
    tokens (the policy's ``mask_truncated_completions`` empties truncated ones) leaves its group's softmax
    (TPO: :func:`tpo_agents.losses.masked_tpo_loss`, logged as ``train/dropped_rows``). The view also
    carries the completions' token log-probs and mask (:class:`~tpo_agents.modes.CompletionTokens`,
    for token-level losses: GRPO's ``loss_type="dapo"``).
    Sample view (PG, DG, PPO): the completion's token log-probs ``[N, T]`` with its padding mask
    and A = s - b (``batch_mean`` over the B*K completions, or a constant).
    The loss runs over parts of whole groups of at most the policy's ``micro_batch_size`` rows, with
    gradient accumulation. ``sample_every``: a TensorBoard table of samples every that many updates.

    **Rollout log-probs.** log pi_old of the completions is the update's first forward at the weights that
    generated them, detached (:meth:`keep_old_log_probs`, part by part): the first epoch's log pi_theta
    equals it exactly, so a group without signal has an exactly zero gradient, and no second
    teacher-forced pass is needed (as TRL does with one epoch). With the vLLM backend too: pi_old is this
    trainer-side forward of the engine's completions; the engine's sampling log-probs are neither
    requested nor read.
    """

    name = "text"
    views = ("group", "sample")
    env_types = (TextEnv,)
    vector_env_types = (TextVectorEnv,)
    env_description = "a text env (TPO/ReasoningGym-v0, TPO/GraphColor-v0, ...)"
    action_space_types = (spaces.Text,)
    has_reference_kl = True
    has_completion_tokens = True

    @classmethod
    def min_group_size(cls, view: str) -> int:
        return 2 if view == "group" else 1

    def __init__(self, *args: Any, sample_every: int = 10, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.baseline == "expected":
            raise ValueError(
                "baseline='expected' needs an action set; text mode takes 'batch_mean' or a number"
            )
        self.sample_every = sample_every
        self._collections = 0

    @property
    def n_envs(self) -> int:
        return self.batch_size * self.group_size

    def steps_per_collect(self, env: VectorEnv) -> int:
        return self.n_envs

    def collect(self, env: VectorEnv, policy: Any, on_step: StepHook) -> TextBatch | None:
        if getattr(policy, "generate", None) is None:  # not a TextPolicy
            name = type(policy).__name__
            raise TypeError(f"text mode needs a language-model policy (LLMPolicy), got {name}")
        k = self.group_size
        obs, _ = env.reset(options={"group_size": k})
        prompts = [str(prompt) for prompt in obs[::k]]
        completions = policy.generate(prompts, k)
        _, _, _, _, infos = env.step(list(completions.texts))
        final = infos["final_info"]
        if not on_step(env.num_envs):
            return None
        scores = th.as_tensor(np.asarray(final["score"], dtype=np.float32))
        return TextBatch(
            prompts=prompts,
            completions=completions,
            scores=scores.reshape(-1, k),
            advantages=losses.baseline_advantages(scores, self.baseline),
            old_token_log_probs=None,
            answers=np.asarray(final["answer"], dtype=object),
            format_ok=np.asarray(final["format_ok"], dtype=bool),
            logscore=policy.logscore,
            group_size=k,
            rows_per_part=max(k, policy.micro_batch_size // k * k),
        )

    def keep_old_log_probs(self, part: TextPart, token_log_probs: th.Tensor) -> None:
        """Write the part's rows of pi_old ``[B*K, T]`` from the update's first forward, detached, until
        every part's are written (a batch trained on again keeps them). Rows not written yet are NaN."""
        batch = part.batch
        if batch.old_complete:
            return
        if batch.old_token_log_probs is None:
            rows = (batch.scores.numel(), token_log_probs.shape[1])
            batch.old_token_log_probs = token_log_probs.new_full(rows, float("nan"))
        batch.old_token_log_probs[part.rows] = token_log_probs.detach()
        batch.old_complete = int(part.rows[-1]) == batch.scores.numel() - 1

    def has_signal(self, batch: TextBatch, view: str) -> bool:
        if view == "group":
            return not bool(losses.zero_variance_groups(batch.scores).all())
        return bool(batch.advantages.ne(0).any())

    def parts(self, batch: TextBatch) -> Iterator[tuple[TextPart, float]]:
        n = batch.scores.numel()
        for start in range(0, n, batch.rows_per_part):
            rows = th.arange(start, min(start + batch.rows_per_part, n))
            yield TextPart(batch, rows), len(rows) / n

    def group_view(self, part: TextPart, token_log_probs: th.Tensor) -> GroupView:
        batch, k, mask = part.batch, part.batch.group_size, part.mask

        def logscores(token_lp: th.Tensor) -> th.Tensor:  # the rows -> groups step of completion_tpo_loss
            return losses.completion_logscores(token_lp, mask, k, batch.logscore)

        old, scores = batch.old_token_log_probs[part.rows], batch.scores.reshape(-1)[part.rows]
        valid = mask.bool().any(-1).reshape(-1, k)  # a completion without tokens leaves the softmax
        tokens = CompletionTokens(token_log_probs, old, mask, part.n_tokens)
        return GroupView(logscores(token_log_probs), logscores(old), scores.reshape(-1, k), valid, tokens)

    def sample_view(self, part: TextPart, token_log_probs: th.Tensor) -> SampleView:
        batch = part.batch
        advantages = batch.advantages[part.rows]
        return SampleView(
            logp=token_log_probs,
            old_logp=batch.old_token_log_probs[part.rows],
            rewards=batch.scores.reshape(-1)[part.rows],
            advantages=advantages,
            actions=batch.completions.completion_ids[part.rows],
            sequence_advantages=advantages,
            n_actions=int(batch.completions.completion_ids.max()) + 1,
            weights=part.mask,
        )

    def approx_kl(self, part: TextPart, token_log_probs: th.Tensor) -> th.Tensor:
        """k3 estimate of KL(pi_old || pi_theta) per completion token of the whole batch: the part's
        terms exp(x) - x - 1, x = log pi_theta(y_t) - log pi_old(y_t), as a share of the batch's token
        mean (:func:`_token_mean_share`)."""
        terms = losses.k3(token_log_probs - part.batch.old_token_log_probs[part.rows])
        return _token_mean_share(part, terms)

    def keep_reference_log_probs(self, policy: Any, part: TextPart) -> None:
        """Write the part's log pi_ref ``[R, T]`` under the frozen reference, without gradient, once (the
        update's first epoch; later epochs read it)."""
        batch, first = part.batch, int(part.rows[0])
        if first not in batch.reference:
            with th.no_grad():
                batch.reference[first] = policy.reference_token_log_probs(batch.completions, part.rows)

    def reference_kl(self, part: TextPart, token_log_probs: th.Tensor) -> th.Tensor:
        """k3 estimate of KL(pi_theta || pi_ref) per completion token of the whole batch, with gradient:
        the part's terms as a share of the batch's token mean (:func:`_token_mean_share`)."""
        reference = part.batch.reference[int(part.rows[0])]
        return _token_mean_share(part, losses.reference_kl_terms(reference, token_log_probs))

    def after_update(self, policy: Any) -> None:
        policy.sync_generator()

    def log_update(self, logger: Logger, batch: TextBatch) -> None:
        """The rollout policy's group softmax over each group's completions with tokens V (the rows the
        loss keeps): effective group size exp(H(p_old,V)) and log-score spread max_V L_old - min_V L_old,
        averaged over the groups with two or more such rows (0 when none has,
        :func:`tpo_agents.losses.masked_group_diagnostics`); an emptied row's L_old = 0 is left out."""
        old_logscores = batch.old_logscores()
        valid = batch.mask.bool().any(-1).reshape(old_logscores.shape)
        stats = losses.masked_group_diagnostics(old_logscores, old_logscores, th.zeros_like(old_logscores),
                                                valid)
        logger.record("rollout/effective_group_size", float(stats["effective_group_size"]))
        logger.record("rollout/logscore_spread", float(stats["logscore_spread"]))

    def train_tokens(self, batch: TextBatch) -> int:
        completions = batch.completions
        prompt_tokens = completions.prompt_mask.sum(-1)[completions.owner].sum()
        return int(prompt_tokens + completions.completion_mask.sum())

    def log_rollout(self, logger: Logger, batch: TextBatch) -> None:  # type: ignore[override]
        """Scores, format rate, lengths and generation speed (the group softmax: :meth:`log_update`)."""
        completions = batch.completions
        logger.record("rollout/task_error", float(1 - batch.scores.mean()))
        logger.record("rollout/mean_score", float(batch.scores.mean()))
        logger.record("rollout/success_rate", float((batch.scores >= 0.99).float().mean()))
        logger.record("rollout/format_rate", float(batch.format_ok.mean()))
        logger.record("rollout/completion_length", float(completions.completion_mask.sum(-1).float().mean()))
        if completions.truncated is not None:  # cut by max_new_tokens (emptied by mask_truncated_completions)
            logger.record("rollout/truncated_frac", float(completions.truncated.float().mean()))
        seconds = max(float(completions.seconds), 1e-9)
        logger.record("time/generation_tokens_per_s", completions.n_generated_tokens / seconds)
        self.record_samples(logger, batch)

    def record_samples(self, logger: Logger, batch: TextBatch) -> None:
        """Every ``sample_every``-th collection from the first, :meth:`sample_table` as TensorBoard text."""
        self._collections += 1
        if self.sample_every > 0 and (self._collections - 1) % self.sample_every == 0:
            table = self.sample_table(batch)
            logger.record("samples/completions", table, exclude=("stdout", "log", "json", "csv"))

    def sample_table(self, batch: TextBatch, n_prompts: int = 2) -> str:
        """A Markdown table of the first completions of ``n_prompts`` prompts (TensorBoard's TEXT tab)."""
        rows = ["| prompt | completion | answer | score |", "|---|---|---|---|"]
        texts, k = batch.completions.texts, batch.group_size
        for i in range(min(n_prompts, len(batch.prompts))):
            for j in range(min(2, k)):
                row = i * k + j
                cells = (batch.prompts[i], texts[row], batch.answers[row], f"{float(batch.scores[i, j]):.3f}")
                rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
        return "\n".join(rows)

    def episode_rows(self, batch: TextBatch) -> dict[str, Any]:
        scores = batch.scores.reshape(-1).numpy()
        return {
            "r": scores,
            "l": batch.completions.completion_mask.sum(-1).numpy(),
            "is_success": scores >= 0.99,
            "format_ok": batch.format_ok,
        }


def _token_mean_share(part: TextPart, terms: th.Tensor) -> th.Tensor:
    """The part's per-token ``terms [R, T]`` summed over its completion tokens and divided by
    :attr:`TextPart.n_tokens`: the part's share of one token mean over the batch."""
    return (terms * part.mask).sum() / part.n_tokens


def _cell(value: Any) -> str:
    text = str(value)[:SAMPLE_CHARS]
    return text.replace("|", "\\|").replace("\n", " ")
