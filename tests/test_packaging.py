"""``pip install .`` (not editable) ships what a run needs: ``zoo_configs/`` (package data, found by
``train.py`` without ``--hyperparams``) and the ``experiments`` package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tpo_agents.zoo.hyperparams import PROJECT_CONFIGS

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_zoo_configs_and_experiments(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
               "-w", str(tmp_path), str(ROOT)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("tpo_gym-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {f"zoo_configs/{path.name}" for path in (ROOT / "zoo_configs").glob("*.yml")}
    assert configs and configs <= names
    assert {"experiments/run.py", "experiments/definitions/tokens.py", "tpo_agents/zoo/run.py"} <= names
    assert not any(name.startswith("agents/") for name in names)  # the import name agents is left free


def test_the_project_configs_sit_beside_agents() -> None:
    """In a checkout and in site-packages alike, ``zoo_configs`` is the folder beside ``agents``."""
    import tpo_agents

    assert PROJECT_CONFIGS == Path(tpo_agents.__file__).resolve().parents[1] / "zoo_configs"
    assert (PROJECT_CONFIGS / "tpo.yml").is_file()
