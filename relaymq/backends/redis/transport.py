"""How the Redis backend talks to the server: one client (plain or cluster), pipelined command
batches with one round trip per server, scripts by SHA reloaded after a server restart, blocking
pops over wake-up lists, and the check of the eviction policy at connect. The backend
(backend.py) only says what to run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis import exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff

from relaymq.backends.redis.config import RedisOptions, check_durability, check_eviction_policy
from relaymq.backends.redis.deadlines import Deadlines, Expired
from relaymq.backends.redis.direct import Link
from relaymq.backends.redis.errors import UNAVAILABLE, refusing, translated
from relaymq.backends.redis.errors import translate as _translate
from relaymq.backends.redis.scripts import Scripts
from relaymq.errors import BackendError, BackendUnavailableError

MIN_BLOCK = 0.01
"""BLPOP rounds timeouts to milliseconds and 0 blocks forever: shorter blocks return at once."""


class Transport:
    def __init__(self, options: RedisOptions, client_options: dict[str, Any]) -> None:
        self._options = options
        self._client_options = client_options
        self.scripts = Scripts()
        self.client: Any = None
        """The redis-py client (``Redis`` or ``RedisCluster``) once open."""
        self.durable: bool | None = None
        """False once connected to a server that keeps nothing on disk."""
        self._link: Link | None = None
        """The pipelined command path (plain Redis only; a cluster client routes by key)."""
        self._deadlines = Deadlines(options.timeout)
        """Every command list's deadline, on one shared timer (the hot path's)."""
        self._sentinels: Sentinel | None = None

    async def open(self) -> None:
        """Connect (idempotent) and check the server's eviction policy and persistence."""
        if self.client is not None:
            return
        o = self._options
        kwargs: dict[str, Any] = {
            # No socket timeout: BLPOP blocks for as long as asked, and redis-py implements a
            # write timeout with asyncio.wait_for, which on Python 3.11 can swallow a task's
            # cancellation (the worker's shutdown then hangs). Keepalive finds dead peers.
            "socket_timeout": None,
            "socket_keepalive": True,
            "socket_connect_timeout": 5.0,
            "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
            **self._client_options,
        }
        with translated("connect"), refusing():
            if o.cluster:
                if len(o.startup_nodes) > 1:
                    kwargs["startup_nodes"] = [ClusterNode(h, p) for h, p in o.startup_nodes]
                client: Any = RedisCluster.from_url(o.client_url, **kwargs)
                await client.initialize()
            elif o.service is not None:
                self._sentinels = sentinels(o, kwargs)
                assert o.service is not None
                client = self._sentinels.master_for(o.service)
            else:
                client = Redis.from_url(o.client_url, **kwargs)
            try:
                async with self._deadline("connect", o.timeout):
                    await client.ping()
                    policies = await self._server_config(client, "maxmemory-policy")
                    appendonly = await self._server_config(client, "appendonly")
            except BaseException:
                await client.aclose()
                raise
        self.client = client
        self._link = None if o.cluster else Link(client)
        check_eviction_policy(policies)
        self.durable = check_durability(appendonly)

    async def _server_config(self, client: Any, name: str) -> dict[str, Any]:
        """The server setting ``name`` per node; empty when CONFIG is not allowed (managed
        Redis), in which case nothing is said about it."""
        try:
            if self._options.cluster:
                found: dict[str, Any] = {}
                for node in client.get_primaries():
                    reply = await client.config_get(name, target_nodes=node)
                    found[node.name] = _config_value(reply, name)
                return found
            reply = await client.config_get(name)
            return {self._options.where: _config_value(reply, name)}
        except rex.ResponseError:
            return {}

    async def close(self) -> None:
        if self.client is not None:
            client, self.client, self._link = self.client, None, None
            with contextlib.suppress(rex.RedisError, OSError):
                await client.aclose()
        if self._sentinels is not None:
            for each in self._sentinels.sentinels:
                with contextlib.suppress(rex.RedisError, OSError):
                    await each.aclose()
            self._sentinels = None

    @contextlib.asynccontextmanager
    async def _deadline(self, what: str, seconds: float) -> AsyncIterator[None]:
        """Give up on a call after ``seconds``: a server that accepted the connection but
        does not answer must not hang the caller for ever."""
        try:
            async with asyncio.timeout(seconds):
                yield
        except TimeoutError as e:
            raise self._unanswered(what, seconds) from e

    def _unanswered(self, what: str, seconds: float) -> BackendUnavailableError:
        return BackendUnavailableError(
            f"Redis at {self._options.where} did not answer within {seconds:g}s ({what})"
        )

    def evalsha(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        """The command that runs script ``name`` (see scripts/*.lua)."""
        return ("EVALSHA", self.scripts.sha[name], len(keys), *keys, *args)

    async def _load_scripts(self) -> None:
        for text in self.scripts.text.values():
            await self.client.script_load(text)

    async def script(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script; its reply."""
        [reply] = await self.run([self.evalsha(name, keys, args)], name)
        return reply

    async def run(self, commands: Sequence[tuple[Any, ...]], what: str) -> list[Any]:
        """Run ``commands`` in one pipeline (one round trip per server) and return the replies;
        an error reply raises."""
        replies = await self.run_all(commands, what)
        for reply in replies:
            if isinstance(reply, Exception):
                raise (_translate(reply, what) or reply) from reply
        return replies

    async def run_all(self, commands: Sequence[tuple[Any, ...]], what: str) -> list[Any]:
        """Like ``run``, but an error reply comes back in its place, as an exception, and the
        other replies stand; only a failed connection or call raises.

        Commands that met an empty script cache (a restarted server) run again once the
        scripts are loaded; they had not run, so running them again is safe. This is a hot
        path: plain try/except, no generator-based context managers, no timer per call.
        """
        if self.client is None:
            raise BackendError("the Redis backend is not connected (call connect())")
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        try:
            await self._deadlines.run(self._run(commands, replies, todo))
        except Expired as e:
            raise self._unanswered(what, self._options.timeout) from e
        except (*UNAVAILABLE, rex.RedisError) as e:
            raise (_translate(e, what) or e) from e
        return replies

    async def _run(
        self, commands: Sequence[tuple[Any, ...]], replies: list[Any], todo: list[int]
    ) -> None:
        for attempt in range(2):
            if self._link is not None:
                got = await self._link.run([commands[i] for i in todo])
            elif len(todo) == 1:
                try:
                    got = [await self.client.execute_command(*commands[todo[0]])]
                except rex.ResponseError as e:
                    got = [e]
            else:
                pipe = self.client.pipeline(transaction=False)
                for i in todo:
                    pipe.execute_command(*commands[i])
                got = await pipe.execute(raise_on_error=False)
            again: list[int] = []
            for i, reply in zip(todo, got, strict=True):
                if isinstance(reply, rex.NoScriptError) and attempt == 0:
                    again.append(i)
                else:
                    replies[i] = reply
            if not again:
                break
            await self._load_scripts()
            todo = again

    async def block(self, lists: Sequence[Sequence[str]], seconds: float) -> None:
        """Block until a token can be popped from one of ``lists`` or ``seconds`` pass.

        ``lists`` are groups of list keys that one BLPOP may watch together (one cluster slot
        each); several groups block side by side and the first to return ends the wait.
        """
        if seconds < MIN_BLOCK:
            return
        seconds = round(seconds, 3)
        async with self._deadline("wait", seconds + self._options.timeout):
            await self._block(lists, seconds)

    async def _block(self, lists: Sequence[Sequence[str]], seconds: float) -> None:
        with translated("wait"):
            if len(lists) == 1:
                await self.client.blpop(lists[0], timeout=seconds)
                return
            tasks = [asyncio.ensure_future(self.client.blpop(k, timeout=seconds)) for k in lists]
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    t.result()
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)


def sentinels(o: RedisOptions, kwargs: dict[str, Any]) -> Sentinel:
    """The sentinels ``o.startup_nodes``; their ``master_for(o.service)`` is a client whose
    every new connection asks them where the primary is, and whose connection to a primary
    that was demoted (a ``READONLY`` reply) is closed, so after a failover the next command
    reaches the new one. The sentinels get the socket and TLS options, and their own
    credentials; the primary, the URL's."""
    options: dict[str, Any] = {**parse_url(o.client_url), **kwargs}
    for key in ("host", "port"):
        options.pop(key, None)
    if options.pop("connection_class", None) is SSLConnection:  # rediss+sentinel://
        options["ssl"] = True
    around = {k: v for k, v in options.items() if k.startswith(("socket_", "ssl"))}
    around["socket_timeout"] = min(5.0, o.timeout)  # a sentinel that hangs: ask the next
    user, password = o.sentinel_auth
    if user is not None:
        around["username"] = user
    if password is not None:
        around["password"] = password
    return Sentinel(list(o.startup_nodes), sentinel_kwargs=around, **options)


def _config_value(reply: Any, name: str) -> str | None:
    """The value of ``name`` out of a CONFIG GET reply (bytes or str keys, nested per node)."""
    if isinstance(reply, dict):
        for key, value in reply.items():
            k = key.decode() if isinstance(key, bytes) else str(key)
            if k == name:
                return value.decode() if isinstance(value, bytes) else str(value)
            if isinstance(value, dict):
                found = _config_value(value, name)
                if found:
                    return found
    return None
