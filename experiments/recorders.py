"""SB3 callbacks that record the paper's curves while an agent of ``tpo_agents/`` learns.

Every recorder keeps one row per update and only records: the runner stops training after the run's
number of updates (``learn(n_iterations=...)``). ``_on_rollout_end`` fires after the batch is collected
and its ``rollout/`` metrics are recorded, before the update (``before_update``); the next
``_on_rollout_start`` or ``_on_training_end`` fires after the update (``after_update``), when the
``train/`` diagnostics of that update are in ``model.logger.name_to_value``, and with them what the mode
logs of the batch once it is trained on (:data:`UPDATE_ROLLOUT_KEYS`). The recorder then takes the
update's values off the logger (the runner never dumps it), so that a row holds its own update's values
only: a key that an update does not log (a batch without signal that is not trained on) is NaN there.

A model of S members (``n_seeds=S``: S seeds trained together as one population) gets one row per
update and member, member m's as the run with seed ``seed + m`` records it: ``arrays(member=m)`` gives
member m's curves in the format of a single run, ``member_arrays()`` those of every member. Its
``rollout/`` values come from ``model.member_rollout``; its ``train/`` diagnostics are not recorded
(the logger holds only the members' means of them).

* ``CurveRecorder``: the training-batch error ``rollout/task_error`` (Sec. 3.4) as ``error``, the other
  ``rollout/`` metrics, every ``train/`` diagnostic (grad_norm, all_fail_frac, q_mass_winners, ...) and
  ``all_fail``: the all-fail group fraction (grouped methods, single runs only) or 1 - success rate
  (PPO/DG), Fig. 12.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from experiments.metrics import mechanism
from tpo_agents.layout import softmax_last

ROLLOUT_KEYS = ("rollout/success_rate", "rollout/ep_rew_mean", "rollout/mean_score", "rollout/format_rate",
                "rollout/completion_length", "time/generation_tokens_per_s")
UPDATE_ROLLOUT_KEYS = ("rollout/effective_group_size", "rollout/logscore_spread", "time/train_tokens_per_s")
"""The batch's values that a mode logs after its update (``CollectionMode.log_update``, the text modes'
group softmax at pi_old; the update's speed), recorded with the ``train/`` diagnostics."""
MECHANISM_ALGOS = ("pg", "dg", "tpo", "grpo", "group_pg")
EVAL_ROWS = 2**16
"""Member x image rows of one forward pass of the MNIST test-set evaluation (bounds its memory)."""

Row = dict[str, np.ndarray]
"""One update's values: key -> ``[S]`` float64, one value per member."""


class CurveBuffer:
    """Rows of per-member values, one per update, kept in float64 arrays ``[capacity, S]`` per key that
    double when full (NaN where a row lacks the key). A row's values are copied in and the row is
    dropped: a training process then holds no small block per update among its tensors' memory (each
    one, kept between the large blocks that an update allocates and frees, made the heap grow and the
    next update touch fresh pages)."""

    INITIAL_ROWS = 256

    def __init__(self) -> None:
        self._columns: dict[str, np.ndarray] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, row: Row, n_seeds: int) -> None:
        """Add one update's ``row`` (key -> ``[S]`` values, or a scalar for every member)."""
        for key, values in row.items():
            column = self._columns.get(key)
            if column is None or len(column) <= self._n:
                grown = np.full((max(self.INITIAL_ROWS, 2 * self._n), n_seeds), np.nan)
                if column is not None:
                    grown[:len(column)] = column
                column = self._columns[key] = grown
            column[self._n] = values
        self._n += 1

    def arrays(self) -> dict[str, np.ndarray]:
        """key -> ``[n_rows, S]`` float64, the keys sorted."""
        return {key: self._columns[key][:self._n] for key in sorted(self._columns)}


class CurveRecorder(BaseCallback):
    """Record per-update curves of every member (never stops training)."""

    wants_train_diagnostics = True
    """Ask for every update's ``train/`` diagnostics where a fast collector (``tpo_agents.fast_collectors``)
    computes them for logged updates only; the runner turns it off where the seed file keeps none
    (``experiments.jobs.needs_train_diagnostics``)."""
    wants_rollout_metrics = True
    """Ask for every batch's ``rollout/`` values too (``error`` is the batch's task error)."""
    progress: Callable[[int], None] | None = None
    """Called with the updates done after each update (``experiments.jobs.ProgressLines``), or None."""

    def __init__(self) -> None:
        super().__init__()
        self.curves = CurveBuffer()
        """The finished updates' rows."""
        self.evals: defaultdict[str, list[np.ndarray]] = defaultdict(list)
        """key -> one ``[S, ...]`` array per evaluation."""
        self._row: Row | None = None  # the row of the batch whose update is running
        self._done = 0

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a job's checkpoint, :mod:`experiments.checkpoints`) without the learn loop's locals and
        globals, which the next ``learn`` sets again."""
        return {**self.__dict__, "locals": {}, "globals": {}}

    @property
    def n_seeds(self) -> int:
        """S, the seeds the model trains together (1 for a single run)."""
        return self.model.n_seeds

    @property
    def updates_done(self) -> int:
        """Updates finished so far (a collected batch counts once its update ran, ``after_update``
        included)."""
        return self._done

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self._row = self._rollout_row()
        self.before_update(self._row)

    def _rollout_row(self) -> Row:
        """``error`` (the batch's ``rollout/task_error``) and the other ``rollout/`` metrics of each member:
        the logger's values for a single run, ``model.member_rollout`` for several members; none where
        the recorder asks for none (``wants_rollout_metrics = False``)."""
        if not self.wants_rollout_metrics:
            return {}
        if self.n_seeds == 1:
            values = self.model.logger.name_to_value
            row = {"error": np.array([float(values["rollout/task_error"])])}
            row.update({key: np.array([float(values[key])]) for key in ROLLOUT_KEYS if key in values})
            return row
        member = self.model.member_rollout
        names = {key: key.removeprefix("rollout/") for key in ROLLOUT_KEYS}
        row = {"error": np.asarray(member["task_error"], dtype=np.float64)}
        row.update({key: np.asarray(member[name], dtype=np.float64) for key, name in names.items()
                    if name in member})
        return row

    def _on_rollout_start(self) -> None:
        self._finish_update()

    def _on_training_end(self) -> None:
        self._finish_update()

    def _finish_update(self) -> None:
        if self._row is None:
            return
        row, self._row = self._row, None
        self._done += 1
        logger = self.model.logger
        values = logger.name_to_value
        if self.n_seeds == 1:  # with several members the logger holds only their means
            row.update({key: np.array([float(value)]) for key, value in values.items()
                        if (key.startswith("train/") and key != "train/n_updates")
                        or key in UPDATE_ROLLOUT_KEYS})
        if "train/all_fail_frac" in row:
            row["all_fail"] = row["train/all_fail_frac"]
        elif "rollout/success_rate" in row and "train/all_fail_frac" not in values:
            row["all_fail"] = 1.0 - row["rollout/success_rate"]
        for taken in (values, logger.name_to_count, logger.name_to_excluded):
            taken.clear()
        self.after_update(row)
        self.curves.append(row, self.n_seeds)
        if self.progress is not None:
            self.progress(self._done)

    # hooks -----------------------------------------------------------------------------------
    def before_update(self, row: Row) -> None:
        """Called with the new row when a batch is collected; the policy is not updated yet."""

    def after_update(self, row: Row) -> None:
        """Called once the update of ``row``'s batch is done."""

    def member_arrays(self) -> list[dict[str, np.ndarray]]:
        """Each member's curves as a single run with its seed records them: ``update/<key>`` [n_updates]
        (NaN where an update lacks the key) and ``eval/<key>`` [n_evaluations, ...]."""
        updates = self.curves.arrays()
        evals = {k: np.asarray(v, dtype=np.float64) for k, v in self.evals.items()}
        return [{**{f"update/{k}": v[:, m] for k, v in updates.items()},
                 **{f"eval/{k}": v[:, m] for k, v in evals.items()}} for m in range(self.n_seeds)]

    def arrays(self, member: int = 0) -> dict[str, np.ndarray]:
        """Member ``member``'s curves (``member_arrays``); a single run's for a single run."""
        return self.member_arrays()[member]


def _tables(model: Any) -> th.Tensor:
    """A copy of every member's logit table in float64, ``[S, n_contexts, n_actions]`` (in the table's
    memory layout)."""
    table = model.policy.logits.detach().to(th.float64, copy=True)
    return table.reshape(model.n_seeds, *table.shape[-2:])


class MemberCosines:
    """Each member's two vectors of a cosine in float64, ``first`` and ``second`` (views shaped like
    ``like`` ``[S, ...]``, written in place), and ``1 - cos`` of each member's pair.

    The vectors lie as member-major rows ``[S, 2, ...]`` with the other axes in ``like``'s memory order
    (an action-major table's actions outer: writing a like-laid-out tensor copies blocks), so the three
    sums of every member are one batched Gram matrix ``[g1; g2] [g1; g2]^T`` in float64, with the 1e-12
    guards of ``tpo_agents.losses.cosine_misalignment``. A recorder keeps one and rewrites it every update."""

    def __init__(self, like: th.Tensor) -> None:
        order = [0, *sorted(range(1, like.dim()), key=lambda d: -like.stride(d))]
        inverse = [order.index(d) for d in range(like.dim())]
        shape = like.permute(order).shape
        self._rows = th.empty((len(like), 2, *shape[1:]), dtype=th.float64, device=like.device)
        self.first, self.second = (self._rows[:, k].permute(inverse) for k in (0, 1))

    def misalignment(self) -> np.ndarray:
        """``1 - cos(first[m], second[m])`` of each member m, float64 ``[S]``."""
        rows = self._rows.reshape(len(self._rows), 2, -1)
        gram = (rows @ rows.mT).cpu().numpy()  # [S, 2, 2]: <g1,g1>, <g1,g2>, <g2,g2>
        norms = np.sqrt(gram[:, 0, 0] + 1e-12) * np.sqrt(gram[:, 1, 1] + 1e-12)
        return 1 - gram[:, 0, 1] / norms


def _misalignment(g1: th.Tensor, g2: th.Tensor) -> np.ndarray:
    """1 - cos(g1[m], g2[m]) of each member m (leading axis, the rest flattened), in float64."""
    cosines = MemberCosines(g1)
    cosines.first.copy_(g1)
    cosines.second.copy_(g2)
    return cosines.misalignment()


def _correct_arms(model: Any, n_contexts: int) -> np.ndarray:
    env = model.vector_env.unwrapped
    arms = getattr(env, "correct_arms", None)
    if arms is None:
        arms = np.full(n_contexts, env.correct_arm)
    return np.asarray(arms, dtype=np.int64)


class TabularSingleRecorder(CurveRecorder):
    """Single-context bandit (Fig. 3): error before the update and misalignment to the exact gradient."""

    def before_update(self, row: Row) -> None:
        self._before = _tables(self.model)
        pi = softmax_last(self._before[:, 0])
        y = int(_correct_arms(self.model, 1)[0])
        row["batch_error"] = row["error"]
        row["error"] = 1.0 - pi[:, y].numpy()
        self._oracle = pi[:, y:y + 1] * (th.eye(pi.shape[1], dtype=th.float64)[y] - pi)

    def after_update(self, row: Row) -> None:
        row["misalignment"] = _misalignment((_tables(self.model) - self._before)[:, 0], self._oracle)


class TabularMultiRecorder(CurveRecorder):
    """Multi-context bandit (Fig. 4): error after the update and misalignment to the CE direction.

    The probabilities are computed in float32 from the (float32) table, once per update (the table after
    an update is the one before the next; its ``_version`` counter says whether it changed), in the
    table's memory layout; the error and the correct arm's CE component are read as the other arms'
    mass, ``1 - pi_n(y_n) = sum_{a != y_n} pi_n(a)``, which float32 keeps to its relative precision
    where ``1 - pi`` would not. The cosine runs in float64 (:class:`MemberCosines`): Delta z is the exact
    difference of the two float32 tables and the CE direction its float32 value, written straight into
    the float64 rows (no float32 temporaries); rounding the vectors perturbs ``1 - cos`` quadratically,
    rounding its sums linearly. It records no ``rollout/`` values (a fast collector then computes none):
    the error before update t is the one after t - 1."""

    wants_rollout_metrics = False

    def __init__(self) -> None:
        super().__init__()
        self._last: tuple[th.Tensor, int, th.Tensor, th.Tensor] | None = None  # table, version, pi, wrong
        self._correct: th.Tensor | None = None  # e_y of every context, [S, C, A] in the table's layout
        self._others: th.Tensor | None = None  # 1 - e_y
        self._cosines: MemberCosines | None = None  # z before the update, then Delta z; e_y - pi

    def _table_and_probs(self) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """The logit table ``[S, C, A]`` (a view), pi = softmax over its arms and the wrong arms' part
        ``pi_n(a) [a != y_n]`` (0 on the correct arms), computed once per version of the table."""
        logits = self.model.policy.logits
        table = logits.detach().reshape(self.n_seeds, *logits.shape[-2:])
        if self._last is None or self._last[0] is not logits or self._last[1] != logits._version:
            pi = softmax_last(table)
            if self._others is None:
                labels = th.tensor(_correct_arms(self.model, pi.shape[1]), device=pi.device)
                self._correct = th.zeros_like(pi)
                self._correct[:, th.arange(pi.shape[1], device=pi.device), labels] = 1.0
                self._others = 1 - self._correct
            self._last = (logits, logits._version, pi, pi * self._others)
        return table, self._last[2], self._last[3]

    def before_update(self, row: Row) -> None:
        table, _, wrong = self._table_and_probs()
        if self._cosines is None:
            self._cosines = MemberCosines(table)
        self._cosines.first.copy_(table)
        # e_y - pi in float32: -pi(a) on the wrong arms, their mass 1 - pi(y) on the correct one
        self._cosines.second.copy_(self._correct * wrong.sum(-1, keepdim=True) - wrong)

    def after_update(self, row: Row) -> None:
        table, _, wrong = self._table_and_probs()
        row["error"] = wrong.sum(-1).mean(1).double().cpu().numpy()
        first = self._cosines.first
        th.sub(table, first, out=first)  # Delta z = z_after - z_before, exact in float64
        row["misalignment"] = self._cosines.misalignment()


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

    def after_update(self, row: Row) -> None:
        done = self.updates_done
        if done % self.eval_every:
            return
        log_probs = self._test_log_probs()
        self.evals["x"].append(np.full(self.n_seeds, done - self.eval_every))
        self.evals["error"].append((log_probs.argmax(-1).numpy() != self.labels).mean(1))
        if self.mechanism_algo is not None:
            stats = [mechanism(member.double().exp().numpy(), self.labels, self.mechanism_algo, self.eta)
                     for member in log_probs]
            for key in stats[0]:
                self.evals[f"mechanism_{key}"].append(np.stack([s[key] for s in stats]))

    def _test_log_probs(self) -> th.Tensor:
        """Every member's log-probabilities of the test images, ``[S, n_images, n_classes]``, computed
        in chunks of at most ``EVAL_ROWS`` member x image rows."""
        step = max(1, EVAL_ROWS // self.n_seeds)
        policy, device = self.model.policy, self.model.device
        with th.no_grad():
            parts = [policy.member_log_probs(self.images[i:i + step].to(device)).cpu()
                     for i in range(0, len(self.images), step)]
        return th.cat(parts, 1)


RECORDERS: dict[str, type[CurveRecorder]] = {
    "curves": CurveRecorder,
    "tabular_single": TabularSingleRecorder,
    "tabular_multi": TabularMultiRecorder,
    "mnist": MNISTRecorder,
}


class PolicyEvalRecorder(CurveRecorder):
    """Curves plus evaluations of a single run's policy before the first update (at the start of the first
    ``learn`` that finds no evaluation recorded) and after every ``eval_every`` updates (a subclass sets
    ``eval_every`` and ``seed`` and defines :meth:`evaluate`), each in evaluation mode with torch's RNG
    seeded with ``seed`` and restored afterwards (:meth:`seeded_evaluation`), so evaluating changes
    neither the training run's samples nor its tasks."""

    eval_every: int
    seed: int

    def _on_training_start(self) -> None:
        if self.n_seeds != 1:
            raise ValueError(f"{type(self).__name__} records single runs, got a model of {self.n_seeds} "
                             "members")
        if not self.evals:  # a job resumed from a checkpoint has evaluated before its first update
            self.evaluate()

    def after_update(self, row: Row) -> None:
        if self.updates_done % self.eval_every == 0:
            self.evaluate()

    @contextmanager
    def seeded_evaluation(self) -> Iterator[Any]:
        """The policy in evaluation mode under torch's RNG seeded with ``seed``; both restored after."""
        policy = self.model.policy
        training = policy.training
        device = th.device(policy.device)
        devices = [device.index or 0] if device.type == "cuda" else []
        policy.set_training_mode(False)
        try:
            with th.random.fork_rng(devices=devices):
                th.manual_seed(self.seed)
                yield policy
        finally:
            policy.set_training_mode(training)

    def evaluate(self) -> dict[str, float]:
        """Evaluate the policy now, append the values (x = updates done) and return them."""
        raise NotImplementedError


class LLMEvalRecorder(PolicyEvalRecorder):
    """Language models (docs/llm.md, ``llm_study``): the training curves plus held-out evaluations on the
    first ``n_prompts`` items of the held-out ``split`` (``"validation"`` to choose settings, ``"test"`` to
    report; neither shares a question with the train split) of the run's task (``env_kwargs``, scored
    natively) before the first update and after every ``eval_every`` updates, stored at x = the updates
    done.

    Each evaluation records ``error`` (1 - exact-match accuracy of one greedy completion per prompt),
    ``native_error`` (1 - its mean native, partial-credit score), ``format_rate``, ``mode_frac`` (the share
    of the greedy answers equal to the most common one: 1 for a constant policy), ``shortcut_frac`` (the
    share equal to the task's binary shortcut answer), ``sampled_error`` and ``sampled_native_error`` (the
    same of ``n_samples`` completions per prompt at the policy's temperature; pass@1 at T), the shortcut's
    ``shortcut_error`` and ``shortcut_native_error`` (1 - the score of the best constant answer of the
    train split on the same prompts, :func:`experiments.llm_tasks.shortcut`; the same at every
    evaluation), ``own_constant_error`` and ``own_constant_native_error`` (the same of the best constant
    of these prompts themselves, :func:`experiments.llm_tasks.held_out_constant`) and ``seconds``.
    Generation runs as :class:`PolicyEvalRecorder` says (evaluation mode, torch's RNG seeded with ``seed``
    and restored), so evaluating changes neither the training run's samples nor its prompts. Single runs
    only (an LLM policy has no populations)."""

    def __init__(self, env_kwargs: dict[str, Any], eval_every: int, n_prompts: int, n_samples: int = 0,
                 seed: int = 0, batch_rows: int = 64, split: str = "test") -> None:
        super().__init__()
        from experiments.llm_tasks import held_out_constant, shortcut, split_task
        from tpo_gym.envs.splits import HELD_OUT_SPLITS

        for name, value, low in (("eval_every", eval_every, 1), ("n_prompts", n_prompts, 1),
                                 ("n_samples", n_samples, 0), ("batch_rows", batch_rows, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"LLMEvalRecorder: {name}={value!r}; use an integer >= {low}")
        if split not in HELD_OUT_SPLITS:
            raise ValueError(f"LLMEvalRecorder: split={split!r}; use one of {', '.join(HELD_OUT_SPLITS)}")
        self.task = split_task(env_kwargs, split)
        if n_prompts > self.task.num_items:
            raise ValueError(f"LLMEvalRecorder: n_prompts={n_prompts} is more than the {split} split's "
                             f"{self.task.num_items} items (eval_size)")
        self.contexts = np.arange(n_prompts)
        self.eval_every, self.n_samples, self.seed, self.batch_rows = eval_every, n_samples, seed, batch_rows
        self.shortcut = shortcut(env_kwargs, self.contexts, split)
        """``{"binary": (answer, score), "native": (answer, score)}`` on the held-out prompts."""
        self.own_constant = held_out_constant(env_kwargs, self.contexts, split)
        """The same for the best constant of the held-out prompts themselves."""

    def evaluate(self) -> dict[str, float]:
        """Evaluate the policy now on the held-out prompts, append the values (x = updates done) and
        return them."""
        import time

        from experiments.llm_tasks import sample_completions
        from tpo_gym.envs.text import SUCCESS_THRESHOLD

        start = time.perf_counter()
        with self.seeded_evaluation() as policy:
            greedy, answers, format_ok = sample_completions(policy, self.task, self.contexts, 1, greedy=True,
                                                            batch_rows=self.batch_rows)
            sampled = (sample_completions(policy, self.task, self.contexts, self.n_samples,
                                          batch_rows=self.batch_rows)[0] if self.n_samples else None)
        given = [str(a) if a is not None else None for a in answers[:, 0]]
        modal = max(given.count(a) for a in set(given)) / len(given)
        values = {"x": float(self.updates_done), "error": float(1 - (greedy >= SUCCESS_THRESHOLD).mean()),
                  "native_error": float(1 - greedy.mean()), "format_rate": float(format_ok.mean()),
                  "mode_frac": modal,
                  "shortcut_frac": given.count(self.shortcut["binary"][0]) / len(given),
                  "shortcut_error": 1 - self.shortcut["binary"][1],
                  "shortcut_native_error": 1 - self.shortcut["native"][1],
                  "own_constant_error": 1 - self.own_constant["binary"][1],
                  "own_constant_native_error": 1 - self.own_constant["native"][1]}
        if sampled is not None:
            values["sampled_error"] = float(1 - (sampled >= SUCCESS_THRESHOLD).mean())
            values["sampled_native_error"] = float(1 - sampled.mean())
        values["seconds"] = time.perf_counter() - start
        for key, value in values.items():
            self.evals[key].append(np.array([value]))
        return values


RECORDERS["llm_eval"] = LLMEvalRecorder


def distinct_contexts(task: Any, n: int, seed: int) -> np.ndarray:
    """The first ``n`` distinct contexts that ``task.sample_contexts`` draws (from the task's split) with
    ``np.random.default_rng(seed)``, sorted, int64 [n]; ``ValueError`` if 100 n draws give fewer."""
    rng, chosen = np.random.default_rng(seed), dict[int, None]()
    for _ in range(100):
        chosen |= dict.fromkeys(int(c) for c in task.sample_contexts(rng, n))
        if len(chosen) >= n:
            return np.sort(np.array(list(chosen)[:n], dtype=np.int64))
    raise ValueError(f"n_tasks={n}: the env's {task.split!r} split gave {len(chosen)} distinct tasks in "
                     f"{100 * n} draws; use fewer tasks")


class AgentEvalRecorder(PolicyEvalRecorder):
    """Multi-turn envs (docs/agents.md): the training curves plus evaluations on fixed tasks: ``n_tasks``
    contexts of the env (all of them where it has no more and no split; else the first ``n_tasks`` distinct
    ones of its split drawn with ``seed``, :func:`distinct_contexts`),
    ``n_samples`` conversations each at the policy's temperature and one greedy conversation each, played
    by the model's ``multiturn`` mode (``MultiTurnMode.play``) before the first update and after every
    ``eval_every`` updates, stored at x = the updates done.

    Each evaluation records ``error`` (1 - the success rate of the sampled conversations), ``greedy_error``
    (the same of the greedy ones), ``turns`` (mean turns of the sampled ones), ``format_rate`` (their turns
    in the env's format), ``shortcut_error`` (1 - the env's shortcut success rate:
    :func:`experiments.agent_tasks.shortcut`) and ``seconds``. torch's RNG is seeded with ``seed`` and
    restored afterwards, so evaluating changes neither the training run's samples nor its tasks (the
    evaluations play on envs of their own). Single runs only."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], eval_every: int, n_tasks: int,
                 n_samples: int, seed: int = 0) -> None:
        super().__init__()
        import gymnasium as gym

        from experiments.agent_tasks import shortcut

        for name, value, low in (("eval_every", eval_every, 1), ("n_tasks", n_tasks, 1),
                                 ("n_samples", n_samples, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"AgentEvalRecorder: {name}={value!r}; use an integer >= {low}")
        task = gym.make(env_id, **env_kwargs).unwrapped.task
        if task.num_contexts <= n_tasks and task.split == "all":
            self.contexts = np.arange(task.num_contexts)
        else:
            self.contexts = distinct_contexts(task, n_tasks, seed)
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self.eval_every, self.n_samples, self.seed = eval_every, n_samples, seed
        self.shortcut = shortcut(task)
        self._envs: dict[int, Any] = {}

    def _env(self, group_size: int) -> Any:
        """The evaluation's vector env of ``len(contexts)`` groups of ``group_size``."""
        import gymnasium as gym

        if group_size not in self._envs:
            self._envs[group_size] = gym.make_vec(self.env_id, num_envs=len(self.contexts) * group_size,
                                                  vectorization_mode="vector_entry_point",
                                                  group_size=group_size, **self.env_kwargs)
        return self._envs[group_size]

    def evaluate(self) -> dict[str, float]:
        """Evaluate the policy now on the fixed tasks, append the values (x = updates done), return them."""
        import time

        start, mode = time.perf_counter(), self.model.mode
        with self.seeded_evaluation() as policy:
            sampled = mode.play(self._env(self.n_samples), policy,
                                {"group_size": self.n_samples, "contexts": self.contexts})
            greedy = mode.play(self._env(1), policy, {"group_size": 1, "contexts": self.contexts},
                               greedy=True)
        episodes = sampled.conversations
        turns = sum(episode.turns for episode in episodes)
        values = {"x": float(self.updates_done),
                  "error": 1 - float(np.mean([episode.success for episode in episodes])),
                  "greedy_error": 1 - float(np.mean([episode.success for episode in greedy.conversations])),
                  "turns": turns / len(episodes),
                  "format_rate": 1 - sum(episode.bad_turns for episode in episodes) / turns,
                  "shortcut_error": 1 - self.shortcut[1], "seconds": time.perf_counter() - start}
        for key, value in values.items():
            self.evals[key].append(np.array([value]))
        return values


RECORDERS["agent_eval"] = AgentEvalRecorder
