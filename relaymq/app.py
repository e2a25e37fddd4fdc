"""App: the one object that owns what a relaymq process shares.

    app = relaymq.App("postgresql://localhost/jobs")

    @app.task(queue="emails", retries=3)
    async def send(to: str) -> None: ...

    app.limit("emails", rate="100/m")
    app.schedule(send, id="digest", cron="0 9 * * *", args=("team@example.com",))

    await send.enqueue("a@example.com")       # connects the app's backend on first use
    await relaymq.Queue("emails", app).counts()
    await relaymq.Worker(app, ["emails"]).run()

An app holds its settings, its backend (built from the URL, connected on first use), the tasks,
limits and schedules declared in code, the instrumented facade every call on the backend goes
through (``app.ops``) and what hangs on it: the observers (``observe``) and the queues' view of
which queues are paused. Queue, Worker, the schedules, the CLI, the dashboard and the contrib
integrations take an app (or its facade) and never call a backend themselves. A ``Queue`` or
``Worker`` given a backend instead is the default app's on that backend (``over``).

``@relaymq.task``, ``relaymq.limit``, ``relaymq.schedule`` and ``relaymq.set_default_backend``
are the default app's (``default_app()``): a process that declares nothing else uses it, with
its backend from ``RELAYMQ_BACKEND``. It is the only state this package keeps at module level.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from relaymq import backends
from relaymq.backends.base import Backend
from relaymq.backends.transactional import Transactional, transactional
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.limits import check_local_max_active, make_limits
from relaymq.observers import Hooks, Observer
from relaymq.options import DEFAULT_QUEUE, Call, Options, validate_queue_name
from relaymq.producer import JobHandle, Producer
from relaymq.records.limits import Limits
from relaymq.retry import DEFAULT_BACKOFF, Backoff
from relaymq.schedules import Schedule, define
from relaymq.serializers import DEFAULT_SERIALIZER, Serializer
from relaymq.settings import Settings
from relaymq.task import JobContext, Task, import_task, resolve, takes_context

P = ParamSpec("P")
R = TypeVar("R")


class App:
    """A backend and everything declared for it. ``url`` defaults to ``settings.backend``,
    and ``settings`` to the environment (``Settings.from_env``, read on first use); a
    ``backend`` given ready (connected) is used as it is. ``options`` go to the backend's
    constructor (``relaymq.connect``).

    ``outbox`` (a ``postgresql://`` or ``sqlite:///`` URL: the application's own database)
    is where enqueues made in a caller's transaction are written when this app's backend
    cannot hold them itself (Redis, MongoDB, RabbitMQ); the app's workers run the relay that
    moves them on (``relaymq.outbox``, docs/transactions.md)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        backend: Backend | None = None,
        serializer: Serializer = DEFAULT_SERIALIZER,
        outbox: str | None = None,
        **options: Any,
    ) -> None:
        self.url = url
        self.outbox_url = outbox
        """The outbox's URL, or None."""
        self._outbox: Backend | None = None
        if (
            outbox is not None
            and not backends.backend_class(outbox).capabilities.joins_transactions
        ):
            raise ConfigError(
                f"the outbox must be a database your transactions write in: a postgresql:// "
                f"or sqlite:/// URL, not {outbox!r}"
            )
        self.serializer = serializer
        self.tasks: dict[str, Task[Any, Any]] = {}
        """Every task declared on this app (``task``), by name: those its workers run."""
        self.limits: dict[str, Limits] = {}
        self.local_limits: dict[str, int] = {}
        """Queue -> at most this many of its jobs running in each worker of this app
        (``limit(local_max_active=...)``); kept in the process, never stored."""
        """Limits declared in code (``limit``), by queue; each worker stores those of its
        queues when it starts, so the code's limits hold from the next deploy on."""
        self.schedules: dict[str, Schedule] = {}
        """Schedules declared in code (``schedule``, ``@task(cron=...)``), by id; each worker
        stores those of its queues when it starts."""
        self.hooks = Hooks()
        self._settings = settings
        self._given_settings = settings is not None
        self._options = options
        self._ops: Instrumented | None = None
        self._producers: dict[str, Producer] = {}
        self._unconnected: Instrumented | None = None
        """A facade over the backend, not connected: sync enqueues in a caller's transaction
        (``enqueue_bulk_sync``) before the app connects, if ever."""
        self._paused: weakref.WeakKeyDictionary[Backend, dict[str, tuple[float, bool]]] = (
            weakref.WeakKeyDictionary()
        )
        """Per backend (this app's own, and those it is used ``over``): which queues its
        enqueues last saw paused, and when (``Instrumented.paused_seen``)."""
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        """One guard per event loop: an ``asyncio.Lock`` that waited once is bound to its
        loop, and a process may run several loops one after another (``asyncio.run`` in
        scripts, the CLI, tests)."""
        if backend is not None:
            self.use(backend)

    def __repr__(self) -> str:
        where = self._ops.backend.url if self._ops is not None else self.url or "(from env)"
        return f"<App {where} tasks={len(self.tasks)}>"

    @property
    def settings(self) -> Settings:
        """The app's settings (read from the environment on first use, unless given)."""
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings

    # -- the backend ------------------------------------------------------------------------

    async def connect(self) -> Instrumented:
        """Connect the app's backend unless it is (once, however many callers wait), and
        its outbox, if any (which prepares the outbox's tables); returns the facade, ``ops``."""
        if self._ops is not None:
            return self._ops
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(loop, asyncio.Lock()):
            if self._ops is None:
                url = self.url or self.settings.backend
                self.use(await backends.connect(url, **self._options))
                await self.connect_outbox()
            assert self._ops is not None
            return self._ops

    def use(self, backend: Backend | None) -> None:
        """Use ``backend`` (connected) from now on; None: forget it, so the next use
        connects again (and settings read from the environment are read again)."""
        self._ops = None
        if backend is not None:
            seen = self._paused.setdefault(backend, {})
            self._ops = Instrumented(
                backend, hooks=self.hooks, paused_seen=seen, outbox=self._outbox_store()
            )
        self._producers.clear()
        if backend is None and not self._given_settings:
            self._settings = None

    async def close(self) -> None:
        """Close the backend, if connected; the next use connects again."""
        if self._ops is not None:
            backend, self._ops = self._ops.backend, None
            self._producers.clear()
            await backend.close()
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            await outbox.close()

    def _outbox_store(self) -> Transactional | None:
        """The outbox backend (built on first need, connected only by ``connect_outbox``)."""
        if self.outbox_url is None:
            return None
        if self._outbox is None:
            self._outbox = backends.from_url(self.outbox_url)
        return transactional(self._outbox)

    async def connect_outbox(self) -> Instrumented | None:
        """The outbox backend, connected, behind a facade of its own (no observers: the
        relay's reads and deletes are not the app's jobs); None without an outbox."""
        if self._outbox_store() is None or self._outbox is None:
            return None
        await self._outbox.connect()
        return Instrumented(self._outbox)

    @property
    def connected(self) -> bool:
        return self._ops is not None

    @property
    def ops(self) -> Instrumented:
        """The instrumented facade over the backend: every call on it goes through here."""
        if self._ops is None:
            raise ConfigError("the app is not connected yet: await app.connect() first")
        return self._ops

    def over(self, backend: Backend) -> App:
        """This app on another backend (a task's ``backend=`` option, ``Worker(backend)``):
        the same tasks, limits, schedules, observers and settings, its own facade (which
        shares what this app's enqueues saw of paused queues on that backend)."""
        if self._ops is not None and self._ops.backend is backend:
            return self
        found = self._sharing(App(settings=self._settings, serializer=self.serializer))
        found.use(backend)
        return found

    def on(self, url: str, *, outbox: str | None = None, **options: Any) -> App:
        """This app on the backend at ``url`` (connected on first use: ``connect``; closed
        by ``close``), with ``outbox`` if given: the same tasks, limits, schedules, observers
        and settings."""
        return self._sharing(
            App(url, settings=self._settings, serializer=self.serializer, outbox=outbox, **options)
        )

    def _sharing(self, other: App) -> App:
        """``other``, made to share this app's declarations, observers and pause views."""
        other.tasks, other.limits, other.schedules = self.tasks, self.limits, self.schedules
        other.local_limits = self.local_limits
        other.hooks, other._paused = self.hooks, self._paused
        return other

    # -- producing --------------------------------------------------------------------------

    def producer(self, name: str) -> Producer:
        """What enqueues on queue ``name`` (the app must be connected: ``connect``); for the
        admin side too, ``relaymq.Queue(name, app)``."""
        found = self._producers.get(name)
        if found is None:
            found = Producer(name, self.ops, serializer=self.serializer, settings=self.settings)
            self._producers[found.name] = found
        return found

    async def enqueue(self, call: Call[R]) -> JobHandle[R]:
        """Enqueue one invocation on its queue (``Task.enqueue`` comes here), on the backend
        its options name, if any; connects first when needed."""
        app = self if call.options.backend is None else self.over(call.options.backend)
        await app.connect()
        return await app.producer(call.options.queue).add(call)

    def enqueue_sync(self, call: Call[R]) -> JobHandle[R]:
        """``enqueue`` from sync code, in the open transaction of the call's ``connection``
        option (``Producer.add_bulk_sync``; ``Task.enqueue_sync`` comes here)."""
        [handle] = self.enqueue_bulk_sync([call])
        return handle

    def enqueue_bulk_sync(
        self, calls: Iterable[Call[Any]], *, connection: object = None
    ) -> list[JobHandle[Any]]:
        """Enqueue ``calls`` (of one queue) from sync code, in the open transaction of
        ``connection`` (or the calls' ``connection`` option). The app need not be connected:
        nothing but the caller's connection is used."""
        calls = list(calls)
        if not calls:
            return []
        options = calls[0].options
        app = self if options.backend is None else self.over(options.backend)
        if app._ops is not None:
            ops = app._ops
        else:  # a facade over the backend unconnected: enough to write in a caller's transaction
            if app._unconnected is None:
                url = app.url or app.settings.backend
                outbox = app._outbox_store()
                built = backends.from_url(url, **app._options)
                app._unconnected = Instrumented(built, hooks=app.hooks, outbox=outbox)
            ops = app._unconnected
        producer = Producer(options.queue, ops, serializer=app.serializer, settings=app.settings)
        return producer.add_bulk_sync(calls, connection=connection)

    # -- declaring --------------------------------------------------------------------------

    def task(
        self,
        name: str | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        retries: int = 0,
        backoff: Backoff | float = DEFAULT_BACKOFF,
        ttl: float | None = None,
        timeout: float | None = None,
        priority: int = 0,
        backend: Backend | None = None,
        sandbox: bool = False,
        cron: str | None = None,
        every: float | None = None,
        tz: str = "UTC",
        missed: str = "skip",
    ) -> Declare:
        """Register a function as a task of this app. Its name defaults to its import path
        ``pkg.mod:func`` (a task defined in a script run as ``__main__`` needs an importable
        module, or an explicit ``name``). A worker runs the tasks of its app, declared by the
        module it was started with (``relaymq worker MODULE``): it never imports a module
        because a job names it.

        ``timeout`` limits one attempt, counted as a failed attempt (retried while
        ``retries`` remain). An async handler is cancelled when it passes. A plain function
        runs in one of the worker's threads, which cannot be stopped: it is told through
        ``JobContext.cancelled`` and keeps its slot and its claim (still renewed) until it
        returns, and only then is the attempt settled as failed, so the next attempt never
        runs beside an overrunning one.

        ``sandbox=True`` runs each attempt in a child process of the worker instead, which a
        timeout, a cancel or the worker's shutdown kills for real, and whose crash fails or
        retries the attempt (``relaymq.worker.sandbox``). The task must live in an
        importable module.

        ``cron`` (with ``tz``) or ``every`` (seconds) also schedule it, with no arguments,
        under its name as the schedule id: the workers serving its queue store the schedule
        and fire it (``relaymq.schedules``); ``missed`` says what becomes of ticks missed
        while no worker ran (``skip``, ``once`` or ``all``)."""
        options = Options(
            queue=queue,
            retries=retries,
            backoff=backoff,
            ttl=ttl,
            timeout=timeout,
            priority=priority,
            backend=backend,
            sandbox=sandbox,
        )
        options.validate()
        when: dict[str, Any] = {}
        if cron is not None or every is not None:
            when = {"cron": cron, "every": every, "tz": tz, "missed": missed}
        return Declare(self, name, options, when)

    def limit(
        self,
        queue: str,
        *,
        max_active: int | None = None,
        rate: int | str | None = None,
        per: float = 1.0,
        key_rate: int | str | None = None,
        key_per: float = 1.0,
        key_max_active: int | None = None,
        fair: bool = False,
        weights: Mapping[str, int] | None = None,
        local_max_active: int | None = None,
    ) -> Limits:
        """Declare ``queue``'s limits in code: at most ``max_active`` of its jobs active at
        once, at most ``rate`` starts per ``per`` seconds (or ``rate="100/m"``), and at most
        ``key_rate`` starts per ``key_per`` seconds and at most ``key_max_active`` active
        jobs for each limit key, over every worker. With ``fair=True``, claims rotate over
        the limit keys with waiting jobs (a key starts its weight, 1 unless ``weights`` says
        more, in each round), priority and FIFO kept within a key. ``local_max_active`` caps
        the queue's running jobs in each worker process of this app (a cap per host, beside
        the global ones; it is not stored in the backend).

        Workers of the queue store them when they start; ``Queue.set_limits`` (or ``relaymq
        queue limits``) changes them at run time, until the next worker start stores these
        again."""
        validate_queue_name(queue)
        limits = make_limits(
            max_active, rate, per, key_rate, key_per, key_max_active, fair, weights
        )
        if local_max_active is not None:
            check_local_max_active(local_max_active)
        self.limits[queue] = limits
        if local_max_active is None:
            self.local_limits.pop(queue, None)
        else:
            self.local_limits[queue] = local_max_active
        return limits

    def schedule(self, task: Task[Any, Any] | str, **how: Any) -> Schedule:
        """Declare a schedule in code (``relaymq.schedules.define`` checks it): every worker
        serving its queue stores it when it starts (an unchanged one keeps its state; a
        changed one replaces it)."""
        s = define(task, registry=self.tasks, **how)
        self.schedules[s.id] = s
        return s

    def resolve(self, name: str, import_prefixes: Iterable[str] = ()) -> Task[Any, Any]:
        """The task of a stored job (``relaymq.task.resolve``): this app's, or one of a
        module in ``import_prefixes``."""
        return resolve(self.tasks, name, import_prefixes)

    def import_task(self, name: str, module: str | None = None) -> Task[Any, Any]:
        """The task ``name`` written in code or by an operator, importing its module first
        (``relaymq.task.import_task``)."""
        return import_task(self.tasks, name, module)

    # -- observing --------------------------------------------------------------------------

    def observe(self, observer: Observer) -> None:
        """Tell ``observer`` what this app does (again: no change)."""
        self.hooks.add(observer)

    def unobserve(self, observer: Observer) -> None:
        """Stop telling ``observer`` (not installed: no change)."""
        self.hooks.remove(observer)

    @property
    def observers(self) -> Sequence[Observer]:
        return self.hooks.observers


class Declare:
    """``@app.task(...)``: registers the function it decorates as a task of the app."""

    def __init__(self, app: App, name: str | None, options: Options, when: dict[str, Any]) -> None:
        self.app = app
        self.name = name
        self.options = options
        self.when = when
        """``cron``/``every``, ``tz`` and ``missed``: the task's schedule, if it has one."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[JobContext, P], Coroutine[Any, Any, R]]
    ) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, P], R]) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Task[P, R]: ...
    def __call__(self, fn: Callable[..., Any]) -> Task[Any, Any]:
        name = self.name or f"{fn.__module__}:{fn.__qualname__}"
        t: Task[Any, Any] = Task(fn, name, self.options, takes_context(fn), self.app)
        self.app.tasks[name] = t
        if self.when:
            self.app.schedule(t, **self.when)
        return t


_DEFAULT = App()
"""The default app: ``@relaymq.task`` and friends declare on it; its backend comes from
``RELAYMQ_BACKEND`` unless ``set_default_backend`` gives one. Its lock is its own (``connect``)."""


def default_app() -> App:
    """The app of ``@relaymq.task``, ``relaymq.limit``, ``relaymq.schedule``, and of a
    ``Queue``, ``Worker`` or ``Schedules`` given a backend rather than an app."""
    return _DEFAULT


task = _DEFAULT.task
limit = _DEFAULT.limit
schedule = _DEFAULT.schedule
observe = _DEFAULT.observe
unobserve = _DEFAULT.unobserve


def set_default_backend(backend: Backend | None) -> None:
    """The backend the default app (and so ``Task.enqueue`` of ``@relaymq.task``) uses;
    None: connect again from ``RELAYMQ_BACKEND`` on next use."""
    _DEFAULT.use(backend)


async def default_backend() -> Backend:
    """The default app's backend, connected on first use from ``RELAYMQ_BACKEND``."""
    return (await _DEFAULT.connect()).backend
