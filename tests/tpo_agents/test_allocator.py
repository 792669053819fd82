"""``tpo_agents.allocator``: glibc's malloc keeps freed blocks where the C library has ``mallopt``."""

from __future__ import annotations

import ctypes

import pytest

from tpo_agents import allocator


class Recorder:
    """A stand-in ``mallopt`` that records its calls and answers ``answer``."""

    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer
        self.argtypes = self.restype = None

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return self.answer


def fake_libc(monkeypatch: pytest.MonkeyPatch, mallopt: Recorder | None) -> None:
    class Lib:
        pass

    lib = Lib()
    if mallopt is not None:
        lib.mallopt = mallopt
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda name: "libc.so.6")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: lib)


def test_keep_freed_memory_sets_every_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    mallopt = Recorder()
    fake_libc(monkeypatch, mallopt)
    assert allocator.keep_freed_memory() is True
    assert mallopt.calls == [(-3, 32 << 20), (-1, 1 << 30), (-2, 64 << 20)]  # mmap, trim, top pad
    assert mallopt.argtypes == (ctypes.c_int, ctypes.c_int)


def test_a_refused_setting_is_reported_and_the_others_still_set(monkeypatch: pytest.MonkeyPatch) -> None:
    mallopt = Recorder(answer=0)
    fake_libc(monkeypatch, mallopt)
    assert allocator.keep_freed_memory() is False
    assert len(mallopt.calls) == len(allocator.SETTINGS)


def test_a_c_library_without_mallopt_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_libc(monkeypatch, None)
    assert allocator.keep_freed_memory() is False
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda name: None)
    assert allocator.keep_freed_memory() is False


def test_this_machine_takes_the_settings() -> None:
    if ctypes.util.find_library("c") is None or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")),
                                                             "mallopt"):
        pytest.skip("no glibc mallopt here")
    assert allocator.keep_freed_memory() is True
