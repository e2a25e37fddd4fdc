"""One virtualenv per peer job queue, under benchmarks/.venvs/<peer>/.

Standard library only.  ``ensure_venv(peer)`` creates the venv with
``python -m venv`` and pip-installs the pinned requirements; it is
idempotent: a marker file in the venv records what was installed, and a
venv whose marker matches is reused as it is.  A file lock makes
concurrent callers wait for each other instead of racing pip.

    python benchmarks/peers/venvs.py            # set up every peer's venv
    python benchmarks/peers/venvs.py huey       # just one

The venvs are git-ignored by the repository's ``benchmarks/.venvs/`` pattern.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

VENVS_DIR = Path(__file__).resolve().parent.parent / ".venvs"
MARKER = "relaymq-peer-requirements.json"

# The peer is pinned exactly; extras pull in the drivers each backend needs.
# huey does not declare its Redis client, so it is pinned here too.
REQUIREMENTS: dict[str, list[str]] = {
    "huey": ["huey==3.5.4", "redis==8.1.0"],
    # redis==8.1.0 everywhere: the side-effect workload's client is the same for every peer
    # (and relaymq); bullmq and asyncmq would bring a redis of their own choosing otherwise.
    "bullmq": ["bullmq==3.4.4", "redis==8.1.0"],  # BullMQ's Python port
    "asyncmq": ["asyncmq[postgres,aio-pika]==0.10.1", "redis==8.1.0"],
    "pgqueuer": ["pgqueuer[asyncpg]==1.6.0", "redis==8.1.0"],  # redis: the side-effect workload
    "dramatiq": ["dramatiq[rabbitmq]==2.2.1", "redis==8.1.0"],
    "oban": ["oban==0.7.0", "redis==8.1.0"],  # Oban for Python: Python >= 3.12
}
MIN_PYTHON: dict[str, tuple[int, int]] = {"oban": (3, 12)}
"""Peers that need a newer Python than the one running the benchmark get one: the one
scripts/python313.sh's ``find_python313`` picks (as the rest of the repository does), else the
first of NEWER_PYTHONS that is new enough."""
PYTHON313_SH = VENVS_DIR.parent.parent / "scripts" / "python313.sh"
NEWER_PYTHONS = [
    str(Path.home() / ".pyenv/versions/3.13.0/bin/python3.13"),
    "python3.13",
    "python3.12",
    "python3.14",
]


class VenvError(RuntimeError):
    """Creating or installing a peer's venv failed."""


def venv_python(peer: str) -> Path:
    return VENVS_DIR / peer / "bin" / "python"


def _wanted(peer: str, base_python: str) -> dict[str, object]:
    version = subprocess.run(
        [base_python, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
        check=True,
        capture_output=True,
        text=True,
        env=_PYENV,
    ).stdout.strip()
    return {"requirements": REQUIREMENTS[peer], "python": version}


def ensure_venv(peer: str, base_python: str | None = None, quiet: bool = True) -> Path:
    """Make sure benchmarks/.venvs/<peer>/ exists with the pinned peer installed;
    return the path of its python."""
    if peer not in REQUIREMENTS:
        raise VenvError(f"unknown peer {peer!r}; known: {', '.join(sorted(REQUIREMENTS))}")
    base_python = base_python or _python_for(peer)
    venv_dir = VENVS_DIR / peer
    python = venv_python(peer)
    marker = venv_dir / MARKER
    VENVS_DIR.mkdir(parents=True, exist_ok=True)

    with open(VENVS_DIR / f".{peer}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = _wanted(peer, base_python)
        if python.exists() and marker.exists():
            try:
                if json.loads(marker.read_text()) == wanted:
                    return python
            except ValueError:
                pass
        if not quiet:
            print(f"setting up {venv_dir} ({' '.join(REQUIREMENTS[peer])})", file=sys.stderr)
        marker.unlink(missing_ok=True)
        _run([base_python, "-m", "venv", str(venv_dir)])
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                *REQUIREMENTS[peer],
            ]
        )
        marker.write_text(json.dumps(wanted))
    return python


def _python_for(peer: str) -> str:
    """This interpreter, or a newer one when the peer needs it (pyenv's 3.13.0 first)."""
    minimum = MIN_PYTHON.get(peer)
    if minimum is None or sys.version_info[:2] >= minimum:
        return sys.executable
    check = f"import sys; sys.exit(sys.version_info[:2] < {minimum!r})"
    for candidate in [*_find_python313(), *NEWER_PYTHONS]:
        try:
            ok = subprocess.run([candidate, "-c", check], env=_PYENV, capture_output=True)
        except OSError:
            continue
        if ok.returncode == 0:
            return candidate
    raise VenvError(f"{peer} needs Python >= {'.'.join(map(str, minimum))}; none found")


def _find_python313() -> list[str]:
    """What scripts/python313.sh's find_python313 prints, if it finds one."""
    if not PYTHON313_SH.exists():
        return []
    found = subprocess.run(
        ["bash", "-c", '. "$1" && find_python313', "find_python313", str(PYTHON313_SH)],
        capture_output=True,
        text=True,
        env=_PYENV,
    )
    return [found.stdout.strip()] if found.returncode == 0 and found.stdout.strip() else []


_PYENV = {**os.environ, "PYENV_VERSION": "3.13.0"}
"""pyenv's shims pick the interpreter by this; harmless for any other Python."""


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_PYENV)
    if proc.returncode != 0:
        raise VenvError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(REQUIREMENTS):
        print(ensure_venv(name, quiet=False))
