"""Command definitions. Thin: each command calls the public API and prints the answer."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import fields
from importlib.metadata import version
from typing import Any

import click

from relaymq.backends import from_url
from relaymq.backends.base import Backend
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.cli.common import (
    LOOPS,
    ConfigProblem,
    Duration,
    Unreachable,
    backend_option,
    connect_waiting,
    json_option,
    loop_factory,
    run,
    settings_from_env,
    with_backend,
)
from relaymq.cli.dashboard import dashboard
from relaymq.cli.dlq import dlq_group
from relaymq.cli.jobs import job_group
from relaymq.cli.logs import (
    JSONFormatter,
    PlainFormatter,
    quiet_client_libraries,
    route_warnings,
)
from relaymq.cli.queues import queue_group
from relaymq.cli.schedules import schedule_group
from relaymq.cli.workers import stats, workers
from relaymq.errors import ConfigError
from relaymq.options import validate_queue_name
from relaymq.settings import Settings
from relaymq.task import REGISTRY, Task
from relaymq.worker import Worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version("relaymq"), "--version", prog_name="relaymq")
@click.option("--log-level", envvar="RELAYMQ_LOG_LEVEL", default="INFO", show_envvar=True,
              show_default=True, type=click.Choice(LOG_LEVELS, case_sensitive=False))  # fmt: skip
@click.option("--log-format", envvar="RELAYMQ_LOG_FORMAT", default="plain", show_envvar=True,
              show_default=True, type=click.Choice(("plain", "json")),
              help="plain: one line per record; json: one object per line.")  # fmt: skip
def cli(log_level: str, log_format: str) -> None:
    """relaymq: an at-least-once job queue for asyncio Python."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if log_format == "json" else PlainFormatter())
    logging.basicConfig(level=log_level.upper(), handlers=[handler], force=True)
    route_warnings()
    quiet_client_libraries(log_level)


# -- worker ---------------------------------------------------------------------------------


def _settings_epilog() -> str:
    names = ", ".join(f"RELAYMQ_{f.name.upper()}" for f in fields(Settings))
    return f"Every worker setting also comes from the environment: {names}."


@cli.command(epilog=_settings_epilog())
@click.argument("module")
@click.option("--queue", "-q", "queues", multiple=True, envvar="RELAYMQ_QUEUES",
              show_envvar=True,
              help="Queue to work (repeatable; default: its tasks' queues).")  # fmt: skip
@click.option("--concurrency", "-c", type=click.IntRange(1, 100_000),
              envvar="RELAYMQ_CONCURRENCY", show_envvar=True,
              help="Jobs run at once (default 10).")  # fmt: skip
@click.option("--worker-id", envvar="RELAYMQ_WORKER_ID", show_envvar=True,
              help="Worker id (default host:pid:random).")  # fmt: skip
@click.option("--metrics-port", type=click.IntRange(1, 65535), envvar="RELAYMQ_METRICS_PORT",
              show_envvar=True,
              help="Serve Prometheus metrics at :PORT/metrics (relaymq[metrics]).")  # fmt: skip
@click.option("--loop", type=click.Choice(LOOPS), default="auto", envvar="RELAYMQ_LOOP",
              show_default=True, show_envvar=True,
              help="Event loop: uvloop's (faster) when installed, or either one.")  # fmt: skip
@click.option("--connect-timeout", type=Duration(), envvar="RELAYMQ_CONNECT_TIMEOUT",
              show_envvar=True,
              help="Seconds to wait for a backend that cannot be reached yet at start "
              "(default 60; 0: exit at once).")  # fmt: skip
@backend_option
def worker(
    module: str, queues: tuple[str, ...], concurrency: int | None, worker_id: str | None,
    metrics_port: int | None, loop: str, connect_timeout: float | None, backend: str,
) -> None:  # fmt: skip
    """Import MODULE (which defines @task functions, schedules and limits) and work its
    queues, or only those named with -q, until SIGTERM/SIGINT."""
    new_loop = loop_factory(loop)
    settings = settings_from_env(
        backend=backend, concurrency=concurrency, connect_timeout=connect_timeout
    )
    for name in queues:
        try:
            validate_queue_name(name)
        except ConfigError as e:
            raise ConfigProblem(str(e)) from e
    found = import_tasks(module)
    names = list(queues) or queues_of(module, found)
    run(lambda: _work(settings, names, worker_id, metrics_port), new_loop)


def discover_queues(module_name: str) -> list[str]:
    """Import ``module_name``; the queues of its tasks (``queues_of``)."""
    return queues_of(module_name, import_tasks(module_name))


def queues_of(module_name: str, found: list[Task[Any, Any]]) -> list[str]:
    """The queues of ``found``; a configuration error when there are none."""
    names = sorted({t.options.queue for t in found})
    if not names:
        raise ConfigProblem(f"{module_name} defines no @task; name queues with -q")
    return names


def import_tasks(module_name: str) -> list[Task[Any, Any]]:
    """Import ``module_name`` with the working directory on ``sys.path``, as a worker always
    does first (its tasks, schedules and limits are then defined); the tasks that importing it
    registered (whatever their names) and those it holds as attributes (re-exported ones too).

    A module that does not import is one line naming the file and line of the failure."""
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        dotted = module_name.removesuffix(".py").strip("/").replace(os.sep, ".")
        dotted = dotted.replace("/", ".")
        raise ConfigProblem(f"MODULE is a module's dotted name, not a file: try {dotted!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    known = set(REGISTRY)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        problem = _import_failure(module_name, e)
        raise ConfigProblem(f"cannot import {module_name!r}: {problem}") from None
    found = [t for name, t in REGISTRY.items() if name not in known]
    found += [t for t in vars(module).values() if isinstance(t, Task)]
    found += [t for t in REGISTRY.values() if t.name.startswith(module_name + ":")]
    return list({id(t): t for t in found}.values())


def _import_failure(module_name: str, e: Exception) -> str:
    """What went wrong importing ``module_name``, with the file and line, in one line."""
    if isinstance(e, ModuleNotFoundError) and f"{module_name}.".startswith(f"{e.name}."):
        return f"no module named {e.name!r} (looked in {os.getcwd()} and sys.path)"
    if isinstance(e, SyntaxError):
        where = f"{e.filename}, line {e.lineno}"
        return f"{type(e).__name__}: {e.msg} ({where})"
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith("<frozen")]  # fmt: skip
    message = " ".join(str(e).split())
    text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    if frames:
        text += f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return text


async def _work(
    settings: Settings, queues: list[str], worker_id: str | None, metrics_port: int | None
) -> None:
    backend = await connect_waiting(settings.backend, settings.connect_timeout)
    try:
        stop_metrics = await _serve_metrics(backend, queues, metrics_port)
    except BaseException:
        await backend.close()
        raise
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
        stop_metrics()
        await backend.close()


async def _serve_metrics(
    backend: Backend, queues: list[str], port: int | None
) -> Callable[[], None]:
    """Count this process's work and serve it, with the queues' gauges, on ``port``; returns
    what stops serving (nothing to stop without a port)."""
    if port is None:
        return lambda: None
    try:
        from relaymq.metrics import process_metrics
    except ImportError as e:
        raise ConfigError(f"--metrics-port: {e}") from e
    metrics = process_metrics().install()
    metrics.watch(backend, queues)
    await metrics.refresh()  # the gauges learn the loop they are read on
    try:
        server = metrics.serve(port)
    except OSError as e:
        metrics.uninstall()
        raise ConfigError(f"cannot serve metrics on port {port}: {e}") from e
    logging.getLogger("relaymq").info("metrics at http://0.0.0.0:%d/metrics", port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        metrics.uninstall()

    return stop


@cli.command("migrate")
@backend_option
def migrate(backend: str) -> None:
    """Apply pending schema migrations, or create a new SQLite database (SQLite upgrades an
    existing one on connect; the other backends prepare their storage themselves)."""
    click.echo(run(lambda: _migrate(backend)))


async def _migrate(url: str) -> str:
    """What ``migrate`` did, in words. The backend says through its capabilities whether it
    has versioned migrations (applied without ``connect``); a SQLite file that does not exist
    is created, with its schema, by connecting with ``create_missing``."""
    b = from_url(url)
    if b.capabilities.migrations:
        applied = await b.migrate()
        return "\n".join(f"applied {name}" for name in applied) or "schema is up to date"
    if isinstance(b, SQLiteBackend):
        created = not await asyncio.to_thread(os.path.exists, b.path)
        b.create_missing = True
        try:
            await b.connect()
        finally:
            await b.close()
        where = await asyncio.to_thread(os.path.abspath, b.path)
        return f"created {where}" if created else f"{where}: schema is up to date"
    return f"{url}: nothing to migrate (this backend prepares its storage itself)"


@cli.command("demo")
@click.option("--jobs", default=2000, show_default=True, envvar="RELAYMQ_DEMO_JOBS",
              show_envvar=True, help="How many jobs to enqueue.")  # fmt: skip
@click.option("--keep", is_flag=True, envvar="RELAYMQ_DEMO_KEEP", show_envvar=True,
              help="Keep the temporary folder (database, ledgers).")  # fmt: skip
def demo(jobs: int, keep: bool) -> None:
    """Two worker processes on SQLite, one SIGKILLed mid-run; prove nothing is lost."""
    from relaymq.demo.run import run_demo

    code = run_demo(jobs=jobs, keep=keep)
    if code:
        raise click.exceptions.Exit(code)


for command in (queue_group, job_group, dlq_group, schedule_group, workers, stats, dashboard):
    cli.add_command(command)

__all__ = ["ConfigProblem", "Unreachable", "backend_option", "json_option", "run", "with_backend"]
