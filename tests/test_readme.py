"""README's facts: every repository path it names exists, and its description of the main job (the first
command) is what ``zoo_configs/tpo.yml`` sets. Its layout of the modules is generated
(``experiments.docs_tables``: ``tests/experiments/test_experiments_docs.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: Paths README names that a run creates, not the repository.
OUTPUTS = ("logs", "runs", "results/smoke")
#: The main job: README's first command.
MAIN_JOB = "python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/"


def code_and_links(text: str) -> list[str]:
    """The text of README's code (inline spans and fenced blocks) and its links' targets, with the
    placeholders of templates (``<algo>``, ``{tpo,grpo}``, ``[_<task>]``) as ``*``."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = fenced + re.findall(r"`([^`\n]+)`", prose) + re.findall(r"\]\(([^)#\s]+)", prose)
    templates = [re.sub(r"<[^<>\s]*>|\{[^{}\s]*\}|\[[^\[\]\s]*\]", "*", span) for span in spans]
    return [re.sub(r"\*+", "*", span) for span in templates]


def named_paths(text: str) -> set[str]:
    """The repository paths README names: the words of its code and links whose first part is an entry of
    the repository's root (``tpo_agents/zoo/cli.py``, ``train.py``), less the run outputs of
    :data:`OUTPUTS`."""
    roots = {path.name for path in ROOT.iterdir()}
    words = {word.rstrip(".:").removeprefix("./") for span in code_and_links(text)
             for word in re.split(r"[\s\"'(),;=|]+", span)}  # fmt: skip
    return {word for word in words if word.split("/")[0] in roots
            and not any(word == out or word.startswith(f"{out}/") for out in OUTPUTS)}  # fmt: skip


def test_every_path_the_readme_names_exists() -> None:
    paths = named_paths(README)
    assert {".ci/run", "docs/llm.md", "zoo_configs/", "train.py", "tpo_agents/zoo/",
            "tpo_agents/learn_loop.py", "tpo_agents/zoo/configs/"} <= paths
    assert not [path for path in sorted(paths) if not any(ROOT.glob(path.rstrip("/")))]


def test_the_readme_states_the_main_jobs_size() -> None:
    """Token mode: an update is B episodes (one per prompt) of H steps each."""
    assert MAIN_JOB in README.splitlines()[3]
    entry = yaml.safe_load((ROOT / "zoo_configs" / "tpo.yml").read_text())["TPO/TokenReversal-v0"]
    b, k, h = entry["batch_size"], entry["group_size"], entry["env_kwargs"]["sequence_length"]
    steps = int(float(entry["n_timesteps"]))
    assert entry["group_mode"] == "token" and steps % (b * h) == 0
    said = README.split(f"```bash\n{MAIN_JOB}\n```\n", 1)[1].split("\n\n", 1)[0]
    assert f"H = {h}, B = {b}, K = {k}" in said
    for unit, value in (("updates", steps // (b * h)), ("episodes", steps // h), ("env steps", steps)):
        assert re.findall(rf"([\d,]+) {unit}\b", said) == [f"{value:,}"], unit
