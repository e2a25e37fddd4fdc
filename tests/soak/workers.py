"""The soak's worker processes: started (on the test hosts in turn, when the target has them),
watched, replaced when one exits on its own, and stopped."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.soak.plan import Target

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Exit:
    """A worker process that ended on its own (no kill of the soak's): how, and its last
    words."""

    pid: int
    code: int | None
    stderr: str
    """The last ``TAIL`` lines of its stderr file."""
    path: Path

    def describe(self) -> str:
        lines = self.stderr.rstrip("\n").splitlines() or ["(nothing on stderr)"]
        return (
            f"worker pid {self.pid} exited with code {self.code} ({self.path}); last "
            "lines of its stderr:\n" + "\n".join(f"    {line}" for line in lines)
        )


TAIL = 20
"""Lines of a worker's stderr an unexpected exit reports."""

MAX_REPLACED = 20
"""Unexpected exits replaced by a fresh worker; past that (a worker that cannot start at all)
none is started, and the soak ends once no worker is left."""


class Workers:
    """The soak's worker processes, each with its stderr in a file of its own in ``folder``.
    A worker that exits on its own (not killed by the chaos, not stopped) is recorded in
    ``exits`` and replaced, so the soak keeps its worker count."""

    def __init__(
        self, target: Target, queue: str, ledger: Path, folder: Path, work: float = 0.0
    ) -> None:
        self.target, self.queue, self.ledger, self.folder = target, queue, ledger, folder
        self.work = work
        self.procs: list[asyncio.subprocess.Process] = []
        self.paths: dict[int, Path] = {}
        self.host_of: dict[int, int] = {}
        """The test host each worker runs on (none without test hosts)."""
        self.exits: list[Exit] = []
        self.killed: set[int] = set()
        """Processes the soak killed or stopped: their exits are expected."""
        self.started = asyncio.Event()
        """Set at every start (``wait_live`` waits on it)."""
        self._watches: list[asyncio.Task[None]] = []
        self._stopping = False
        folder.mkdir(parents=True, exist_ok=True)

    async def start(self) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RELAYMQ_SOAK_LEDGER": str(self.ledger),
            "RELAYMQ_SOAK_WORK": str(self.work),
            "RELAYMQ_LOG_LEVEL": "WARNING",
        }
        path = self.folder / f"worker-{len(self.procs):04d}.stderr"
        inside, url, host = [], self.target.url, 0
        if (network := self.target.network) is not None:  # the hosts in turn
            host = len(self.procs) % network.hosts.workers + 1
            inside, url = network.hosts.inside(host), network.url_on(host)
        with path.open("wb") as stderr:  # the child holds its own copy of the descriptor
            proc = await asyncio.create_subprocess_exec(
                *inside,  # ip netns exec: the same process, in the host's namespace
                sys.executable,
                "-m",
                self.target.worker_module,
                url,
                self.queue,
                str(self.target.stalled_threshold),
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        self.procs.append(proc)
        self.paths[proc.pid] = path
        if host:
            self.host_of[proc.pid] = host
        self._watches.append(asyncio.create_task(self._watch(proc)))
        self.started.set()
        return proc

    def kill(self, proc: asyncio.subprocess.Process) -> None:
        """SIGKILL ``proc``: an exit the chaos causes."""
        self.killed.add(proc.pid)
        proc.kill()

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self._stopping or proc.pid in self.killed:
            return
        path = self.paths[proc.pid]
        tail = "\n".join(path.read_text(errors="replace").splitlines()[-TAIL:])
        gone = Exit(proc.pid, code, tail, path)
        self.exits.append(gone)
        print(f"soak: {gone.describe()}", file=sys.stderr, flush=True)
        if len(self.exits) <= MAX_REPLACED:
            await self.start()

    def live(self) -> list[asyncio.subprocess.Process]:
        return [p for p in self.procs if p.returncode is None]

    def waited(self) -> int:
        """How many workers logged that they waited for the server at start."""
        texts = [path.read_text(errors="replace") for path in self.paths.values()]
        return sum("waiting for" in text for text in texts)

    async def wait_live(self, within: float) -> list[asyncio.subprocess.Process]:
        """The live workers, once there is one (a replacement may be starting); an empty list
        when none came within ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                while not self.live():
                    self.started.clear()
                    await self.started.wait()
        except TimeoutError:
            return []
        return self.live()

    async def stop(self) -> None:
        self._stopping = True
        for p in self.live():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                await asyncio.wait_for(p.wait(), 20)
            except TimeoutError:
                p.kill()
                await p.wait()
        for w in self._watches:
            w.cancel()
        await asyncio.gather(*self._watches, return_exceptions=True)
