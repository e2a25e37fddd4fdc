"""The docs site: every Python example on its pages runs as written (each as a script of its
own, in an empty directory), and the site builds with strict link checking."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
EXAMPLES = [
    pytest.param(block, id=f"{page.stem}-{n}")
    for page in PAGES
    for n, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL))
]


def test_the_pages_have_examples_to_run() -> None:
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_python_example_runs(example: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAYMQ_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_site_builds_with_strict_link_checking(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
