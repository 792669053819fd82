"""Train, validation and test splits of a generated dataset that share no question.

A procedural generator (reasoning-gym) may draw the same question many times: an index range of its
items is no held-out set (two one-digit terms give 121 questions, so any 64 evaluation items are all in a
1,000-item train range). Here the split of an item is a function of its question alone,
:func:`split_of`: a stable hash of ``(dataset seed, question)`` puts :data:`HELD_OUT_SHARE` of the
question space into each held-out split and the rest into train, so a question belongs to one split
whatever its index and however often it is drawn. :func:`disjoint_splits` walks the generator's items in
index order and fills each split: train keeps its items as drawn (repeats included, the generator's own
distribution), validation and test keep each question once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

__all__ = ["HELD_OUT_SHARE", "HELD_OUT_SPLITS", "MAX_DRAWS_PER_ITEM", "SPLITS", "disjoint_splits", "split_of"]

SPLITS = ("train", "validation", "test")
HELD_OUT_SPLITS = ("validation", "test")
HELD_OUT_SHARE = 0.1
"""The share of the question space that each held-out split owns (test: u < 0.1, validation: 0.1 <= u <
0.2 for the question's hash u in [0, 1)); train owns the other 0.8."""
MAX_DRAWS_PER_ITEM = 20
"""Items drawn at most per item asked for (``size + 2 * eval_size``) before a split that is still short is
an error: the question space is too small to hold out ``eval_size`` questions."""


def split_of(question: str, seed: int) -> str:
    """The split of ``question`` in the dataset of seed ``seed``: ``u = blake2b(f"{seed}:{question}") / 2^64``
    is ``"test"`` if ``u < HELD_OUT_SHARE``, ``"validation"`` if ``u < 2 * HELD_OUT_SHARE``, else
    ``"train"``; the same for any index and any run."""
    digest = hashlib.blake2b(f"{seed}:{question}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    return "test" if u < HELD_OUT_SHARE else "validation" if u < 2 * HELD_OUT_SHARE else "train"


def disjoint_splits(item: Callable[[int], dict[str, Any]], n_available: int, size: int, eval_size: int,
                    seed: int, name: str) -> dict[str, list[dict[str, Any]]]:
    """``{"train": [...], "validation": [...], "test": [...]}``: the first ``size`` items of index order
    whose question :func:`split_of` puts into train, and the first ``eval_size`` distinct questions of each
    held-out split, from ``item(0), item(1), ...`` (at most ``n_available`` items). ``ValueError`` naming
    the short split when the items run out first."""
    wanted = {"train": size, "validation": eval_size, "test": eval_size}
    splits: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    seen: dict[str, set[str]] = {split: set() for split in HELD_OUT_SPLITS}
    index = 0
    while index < n_available and any(len(splits[s]) < wanted[s] for s in SPLITS):
        entry = item(index)
        index += 1
        split = split_of(entry["question"], seed)
        if len(splits[split]) == wanted[split] or (split in seen and entry["question"] in seen[split]):
            continue
        if split in seen:
            seen[split].add(entry["question"])
        splits[split].append(entry)
    for split in SPLITS:
        if len(splits[split]) < wanted[split]:
            kind = "items" if split == "train" else "distinct questions"
            raise ValueError(
                f"dataset {name!r}: {len(splits[split])} {kind} of the {split} split in {index} draws, fewer "
                f"than {'size' if split == 'train' else 'eval_size'}={wanted[split]}; its question space is "
                f"too small to hold out that many (each held-out split owns {HELD_OUT_SHARE:.0%} of the "
                "questions): widen the dataset's config or lower eval_size")
    return splits
