"""Every dotted name of the project that README.md and docs/*.md write as code exists: a module of
``tpo_agents``, ``tpo_gym``, ``experiments`` or ``benchmarks``, or an attribute defined in one
(``tpo_agents.monitor.EpisodeMonitor``, ``python -m experiments.run``), so that the docs point at no
name the code has moved or deleted."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.test_readme import code_and_links

ROOT = Path(__file__).resolve().parents[1]
#: The project's import names (each its folder in the checkout).
PACKAGES = ("tpo_agents", "tpo_gym", "experiments", "benchmarks")
#: A dotted name of the project inside a code span: ``tpo_agents.losses.tpo_loss``, not a path's part.
NAME = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_names() -> dict[str, list[str]]:
    """Each dotted name of the project the pages write as code -> the pages that write it."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for span in code_and_links(page.read_text()):
            for name in NAME.findall(span):
                pages = found.setdefault(name, [])
                if page.name not in pages:
                    pages.append(page.name)
    return found


def module_file(dotted: str) -> Path | None:
    """The checkout's file of the module ``dotted`` (a package's ``__init__.py``), None if there is none."""
    first, *rest = dotted.split(".")
    path = ROOT / first
    for part in rest:
        path = path / part
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines, also under ``if`` / ``try`` / ``with`` (a class defined
    only where an optional dependency is installed), not inside functions."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for element in ast.walk(target):
                    if isinstance(element, ast.Name):
                        names[element.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update({(alias.asname or alias.name).split(".")[0]: node for alias in node.names})
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, block, []):
                    names.update(defined(child.body if isinstance(child, ast.ExceptHandler) else [child]))
    return names


def defined_in_source(name: str) -> bool:
    """``name`` is a module of the checkout, or its longest module prefix defines the rest (a class's
    attributes in the class body)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:i]))
        if path is not None:
            break
    else:
        return False
    node: ast.AST = ast.parse(path.read_text())
    for attr in parts[i:]:
        if not isinstance(node, ast.Module | ast.ClassDef) or attr not in (names := defined(node.body)):
            return False
        node = names[attr]
    return True


def importable(name: str) -> bool:
    """``name`` is an importable module, or an attribute of one (names a module makes on first use)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_docs_write_names_of_the_project() -> None:
    names = doc_names()
    expected = {"tpo_agents.monitor.EpisodeMonitor", "experiments.run", "tpo_gym.data.load_mnist"}
    assert expected <= set(names)
    assert len(names) > 50


@pytest.mark.parametrize("name", sorted(doc_names()))
def test_every_name_the_docs_write_exists(name: str) -> None:
    assert defined_in_source(name) or importable(name), f"{name} (in {', '.join(doc_names()[name])})"


def test_a_moved_or_deleted_name_is_found() -> None:
    assert defined_in_source("tpo_agents.monitor.EpisodeMonitor")
    assert defined_in_source("tpo_agents.integrations.verl.settings.TPOPolicyLossConfig")  # only with verl
    assert not defined_in_source("tpo_agents.base_class._EpisodeMonitor")
    assert not defined_in_source("tpo_agents.zoo_configs") and not importable("tpo_agents.zoo_configs")
    assert importable("tpo_agents.TPO")  # made on first use (the package's __getattr__)


def test_the_architecture_page_walks_at_most_six_library_files_that_exist() -> None:
    """docs/architecture.md's table of one TPO update: every library file it names exists, and the update
    passes through at most six of them (the policy's own files are described below the table)."""
    table = [line for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
             if re.match(r"\| \d+ \|", line)]
    files = {name for line in table for name in re.findall(r"`(tpo_agents/[\w/]+\.py)`", line)}
    assert table and all((ROOT / name).is_file() for name in files), files
    assert 2 <= len(files) <= 6, sorted(files)
