"""A private redis-server for restart, crash and configuration tests (services.md recipe).

Started on a free port with ``appendonly yes`` and ``appendfsync always`` in the test's tmp
dir; ``kill()`` is SIGKILL (no save, no AOF rewrite), ``start()`` again reuses the same dir.
``host`` and ``wrap`` (an argv prefix: ``ip netns exec NS``) run it on a test host
(tests/hosts).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    def __init__(
        self,
        directory: Path,
        *extra: str,
        host: str = "127.0.0.1",
        wrap: Sequence[str] = (),
    ) -> None:
        self.dir = directory
        self.port = free_port()
        self.extra = extra
        self.host, self.wrap = host, list(wrap)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if os.environ.get("CI"):
                pytest.fail("redis-server is not installed (CI must have it)", pytrace=False)
            pytest.skip("redis-server is not installed")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                *self.wrap,
                binary,
                "--port",
                str(self.port),
                "--bind",
                self.host,
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--logfile",
                str(self.dir / "redis.log"),
                *self.extra,
            ],
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"private redis-server on {self.port} did not start ({self.dir})")

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to save anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
