"""Callbacks of the zoo: atomic saving, timestep-based triggers, task error, evaluation, hyperparameters.

Triggers count environment steps (``model.num_timesteps``), not ``on_step`` calls, so
``--eval-freq`` and ``--save-freq`` mean the same for SB3's PPO (one call per vectorised step) and
for a grouped algorithm whose steps cover many prompts at once.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import (
    BaseCallback,
    EvalCallback,
    EventCallback,
    ProgressBarCallback,
)
from stable_baselines3.common.logger import HParam, KVWriter, SeqWriter, TensorBoardOutputFormat

from tpo_agents.files import atomic_write

#: Scalars the HParams tab shows next to the hyperparameters.
HPARAM_METRICS = ("rollout/task_error", "eval/task_error", "eval/mean_reward", "rollout/ep_rew_mean")


def atomic_save(model: BaseAlgorithm, path: str) -> str:
    """Save ``model`` to ``path`` (``.zip`` added if missing) with :func:`tpo_agents.files.atomic_write`.

    An interruption while writing leaves the previous file at ``path`` intact; the zip gets the mode
    of the run's other files. A language-model policy is saved by
    :func:`tpo_agents.policies.llm_checkpoint.save_llm`: ``<name>.hf/`` (``save_pretrained``) beside the zip.
    """
    path = path if path.endswith(".zip") else path + ".zip"
    from tpo_agents.policies.llm_checkpoint import checkpoint_folder, is_llm_algorithm, save_llm

    if is_llm_algorithm(model):  # the weights as a save_pretrained folder beside a small zip
        folder = checkpoint_folder(path)
        atomic_write(path, lambda file: save_llm(model, file, folder=folder))
    else:
        atomic_write(path, model.save)
    return path


def episode_task_error(info: dict[str, Any]) -> float | None:
    """The task's error of a finished episode: ``token_error`` if given, else ``1 - is_success``."""
    if "token_error" in info:
        return float(info["token_error"])
    if "is_success" in info:
        return 1.0 - float(info["is_success"])
    return None


class EveryTimesteps(EventCallback):
    """Run ``callback`` each time ``num_timesteps`` passes a multiple of ``n_steps``."""

    def __init__(self, n_steps: int, callback: BaseCallback) -> None:
        super().__init__(callback)
        self.n_steps = int(n_steps)
        self._bucket = 0

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self._bucket = self.model.num_timesteps // self.n_steps

    def _on_step(self) -> bool:
        bucket = self.model.num_timesteps // self.n_steps
        if bucket > self._bucket:
            self._bucket = bucket
            return self._on_event()
        return True


class AtomicCheckpoint(BaseCallback):
    """Save ``<folder>/<prefix>_<num_timesteps>_steps.zip`` atomically each time it is called."""

    def __init__(self, folder: str, name_prefix: str = "rl_model", verbose: int = 0) -> None:
        super().__init__(verbose)
        self.folder = folder
        self.name_prefix = name_prefix

    def _on_step(self) -> bool:
        path = os.path.join(self.folder, f"{self.name_prefix}_{self.num_timesteps}_steps.zip")
        atomic_save(self.model, path)
        if self.verbose >= 1:
            print(f"Saving model checkpoint to {path}")
        return True


class TrainedSteps(BaseCallback):
    """Keep :attr:`trained`, the model's ``num_timesteps`` when its latest collection began: the steps of
    the batches it has trained on. A run stopped during a collection (or the update after it) has
    counted steps it did not train on; :meth:`rewind` takes them back."""

    def __init__(self) -> None:
        super().__init__()
        self.trained = 0

    def _on_training_start(self) -> None:
        self.trained = self.model.num_timesteps

    def _on_rollout_start(self) -> None:
        self.trained = self.model.num_timesteps

    def _on_step(self) -> bool:
        return True

    def rewind(self) -> str:
        """Set the model's ``num_timesteps`` back to :attr:`trained`; return the line that says so."""
        untrained = self.model.num_timesteps - self.trained
        self.model.num_timesteps = self.trained
        if untrained <= 0:
            return f"Interrupted after {self.trained} steps: saving the model"
        return (f"Interrupted after {self.trained} steps: saving the model (the {untrained} steps of the "
                "batch in progress were collected but not trained on, and are not counted)")


class SaveBest(BaseCallback):
    """``callback_on_new_best`` of the evaluation: save ``best_model.zip`` atomically."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def _on_step(self) -> bool:
        atomic_save(self.model, os.path.join(self.folder, "best_model.zip"))
        return True


class TaskErrorCallback(BaseCallback):
    """Log ``rollout/task_error`` from the ``infos`` of finished episodes (for algorithms that do not)."""

    def __init__(self) -> None:
        super().__init__()
        self._errors: list[float] = []

    def _on_step(self) -> bool:
        dones = self.locals.get("dones")
        infos = self.locals.get("infos") or []
        if dones is not None:
            for done, info in zip(np.asarray(dones).reshape(-1), infos, strict=False):
                error = episode_task_error(info) if done else None
                if error is not None:
                    self._errors.append(error)
        return True

    def _on_rollout_end(self) -> None:
        if self._errors:
            self.logger.record("rollout/task_error", float(np.mean(self._errors)))
            self._errors = []


class TaskEvalCallback(EvalCallback):
    """SB3's ``EvalCallback`` that also logs ``eval/task_error`` and saves ``task_errors`` in the npz."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._errors: list[float] = []
        self.evaluations_task_errors: list[list[float]] = []

    def _init_callback(self) -> None:
        # The grouped algorithms collect from their own batched env, so the training env is never
        # of the evaluation env's type; SB3's warning about that would be noise here.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Training and eval env are not of the same type")
            super()._init_callback()

    def _log_success_callback(self, locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        super()._log_success_callback(locals_, globals_)
        error = episode_task_error(locals_["info"]) if locals_["done"] else None
        if error is not None:
            self._errors.append(error)
            self.logger.record_mean("eval/task_error", error)

    def _on_step(self) -> bool:
        n_before = len(self.evaluations_timesteps)
        self._errors = []
        keep_going = super()._on_step()
        if self.log_path is not None and len(self.evaluations_timesteps) > n_before and self._errors:
            self.evaluations_task_errors.append(self._errors)
            extra = {"successes": self.evaluations_successes} if self.evaluations_successes else {}
            np.savez(
                self.log_path,
                timesteps=self.evaluations_timesteps,
                results=self.evaluations_results,
                ep_lengths=self.evaluations_length,
                task_errors=self.evaluations_task_errors,
                **extra,
            )
        return keep_going


class ProgressBar(ProgressBarCallback):
    """SB3's progress bar (tqdm + rich), moved to the model's ``num_timesteps`` at each step, so it also
    counts right for a grouped algorithm (whose steps do not make ``num_envs`` interactions each)."""

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self._start = self.model.num_timesteps

    def _on_step(self) -> bool:
        done = min(self.model.num_timesteps - self._start, self.pbar.total)
        if done > self.pbar.n:
            self.pbar.update(done - self.pbar.n)
        return True


class EveryNthDump(KVWriter, SeqWriter):
    """An SB3 logger output that passes every ``n``-th dump to ``output`` (the stdout table; ``n = 0``:
    none) and every text message; :meth:`flush_last` prints the last dump if it was skipped."""

    def __init__(self, output: Any, n: int) -> None:
        self.output, self.n = output, int(n)
        self._dumps = 0
        self._pending: tuple[dict[str, Any], dict[str, Any], int] | None = None

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self._dumps += 1
        if self.n > 0 and self._dumps % self.n == 0:
            self.output.write(key_values, key_excluded, step)
            self._pending = None
        else:  # the logger clears its dicts after a dump: keep copies
            self._pending = (dict(key_values), dict(key_excluded), step)

    def flush_last(self) -> None:
        """Print the last dump if it was skipped (so a run ends on its final values)."""
        if self._pending is not None and self.n > 0:
            self.output.write(*self._pending)
        self._pending = None

    def write_sequence(self, sequence: list[str]) -> None:
        self.output.write_sequence(sequence)

    def close(self) -> None:
        self.output.close()


class HParamCallback(BaseCallback):
    """Write the hyperparameters to TensorBoard: the HPARAMS tab and a markdown table (TEXT tab)."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        super().__init__()
        self.hparams = {key: _hparam_value(value) for key, value in flatten(hparams).items()}

    def _on_training_start(self) -> None:
        # Written straight to the TensorBoard writer: no other output format takes these values,
        # and the algorithm's own pending values are left for its next dump.
        rows = "\n".join(f"|{key}|{value}|" for key, value in sorted(self.hparams.items()))
        values = {
            "hparams": HParam(self.hparams, dict.fromkeys(HPARAM_METRICS, 0.0)),
            "hyperparameters": f"|param|value|\n|-|-|\n{rows}",
        }
        for output in self.logger.output_formats:
            if isinstance(output, TensorBoardOutputFormat):
                output.write(values, dict.fromkeys(values), self.num_timesteps)

    def _on_step(self) -> bool:
        return True


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"env_kwargs": {"reward": "x"}}`` -> ``{"env_kwargs.reward": "x"}``."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _hparam_value(value: Any) -> bool | int | float | str:
    """A value TensorBoard's HParams accept (numbers, bools, strings)."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)
