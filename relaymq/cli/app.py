"""Command definitions. Thin: each command calls the public API and prints the answer."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
import orjson
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from relaymq.backends import connect, from_url
from relaymq.backends.base import Backend
from relaymq.errors import RelayError
from relaymq.job import JobState
from relaymq.queue import Queue
from relaymq.settings import DEFAULT_BACKEND_URL, Settings
from relaymq.task import REGISTRY
from relaymq.worker import Worker

T = TypeVar("T")
console = Console(stderr=True)

backend_option = click.option(
    "--backend", "-b", envvar="RELAYMQ_BACKEND", default=DEFAULT_BACKEND_URL, show_default=True,
    show_envvar=True, help="Backend URL: memory://, sqlite:///path.db, redis://, postgresql://...",
)  # fmt: skip
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", envvar="RELAYMQ_LOG_LEVEL", default="INFO", show_envvar=True)
def cli(log_level: str) -> None:
    """relaymq: an at-least-once job queue for asyncio Python."""
    logging.basicConfig(
        level=log_level.upper(), format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )  # fmt: skip


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; relaymq errors become a clear message and exit code 2."""
    try:
        return asyncio.run(factory())  # type: ignore[arg-type]
    except RelayError as e:
        raise click.ClickException(str(e)) from e


async def with_backend(url: str, fn: Callable[[Backend], Awaitable[T]]) -> T:
    backend = await connect(url)
    try:
        return await fn(backend)
    finally:
        await backend.close()


# -- worker ---------------------------------------------------------------------------------


@cli.command()
@click.argument("module")
@click.option("--queue", "-q", "queues", multiple=True, envvar="RELAYMQ_QUEUES",
              show_envvar=True,
              help="Queue to work (repeatable; default: its tasks' queues).")  # fmt: skip
@click.option("--concurrency", "-c", type=int, envvar="RELAYMQ_CONCURRENCY", show_envvar=True,
              help="Jobs run at once (default 10).")  # fmt: skip
@click.option("--worker-id", envvar="RELAYMQ_WORKER_ID", show_envvar=True,
              help="Worker id (default host:pid:random).")  # fmt: skip
@backend_option
def worker(
    module: str, queues: tuple[str, ...], concurrency: int | None, worker_id: str | None,
    backend: str,
) -> None:  # fmt: skip
    """Import MODULE (which defines @task functions) and work its queues until SIGTERM/SIGINT.

    Settings come from RELAYMQ_* variables: RELAYMQ_STALLED_THRESHOLD,
    RELAYMQ_HEARTBEAT_INTERVAL, RELAYMQ_STALLED_CHECK_INTERVAL, RELAYMQ_SHUTDOWN_TIMEOUT,
    RELAYMQ_MAX_STALLED, RELAYMQ_ENABLE_STALLED_CHECK.
    """
    sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise click.ClickException(f"cannot import {module!r}: {e}") from e
    names = list(queues) or sorted({t.options.queue for t in REGISTRY.values()
                                    if t.name.startswith(module + ":")})  # fmt: skip
    if not names:
        raise click.ClickException(f"{module} defines no @task; name queues with -q")
    settings = Settings.from_env(backend=backend, concurrency=concurrency)
    run(lambda: _work(settings, names, worker_id))


async def _work(settings: Settings, queues: list[str], worker_id: str | None) -> None:
    backend = await connect(settings.backend)
    w = Worker(backend, queues, settings=settings, worker_id=worker_id)
    loop = asyncio.get_running_loop()
    stops = 0

    def on_signal() -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            logging.getLogger("relaymq").info("stopping: finishing running jobs (again: now)")
            w.stop()
        else:
            w.stop(now=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await w.run()
    finally:
        await backend.close()


# -- observation ----------------------------------------------------------------------------


@cli.command("stats")
@backend_option
@json_option
def stats(backend: str, as_json: bool) -> None:
    """Jobs per state in every queue."""

    async def collect(b: Backend) -> dict[str, dict[JobState, int]]:
        return {name: await Queue(name, b).counts() for name in await b.list_queues()}

    counts = run(lambda: with_backend(backend, collect))
    if as_json:
        click.echo(orjson.dumps({q: {s.value: n for s, n in c.items()} for q, c in counts.items()}))
        return
    table = Table("queue", *(s.value for s in JobState))
    for name, c in counts.items():
        table.add_row(name, *(str(c[s]) for s in JobState))
    Console().print(table)


@cli.command("migrate")
@backend_option
def migrate(backend: str) -> None:
    """Apply pending schema migrations (backends without versioned migrations, such as
    SQLite, prepare their storage on connect)."""
    applied = run(lambda: _migrate(backend))
    if applied is None:
        click.echo(f"{backend}: nothing to migrate (this backend prepares its storage itself)")
        return
    click.echo("\n".join(f"applied {name}" for name in applied) or "schema is up to date")


async def _migrate(url: str) -> list[str] | None:
    """The migrations applied now; None when the backend has no versioned migrations.

    The backend says so through its capabilities; ``migrate`` needs no connection."""
    b = from_url(url)
    if not b.capabilities.migrations:
        return None
    return await b.migrate()


@cli.command("demo")
@click.option("--jobs", default=2000, show_default=True, help="How many jobs to enqueue.")
@click.option("--keep", is_flag=True, help="Keep the temporary folder (database, ledgers).")
def demo(jobs: int, keep: bool) -> None:
    """Two worker processes on SQLite, one SIGKILLed mid-run; prove nothing is lost."""
    from relaymq.demo.run import run_demo

    code = run_demo(jobs=jobs, keep=keep)
    if code:
        raise click.exceptions.Exit(code)
