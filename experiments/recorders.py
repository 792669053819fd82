"""SB3 callbacks that record the paper's curves while an agent of ``agents/`` learns.

Every recorder keeps one row per update and only records: the runner stops training after the run's
number of updates (``learn(n_iterations=...)``). ``_on_rollout_end`` fires after the batch is collected
and its ``rollout/`` metrics are recorded, before the update (``before_update``); the next
``_on_rollout_start`` or ``_on_training_end`` fires after the update (``after_update``), when the
``train/`` diagnostics of that update are in ``model.logger.name_to_value``.

* ``CurveRecorder``: the training-batch error ``rollout/task_error`` (Sec. 3.4) as ``error``, the other
  ``rollout/`` metrics, every ``train/`` diagnostic (grad_norm, all_fail_frac, q_mass_winners, ...) and
  ``all_fail``: the all-fail group fraction (grouped methods) or 1 - success rate (PPO/DG), Fig. 12.
* ``TabularSingleRecorder``: ``error`` = 1 - pi(y*) before the update, ``misalignment`` = 1 - cos(Delta z,
  pi_y (e_y - pi)) with Delta z the change of the logit table in the update (Sec. 3.1, Fig. 3).
* ``TabularMultiRecorder``: ``error`` = 1 - mean_n pi_n(y_n) after the update, ``misalignment`` to the CE
  direction e_y - pi before the update (Sec. 3.2, Fig. 4).
* ``MNISTRecorder``: greedy test error on the full test set after every ``eval_every`` updates, stored at
  x = (i - 1) * eval_every for the i-th evaluation (as the reference code plots it), and the Fig. 5b
  diagnostics (Sec. 3.3, App. C).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from agents.losses import cosine_misalignment
from experiments.metrics import mechanism

ROLLOUT_KEYS = ("rollout/success_rate", "rollout/ep_rew_mean", "rollout/mean_score", "rollout/format_rate",
                "rollout/completion_length", "rollout/effective_group_size", "rollout/logscore_spread",
                "time/generation_tokens_per_s")
MECHANISM_ALGOS = ("pg", "dg", "tpo", "grpo", "group_pg")


class CurveRecorder(BaseCallback):
    """Record per-update curves (never stops training)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, float]] = []
        self.evals: dict[str, list[Any]] = defaultdict(list)
        self._pending = False

    @property
    def updates_done(self) -> int:
        """Updates finished so far (a collected batch counts once its update ran)."""
        return len(self.rows) - int(self._pending)

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        values = self.model.logger.name_to_value
        row = {"error": float(values["rollout/task_error"])}
        row.update({key: float(values[key]) for key in ROLLOUT_KEYS if key in values})
        self.rows.append(row)
        self._pending = True
        self.before_update(row)

    def _on_rollout_start(self) -> None:
        self._finish_update()

    def _on_training_end(self) -> None:
        self._finish_update()

    def _finish_update(self) -> None:
        if not self._pending:
            return
        self._pending = False
        row = self.rows[-1]
        for key, value in self.model.logger.name_to_value.items():
            if (key.startswith("train/") and key != "train/n_updates") or key == "time/train_tokens_per_s":
                row[key] = float(value)
        if "train/all_fail_frac" in row:
            row["all_fail"] = row["train/all_fail_frac"]
        elif "rollout/success_rate" in row:
            row["all_fail"] = 1.0 - row["rollout/success_rate"]
        self.after_update(row)

    # hooks -----------------------------------------------------------------------------------
    def before_update(self, row: dict[str, float]) -> None:
        """Called with the new row when a batch is collected; the policy is not updated yet."""

    def after_update(self, row: dict[str, float]) -> None:
        """Called once the update of ``row``'s batch is done."""

    def arrays(self) -> dict[str, np.ndarray]:
        """``update/<key>`` [n_updates] (NaN where an update lacks the key) and ``eval/<key>`` arrays."""
        keys = sorted({key for row in self.rows for key in row})
        out = {f"update/{k}": np.array([row.get(k, np.nan) for row in self.rows], dtype=np.float64)
               for k in keys}
        out.update({f"eval/{k}": np.asarray(v, dtype=np.float64) for k, v in self.evals.items()})
        return out


def _table(model: Any) -> th.Tensor:
    return model.policy.logits.detach().double().clone()


def _misalignment(g1: th.Tensor | np.ndarray, g2: th.Tensor | np.ndarray) -> float:
    """``agents.losses.cosine_misalignment`` (1 - cos, the reference's 1e-12 guards) in float64."""
    return float(cosine_misalignment(th.as_tensor(g1, dtype=th.float64), th.as_tensor(g2, dtype=th.float64)))


def _correct_arms(model: Any, n_contexts: int) -> np.ndarray:
    env = model.vector_env.unwrapped
    arms = getattr(env, "correct_arms", None)
    if arms is None:
        arms = np.full(n_contexts, env.correct_arm)
    return np.asarray(arms, dtype=np.int64)


class TabularSingleRecorder(CurveRecorder):
    """Single-context bandit (Fig. 3): error before the update and misalignment to the exact gradient."""

    def before_update(self, row: dict[str, float]) -> None:
        self._before = _table(self.model)
        pi = th.softmax(self._before[0], -1).numpy()
        y = int(_correct_arms(self.model, 1)[0])
        row["batch_error"] = row["error"]
        row["error"] = 1.0 - float(pi[y])
        self._oracle = pi[y] * (np.eye(len(pi))[y] - pi)

    def after_update(self, row: dict[str, float]) -> None:
        delta = (_table(self.model) - self._before)[0].numpy()
        row["misalignment"] = _misalignment(delta, self._oracle)


class TabularMultiRecorder(CurveRecorder):
    """Multi-context bandit (Fig. 4): error after the update and misalignment to the CE direction."""

    def before_update(self, row: dict[str, float]) -> None:
        self._before = _table(self.model)
        pi = th.softmax(self._before, -1).numpy()
        self._labels = _correct_arms(self.model, len(pi))
        self._ce = np.eye(pi.shape[1])[self._labels] - pi
        row["batch_error"] = row.pop("error")

    def after_update(self, row: dict[str, float]) -> None:
        after = _table(self.model)
        pi = th.softmax(after, -1).numpy()
        row["error"] = 1.0 - float(pi[np.arange(len(pi)), self._labels].mean())
        row["misalignment"] = _misalignment(after - self._before, self._ce)


class MNISTRecorder(CurveRecorder):
    """MNIST: greedy test error and Fig. 5b's mechanism (``mechanism_algo``) every ``eval_every`` updates."""

    def __init__(self, eval_every: int, mechanism_algo: str | None = None, eta: float = 1.0) -> None:
        super().__init__()
        from tpo_gym.data import load_mnist

        images, labels = load_mnist("test")
        self.images = th.as_tensor(np.array(images))
        self.labels = np.array(labels)
        self.eval_every = eval_every
        self.mechanism_algo = mechanism_algo if mechanism_algo in MECHANISM_ALGOS else None
        self.eta = eta

    def after_update(self, row: dict[str, float]) -> None:
        done = self.updates_done
        if done % self.eval_every:
            return
        with th.no_grad():
            log_probs = self.model.policy.action_log_probs(self.images.to(self.model.device)).cpu()
        self.evals["x"].append(done - self.eval_every)
        self.evals["error"].append(float((log_probs.argmax(-1).numpy() != self.labels).mean()))
        if self.mechanism_algo is not None:
            stats = mechanism(log_probs.double().exp().numpy(), self.labels, self.mechanism_algo, self.eta)
            for key, value in stats.items():
                self.evals[f"mechanism_{key}"].append(value)


RECORDERS: dict[str, type[CurveRecorder]] = {
    "curves": CurveRecorder,
    "tabular_single": TabularSingleRecorder,
    "tabular_multi": TabularMultiRecorder,
    "mnist": MNISTRecorder,
}
