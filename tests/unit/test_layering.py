"""The package's import graph, read from the source (imports inside functions and under
``TYPE_CHECKING`` count too): no import circle, and no module imports one of a higher layer.

The layers, lowest first, are those of docs/architecture.md: records at the bottom, then the
policy functions, the seams, the backends, what is written once on the meta store above the
seam, the facade, the features, the worker, and the command line, dashboard and integrations
on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import relaymq

PACKAGE = Path(relaymq.__file__).parent

# Each module takes the layer of the longest entry that names it or a package above it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "records",
        ("errors", "records", "job", "serializers", "retry", "arguments", "models", "settings"),
    ),
    ("policy", ("policy",)),
    (
        "seams",
        (
            "backends.base",
            "backends.meta",
            "backends.notifier",
            "backends.transactional",
            "backends.corrupt",
            "backends.sqlfile",
        ),
    ),
    ("backends", ("backends",)),
    ("above the seam", ("registry", "schedules.store")),
    ("facade", ("observers", "coalesce", "instrumented", "transactions", "events")),
    (
        "features",
        (
            "options",
            "limits",
            "retention",
            "flows",
            "bulk",
            "producer",
            "task",
            "schedules",
            "app",
            "queue",
            "recovery",
            "outbox",
            "metrics",
            "tracing",
            "overview",
            "keyusage",
        ),
    ),
    ("worker", ("worker",)),
    ("surfaces", ("cli", "dashboard", "contrib", "demo", "testing", "__main__", "")),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    best, best_length = -1, -1
    for number, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".") or prefix == "") and len(
                prefix
            ) > best_length:
                best, best_length = number, len(prefix)
    return best


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its file. ``from P import
    n`` counts P.n when that is a module, and P itself when a name comes from its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def inner(name: str) -> str | None:
        if name == "relaymq" or name.startswith("relaymq."):
            return name.removeprefix("relaymq").removeprefix(".")
        return None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(i for a in node.names if (i := inner(a.name)) in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                outer = inner(node.module or "")
                if outer is None:
                    continue
                source = outer
            for a in node.names:
                sub = f"{source}.{a.name}" if source else a.name
                if sub in known:
                    found.add(sub)
                elif source in known:
                    found.add(source)
    found.discard(module)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {m: imports(m, p, known) for m, p in found.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in modules() if layer_of(m) < 0] == []


def test_the_import_graph_has_no_circle() -> None:
    assert circles(graph()) == []


def test_no_module_imports_one_of_a_higher_layer() -> None:
    upward = sorted(
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in graph().items()
        for t in targets
        if layer_of(t) > layer_of(m)
    )
    assert upward == []


def test_records_import_nothing_of_relaymq_but_records_and_errors() -> None:
    edges = graph()
    records = [m for m in edges if layer_of(m) == 0]
    assert "records" in records and "job" in records
    assert [(m, sorted(edges[m])) for m in records if any(layer_of(t) for t in edges[m])] == []
