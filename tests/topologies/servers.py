"""What the topology tests share: free ports, the rule for a server that cannot start (fail in
CI, skip locally, with the reason), running a command as another user, and waiting for a port.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing(reason: str) -> None:
    """A server this test needs cannot run here: fail under CI, skip otherwise."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must have it: make test installs it)", pytrace=False)
    pytest.skip(reason)


def need_binary(name: str, hint: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if found is None:
        missing(f"{name} is not installed ({hint})")
    assert found is not None
    return found


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        missing(f"{what} runs server processes as other users: run the tests as root")


def as_user(user: str, argv: list[str]) -> list[str]:
    """``argv`` run as ``user`` (the tests run as root; PostgreSQL and PgBouncer refuse it)."""
    if os.geteuid() != 0:
        return argv
    return ["su", user, "-s", "/bin/sh", "-c", " ".join(shlex.quote(a) for a in argv)]


def give(path: Path, user: str) -> None:
    """Hand ``path`` (and what is under it) to ``user``."""
    if os.geteuid() == 0:
        for p in [path, *path.rglob("*")]:
            shutil.chown(p, user)


def await_port(port: int, within: float, what: str, log: Path | None = None) -> None:
    """Return once 127.0.0.1:``port`` accepts connections."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.05)  # the server is starting: a short pause before the next try
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise AssertionError(f"{what} not listening on {port} after {within}s\n{tail}")
