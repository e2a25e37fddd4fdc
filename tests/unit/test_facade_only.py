"""The layers above the seam reach a backend only through the instrumented facade.

Walks the package's source: a call of a backend method (an abstract method of ``Backend`` or
of a class it derives from, found by introspection) on something that looks like a backend
fails the test, outside ``relaymq/backends/`` and the facade (``relaymq/instrumented.py``, with
its writes in a caller's transaction in ``relaymq/transactions.py``). What looks like
a backend: a name or attribute called ``backend`` or ``_backend``, or one annotated
with a type that names ``Backend`` (a parameter, or an annotated assignment, in the same
module).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from relaymq.backends.base import Backend

PACKAGE = Path(__file__).resolve().parents[2] / "relaymq"
EXEMPT = ("backends/", "instrumented.py", "transactions.py")  # the facade, in two files
RECEIVERS = frozenset({"backend", "_backend"})
# The modules above the seam (relaymq.registry, relaymq.schedules.store) are written on the
# meta store's interface (a parameter typed ``MetaStore``); their callers hand them the facade,
# which is a meta store too.


def backend_methods() -> frozenset[str]:
    names: set[str] = set()
    for cls in inspect.getmro(Backend):
        names |= {
            name
            for name, value in vars(cls).items()
            if getattr(value, "__isabstractmethod__", False)
        }
    return frozenset(names)


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_backend(annotation: ast.expr) -> bool:
    """A type naming ``Backend`` and no facade (``Instrumented | Backend`` is made a facade
    before use)."""
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)}
    return "Backend" in names and not names & {"Instrumented", "App"}


def _typed_backend(tree: ast.AST) -> set[str]:
    """The names and attributes this module annotates as a backend."""
    typed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if _is_backend(node.annotation):
                typed.add(node.arg)
        elif isinstance(node, ast.AnnAssign):
            name = _name_of(node.target)
            if name and _is_backend(node.annotation):
                typed.add(name)
    return typed


def backend_calls(path: Path, methods: frozenset[str], root: Path = PACKAGE.parent) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    receivers = RECEIVERS | _typed_backend(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in methods and _name_of(node.func.value) in receivers:
            where = path.relative_to(root)
            found.append(f"{where}:{node.lineno}: {ast.unparse(node.func)}(...)")
    return found


def test_the_backend_methods_are_found() -> None:
    methods = backend_methods()
    assert {"enqueue", "claim", "settle", "publish", "subscribe"} <= methods
    assert "capabilities" not in methods


def test_no_backend_method_is_called_outside_backends_and_the_facade() -> None:
    methods = backend_methods()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(EXEMPT):
            continue
        found += backend_calls(path, methods)
    assert not found, "call the facade (relaymq.instrumented) instead:\n" + "\n".join(found)


def test_the_check_sees_a_call_on_a_backend(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "async def f(b: Backend | None, o: Instrumented | Backend, self) -> None:\n"
        "    await b.claim([], 'w', 1)\n"
        "    await o.claim([], 'w', 1)\n"
        "    await self.backend.drain('q')\n"
        "    await self.ops.drain('q')\n"
    )
    found = backend_calls(source, backend_methods(), tmp_path)
    assert [line.split(": ", 1)[1] for line in found] == [
        "b.claim(...)",
        "self.backend.drain(...)",
    ]
