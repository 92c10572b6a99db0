"""The project's layout as a rule: imports flow one way, with no circles.

Every import counts, a lazy one inside a function or one only for type checking included: a
circle through either still ties two modules into one unit. The rooms, lowest first:
settings (no Pulumi, no toolkit), then the routing toolkit's rooms in the order its package
docstring gives, then the benchmarks; the Pulumi program (components) imports only settings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("settings", "components", "dryrun", "routing", "benchmarks")

# Each room may import its own modules and rooms of a lower rank, never a higher one.
ROOM_RANKS = {
    "settings": 0,
    "components": 1,
    "dryrun": 2,  # runs __main__.py by path, so no static edge to components
    "routing.picker": 1,
    "routing.shared": 2,  # routing's top-level modules: workloads, metrics, tables, options
    "routing.simulation": 3,
    "routing.live": 4,
    "routing.lab": 5,
    "routing.__main__": 6,
    "benchmarks": 7,
}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports: `import a.b`, `from a.b import c` (c a module or a
    name in a.b), relative imports resolved against the module's package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` is an import of the module; of a name, of the package.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def room_of(module: str) -> str:
    if module.startswith("routing."):
        room = ".".join(module.split(".")[:2])
        return room if room in ROOM_RANKS else "routing.shared"
    return "routing.shared" if module == "routing" else module.split(".")[0]


def test_the_project_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_circle_of_three_and_leaves_a_chain_alone():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def import_allowed(module: str, target: str) -> bool:
    source_room, target_room = room_of(module), room_of(target)
    if "components" in (source_room, target_room) and source_room != target_room:
        return source_room == "components" and target_room == "settings"  # the program reads only settings
    return ROOM_RANKS[target_room] <= ROOM_RANKS[source_room]


def test_every_import_flows_from_a_higher_room_to_a_lower_or_the_same_one():
    backwards = [f"{module} ({room_of(module)}) imports {target} ({room_of(target)})"
                 for module, targets in sorted(import_graph().items()) for target in sorted(targets)
                 if not import_allowed(module, target)]
    assert backwards == []


def test_the_room_rule_refuses_a_lower_room_importing_a_higher_one():
    assert not import_allowed("routing.picker.prefix", "routing.simulation.engine")
    assert not import_allowed("settings.parse", "routing.picker.endpoint_picker")
    assert not import_allowed("routing.live.serve", "components.platform")
    assert import_allowed("routing.lab.demo", "routing.live.serve")
    assert import_allowed("components.platform", "settings")


@pytest.mark.parametrize("room", ["picker", "simulation", "live", "lab"])
def test_each_room_says_what_it_holds_and_what_it_may_import(room):
    docstring = ast.get_docstring(ast.parse((ROOT / "routing" / room / "__init__.py").read_text()))
    assert docstring and "import" in docstring.lower()


def test_nothing_in_the_toolkit_or_settings_imports_pulumi():
    offenders = []
    for name, path in project_modules().items():
        if room_of(name) in {"components", "dryrun"} or name == "benchmarks.bench_program":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{name}: {imported}" for imported in names if imported.split(".")[0].startswith("pulumi")]
    assert offenders == []


def test_no_two_test_modules_share_a_basename():
    # pytest's default import mode imports test files without __init__.py by basename, so a
    # second test_x.py in another folder stops the whole collection.
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
