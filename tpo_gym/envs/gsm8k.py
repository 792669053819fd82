"""GSM8K (grade-school maths word problems) for the text envs: ``TPO/GSM8K-v0``, scored as verl scores it.

The data is read, never downloaded, from (in this order):

* ``data_file=PATH``: JSON lines (``.jsonl``), a JSON list (``.json``) or parquet (``.parquet``) with
  the ``question`` and ``answer`` columns of GSM8K (the answer ends ``#### <number>``); its first
  ``size`` items are the train split and the next ``eval_size`` the eval split, unless
  ``eval_data_file=PATH`` gives the eval split (then ``data_file`` is all train);
* the Hugging Face cache of ``openai/gsm8k`` (config ``main``): its ``train`` split is ours, its ``test``
  split our eval split (the parquet files of the hub cache, or the arrow files ``datasets`` built).

Neither there: a one-line ``ValueError`` naming both. ``size`` and ``eval_size`` cap the splits
(None: all items).

Answers (``answer_format``, :data:`ANSWER_FORMATS`), read as verl's GSM8K reward reads them (the stack of
the paper's LLM runs, Sec. 3.8):

* ``"strict"`` (default): the number after the last ``#### `` (:func:`read_answer`); without one the
  format was not followed;
* ``"flexible"``: the last number of the completion (``\\boxed{18}``, "The answer is 18.");
* ``"tag"``: the text envs' ``<answer>...</answer>`` tags (:mod:`tpo_gym.envs.text`).

With ``strict`` and ``flexible`` the prompt is the question plus verl's GSM8K instruction
(:data:`VERL_INSTRUCTION`); with ``tag`` the text envs' tag instruction. Scoring
(:meth:`GSM8KDataset.score_answer`): the last number of the answer, commas removed, equals the gold
number as a decimal (``18.0`` = ``18.`` = ``18``; verl compares the strings) -> 1.0, else 0.0; the env's
``reward`` (native or binary) is the same here.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from tpo_gym.vector import check_choice

__all__ = ["ANSWER_FORMATS", "GSM8K", "GSM8KDataset", "VERL_INSTRUCTION", "final_number", "gold_number",
           "load_items", "read_answer"]

#: The dataset name text envs take for GSM8K (``dataset="gsm8k"``), and the hub repository read.
GSM8K = "gsm8k"
HUB_REPO = "openai/gsm8k"
#: How an answer is read: verl's ``strict`` (``#### N``) and ``flexible`` (last number), or ``<answer>`` tags.
ANSWER_FORMATS = ("strict", "flexible", "tag")
#: What verl's GSM8K data (``examples/data_preprocess/gsm8k.py``) appends to each question.
VERL_INSTRUCTION = ' Let\'s think step by step and output the final answer after "####".'
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_STRICT = re.compile(r"#### (-?[0-9.,]+)")  # verl's strict pattern


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "")).normalize()
    except InvalidOperation:
        return None


def final_number(text: str | None) -> Decimal | None:
    """The last number written in ``text`` (commas removed), as a normalised ``Decimal``; None if none."""
    if not text:
        return None
    numbers = _NUMBER.findall(text)
    return _decimal(numbers[-1]) if numbers else None


def read_answer(completion: str, answer_format: str = "strict") -> str | None:
    """The answer of a completion as verl's GSM8K reward reads it: the text after the last ``#### ``
    (``"strict"``) or the last number (``"flexible"``); None when there is none."""
    if answer_format == "strict":
        answers = _STRICT.findall(completion)
    elif answer_format == "flexible":
        answers = _NUMBER.findall(completion)
    else:
        raise ValueError(f"answer_format={answer_format!r}: read_answer reads 'strict' or 'flexible'")
    return answers[-1] if answers else None


def gold_number(answer: str) -> str:
    """The gold number of a GSM8K answer: the text after its last ``####``, commas removed."""
    if "####" not in answer:
        raise ValueError(f"GSM8K answer {answer[-60:]!r} has no '#### <number>' line")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _read_file(path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        raise ValueError(f"data_file={path!r}: no such file")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        if path.endswith(".json"):
            rows = json.load(f)
            if not isinstance(rows, list):
                raise ValueError(f"data_file={path!r} holds a {type(rows).__name__}; expected a list of rows")
            return rows
    raise ValueError(f"data_file={path!r}: use a .jsonl, .json or .parquet file")


def _hub_cache() -> str:
    """The Hugging Face hub cache folder: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``~/.cache/huggingface/hub``."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE

        return str(HF_HUB_CACHE)
    except ImportError:
        home = os.environ.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface"))
        return os.environ.get("HF_HUB_CACHE", os.path.join(home, "hub"))


def _hub_files(split: str) -> list[str]:
    """Cached files of ``openai/gsm8k`` (``main``) for ``split`` (``train``/``test``): the newest hub
    snapshot's parquet files, else the arrow files ``datasets`` built."""
    snapshots = glob.glob(os.path.join(_hub_cache(), "datasets--openai--gsm8k", "snapshots", "*"))
    for snapshot in sorted(snapshots, key=os.path.getmtime, reverse=True):
        files = sorted(glob.glob(os.path.join(snapshot, "main", f"{split}-*.parquet")))
        if files:
            return files
    try:
        from datasets.config import HF_DATASETS_CACHE
    except ImportError:
        return []
    built = os.path.join(str(HF_DATASETS_CACHE), "openai___gsm8k", "main", "*", "*", f"gsm8k-{split}*.arrow")
    return sorted(glob.glob(built))


def _read_cache(split: str) -> list[dict[str, Any]] | None:
    files = _hub_files(split)
    if not files:
        return None
    rows: list[dict[str, Any]] = []
    for path in files:
        if path.endswith(".parquet"):
            rows.extend(_read_file(path))
        else:
            from datasets import Dataset

            rows.extend(Dataset.from_file(path).to_list())
    return rows


def _entries(rows: Sequence[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    entries = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "question" not in row or "answer" not in row:
            raise ValueError(f"row {i} of {source} lacks the GSM8K columns question and answer")
        solution = str(row["answer"])
        entries.append({"question": str(row["question"]), "answer": gold_number(solution),
                        "metadata": {"solution": solution, "source": source}})
    return entries


def load_items(
    size: int | None = None, eval_size: int | None = None, data_file: str | None = None,
    eval_data_file: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train items, eval items)`` of GSM8K from ``data_file`` (and ``eval_data_file``) or the HF cache.

    Each item: ``question``, ``answer`` (the gold number as text) and ``metadata`` (the full solution).
    """
    for name, value in (("size", size), ("eval_size", eval_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name}={value!r}: must be an integer >= 0 or None (all items)")
    if data_file is not None:
        train = _entries(_read_file(data_file), data_file)
        if eval_data_file is not None:
            evals = _entries(_read_file(eval_data_file), eval_data_file)
        else:
            n_eval = 0 if eval_size is None else eval_size
            n_train = len(train) - n_eval if size is None else size
            if n_train < 0 or n_train + n_eval > len(train):
                raise ValueError(f"data_file={data_file!r} has {len(train)} items, fewer than size={size} + "
                                 f"eval_size={eval_size}; pass eval_data_file= or smaller sizes")
            train, evals = train[:n_train], train[n_train : n_train + n_eval]
    elif eval_data_file is not None:
        raise ValueError(f"eval_data_file={eval_data_file!r} needs data_file= for the train split")
    else:
        cached = [_read_cache(split) for split in ("train", "test")]
        if cached[0] is None or cached[1] is None:
            raise ValueError(
                f"GSM8K data not found: pass data_file=PATH (.jsonl/.json/.parquet with question and answer) "
                f"or put {HUB_REPO} (config main) in the Hugging Face cache ({_hub_cache()}), e.g. by "
                f"datasets.load_dataset('{HUB_REPO}', 'main') on a machine with internet"
            )
        train, evals = _entries(cached[0], f"{HUB_REPO}:train"), _entries(cached[1], f"{HUB_REPO}:test")
    train = train if size is None else train[:size]
    evals = evals if eval_size is None else evals[:eval_size]
    if not train and not evals:
        raise ValueError("GSM8K: no items (size=0 and eval_size=0, or empty files)")
    return train, evals


class GSM8KDataset:
    """GSM8K items with a reasoning-gym-style interface: ``dataset[i]`` and ``score_answer(answer, entry)``.

    Items ``0..n_train-1`` are the train split, ``n_train..n_train+n_eval-1`` the eval split;
    ``answer_format`` (one of :data:`ANSWER_FORMATS`) says how the text envs read a completion's answer.
    """

    def __init__(
        self, train: list[dict[str, Any]], evals: list[dict[str, Any]], answer_format: str = "strict"
    ) -> None:
        self.answer_format = check_choice("answer_format", answer_format, ANSWER_FORMATS)
        self.items = [*train, *evals]
        self.n_train, self.n_eval = len(train), len(evals)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.items[index]

    @staticmethod
    def score_answer(answer: str | None, entry: dict[str, Any]) -> float:
        """1.0 when the last number of ``answer`` equals the gold number exactly (as a decimal), else 0.0."""
        predicted, gold = final_number(answer), _decimal(str(entry["answer"]))
        return 1.0 if predicted is not None and predicted == gold else 0.0
