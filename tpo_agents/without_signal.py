"""One warning when most steps of a run had nothing to learn from, shared by every training path.

A step (a batch of the learn loop, an optimizer step of ``TargetPOTrainer``, a loss call of verl's plugin)
has no signal when no group carries any: every group's scores are equal (u = 0, q = p_old; GRPO's A = 0),
or no group kept two completions with tokens to compare (every completion empty, or truncated and masked).
Its gradient from the scores is then exactly zero. :func:`warn_without_signal` words the warning,
:class:`StepsWithoutSignal` counts the steps of a run and warns once, and :func:`loss_signal` reads a step's
kind from the diagnostics of :func:`tpo_agents.losses.completion_tpo_loss`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch

__all__ = ["StepsWithoutSignal", "loss_signal", "warn_without_signal"]


def warn_without_signal(
    steps: int,
    flat: int,
    dropped: int = 0,
    unit: str = "batches",
    flat_metric: str = "train/batches_without_signal counts them",
    dropped_advice: str = "",
    stacklevel: int = 2,
) -> bool:
    """One ``UserWarning`` when more than half of ``steps`` had no signal; True when it warned.

    ``flat`` steps had equal scores in every group (or every advantage 0), ``dropped`` steps no group of
    two completions with tokens; the message names both counts, the metric that logs the first
    (``flat_metric``) and the fix of the second (``dropped_advice``). ``stacklevel`` is
    ``warnings.warn``'s, counted from the caller.
    """
    without = flat + dropped
    if not steps or without <= steps / 2:
        return False
    causes = []
    if flat:
        causes.append(f"{flat} with equal scores in every group, or every advantage 0 ({flat_metric}): a "
                      "task this hard for the policy needs larger groups, an easier start or more updates")
    if dropped:
        causes.append(f"{dropped} with no group of two completions left to compare (every completion empty, "
                      f"or truncated and masked): {dropped_advice}")
    warnings.warn(f"{without} of {steps} {unit} had no signal, so their gradient from the scores is exactly "
                  f"zero: {'; '.join(causes)}", stacklevel=stacklevel + 1)
    return True


def loss_signal(stats: Mapping[str, torch.Tensor]) -> tuple[bool, bool]:
    """``(signal, rows)`` of a loss call from :func:`~tpo_agents.losses.completion_tpo_loss`'s diagnostics
    (one value each, or one per process once gathered): whether some group carries signal (two or more
    rows with tokens whose scores are not all equal), and whether some group kept two or more such rows."""
    rows = torch.as_tensor(stats["unusable_group_frac"]) < 1
    signal = rows & (torch.as_tensor(stats["zero_variance_frac"]) < 1)
    return bool(signal.any()), bool(rows.any())


class StepsWithoutSignal:
    """The steps of a run without signal, counted by kind, and :func:`warn_without_signal` at most once.

    :param unit: what a step is, plural (``"optimizer steps"``)
    :param flat_metric: the metric that logs the steps whose groups all had equal scores
    :param dropped_advice: the fix for steps whose completions were all dropped, with the metric logging them
    """

    def __init__(self, unit: str, flat_metric: str, dropped_advice: str) -> None:
        self.unit, self.flat_metric, self.dropped_advice = unit, flat_metric, dropped_advice
        self.reset()

    def reset(self) -> None:
        """Forget the steps counted so far and whether it warned (a new run)."""
        self.steps = self.flat = self.dropped = 0
        self.warned = False
        self._open: tuple[int | None, bool, bool] | None = None  # (step, signal, rows) of the open step

    def add(self, signal: bool, rows: bool, step: int | None = None) -> None:
        """One loss call: whether some group carried signal, whether some group kept two rows with tokens.

        Calls with the same ``step`` (an optimizer step's micro-batches) make one step, which has signal when
        one of them has; ``None`` makes the call a step of its own.
        """
        if self._open is not None and self._open[0] != step:
            self.close()
        _, had_signal, had_rows = self._open or (step, False, False)
        self._open = (step, had_signal or signal, had_rows or rows)
        if step is None:
            self.close()

    def close(self) -> None:
        """Count the step being added, if any."""
        if self._open is None:
            return
        _, signal, rows = self._open
        self._open = None
        self.steps += 1
        if not signal:
            self.flat += int(rows)
            self.dropped += int(not rows)

    def warn(self, min_steps: int = 1, stacklevel: int = 2) -> bool:
        """Close the open step; once ``min_steps`` are counted, warn if more than half had no signal, unless
        it already warned since :meth:`reset`. True when it has warned."""
        self.close()
        if not self.warned and self.steps >= min_steps:
            self.warned = warn_without_signal(self.steps, self.flat, self.dropped, self.unit,
                                              self.flat_metric, self.dropped_advice, stacklevel + 1)
        return self.warned
