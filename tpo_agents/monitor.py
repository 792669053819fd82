"""The CSV episode monitor of a grouped algorithm: one ``monitor.csv`` row per episode trained on."""

from __future__ import annotations

import os
import time

import numpy as np
from stable_baselines3.common.monitor import ResultsWriter


class EpisodeMonitor:
    """``<folder>/monitor.csv`` in SB3's format (``r, l, t`` and info keys), one row per episode trained on.

    The columns after ``r, l, t`` are those of the first batch (``is_success``, and ``token_error`` on
    the token tasks); the file is created at the first batch, ``t`` counts from the env's creation.
    """

    def __init__(self, folder: str, env_id: str) -> None:
        self.path = os.path.join(folder, "monitor.csv")
        self.env_id, self.t_start = env_id, time.time()
        self._writer: ResultsWriter | None = None

    def write(self, rows: dict[str, np.ndarray]) -> None:
        extra = [key for key in rows if key not in ("r", "l")]
        if self._writer is None:
            header = {"t_start": self.t_start, "env_id": self.env_id}
            self._writer = ResultsWriter(self.path, header=header, extra_keys=tuple(extra))
        elapsed = round(time.time() - self.t_start, 6)
        for i, reward in enumerate(rows["r"]):
            row = {"r": round(float(reward), 6), "l": int(rows["l"][i]), "t": elapsed}
            row.update({key: rows[key][i] for key in extra})
            self._writer.logger.writerow(row)
        self._writer.file_handler.flush()
