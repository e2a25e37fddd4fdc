"""The docs site's API reference (docs/reference.md, rendered by mkdocstrings from the
docstrings when ``mkdocs build --strict`` runs in ``make test``) has an entry for every public
name, and for nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import relaymq

REFERENCE = Path(__file__).parents[2] / "docs" / "reference.md"


def test_every_public_name_has_its_entry_in_the_api_reference() -> None:
    entries = re.findall(r"^::: relaymq\.(\w+)$", REFERENCE.read_text(), re.MULTILINE)
    assert entries == relaymq.__all__  # each once, in the order of __all__


def test_the_site_builds_the_reference_with_mkdocstrings() -> None:
    config = (REFERENCE.parents[1] / "mkdocs.yml").read_text()
    assert "- mkdocstrings:" in config and "API reference: reference.md" in config
