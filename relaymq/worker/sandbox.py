"""Sandboxed handlers: ``@task(sandbox=True)`` runs each attempt in a child process.

Unlike a thread, a child process can be stopped for real: a timeout, a cancel, a lost claim or
the worker's shutdown kills it (SIGKILL), and a crash of the handler (a segfault, ``os._exit``,
a child killed from outside) ends only the child. The worker then settles the job as it would
for an async handler stopped the same way, and a crash fails or retries the attempt with an
error naming the exit code or signal.

Children are new interpreters (``python -c``, not a fork: the worker has threads and an event
loop, which a fork would copy half-way; not ``multiprocessing``'s spawn either, which imports the
worker's main script again, guard or not), one per slot at most, started on first need and kept
for the next sandboxed job; a child that was killed or crashed is replaced. A child imports
the module the worker's task came from (so the task must live in an importable module) and
finds the task there by name, and dies with the worker (``PR_SET_PDEATHSIG`` on Linux;
elsewhere it ends when its pipe closes).

Arguments, results and progress values cross the pipe pickled; the job's own serializer still
decodes the arguments and encodes the result in the worker. ``JobContext.progress`` works in a
sandbox; ``JobContext.cancelled`` is always False there (the child is killed instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("relaymq.worker")

PR_SET_PDEATHSIG = 1
_CHILD = "import sys; from relaymq.worker.sandbox import child; child(int(sys.argv[1]))"


class SandboxFailed(Exception):
    """The sandboxed attempt failed: ``str(e)`` is the error to store (the handler's own
    traceback from the child, or how the child died)."""


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def child(fd: int) -> None:
    """The child's main: run one job per message on the pipe ``fd`` until it closes."""
    _die_with_parent()
    conn = Connection(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the worker's to handle
    from relaymq.app import default_app
    from relaymq.job import describe
    from relaymq.task import JobContext

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    while True:
        try:
            name, module, args, kwargs, context = conn.recv()
        except (EOFError, OSError):
            return
        try:
            # the worker's own task: it had it registered (on the default app, or under its
            # import path on another)
            t = default_app().import_task(name, module)
            if context is not None:
                job_id, queue, task_name, attempt, results, failed = context
                ctx = JobContext(
                    job_id,
                    queue,
                    task_name,
                    attempt,
                    lambda value: conn.send(("progress", value)),
                    results,
                    failed,
                )
                args = [ctx, *args]
            if t.is_async:  # one event loop for the child's life, as a worker has
                value = loop.run_until_complete(t.fn(*args, **kwargs))
            else:
                value = t.fn(*args, **kwargs)
            reply: tuple[str, Any] = ("ok", value)
        except BaseException as e:  # the handler's failure, SystemExit included, is the job's
            reply = ("error", describe(e))
        try:
            conn.send(reply)
        except Exception as e:  # an unpicklable result
            conn.send(("error", f"the result cannot be sent back from the sandbox: {e!r}"))


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the sandboxed handler's process died with {name} (exit code {exitcode})"
    return f"the sandboxed handler's process exited with code {exitcode} before it answered"


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Child:
    def __init__(self) -> None:
        self.conn, theirs = Pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or "." for p in sys.path)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()

    @property
    def pid(self) -> int:
        return self.process.pid

    async def receive(self) -> tuple[str, Any]:
        """The child's next message; ``SandboxFailed`` when it died instead."""
        loop = asyncio.get_running_loop()
        fd = self.conn.fileno()
        while not self.conn.poll():
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _set, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
        try:
            message: tuple[str, Any] = self.conn.recv()
        except (EOFError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self.process.wait, 5.0)
            raise SandboxFailed(_death(self.process.returncode)) from None
        return message

    def kill(self) -> None:
        """Kill the child now; it is reaped in the background."""
        with contextlib.suppress(Exception):
            self.process.kill()
        self.conn.close()
        with contextlib.suppress(RuntimeError):  # no running loop: left to the OS
            asyncio.get_running_loop().run_in_executor(None, self._reap)

    def _reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5.0)


class Sandbox:
    """The worker's child processes for sandboxed tasks: at most ``size`` at once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()

    async def run(
        self,
        task: str,
        module: str,
        args: list[Any],
        kwargs: dict[str, Any],
        context: tuple[str, str, str, int, dict[str, Any], dict[str, str]] | None,
        progress: Callable[[Any], None],
    ) -> Any:
        """Run one attempt of ``task`` (defined in ``module``) in a child; its value. Raises
        ``SandboxFailed`` when the handler raised or its process died; a cancel (or a timeout
        around this call) kills the child."""
        # Started on the loop's thread: the child dies with the thread that made it (Linux)
        child = self._idle.pop() if self._idle else _Child()
        self._busy.add(child)
        reusable = False
        try:
            child.conn.send((task, module, args, kwargs, context))
            while True:
                kind, value = await child.receive()
                if kind == "progress":
                    progress(value)
                    continue
                reusable = True
                if kind == "ok":
                    return value
                raise SandboxFailed(value)
        finally:
            self._busy.discard(child)
            if reusable and len(self._idle) < self.size:
                self._idle.append(child)
            else:
                child.kill()

    def close(self) -> None:
        """Kill every child (the worker is stopping)."""
        for child in [*self._idle, *self._busy]:
            child.kill()
        self._idle.clear()
        self._busy.clear()

    def pids(self) -> list[int]:
        """The children's process ids, idle and busy."""
        return [c.pid for c in [*self._idle, *self._busy]]
