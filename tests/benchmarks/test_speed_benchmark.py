"""benchmarks.speed: the reference's CLI is timed with the arguments of each workload (a stand-in
``tpo.cli`` records them), and its failure is one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.speed import WORKLOADS, alternating, main, time_reference


def stand_in(tmp_path: Path, exit_code: int = 0) -> str:
    """An interpreter whose ``python -m tpo.cli`` records its arguments in ``tmp_path/argv.json``."""
    package = tmp_path / "reference" / "tpo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text(
        f"import json, sys\njson.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n"
        f"sys.exit({exit_code})\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'reference'} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_every_workload_names_the_reference_command_and_a_recorded_time():
    for name, workload in WORKLOADS.items():
        assert workload.reference_args or workload.reference_wall_s is None, name
    assert WORKLOADS["tabular_multi_full"].target_ratio == 0.6
    assert WORKLOADS["token_reversal_smoke"].reference_args == ("transformer", "--smoke")


def test_the_reference_runs_with_the_workloads_arguments(tmp_path: Path):
    wall = time_reference("terminal_h5", stand_in(tmp_path))
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:4] == ["transformer_rlvr", "--smoke", "--num-episodes", "10"]
    assert argv[4:6] == ["--no-wandb", "--save-dir"] and wall > 0


def test_a_failing_reference_is_one_line(tmp_path: Path):
    with pytest.raises(SystemExit, match="the reference's mnist_full failed"):
        time_reference("mnist_full", stand_in(tmp_path, exit_code=3))


def test_repeated_runs_alternate_ours_and_the_references():
    calls = []

    def run(label, seconds):
        def timed_run():
            calls.append(label)
            return seconds + len(calls)
        return timed_run

    walls = alternating(3, run("ours", 10.0), run("reference", 20.0))
    assert calls == ["ours", "reference"] * 3
    assert walls == [[11.0, 13.0, 15.0], [22.0, 24.0, 26.0]]
    with pytest.raises(ValueError, match="repeat must be at least 1, got 0"):
        alternating(0, run("ours", 1.0))


def test_a_bad_repeat_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit):
        main(["tabular_single_full", "--repeat", "0"])
    assert "--repeat must be at least 1, got 0" in capsys.readouterr().err
