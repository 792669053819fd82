"""The architecture's arrows (docs: design): no import circle among the modules of ``agents`` (its
subpackages included) nor of ``experiments``, ``tpo_gym`` never reaches ``agents``, the losses reach nothing
of the project but the memory layout (``tpo_agents/layout.py``), which imports nothing of it. The arrows hold
through any chain of imports; every import statement counts, also one inside a function or relative."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path, package: str | None = None) -> set[str]:
    """The modules ``path`` imports (absolute names; ``from a import b`` gives ``a`` and ``a.b``). With
    ``package``, the package ``path`` lies in, a relative import counts too (``from .base import X`` in
    ``tpo_agents.policies`` gives ``tpo_agents.policies.base`` and ``tpo_agents.policies.base.X``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.level == 0 or package is not None):
            if node.level == 0:
                module = node.module
            else:
                base = ".".join(str(package).split(".")[: len(str(package).split(".")) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            if module:
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
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
        assert not any(name.split(".")[0] in {"tpo_agents"} for name in imports(path)), path
    project = {"tpo_agents", "tpo_gym", "experiments", "benchmarks"}
    assert not {name.split(".")[0] for name in imports(ROOT / "tpo_agents" / "layout.py")} & project
    for path in (ROOT / "tpo_agents" / "losses").glob("*.py"):
        of_project = {name for name in imports(path) if name.split(".")[0] in project}
        assert all(name.startswith(("tpo_agents.layout", "tpo_agents.losses")) for name in of_project), \
            (path, of_project)


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


def test_the_learn_loop_imports_no_policy_fast_collector_or_allocator():
    """The learn loop reaches policies, the fast collectors (registered, :mod:`tpo_agents.modes.base`) and
    the allocator's settings only through the base class and the entry points: its own imports name none
    of them, nor an env."""
    banned = ("tpo_agents.policies", "tpo_agents.fast_collectors", "tpo_agents.allocator", "tpo_gym")
    assert not [name for name in imports(ROOT / "tpo_agents" / "learn_loop.py") if name.startswith(banned)]


#: The project's import roots (each a top-level folder).
ROOTS = ("tpo_agents", "tpo_gym")


def project_modules() -> dict[str, tuple[Path, str]]:
    """Every module of ``tpo_agents`` and ``tpo_gym``, subpackages included: its dotted
    name -> (its file, the package it lies in). A package is its ``__init__``, named by the package."""
    modules = {}
    for name in ROOTS:
        for path in (ROOT / name).rglob("*.py"):
            parts = (name, *path.relative_to(ROOT / name).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
                package = ".".join(parts)
            else:
                package = ".".join(parts[:-1])
            modules[".".join(parts)] = (path, package)
    return modules


def project_graph(parents: bool = False) -> dict[str, set[str]]:
    """Module -> the project's modules it imports, by any import statement (also inside a function, also
    a relative one). With ``parents``, importing ``a.b.c`` also runs the packages ``a`` and ``a.b``: what
    the import executes, not only what it names."""
    modules = project_modules()
    graph = {}
    for name, (path, package) in modules.items():
        named = imports(path, package)
        if parents:
            named |= {".".join(n.split(".")[:i]) for n in named for i in range(1, n.count(".") + 1)}
        graph[name] = named & set(modules) - {name}
    return graph


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` reaches through any chain of imports of ``graph`` (itself not counted)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen - {start}


def test_relative_imports_count_in_their_package(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text("from .base import A\nfrom .. import files\n\n\ndef f():\n    from .optim import B\n")
    assert imports(path) == set()
    assert imports(path, "tpo_agents.policies") == {
        "tpo_agents.policies.base", "tpo_agents.policies.base.A", "tpo_agents", "tpo_agents.files",
        "tpo_agents.policies.optim", "tpo_agents.policies.optim.B"}


def test_reached_follows_chains() -> None:
    assert reached({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, "a") == {"b", "c"}
    assert reached({"a": {"b"}, "b": {"a"}}, "a") == {"b"}


def test_the_project_graph_sees_every_module_and_its_relative_imports() -> None:
    graph = project_graph()
    assert {"tpo_agents", "tpo_agents.policies", "tpo_agents.policies.base", "tpo_agents.zoo.run",
            "tpo_agents.integrations.verl.loss", "tpo_gym", "tpo_gym.sb3"} <= set(graph)
    assert "tpo_agents.policies.base" in graph["tpo_agents.policies"]  # ``from .base import ...``
    assert "tpo_agents.policies" not in graph["tpo_agents.rollout"]  # it names tpo_agents.policies.base,
    assert "tpo_agents.policies" in project_graph(parents=True)["tpo_agents.rollout"]  # runs it


def test_losses_reach_no_project_module_but_the_layout() -> None:
    """Through any chain of imports, the packages each import runs included: the losses reach the
    memory layout, their own modules and the package's ``__init__`` (which loads its classes on first use),
    nothing else."""
    reach = {name for name in reached(project_graph(parents=True), "tpo_agents.losses")
             if not name.startswith("tpo_agents.losses.")}
    assert reach <= {"tpo_agents", "tpo_agents.layout"}, reach


def test_tpo_gym_never_reaches_agents() -> None:
    graph = project_graph(parents=True)
    for name in graph:
        if name.split(".")[0] == "tpo_gym":
            assert not {m for m in reached(graph, name) if m.split(".")[0] == "tpo_agents"}, name


def test_no_import_circle_among_the_agents_modules() -> None:
    """Subpackages included (``policies``, ``modes``, ``zoo``, ``integrations``), every import statement
    counting, relative ones too; a package counts as its ``__init__``."""
    ours = {name for name in project_graph() if name.split(".")[0] == "tpo_agents"}
    graph = {name: edges & ours for name, edges in project_graph().items() if name in ours}
    assert {"tpo_agents.base_class", "tpo_agents.saving", "tpo_agents.policies.llm", "tpo_agents.zoo"} <= ours
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])
