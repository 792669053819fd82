"""The architecture's arrows (docs: design): no import circle among the zoo's modules, ``tpo_gym`` never
imports ``agents``, the losses import nothing of the project but the memory layout (``agents/layout.py``),
which imports nothing of it. Every import statement counts, also one inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path) -> set[str]:
    """The modules ``path`` imports (absolute names; ``from a import b`` gives ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports."""
    folder = ROOT / package.replace(".", "/")
    modules = {f"{package}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    return {name: imports(path) & set(modules) - {name} for name, path in modules.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_circle_among_the_zoo_modules():
    graph = module_graph("tpo_agents.zoo")
    assert {f"tpo_agents.zoo.{name}" for name in ("run", "train", "optimize", "cli")} <= set(graph)
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_envs_never_import_agents_and_losses_import_nothing_of_the_project_but_the_layout():
    for path in (ROOT / "tpo_gym").rglob("*.py"):
        assert not any(name.split(".")[0] in {"agents", "tpo_agents"} for name in imports(path)), path
    project = {"agents", "tpo_agents", "tpo_gym", "experiments", "benchmarks"}
    assert not {name.split(".")[0] for name in imports(ROOT / "agents" / "layout.py")} & project
    of_project = {name for name in imports(ROOT / "agents" / "losses.py") if name.split(".")[0] in project}
    assert all(name == "tpo_agents.layout" or name.startswith("tpo_agents.layout.") for name in of_project), \
        of_project


def package_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, subpackages included (a subpackage is its
    ``__init__``, named by the package's dotted name)."""
    folder = ROOT / package.replace(".", "/")
    modules = {}
    for path in folder.rglob("*.py"):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return {name: imports(path) & set(modules) - {name} for name, path in modules.items()}


def test_no_import_circle_in_experiments():
    """Every import statement of ``experiments`` counts, also one under ``if TYPE_CHECKING:``."""
    graph = package_graph("experiments")
    assert {f"experiments.{name}" for name in ("report", "figures", "profiles", "pairwise", "runs",
                                                "definitions", "definitions.tokens")} <= set(graph)
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_imports_count_type_checking_imports(tmp_path):
    path = tmp_path / "module.py"
    path.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from a.b import C\n\n\n"
                    "def f():\n    import d\n")
    assert {"a.b", "a.b.C", "d"} <= imports(path)


def test_the_learn_loop_imports_no_policy_fused_collection_or_allocator():
    """The learn loop reaches policies, the fused collection (chosen in one place,
    ``GroupBaseAlgorithm.fused_collector``) and the allocator's settings only through the base class and
    the entry points: its own imports name none of them, nor an env."""
    banned = ("tpo_agents.policies", "tpo_agents.fused_collection", "tpo_agents.allocator", "tpo_gym")
    assert not [name for name in imports(ROOT / "agents" / "learn_loop.py") if name.startswith(banned)]
