"""relaymq ships its types (PEP 561): mypy checks a user's ``.enqueue()`` calls against the task.

mypy runs on a small user module in a temporary directory and finds relaymq as an installed
package on its search path (not as source given to it), so without ``relaymq/py.typed`` it
would treat relaymq as untyped and let every call through.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tomllib

import relaymq

USER_MODULE = """
from relaymq import JobHandle, task


@task(queue="emails")
async def send(to: str, times: int = 1) -> bool:
    return True


async def main() -> None:
    ok: JobHandle[bool] = await send.enqueue("a@example.com", times=2)  # fine
    await send.enqueue(42)  # line 12: wrong type
    await send.enqueue()  # line 13: missing argument
    await send.enqueue("a", 1, 2)  # line 14: too many arguments
    await send.with_options(delay=5).enqueue("a", tims=3)  # line 15: unknown keyword
    wrong: JobHandle[int] = await send.enqueue("a")  # line 16: wrong result type
"""


def test_mypy_rejects_wrong_enqueue_calls_in_user_code(tmp_path: pathlib.Path) -> None:
    (tmp_path / "user.py").write_text(USER_MODULE)
    installed = pathlib.Path(relaymq.__file__).parent.parent  # where relaymq is importable from
    env = {k: v for k, v in os.environ.items() if k not in {"MYPYPATH", "PYTHONPATH"}}
    env["PYTHONPATH"] = str(installed)  # seen by mypy as an installed package, not a source
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(tmp_path / "cache"),
            "user.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    errors = sorted(line for line in done.stdout.splitlines() if ": error:" in line)
    assert [line.split(":")[1] for line in errors] == ["12", "13", "14", "15", "16"], done.stdout
    assert "[arg-type]" in errors[0] and "[call-arg]" in errors[1]
    assert "import-untyped" not in done.stdout


def test_the_marker_is_shipped_as_package_data() -> None:
    assert (pathlib.Path(relaymq.__file__).parent / "py.typed").is_file()
    pyproject = pathlib.Path(relaymq.__file__).parent.parent / "pyproject.toml"
    package_data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["relaymq"]
