"""Shared plumbing for the peer benchmark scripts (standard library only).

Each ``<peer>_bench.py`` runs inside that peer's own virtualenv and imports
this module from its own directory.  The workload is fixed:

* N no-op jobs enqueued in bulk by this (driver) process,
* one worker process, started by the driver, with concurrency 10,
* enqueue jobs/s   = N / (time to enqueue all N jobs),
* end-to-end jobs/s = N / (time from the start of the enqueue until the
  driver observes, by polling the peer's own count API at most every 20 ms,
  that the last job has completed).

Before the clock starts, one warm-up job is enqueued and waited for: that
proves the worker is up and connected, so worker start-up time is not
measured.  A watchdog thread enforces a hard deadline: if the run does not
finish in time the worker is killed and the script exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

CONCURRENCY = 10
POLL_INTERVAL_S = 0.02  # never poll the peer more often than this
DEFAULT_DEADLINE_S = 120.0
WORKER_STOP_GRACE_S = 5.0

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_POSTGRES_DB = "relaymq_bench_peer"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"

# Every key, queue, table or database name we create starts with this.
PREFIX = "relaymq_bench_peer"


class BenchError(RuntimeError):
    """A benchmark run failed; the message says why."""


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="number of no-op jobs (default depends on peer/backend)",
    )
    p.add_argument("--url", default=None, help="server URL (default depends on backend)")
    p.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_S,
        help="hard limit in seconds for the whole run (default %(default)s)",
    )
    p.add_argument(
        "--workload",
        choices=("noop", "side-effect"),
        default="noop",
        help="side-effect: each job's handler makes one Redis call (INCR), see SIDE_URL_ENV",
    )
    p.add_argument(
        "--single",
        action="store_true",
        help="enqueue one job per call (what a web request does), not in bulk",
    )
    # Internal: the same script is re-executed as the worker process.
    p.add_argument("--role", choices=("driver", "worker"), default="driver", help=argparse.SUPPRESS)
    return p


SIDE_URL_ENV = "RELAYMQ_BENCH_SIDE_URL"
"""The Redis a side-effect handler INCRs (``SIDE_KEY``), the same for relaymq and every peer."""
SIDE_KEY_ENV = "RELAYMQ_BENCH_SIDE_KEY"
"""The key it INCRs: ``SideEffect`` gives every run one of its own, ``SIDE_KEY:<run id>``."""
SIDE_KEY = "relaymq_bench:side"
DEFAULT_SIDE_URL = "redis://127.0.0.1:6379/0"


def side_url() -> str:
    return os.environ.get(SIDE_URL_ENV, DEFAULT_SIDE_URL)


def side_key() -> str:
    """The key a side-effect handler INCRs (read by the worker process, set by the driver)."""
    return os.environ.get(SIDE_KEY_ENV, SIDE_KEY)


class SideEffect:
    """The driver's half of ``--workload side-effect``.

    Made before the worker starts: it puts a key of this run's own into the environment
    (``SIDE_KEY_ENV``; ``Worker`` passes the environment on), so runs never share a counter.
    ``count()`` before the clock and ``check(before + jobs)`` after it prove that every job's
    handler really made its Redis call, exactly once; ``cleanup()`` deletes the key (the side
    Redis is db 0 by default, which is never flushed).  With ``noop`` all of it does nothing.
    redis-py is imported only here, so this module stays standard-library-only otherwise.
    """

    def __init__(self, workload: str) -> None:
        self.enabled = workload == "side-effect"
        self.key = f"{SIDE_KEY}:{os.getpid()}-{time.time_ns()}"
        self._client: Any = None
        if self.enabled:
            os.environ[SIDE_URL_ENV] = side_url()
            os.environ[SIDE_KEY_ENV] = self.key

    def _redis(self) -> Any:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(side_url())
        return self._client

    def count(self) -> int:
        return int(self._redis().get(self.key) or 0) if self.enabled else 0

    def check(self, expected: int) -> None:
        if self.enabled and (got := self.count()) != expected:
            raise BenchError(f"side-effect key {self.key} is {got}, expected {expected}")

    def cleanup(self) -> None:
        if self.enabled:
            self._redis().delete(self.key)
            self._client.close()
            self._client = None


def redis_db_url(url: str) -> str:
    """Check that a Redis URL names a dedicated, non-zero database we may flush."""
    parts = urlsplit(url)
    db_text = parts.path.lstrip("/") or "0"
    if not db_text.isdigit():
        raise BenchError(f"cannot read a Redis db number from {url!r}")
    if int(db_text) == 0:
        raise BenchError(
            f"refusing to use Redis db 0 ({url!r}): it gets flushed; pass a dedicated db, e.g. /9"
        )
    return url


def postgres_url_for_db(server_url: str, dbname: str) -> str:
    """The same server URL, pointing at database ``dbname``."""
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, user + system CPU seconds) of every live process."""
    out: dict[int, tuple[int, str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:  # ended meanwhile
            continue
        fields = tail.split()
        out[int(entry)] = (
            int(fields[1]),
            head.split("(", 1)[1],
            (int(fields[11]) + int(fields[12])) / tick,
        )
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live descendants (/proc; Linux).

    The worker's own cost per job: unlike jobs/s it barely moves when other processes share
    the cores. Read it before and after the measured span."""
    processes = _processes()
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += processes[p][2] if p in processes else 0.0
        todo += children.get(p, [])
    return total


def named_cpu_seconds(name: str) -> float:
    """User + system CPU seconds of the live processes called ``name`` ("postgres",
    "redis-server"): a local server's share of a run, if nothing else uses that server meanwhile
    and its connections stay open until the second reading (a process that ended is not counted)."""
    return sum(seconds for _, command, seconds in _processes().values() if command == name)


class Calls:
    """One timed loop of calls: ``start()`` before it, ``stop(calls)`` after. ``runs`` keeps
    (calls/s, this process's CPU us per call, ``server``'s CPU us per call) of each loop, the
    split of a call's cost that ``single_enqueue.py`` and the peers' ``--enqueue-only`` print."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.runs: list[tuple[float, float, float]] = []
        self._at = (0.0, 0.0, 0.0)

    def start(self) -> None:
        self._at = (time.perf_counter(), time.process_time(), named_cpu_seconds(self.server))

    def stop(self, calls: int) -> None:
        wall, cpu, served = self._at
        self.runs.append(
            (
                calls / (time.perf_counter() - wall),
                (time.process_time() - cpu) / calls * 1e6,
                (named_cpu_seconds(self.server) - served) / calls * 1e6,
            )
        )

    def summary(self) -> str:
        """The median run (by calls/s) and every run."""
        rate, cpu, served = sorted(self.runs)[len(self.runs) // 2]
        each = ", ".join(f"{r:,.0f}/s {c:.0f}+{s:.0f} us" for r, c, s in self.runs)
        return (
            f"{rate:,.0f} calls/s, client CPU {cpu:.0f} us, {self.server} CPU {served:.0f} us "
            f"per call (median of {len(self.runs)} by calls/s; runs: {each})"
        )


def machine_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of every core since boot (/proc/stat; Linux). Two readings give
    how many cores were busy in between (``busy_cores``), whoever kept them busy."""
    with open("/proc/stat") as f:
        ticks = [int(t) for t in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


def busy_cores(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Cores busy on average between two ``machine_ticks`` readings."""
    spent = after[1] - before[1]
    return (after[0] - before[0]) / spent * (os.cpu_count() or 1) if spent else 0.0


def emit_result(
    peer: str,
    version: str,
    backend: str,
    jobs: int,
    enqueue_s: float,
    e2e_s: float,
    worker_cpu_s: float | None = None,
) -> None:
    """Print the one JSON line that run.py reads."""
    line = {
        "peer": peer,
        "version": version,
        "backend": backend,
        "jobs": jobs,
        "enqueue_per_s": round(jobs / enqueue_s, 1),
        "e2e_per_s": round(jobs / e2e_s, 1),
        "enqueue_s": round(enqueue_s, 4),
        "e2e_s": round(e2e_s, 4),
    }
    if worker_cpu_s is not None:
        line["worker_cpu_us_per_job"] = round(worker_cpu_s / jobs * 1e6, 1)
    print(json.dumps(line), flush=True)


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


class Worker:
    """The peer's worker, run as a child process of the driver.

    Output goes to a log file in a temporary directory; the tail of that log
    is shown if the run fails.  ``stop()`` sends SIGTERM, then SIGKILL after a
    grace period.  The child stays in the driver's process group, so run.py
    can also kill both at once (it starts every bench script in a new
    session).
    """

    def __init__(
        self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None
    ) -> None:
        self.argv = list(argv)
        self._tmpdir = tempfile.mkdtemp(prefix=PREFIX + "_")
        self.log_path = os.path.join(self._tmpdir, "worker.log")
        self._log: IO[bytes] = open(self.log_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
        )

    def cpu(self) -> float:
        """CPU seconds the worker (and any process it started) used so far."""
        return cpu_seconds(self.proc.pid)

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise BenchError(f"worker exited early with code {code}\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            self._log.flush()
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no worker log)"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- worker log tail ({self.log_path}) ---\n{tail}"

    def kill_now(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    def stop(self, keep_log: bool = False) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=WORKER_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WORKER_STOP_GRACE_S)
            except ProcessLookupError:
                pass
        self._log.close()
        if not keep_log:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


class Watchdog:
    """Hard deadline: after ``seconds``, kill the worker and exit with code 3."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.worker: Worker | None = None
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._timer.start()
        return self

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        fail(f"{self.what}: not done within the {self.seconds:g} s deadline; killing the worker")
        if self.worker is not None:
            print(self.worker.log_tail(), file=sys.stderr, flush=True)
            self.worker.kill_now()
        sys.stderr.flush()
        os._exit(3)


def wait_until(done: Callable[[], bool], worker: Worker, timeout: float, what: str) -> float:
    """Poll ``done()`` every POLL_INTERVAL_S until true; return the perf_counter()
    time at which it was first seen true."""
    limit = time.perf_counter() + timeout
    while True:
        if done():
            return time.perf_counter()
        worker.check_alive()
        if time.perf_counter() > limit:
            raise BenchError(
                f"timed out after {timeout:g} s waiting for {what}\n{worker.log_tail()}"
            )
        time.sleep(POLL_INTERVAL_S)


async def await_until(
    done: Callable[[], Awaitable[bool]], worker: Worker, timeout: float, what: str
) -> float:
    """Async twin of ``wait_until``."""
    import asyncio

    limit = time.perf_counter() + timeout
    while True:
        if await done():
            return time.perf_counter()
        worker.check_alive()
        if time.perf_counter() > limit:
            raise BenchError(
                f"timed out after {timeout:g} s waiting for {what}\n{worker.log_tail()}"
            )
        await asyncio.sleep(POLL_INTERVAL_S)


def self_worker_argv(script: str, argv: Sequence[str]) -> list[str]:
    """Command line that re-runs ``script`` (with this interpreter) as the worker."""
    return [sys.executable, os.path.abspath(script), *argv, "--role", "worker"]


def run_main(main: Callable[[], Any]) -> None:
    """Run a bench ``main`` and turn BenchError into a message and exit code 2."""
    try:
        main()
    except BenchError as exc:
        fail(str(exc))
        sys.exit(2)


def run_roles(
    args: Any,
    work: Callable[[Any], Awaitable[None]],
    drive: Callable[[Any, Watchdog], Awaitable[None]],
    label: str,
) -> None:
    """The body of an asyncio bench script's ``main``: ``work`` in the worker process (the
    script re-run with ``--role worker``), else ``drive`` under a watchdog named ``label``."""
    import asyncio

    if args.role == "worker":
        asyncio.run(work(args))
        return
    watchdog = Watchdog(args.deadline, label).start()
    try:
        asyncio.run(drive(args, watchdog))
    finally:
        watchdog.cancel()
