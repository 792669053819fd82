"""``pip install .`` (not editable) ships what a run needs: ``zoo_configs/`` (package data, found by
``train.py`` without ``--hyperparams``) and the ``experiments`` package."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tpo_agents.zoo.hyperparams import PROJECT_CONFIGS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
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


LLM_STACK = {"transformers", "tokenizers", "accelerate", "trl", "peft", "datasets", "vllm", "verl", "wandb",
             "reasoning-gym", "gguf", "ray"}  # fmt: skip


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", item, maxsplit=1)[0].lower() for item in requirements}


def test_the_default_install_has_no_llm_stack_and_the_readme_installs_it_for_the_tests() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not requirement_names(project["dependencies"]) & LLM_STACK
    assert {"transformers", "trl"} <= requirement_names(extras["llm"] + extras["trl"])
    install, tests = (ROOT / "README.md").read_text().splitlines()[3:5]
    assert install.startswith("pip install -e . && python train.py ")
    assert tests.startswith('pip install -e ".[dev]" && python -m tpo_gym.data && ')
    assert "--no-deps" not in install + tests  # nothing whose declared requirements pip reports as conflicts


@pytest.mark.slow
def test_the_main_job_imports_no_llm_module() -> None:
    code = ("import sys, tpo_agents.zoo.train, tpo_agents.tpo, tpo_gym; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'transformers', 'trl', 'peft', "
            "'reasoning_gym', 'accelerate', 'datasets'}))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)  # fmt: skip
    assert out.stdout.strip() == "[]"
