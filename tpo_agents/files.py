"""Atomic file writes: a file is written beside its destination and moved over it when complete."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO


def default_file_mode() -> int:
    """``0o666`` less the process's umask (``0o644`` under the usual umask 022): the mode of a file made
    with ``open``. ``tempfile.mkstemp`` makes ``0o600`` files, which a TensorBoard server or a teammate
    could not read once they replace the real file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Call ``write`` on a temporary file in ``path``'s folder (created if missing), flush it to disk,
    give it :func:`default_file_mode` and move it to ``path`` with ``os.replace``.

    An interruption or an error while writing leaves the previous file at ``path`` intact and removes
    the temporary file.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    suffix = os.path.splitext(str(path))[1]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
