"""The import name ``tpo_agents`` beside the OpenAI Agents SDK, whose import name is ``agents``: the SDK and
the zoo in one environment, and zips and YAML paths written under the package's former name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpo_agents.zoo.hyperparams import import_object

ROOT = Path(__file__).resolve().parents[1]
#: A TPO zip (TokenReversal, V = 2, H = 3, d_model 8) saved while the package was imported as ``agents``:
#: its ``policy_class`` is pickled as ``agents.policies.transformer.TransformerSoftmaxPolicy``.
OLD_ZIP = ROOT / "tests" / "fixtures" / "tpo_saved_as_agents.zip"
SDK = '''"""Stands in for openai-agents: a package named agents."""
class Agent:
    pass
class Runner:
    pass
'''


@pytest.fixture
def sdk_env(tmp_path: Path) -> dict[str, str]:
    """Environment variables of a process in which ``agents`` is an SDK-like package (first on the path)."""
    (tmp_path / "sdk" / "agents").mkdir(parents=True)
    (tmp_path / "sdk" / "agents" / "__init__.py").write_text(SDK)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "sdk"), str(ROOT)])}


def python(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


@pytest.mark.slow
def test_the_sdk_and_the_zoo_in_one_process(tmp_path: Path, sdk_env: dict[str, str]) -> None:
    code = ("import agents, tpo_agents, torch; torch.set_num_threads(1)\n"
            "from agents import Agent, Runner\n"
            "from tpo_agents.zoo.train import main\n"
            f"main(['--algo', 'tpo', '--env', 'TokenReversal', '-n', '24', '-f', {str(tmp_path / 'logs')!r},"
            " '--seed', '0', '--verbose', '0', '--eval-freq', '-1',"
            " '-params', 'batch_size:4', 'group_size:2', '--env-kwargs', 'sequence_length:3'])\n"
            "print(agents.__doc__, tpo_agents.TPO.__module__)")  # fmt: skip
    out = python(code, tmp_path, sdk_env)
    assert out.endswith("Stands in for openai-agents: a package named agents. tpo_agents.tpo")
    assert list((tmp_path / "logs" / "tpo").glob("*/TPO-TokenReversal-v0.zip"))


@pytest.mark.slow
def test_train_py_beside_the_sdk(tmp_path: Path, sdk_env: dict[str, str]) -> None:
    """``python train.py`` from the checkout, the SDK first on ``sys.path``."""
    command = [sys.executable, str(ROOT / "train.py"), "--algo", "tpo", "--env", "TokenReversal", "-n", "24",
               "-f", str(tmp_path / "logs"), "--seed", "0", "--verbose", "0", "--eval-freq", "-1",
               "-params", "batch_size:4", "group_size:2", "--env-kwargs", "sequence_length:3"]  # fmt: skip
    out = subprocess.run(command, cwd=ROOT, env=sdk_env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert python("from agents import Agent, Runner; print(Runner.__module__)", tmp_path, sdk_env) == "agents"



@pytest.mark.slow
def test_a_zip_saved_under_the_old_name_loads_beside_the_sdk(tmp_path: Path, sdk_env: dict[str, str]) -> None:
    code = ("from tpo_agents import TPO\n"
            f"model = TPO.load({str(OLD_ZIP)!r})\n"
            "print(type(model.policy).__module__, model.eta, model.group_size)")  # fmt: skip
    assert python(code, tmp_path, sdk_env) == "tpo_agents.policies.transformer 1.0 4"


def test_yaml_paths_under_the_old_name() -> None:
    from tpo_agents.zoo.sb3_algos import MlpLstmPolicy

    assert import_object("agents.zoo.sb3_algos.MlpLstmPolicy") is MlpLstmPolicy
    assert import_object("tpo_agents.zoo.sb3_algos:MlpLstmPolicy") is MlpLstmPolicy
