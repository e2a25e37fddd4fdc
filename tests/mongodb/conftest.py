"""Private mongoeco servers for restart and crash tests (never the shared one on 27017).

Each ``MongoServer`` runs the launcher tests/support/mongoeco_server.py under .venv-mongo on a
free port with its SQLite data file in the test's tmp dir; ``kill`` is SIGKILL, ``start`` again
reopens the same file. The fixture kills whatever is still running when the test ends.
``host`` and ``wrap`` (an argv prefix: ``ip netns exec NS``) run it on a test host (tests/hosts).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from relaymq.backends.base import Backend
from tests.conftest import require
from tests.support import case_mongodb

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-mongo" / "bin" / "python"
LAUNCHER = ROOT / "tests" / "support" / "mongoeco_server.py"


PYMONGO_SOCKET_LEAK = pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning")
"""For tests that make pymongo dial a dead server: when ``close()`` cancels its monitor
mid-connect, pymongo 4.20 drops the socket without closing it (a ResourceWarning, harmless)."""


@pytest.fixture(autouse=True)
def _collect_leaked_sockets() -> Iterator[None]:
    """Collect those sockets while this test's warning filters apply, not in a later test."""
    yield
    gc.collect()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MongoServer:
    def __init__(self, data: Path, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> None:
        self.data = data
        self.port = free_port()
        self.host, self.wrap = host, list(wrap)
        self.url = f"mongodb://{host}:{self.port}/relaymq_restart"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self, deadline: float = 30.0) -> None:
        assert self.proc is None, "already running"
        self.starts += 1
        log = self.data.with_suffix(f".{self.starts}.log")
        with log.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.wrap,
                *(str(PYTHON), str(LAUNCHER), str(self.port), str(self.data), self.host),
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        until = time.monotonic() + deadline
        while b"READY" not in log.read_bytes():
            if self.proc.returncode is not None:
                raise RuntimeError(f"mongoeco exited: {log.read_text(errors='replace')}")
            if time.monotonic() > until:
                raise TimeoutError(f"mongoeco not READY within {deadline} s on {self.port}")
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL: no shutdown, no flush beyond what acknowledged writes already did."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


@pytest_asyncio.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Backend]:
    """A backend on the shared MongoDB test server, in a database of this test's own."""
    require(case_mongodb.CASE)
    b = await case_mongodb.CASE.make(None, tmp_path)
    yield b
    await b.close()


@pytest_asyncio.fixture
async def mongo_server(tmp_path: Path) -> AsyncIterator[MongoServer]:
    if not PYTHON.exists():
        reason = f"{PYTHON} is missing: run 'make services' (scripts/services.d/mongodb.sh)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    server = MongoServer(tmp_path / "mongo.db")
    try:
        await server.start()
        yield server
    finally:
        await server.kill()
