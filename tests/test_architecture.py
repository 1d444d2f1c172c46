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
        # Where the tables sit on a Citus cluster: storage's, and placed by migrations.
        "normwatch.server.storage.citus",
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


# --- where SQL is written ---------------------------------------------------------------

SQL_HOMES = (
    # Statements are written in the storage layer only.
    "normwatch.server.storage",
    # Schema history and the schema itself (server defaults and index predicates are SQL).
    "normwatch.migrations",
    "normwatch.server.models",
    # How connections are made and set up (driver cursors, a snapshot's isolation level).
    "normwatch.server.db",
)
SQL_CHECKED = ("normwatch.server", "normwatch.dashboard")
SQL_BUILDERS = {"select", "text", "insert", "update", "delete", "literal_column", "table"}
STATEMENT_CALLS = {"execute", "exec_driver_sql", "scalars", "scalar"}
ORM_WRITES = {"add", "add_all", "delete", "merge", "flush"}
SESSION_NAMES = {"session", "conn", "connection", "db"}


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def sql_written(path: Path) -> Iterator[str]:
    """What in the module at ``path`` writes or sends SQL: SQLAlchemy's statement builders
    imported, statements executed on a session or connection, ORM objects fetched by key,
    added, deleted or flushed."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            for alias in node.names:
                if alias.name in SQL_BUILDERS:
                    yield f"line {node.lineno}: imports sqlalchemy's {alias.name}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            name = receiver.id if isinstance(receiver, ast.Name) else None
            if receiver is not None and isinstance(receiver, ast.Call):
                # session.connection().execute(...)
                inner = receiver.func
                if isinstance(inner, ast.Attribute) and inner.attr == "connection":
                    name = "conn"
            if name is None:
                continue
            if node.func.attr in STATEMENT_CALLS and name in SESSION_NAMES:
                yield f"line {node.lineno}: {name}.{node.func.attr}(...)"
            elif node.func.attr in ORM_WRITES | {"get"} and name == "session":
                yield f"line {node.lineno}: session.{node.func.attr}(...)"


def test_sql_is_written_only_in_storage() -> None:
    found = sorted(
        f"{module}, {where}"
        for module, path in modules().items()
        if _in(module, SQL_CHECKED) and not _in(module, SQL_HOMES)
        for where in sql_written(path)
    )
    assert found == []


def test_the_dashboard_reads_no_orm_models() -> None:
    """The dashboard goes through the services; the tables' classes are storage's business."""
    found = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if _in(module, ("normwatch.dashboard",))
        for target in targets
        if target == "normwatch.server.models"
    )
    assert found == []


def test_the_sql_check_sees_sql() -> None:
    written = list(sql_written(modules()["normwatch.server.storage.runs"]))
    assert any("imports sqlalchemy's text" in w for w in written)
    assert any("conn.execute" in w for w in written)


# --- one way to refuse --------------------------------------------------------------------


def test_routes_raise_refusals_not_http_exceptions() -> None:
    """A route refuses with a `normwatch.server.errors` refusal; `api.errors` alone turns
    refusals into HTTP answers."""
    found = sorted(
        f"{module}, line {line}"
        for module, path in modules().items()
        if _in(module, SQL_CHECKED) and module != "normwatch.server.api.errors"
        for line in http_exceptions(path.read_text())
    )
    assert found == []


def http_exceptions(source: str) -> list[int]:
    """Lines of ``source`` that import or use FastAPI's ``HTTPException``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Name | ast.alias | ast.ImportFrom)
        and "HTTPException"
        in (
            [node.id]
            if isinstance(node, ast.Name)
            else [node.name]
            if isinstance(node, ast.alias)
            else [a.name for a in node.names]
        )
    ]


def test_the_refusal_check_sees_http_exceptions() -> None:
    source = "from fastapi import HTTPException\n\ndef f():\n    raise HTTPException(404)\n"
    assert sorted(set(http_exceptions(source))) == [1, 4]


def test_every_refusal_is_in_the_one_tree() -> None:
    """Every refusal class is defined in `normwatch.server.errors` (its docstring draws the
    tree); nothing else subclasses them."""
    import importlib

    from normwatch.server import errors

    for module in modules():
        if _in(module, SQL_CHECKED) and not module.endswith("__main__"):
            importlib.import_module(module)
    seen, stack = [], [errors.ServiceError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    outside = sorted(
        f"{c.__module__}.{c.__qualname__}" for c in seen if c.__module__ != errors.__name__
    )
    assert outside == []
    drawn = errors.__doc__ or ""
    assert [c.__name__ for c in seen if c.__name__ not in drawn] == []
    assert len(seen) >= 15


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules (``tests/helpers``, or a non-``test_``
    module beside them), so that running one test file never runs another's module."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.rpartition(".")[2].startswith("test_") for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
