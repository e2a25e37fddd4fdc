"""The README's Python examples are valid scripts (no top-level await) and import only what
exists; its first lines give the two commands a newcomer runs."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def test_the_first_lines_give_make_demo_and_make_test() -> None:
    head = "\n".join(README.splitlines()[:5])
    assert "make demo" in head and "make test" in head


def test_there_are_python_examples() -> None:
    assert len(BLOCKS) >= 3


def test_every_python_example_compiles_as_a_script() -> None:
    for block in BLOCKS:
        compile(block, "README.md", "exec")  # top-level await would be a SyntaxError


def test_every_relaymq_name_an_example_uses_exists() -> None:
    for block in BLOCKS:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("relaymq"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "relaymq"
            ):
                assert hasattr(importlib.import_module("relaymq"), node.attr), node.attr
