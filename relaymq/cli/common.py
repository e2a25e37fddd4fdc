"""What every command shares: its options, its exit codes and how it reaches a backend (through
an ``App`` over it: ``with_app``).

Exit codes: 0 ok, 1 an error (a queue or job not found, an action refused or declined), 2 a
usage or configuration error, 3 a backend that cannot be reached.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from relaymq.app import App
from relaymq.backends import from_url
from relaymq.backends.base import Backend
from relaymq.errors import BackendUnavailableError, ConfigError, RelayError
from relaymq.job import JobState
from relaymq.queue import Queue
from relaymq.settings import DEFAULT_BACKEND_URL, Settings
from relaymq.worker.startup import describe, patiently

T = TypeVar("T")

backend_option = click.option(
    "--backend",
    "-b",
    envvar="RELAYMQ_BACKEND",
    default=DEFAULT_BACKEND_URL,
    show_default=True,
    show_envvar=True,
    help="Backend URL: memory://, sqlite:///path.db, redis://, postgresql://...",
)
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    envvar="RELAYMQ_JSON",
    show_envvar=True,
    help="Print JSON for scripts.",
)
yes_option = click.option(
    "--yes",
    "-y",
    is_flag=True,
    envvar="RELAYMQ_YES",
    show_envvar=True,
    help="Do not ask for confirmation.",
)


class ConfigProblem(click.ClickException):
    """A configuration error: one line on stderr, exit code 2 (like a usage error)."""

    exit_code = 2


class Unreachable(click.ClickException):
    """The backend's server cannot be reached: exit code 3."""

    exit_code = 3


class NotFound(click.ClickException):
    """No such queue or job (exit code 1)."""


def settings_from_env(**overrides: Any) -> Settings:
    try:
        return Settings.from_env(**overrides)
    except ConfigError as e:
        raise ConfigProblem(str(e)) from e


LOOPS = ("auto", "asyncio", "uvloop")
"""``--loop`` choices: uvloop when it is installed, or either one."""


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a ``--loop`` choice runs on (None: asyncio's own). uvloop's is written in
    C: a worker whose handlers wait on sockets spends less CPU per job on it (11 to 17 % in
    benchmarks/RESULTS.md, handlers making one Redis call each)."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as e:
        if name == "auto":  # not built for this platform (Windows, PyPy): asyncio's own
            return None
        hint = "pip install uvloop"
        raise ConfigProblem(f"--loop uvloop: uvloop is not installed ({e}); {hint}") from e
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(
    factory: Callable[[], Awaitable[T]],
    new_loop: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run a coroutine (on a loop from ``new_loop``, if given); a configuration error exits 2,
    a backend that cannot be reached 3, any other relaymq error 1, each with one clear line."""
    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            return runner.run(factory())  # type: ignore[arg-type]
    except ConfigError as e:
        raise ConfigProblem(str(e)) from e
    except BackendUnavailableError as e:
        raise Unreachable(str(e)) from e
    except RelayError as e:
        raise click.ClickException(str(e)) from e


async def with_app(url: str, fn: Callable[[App], Awaitable[T]], *, create: bool = False) -> T:
    """Run ``fn`` on an app over the backend at ``url``; a missing store is an error, never
    created, unless ``create`` (a command that adds, as producers do)."""
    backend = from_url(url)
    backend.create_missing = create
    try:
        await backend.connect()
    except BaseException:
        await backend.close()
        raise
    try:
        return await fn(App(url, backend=backend))
    finally:
        await backend.close()


async def connect_waiting(url: str, timeout: float) -> Backend:
    """The backend at ``url``, connected; a worker's start waits up to ``timeout`` seconds
    for a server that cannot be reached yet (``relaymq.worker.startup``). Admin commands use
    ``with_app``, which fails at once."""

    async def attempt() -> Backend:
        backend = from_url(url)
        try:
            await backend.connect()
        except BaseException:
            await backend.close()
            raise
        return backend

    return await patiently(attempt, describe(url), timeout)


async def known_queue(app: App, name: str) -> Queue:
    """The handle of queue ``name``; ``NotFound`` unless it holds jobs, is paused or a live
    worker serves it (so a mistyped name changes nothing)."""
    queue = Queue(name, app)  # validates the name first: a bad one is a usage error
    names = await app.ops.list_queues()
    if name not in names and not any(name in w.queues for w in await app.ops.list_workers()):
        known = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise NotFound(f"no queue {name!r}" + (f" (queues: {known})" if names else ""))
    return queue


def with_queue(url: str, name: str, fn: Callable[[Queue], Awaitable[T]]) -> T:
    """Run ``fn`` on the existing queue ``name`` of the backend at ``url``."""

    async def go(app: App) -> T:
        return await fn(await known_queue(app, name))

    return run(lambda: with_app(url, go))


# -- filters --------------------------------------------------------------------------------

MAX_DURATION = 100 * 365 * 86400.0
"""The longest duration an option takes (100 years): more is surely a typo, and would overflow
the backends' integers."""
MAX_OFFSET = 1_000_000_000
"""The largest ``--offset``: past any store's jobs, within every backend's integers."""

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


class Duration(click.ParamType):  # type: ignore[type-arg]
    """Seconds, written ``90``, ``30s``, ``15m``, ``2h``, ``7d`` or ``1w``."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float | int):
            seconds = float(value)
        else:
            found = _DURATION.match(str(value).lower())
            if found is None:
                self.fail(f"{value!r} is not a duration (e.g. 90, 30s, 15m, 2h, 7d)", param, ctx)
            seconds = float(found[1]) * _UNITS[found[2]]
        if not 0 <= seconds <= MAX_DURATION:
            self.fail(f"{value!r} is longer than 100 years", param, ctx)
        return seconds


def state_option(
    states: tuple[JobState, ...], help: str, default: str | None = None, multiple: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--state",
        "-s",
        "states" if multiple else "state",
        multiple=multiple,
        default=default,
        type=click.Choice([s.value for s in states]),
        envvar="RELAYMQ_STATE",
        show_envvar=True,
        show_default=default is not None,
        help=help,
    )


task_option = click.option(
    "--task", "-t", envvar="RELAYMQ_TASK", show_envvar=True, help="Only jobs of this task name."
)
older_than_option = click.option(
    "--older-than",
    type=Duration(),
    envvar="RELAYMQ_OLDER_THAN",
    show_envvar=True,
    help="Only jobs that finished (or, not finished, were created) longer ago: 90, 30s, 15m, "
    "2h, 7d.",
)
offset_option = click.option(
    "--offset",
    type=click.IntRange(0, MAX_OFFSET),
    default=0,
    show_default=True,
    envvar="RELAYMQ_OFFSET",
    show_envvar=True,
    help="Skip this many matching jobs.",
)
limit_option = click.option(
    "--limit",
    type=click.IntRange(min=1, max=10_000),
    default=50,
    show_default=True,
    envvar="RELAYMQ_LIMIT",
    show_envvar=True,
    help="Show at most this many jobs.",
)
all_option = click.option(
    "--all",
    "everything",
    is_flag=True,
    envvar="RELAYMQ_ALL",
    show_envvar=True,
    help="Select every job the action applies to.",
)
