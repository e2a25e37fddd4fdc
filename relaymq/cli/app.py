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

from relaymq.app import App, default_app
from relaymq.backends import from_url
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
    with_app,
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
from relaymq.task import Task
from relaymq.worker import Worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version("relaymq"), "--version", prog_name="relaymq")
@click.option(
    "--log-level",
    envvar="RELAYMQ_LOG_LEVEL",
    default="INFO",
    show_envvar=True,
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
)
@click.option(
    "--log-format",
    envvar="RELAYMQ_LOG_FORMAT",
    default="plain",
    show_envvar=True,
    show_default=True,
    type=click.Choice(("plain", "json")),
    help="plain: one line per record; json: one object per line.",
)
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
@click.argument("module", required=False)
@click.option(
    "--app",
    "-A",
    "app_path",
    envvar="RELAYMQ_APP",
    show_envvar=True,
    help="MODULE:NAME of the relaymq.App to work (default: MODULE's only App, "
    "else the default app of @relaymq.task).",
)
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    envvar="RELAYMQ_QUEUES",
    show_envvar=True,
    help="Queue to work (repeatable; default: its tasks' queues).",
)
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 100_000),
    envvar="RELAYMQ_CONCURRENCY",
    show_envvar=True,
    help="Jobs run at once (default 10).",
)
@click.option(
    "--worker-id",
    envvar="RELAYMQ_WORKER_ID",
    show_envvar=True,
    help="Worker id (default host:pid:random).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    envvar="RELAYMQ_METRICS_PORT",
    show_envvar=True,
    help="Serve Prometheus metrics at :PORT/metrics (relaymq[metrics]).",
)
@click.option(
    "--loop",
    type=click.Choice(LOOPS),
    default="auto",
    envvar="RELAYMQ_LOOP",
    show_default=True,
    show_envvar=True,
    help="Event loop: uvloop's (faster) when installed, or either one.",
)
@click.option(
    "--connect-timeout",
    type=Duration(),
    envvar="RELAYMQ_CONNECT_TIMEOUT",
    show_envvar=True,
    help="Seconds to wait for a backend that cannot be reached yet at start "
    "(default 60; 0: exit at once).",
)
@backend_option
def worker(
    module: str | None,
    app_path: str | None,
    queues: tuple[str, ...],
    concurrency: int | None,
    worker_id: str | None,
    metrics_port: int | None,
    loop: str,
    connect_timeout: float | None,
    backend: str,
) -> None:
    """Import MODULE (which declares tasks, schedules and limits on its app) and work its
    queues, or only those named with -q, until SIGTERM/SIGINT. MODULE:NAME (or -A) names the
    app; MODULE alone works its only relaymq.App, or the default app of @relaymq.task."""
    if app_path is not None and module is not None and module != app_path.partition(":")[0]:
        raise ConfigProblem(f"give MODULE or --app, not both ({module!r}, {app_path!r})")
    target = app_path or module
    if target is None:
        raise ConfigProblem("name the MODULE to work (or --app MODULE:NAME)")
    new_loop = loop_factory(loop)
    module_name, _, app_name = target.partition(":")
    for name in queues:
        try:
            validate_queue_name(name)
        except ConfigError as e:
            raise ConfigProblem(str(e)) from e
    app, found = import_app(module_name, app_name or None)
    if app.url and click.get_current_context().get_parameter_source("backend") in (
        click.core.ParameterSource.DEFAULT,
        None,
    ):
        backend = app.url  # the app's own URL, unless --backend or RELAYMQ_BACKEND says
    settings = settings_from_env(
        backend=backend, concurrency=concurrency, connect_timeout=connect_timeout
    )
    names = list(queues) or queues_of(module_name, found)
    run(lambda: _work(app, settings, names, worker_id, metrics_port), new_loop)


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
    """The tasks of ``module_name``'s app, importing it (``import_app``)."""
    return import_app(module_name)[1]


def import_app(module_name: str, app_name: str | None = None) -> tuple[App, list[Task[Any, Any]]]:
    """Import ``module_name`` with the working directory on ``sys.path``, as a worker always
    does first (its tasks, schedules and limits are then declared); its app (the attribute
    ``app_name``; without it the module's only ``App``, else the default app) and the tasks
    of that app that importing it declared (whatever their names), those it holds as
    attributes (re-exported ones too) and those named after it.

    A module that does not import is one line naming the file and line of the failure."""
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        dotted = module_name.removesuffix(".py").strip("/").replace(os.sep, ".")
        dotted = dotted.replace("/", ".")
        raise ConfigProblem(f"MODULE is a module's dotted name, not a file: try {dotted!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    known = set(default_app().tasks)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        problem = _import_failure(module_name, e)
        raise ConfigProblem(f"cannot import {module_name!r}: {problem}") from None
    app = _app_of(module, module_name, app_name)
    tasks = app.tasks
    found = [t for name, t in tasks.items() if app is not default_app() or name not in known]
    found += [t for t in vars(module).values() if isinstance(t, Task) and t.app in (app, None)]
    found += [t for t in tasks.values() if t.name.startswith(module_name + ":")]
    return app, list({id(t): t for t in found}.values())


def _app_of(module: Any, module_name: str, app_name: str | None) -> App:
    if app_name is not None:
        app = getattr(module, app_name, None)
        if not isinstance(app, App):
            raise ConfigProblem(f"{module_name}:{app_name} is not a relaymq.App")
        return app
    apps = list({id(a): a for a in vars(module).values() if isinstance(a, App)}.values())
    return apps[0] if len(apps) == 1 else default_app()


def _import_failure(module_name: str, e: Exception) -> str:
    """What went wrong importing ``module_name``, with the file and line, in one line."""
    if isinstance(e, ModuleNotFoundError) and f"{module_name}.".startswith(f"{e.name}."):
        return f"no module named {e.name!r} (looked in {os.getcwd()} and sys.path)"
    if isinstance(e, SyntaxError):
        where = f"{e.filename}, line {e.lineno}"
        return f"{type(e).__name__}: {e.msg} ({where})"
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")
    ]
    message = " ".join(str(e).split())
    text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    if frames:
        text += f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return text


async def _work(
    app: App,
    settings: Settings,
    queues: list[str],
    worker_id: str | None,
    metrics_port: int | None,
) -> None:
    backend = await connect_waiting(settings.backend, settings.connect_timeout)
    app.use(backend)
    try:
        stop_metrics = await _serve_metrics(app, queues, metrics_port)
    except BaseException:
        app.use(None)
        await backend.close()
        raise
    w = Worker(app, queues, settings=settings, worker_id=worker_id)
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
        app.use(None)
        await backend.close()


async def _serve_metrics(app: App, queues: list[str], port: int | None) -> Callable[[], None]:
    """Count this process's work and serve it, with the queues' gauges, on ``port``; returns
    what stops serving (nothing to stop without a port)."""
    if port is None:
        return lambda: None
    try:
        from relaymq.metrics import process_metrics
    except ImportError as e:
        raise ConfigError(f"--metrics-port: {e}") from e
    metrics = process_metrics().install(app)
    metrics.watch(app.ops, queues)
    await metrics.refresh()  # the gauges learn the loop they are read on
    try:
        server = metrics.serve(port)
    except OSError as e:
        metrics.uninstall(app)
        raise ConfigError(f"cannot serve metrics on port {port}: {e}") from e
    logging.getLogger("relaymq").info("metrics at http://0.0.0.0:%d/metrics", port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        metrics.uninstall(app)

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
@click.option(
    "--jobs",
    default=2000,
    show_default=True,
    envvar="RELAYMQ_DEMO_JOBS",
    show_envvar=True,
    help="How many jobs to enqueue.",
)
@click.option(
    "--keep",
    is_flag=True,
    envvar="RELAYMQ_DEMO_KEEP",
    show_envvar=True,
    help="Keep the temporary folder (database, ledgers).",
)
def demo(jobs: int, keep: bool) -> None:
    """Two worker processes on SQLite, one SIGKILLed mid-run; prove nothing is lost."""
    from relaymq.demo.run import run_demo

    code = run_demo(jobs=jobs, keep=keep)
    if code:
        raise click.exceptions.Exit(code)


for command in (queue_group, job_group, dlq_group, schedule_group, workers, stats, dashboard):
    cli.add_command(command)

__all__ = ["ConfigProblem", "Unreachable", "backend_option", "json_option", "run", "with_app"]
