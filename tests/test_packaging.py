"""``pip install .`` (not editable) installs the packages ``tpo_gym`` and ``tpo_agents`` only, the zoo's
configs as ``tpo_agents.zoo``'s package data, and the ``tpo-gym`` command, which trains from any folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tpo_agents.zoo.hyperparams import PROJECT_CONFIGS

ROOT = Path(__file__).resolve().parents[1]
#: What the wheel is built from, copied: setuptools would put a stale ``build/lib`` of the checkout into it.
SOURCES = ("pyproject.toml", "README.md", "tpo_gym", "tpo_agents")
#: The environment of the installed command: no checkout on ``PYTHONPATH``, no user site, one thread.
CLEAN_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONNOUSERSITE": "1",
             "OMP_NUM_THREADS": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built by pip from a copy of its sources, without the network."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
             str(src)]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (built,) = out.glob("tpo_gym-*.whl")
    return built


def venv_with(wheel: Path, folder: Path) -> Path:
    """A fresh venv in ``folder`` with ``wheel`` installed (no dependencies, no index); returns its
    site-packages. It imports the dependencies from this interpreter's site-packages, named in a ``.pth``
    file as plain paths: their own ``.pth`` files, the checkout's editable install among them, do not run."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = str(folder / "bin" / "python")
    where = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    site = Path(where)
    dependencies = [path for path in sys.path if Path(path).name in ("site-packages", "dist-packages")]
    (site / "dependencies.pth").write_text("\n".join(dependencies) + "\n")
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
               str(wheel)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True, env=CLEAN_ENV, timeout=300)
    return site


@pytest.mark.slow
def test_the_wheel_ships_the_configs_inside_the_package(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    configs = {f"tpo_agents/zoo/configs/{path.name}" for path in PROJECT_CONFIGS.glob("*.yml")}
    assert configs and configs <= names
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"tpo_gym", "tpo_agents"}
    (entry_points,) = (name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "tpo-gym = tpo_agents.zoo.commands:main" in archive.read(entry_points).decode()


@pytest.mark.slow
def test_the_installed_command_trains_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """``tpo-gym train`` of the installed wheel, in a folder without ``zoo_configs/``, reads the installed
    configs; site-packages gains no generic top-level name (``experiments``, ``zoo_configs``, ``agents``)."""
    site, scripts, elsewhere = venv_with(wheel, tmp_path / "venv"), tmp_path / "venv" / "bin", tmp_path / "x"
    elsewhere.mkdir()
    train = [str(scripts / "tpo-gym"), "train", "--algo", "tpo", "--env", "TokenReversal", "-n", "2000",
             "--seed", "0", "-f", str(elsewhere / "logs")]  # fmt: skip
    out = subprocess.run(train, cwd=elsewhere, env=CLEAN_ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (elsewhere / "logs" / "tpo" / "TPO-TokenReversal-v0_1" / "TPO-TokenReversal-v0.zip").is_file()
    code = "import tpo_agents.zoo.hyperparams as h; print(h.__file__); print(h.default_dir())"
    used = subprocess.run([str(scripts / "python"), "-c", code], cwd=elsewhere, env=CLEAN_ENV,
                          capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    zoo = site / "tpo_agents" / "zoo"
    assert used == [str(zoo / "hyperparams.py"), str(zoo / "configs")]  # the wheel's code and configs
    top_level = {path.name for path in site.iterdir() if path.suffix not in (".dist-info", ".pth")}
    assert top_level == {"tpo_gym", "tpo_agents"}


def test_the_configs_are_package_data_and_the_checkouts_zoo_configs_links_to_them() -> None:
    """One copy of the configs, in ``tpo_agents.zoo``; ``zoo_configs/`` of the checkout is a link to it."""
    import tpo_agents

    assert PROJECT_CONFIGS == Path(tpo_agents.__file__).resolve().parent / "zoo" / "configs"
    assert (ROOT / "zoo_configs").is_symlink() and (ROOT / "zoo_configs").resolve() == PROJECT_CONFIGS
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


def test_torch_has_the_lower_bound_the_readme_explains_and_no_upper_one() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = (item for item in dependencies if requirement_names([item]) == {"torch"})
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert torch == "torch>=2.8" and "asks for `torch>=2.8` and sets no upper bound" in readme
