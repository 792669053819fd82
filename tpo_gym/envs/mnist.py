"""MNIST contextual bandit of the paper (paper Sec. 3.3): classify one image per episode, reward 1 if right.

The context is an image index into the split. Training draws indices uniformly with replacement
(no epochs, as the reference does); the test split is sampled the same way, so a full test-set
evaluation should read ``MNISTBanditVectorEnv.dataset()`` rather than step the env.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from gymnasium import spaces

from tpo_gym.data.mnist import load_mnist
from tpo_gym.vector import (
    BatchedTask,
    BatchedTaskEnv,
    BatchedTaskVectorEnv,
    check_choice,
    check_int_array,
    check_render_mode,
    readonly,
    uniform_ints,
)

SPLITS = ("train", "test")
RENDER_MODES = ["rgb_array"]
#: Dark to bright, for the text picture of an image.
_SHADES = " .:-=+*#%@"


class MNISTTask(BatchedTask):
    """Batched one-step MNIST bandit over a fixed set of ``images`` [N, 784] and ``labels`` [N]."""

    horizon = 1

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        super().__init__()
        self.data_images, self.data_labels = readonly(images), readonly(labels)
        self.observation_space = spaces.Box(0.0, 1.0, (images.shape[1],), np.float32)
        self.action_space = spaces.Discrete(10)

    @classmethod
    def from_split(cls, split: str, data_dir: str | os.PathLike[str] | None, download: bool) -> MNISTTask:
        """Load ``split`` with :func:`tpo_gym.data.load_mnist` (cached in-process)."""
        return cls(*load_mnist(check_choice("split", split, SPLITS), data_dir=data_dir, download=download))

    def sample_contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return uniform_ints(rng, len(self.data_labels), n)

    def check_contexts(self, contexts: Any) -> np.ndarray:
        return check_int_array("context", contexts, len(self.data_labels), 1)

    def _start(self, contexts: np.ndarray) -> dict[str, np.ndarray]:
        self.images = self.data_images[contexts]
        self.labels = self.data_labels[contexts]
        self.hits = np.zeros(len(contexts), dtype=bool)
        self.actions = np.full(len(contexts), -1, dtype=np.int64)
        return {}

    def _observe(self) -> np.ndarray:
        return self.images.copy()

    def _advance(self, actions: np.ndarray) -> np.ndarray:
        self.actions = actions.copy()
        self.hits = actions == self.labels
        return self.hits

    def _final_info(self) -> dict[str, np.ndarray]:
        return {"label": self.labels.copy(), "is_success": self.hits.copy()}

    def _score(self, candidates: np.ndarray) -> np.ndarray:
        return candidates == self.labels[:, None]

    def render_text(self, index: int) -> str:
        """The image in ASCII shades (14 rows of 28, two pixel rows per line), then
        ``image i | label y | action a | reward r`` (``-`` before the guess)."""
        image = np.asarray(self.images[index], dtype=np.float64).reshape(-1, 28)
        rows = image[: len(image) // 2 * 2].reshape(-1, 2, 28).mean(axis=1)
        shades = np.minimum((rows * len(_SHADES)).astype(int), len(_SHADES) - 1)
        picture = ["".join(_SHADES[v] for v in row).rstrip() for row in shades]
        head = f"image {self.contexts[index]} | label {self.labels[index]} | "
        if self.step_index == 0:
            return "\n".join([*picture, head + "action - | reward -"])
        hit = bool(self.hits[index])
        result = f"action {self.actions[index]} | reward {float(hit):g} ({'right' if hit else 'wrong'})"
        return "\n".join([*picture, head + result])


def _frames(images: np.ndarray) -> np.ndarray:
    """Images [n, 784] in [0, 1] -> uint8 RGB frames [n, 28, 28, 3]."""
    gray = np.rint(images * 255).astype(np.uint8).reshape(len(images), 28, 28, 1)
    return np.repeat(gray, 3, axis=-1)


class MNISTBanditEnv(BatchedTaskEnv):
    """MNIST contextual bandit (paper Sec. 3.3), ``TPO/MNISTBandit-v0``.

    Observation: ``Box(0, 1, (784,), float32)``, one MNIST image (raw pixels / 255, flattened),
    drawn uniformly with replacement from ``split`` ("train": 60,000 images, "test": 10,000) at
    reset. Action: ``Discrete(10)``, the predicted digit. Reward: ``1.0`` if the action equals the
    image's label, else ``0.0``. Termination: every episode is one step (``terminated=True``);
    never truncated. Info: reset holds ``context`` (the image index); the step holds ``label`` and
    ``is_success``. The label is never part of the observation.
    Grouped use: ``score_candidates(cands [K]) -> 1[cand = label]`` without stepping;
    ``reset(options={"context": i})`` pins image ``i``. Data: see :func:`tpo_gym.data.load_mnist`.
    ``render_mode="rgb_array"`` renders the current image as a 28x28x3 uint8 frame; ``"ansi"`` as
    text: the image in ASCII shades, its label, the guess and the reward.
    """

    metadata: dict[str, Any] = {"render_modes": [*RENDER_MODES, "ansi"], "render_fps": 1}

    def __init__(self, split: str = "train", data_dir: str | os.PathLike[str] | None = None,
                 render_mode: str | None = None, download: bool = False) -> None:
        check_render_mode(render_mode, self.metadata["render_modes"])  # before loading the data
        super().__init__(MNISTTask.from_split(split, data_dir, download), render_mode)
        self.split = split

    def render(self) -> np.ndarray | str | None:
        """The current image as a uint8 [28, 28, 3] frame (``rgb_array``) or as text (``ansi``);
        ``None`` before the first reset."""
        if self.render_mode != "rgb_array":
            return super().render()
        if self.task.contexts is None:
            return None
        return _frames(self.task.images)[0]


class MNISTBanditVectorEnv(BatchedTaskVectorEnv):
    """``num_envs`` MNIST bandits as one numpy batch (see ``MNISTBanditEnv`` and
    ``BatchedTaskVectorEnv``): ``contexts`` [n] are the current image indices, ``labels`` [n] and
    ``images`` [n, 784] the current batch; ``dataset()`` returns the whole split."""

    metadata: dict[str, Any] = {**BatchedTaskVectorEnv.metadata, "render_modes": RENDER_MODES,
                                "render_fps": 1}

    def __init__(self, num_envs: int, split: str = "train", data_dir: str | os.PathLike[str] | None = None,
                 group_size: int = 1, max_episode_steps: int | None = None,
                 render_mode: str | None = None, download: bool = False, n_seeds: int = 1) -> None:
        super().__init__(MNISTTask.from_split(split, data_dir, download), num_envs, group_size,
                         max_episode_steps, n_seeds)
        self.split = split
        self.render_mode = check_render_mode(render_mode, RENDER_MODES)

    @property
    def labels(self) -> np.ndarray:
        """Read-only labels int64 [n] of the current images."""
        return readonly(self.task.labels)

    @property
    def images(self) -> np.ndarray:
        """Read-only current images float32 [n, 784]."""
        return readonly(self.task.images)

    def dataset(self) -> tuple[np.ndarray, np.ndarray]:
        """All ``(images float32 [N, 784], labels int64 [N])`` of this env's split, read-only."""
        return self.task.data_images, self.task.data_labels

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One uint8 [28, 28, 3] frame per sub-env (``None`` without ``render_mode`` or a reset)."""
        if self.render_mode is None or self.task.contexts is None:
            return None
        return tuple(_frames(self.task.images))
