"""A private, throwaway PostgreSQL cluster for restart tests (services.md's recipe).

initdb under a temp dir as user postgres, started on a free loopback port; ``stop_immediate``
is a crash-style stop (no checkpoint), ``start`` brings it back on the same port. The fixture
always stops it and removes its files, even when the test fails. ``host`` and ``wrap`` (an
argv prefix: ``ip netns exec NS``) run it on a test host (tests/hosts).
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    if _bin_dir() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    if os.geteuid() != 0 and os.environ.get("USER") != "postgres":
        return "restart tests run initdb as user postgres: run them as root or postgres"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    def __init__(self, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> None:
        bin_dir = _bin_dir()
        assert bin_dir is not None
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="relaymq-pg-"))
        self.port = _free_port()
        self.running = False
        self.host, self.wrap = host, list(wrap)
        shutil.chown(self.dir, "postgres") if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = " ".join(shlex.quote(a) for a in args)
        if os.geteuid() == 0:
            argv = [*self.wrap, "su", "postgres", "-c", cmd]
        else:
            argv = [*self.wrap, "sh", "-c", cmd]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run(
            str(self.bin / "initdb"),
            "-D",
            f"{self.dir}/data",
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        )

    def start(self) -> None:
        opts = f"-p {self.port} -c listen_addresses={self.host} -k {self.dir} -c fsync=on"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            f"{self.dir}/data",
            "-l",
            f"{self.dir}/log",
            "-o",
            opts,
            "-w",
            "start",
        )
        self.running = True

    def stop_immediate(self) -> None:
        self._run(
            str(self.bin / "pg_ctl"), "-D", f"{self.dir}/data", "-m", "immediate", "-w", "stop"
        )
        self.running = False

    def destroy(self) -> None:
        try:
            if self.running:
                self.stop_immediate()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
