"""The import graph of the package keeps its layers: no cycles, and no module importing from
a layer above its own.

The graph is read from the source (every ``import`` and ``from ... import`` statement,
including those inside functions), not from what happens to be imported at run time, so a
lazy import counts like any other. Layers, lowest first, are those of docs/architecture.md.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "client": "normwatch.client",
    "server": "normwatch.server",
    "dashboard": "normwatch.dashboard",
    "migrations": "normwatch.migrations",
    "normwatch": "normwatch",
}

LAYERS: list[tuple[str, ...]] = [
    # The trainer client installs alone: it may import nothing else of normwatch.
    ("normwatch.client",),
    ("normwatch.server.config", "normwatch.server.errors", "normwatch.server.memory"),
    (
        "normwatch.server.db",
        "normwatch.server.models",
        "normwatch.server.migrate",
        "normwatch.server.citus",
        "normwatch.migrations",
    ),
    # Pure domain logic: the batch parser and alerting (conditions, evaluation, delivery).
    (
        "normwatch.server.batch",
        "normwatch.server.alerts",
        "normwatch.server.analytics",
        "normwatch.server.aliases",
    ),
    ("normwatch.server.schemas", "normwatch.server.storage"),
    ("normwatch.server.auth", "normwatch.server.telemetry"),
    ("normwatch.server.services",),
    ("normwatch.server.workers",),
    ("normwatch.server.api",),
    ("normwatch.dashboard",),
    ("normwatch.server.app",),
    # The command line, the demo, the simulator and test helpers sit on top of everything.
    ("normwatch",),
]


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ``known`` that the module ``name`` at ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = [f"{source}.{alias.name}" for alias in node.names]
            yield from (module for module in submodules if module in known)
            # Names that are not submodules come from the module itself.
            if source in known and any(module not in known for module in submodules):
                yield source


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (length of the matching prefix, layer)
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


GRAPH = {name: set(imports(name, path, modules())) - {name} for name, path in modules().items()}


def test_every_module_is_in_a_layer() -> None:
    for module in GRAPH:
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = sorted(
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in GRAPH.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert upward == []


def test_the_import_graph_has_no_cycles() -> None:
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert cycles == []


def test_the_checks_see_what_they_check() -> None:
    """The graph is the package's: the modules and edges the other tests rely on are there."""
    assert "normwatch.server.storage.pyramid" in GRAPH
    assert "normwatch.server.storage.chunks" in GRAPH["normwatch.server.storage.pyramid"]
    assert "normwatch.server.services.ingest" in GRAPH["normwatch.server.api.metrics"]
    assert layer_of("normwatch.client._run") == 0
    assert layer_of("normwatch.cli") == len(LAYERS) - 1
    assert layer_of("normwatch.server.storage.runs") < layer_of("normwatch.server.services.runs")
