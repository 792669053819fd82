"""``tpo-gym <command>``: the console script pyproject declares runs the zoo's command lines unchanged, and
``train`` finds the project's configs from a folder without ``zoo_configs/``."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from tests.tpo_agents.zoo.test_zoo_validation import TINY_GROUP, TINY_TOKENS, zoo_argv
from tpo_agents.zoo import hyperparams as hp
from tpo_agents.zoo.commands import COMMANDS, main

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
#: The usage line of each command's own parser, as ``tpo-gym <command> --help`` prints it.
USAGE = {"train": "usage: train.py", "evaluate": "usage: python -m tpo_agents.evaluate",
         "enjoy": "usage: python -m tpo_agents.enjoy",
         "plots": "usage: python -m tpo_agents.zoo.plots"}  # fmt: skip


def test_pyproject_installs_the_command() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"tpo-gym": "tpo_agents.zoo.commands:main"}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_is_its_modules_command_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    module, function = COMMANDS[command][0].split(":")
    assert callable(getattr(importlib.import_module(module), function))
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith(USAGE[command])


def test_the_listing_and_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and all(f"  {name} " in out for name in COMMANDS)
    with pytest.raises(SystemExit) as exc:
        main(["trian"])
    assert exc.value.code == 2 and "invalid choice: 'trian'" in capsys.readouterr().err


def test_a_commands_user_error_is_its_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--model", str(tmp_path / "none.zip")])
    assert str(exc.value.code).startswith("error: ") and "\n" not in str(exc.value.code)


def test_train_outside_a_checkout_reads_the_project_configs(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./zoo_configs/ here
    main(["train", *zoo_argv(tmp_path, "tpo", "-n", "12", "-tb", "", "--env-kwargs", *TINY_TOKENS,
                             "-params", *TINY_GROUP)])  # fmt: skip
    config = tmp_path / "logs" / "tpo" / "TPO-TokenReversal-v0_1" / "TPO-TokenReversal-v0" / "config.yml"
    assert config.is_file() and "TransformerPolicy" in config.read_text()  # the project's tpo.yml's policy
    assert hp.default_dir() == hp.PROJECT_CONFIGS
