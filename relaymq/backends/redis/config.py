"""URL options of ``RedisBackend``, and the server-configuration check it makes at connect."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

from relaymq.backends.urls import hosts, split_options, where
from relaymq.errors import ConfigError, DurabilityWarning, EvictionPolicyWarning

DEFAULT_PREFIX = "relaymq"
DEFAULT_TIMEOUT = 10.0
OURS = (
    "prefix",
    "timeout",
    "wait_replicas",
    "wait_timeout",
    "sentinel_username",
    "sentinel_password",
)
SCHEMES = (
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
DRIVER = (
    *URL_QUERY_ARGUMENT_PARSERS,
    "client_name",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_password",
)
"""What redis-py reads from a URL's query (``redis.asyncio.connection.parse_url``) and the
TLS options of its SSL connections; any other name would reach its connection class as a
keyword argument it does not take."""


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """What a ``redis://`` URL asks for, split into our options and redis-py's."""

    client_url: str
    """The URL handed to redis-py (our own query options removed, ``+cluster`` dropped; for
    Sentinel, the master's database and credentials, on no host)."""
    cluster: bool
    prefix: str
    startup_nodes: tuple[tuple[str, int], ...] = ()
    """For cluster URLs: every ``host:port`` listed (comma separated) in the URL; for
    Sentinel, the sentinels."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds a server may take to answer a call (beyond any blocking time the call asks
    for) before the backend gives up on it: a server that accepts but never answers."""
    where: str = ""
    """``host:port`` (of the first node) for messages."""
    service: str | None = None
    """The Sentinel service (master group) name; None: not Sentinel."""
    wait_replicas: int = 0
    """Replicas that must have an enqueue before it returns (``WAIT``); 0: none."""
    wait_timeout: float = 1.0
    """Seconds an enqueue waits for them."""
    sentinel_auth: tuple[str | None, str | None] = (None, None)
    """User name and password of the sentinels (the URL's own are the master's)."""


def parse_url(url: str, prefix: str | None = None) -> RedisOptions:
    """Read ``redis[s][+cluster]://[user:pass@]host:port[,host:port...][/db][?prefix=...]``
    and ``redis[s]+sentinel://[user:pass@]host:port[,host:port...]/SERVICE[/db]``
    (``?timeout=`` seconds: how long a server may take to answer; 10 by default;
    ``?wait_replicas=N&wait_timeout=S``: an enqueue returns once N replicas have it)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"not a Redis URL: {url!r} (schemes: {', '.join(SCHEMES)})")
    ours, rest = split_options(parts.query, OURS, DRIVER, "Redis")
    try:
        timeout = float(ours.get("timeout", DEFAULT_TIMEOUT))
        wait_replicas = int(ours.get("wait_replicas", 0))
        wait_timeout = float(ours.get("wait_timeout", 1.0))
    except ValueError as e:
        raise ConfigError(f"bad option in Redis URL {url!r}: {e}") from e
    if timeout <= 0:
        raise ConfigError(f"timeout must be > 0 in Redis URL {url!r}")
    if wait_replicas < 0 or (wait_replicas and not 0 < wait_timeout < timeout):
        raise ConfigError(
            f"wait_replicas must be >= 0 and wait_timeout between 0 and timeout ({timeout:g}s)"
            f" in Redis URL {url!r}"
        )
    chosen = prefix if prefix is not None else ours.get("prefix", DEFAULT_PREFIX)
    base_scheme, _, shape = scheme.partition("+")
    netloc = parts.netloc
    auth, _, listed = netloc.rpartition("@")
    nodes = tuple(hosts(netloc, 26379 if shape == "sentinel" else 6379, url))
    path = parts.path.strip("/")
    service = None
    if shape == "sentinel":
        service, _, path = path.partition("/")
        if not service:
            raise ConfigError(
                f"a Redis Sentinel URL names its service: "
                f"redis+sentinel://host:26379[,host:26379]/SERVICE[/db], not {url!r}"
            )
        netloc = f"{auth}@sentinel" if auth else "sentinel"  # the master's address: asked
    elif shape == "cluster":
        first = listed.split(",")[0]
        netloc = f"{auth}@{first}" if auth else first
        if path not in ("", "0"):
            raise ConfigError(f"Redis Cluster has only database 0: {url!r}")
        if wait_replicas:
            raise ConfigError(
                f"wait_replicas is for a primary with replicas (redis:// or redis+sentinel://),"
                f" not a Redis Cluster: {url!r}"
            )
    elif "," in listed:
        raise ConfigError(
            f"a redis:// URL names one server; several are redis+cluster:// or "
            f"redis+sentinel://HOSTS/SERVICE: {url!r}"
        )
    if path and not path.isdigit():
        raise ConfigError(f"the database of a Redis URL is a number, not {path!r}: {url!r}")
    client_url = urlunsplit((base_scheme, netloc, f"/{path}" if path else "", urlencode(rest), ""))
    sentinel_auth = (ours.get("sentinel_username"), ours.get("sentinel_password"))
    return RedisOptions(
        client_url,
        shape == "cluster",
        chosen,
        nodes if shape else (),
        timeout,
        where(list(nodes)) if shape == "sentinel" else f"{nodes[0][0]}:{nodes[0][1]}",
        service,
        wait_replicas,
        wait_timeout,
        sentinel_auth,
    )


def check_eviction_policy(policies: dict[str, Any]) -> None:
    """Warn when a server's ``maxmemory-policy`` is not ``noeviction`` (``policies``: per node)."""
    bad = {node: p for node, p in policies.items() if p and p != "noeviction"}
    if bad:
        listed = ", ".join(f"{node}: {p}" for node, p in sorted(bad.items()))
        warnings.warn(
            f"Redis maxmemory-policy is not noeviction ({listed}): under memory pressure the "
            "server evicts keys and accepted jobs are lost; set maxmemory-policy noeviction",
            EvictionPolicyWarning,
            stacklevel=3,
        )


def check_durability(appendonly: dict[str, Any]) -> bool:
    """Warn when a server keeps nothing on disk (``appendonly``: per node, None where CONFIG
    was refused); False when some server does not persist."""
    off = sorted(node for node, value in appendonly.items() if value == "no")
    if off:
        warnings.warn(
            f"Redis appendonly is off ({', '.join(off)}): a restart of the server loses every "
            "accepted job; set appendonly yes (and appendfsync always to lose nothing on a crash)",
            DurabilityWarning,
            stacklevel=3,
        )
    return not off
