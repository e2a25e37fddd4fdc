"""URL options of ``RedisBackend``, and the server-configuration check it makes at connect."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from relaymq.errors import ConfigError, DurabilityWarning, EvictionPolicyWarning

DEFAULT_PREFIX = "relaymq"
DEFAULT_TIMEOUT = 10.0
OURS = ("prefix", "timeout")
SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """What a ``redis://`` URL asks for, split into our options and redis-py's."""

    client_url: str
    """The URL handed to redis-py (our own query options removed, ``+cluster`` dropped)."""
    cluster: bool
    prefix: str
    startup_nodes: tuple[tuple[str, int], ...] = ()
    """For cluster URLs: every ``host:port`` listed (comma separated) in the URL."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds a server may take to answer a call (beyond any blocking time the call asks
    for) before the backend gives up on it: a server that accepts but never answers."""
    where: str = ""
    """``host:port`` (of the first node) for messages."""


def parse_url(url: str, prefix: str | None = None) -> RedisOptions:
    """Read ``redis[s][+cluster]://[user:pass@]host:port[,host:port...][/db][?prefix=...]``
    (``?timeout=`` seconds: how long a server may take to answer; 10 by default)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"not a Redis URL: {url!r} (schemes: {', '.join(SCHEMES)})")
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in OURS}
    rest = [(k, v) for k, v in query if k not in OURS]
    try:
        timeout = float(ours.get("timeout", DEFAULT_TIMEOUT))
    except ValueError as e:
        raise ConfigError(f"bad timeout in Redis URL {url!r}: {e}") from e
    if timeout <= 0:
        raise ConfigError(f"timeout must be > 0 in Redis URL {url!r}")
    chosen = prefix if prefix is not None else ours.get("prefix", DEFAULT_PREFIX)
    cluster = scheme.endswith("+cluster")
    base_scheme = scheme.removesuffix("+cluster")
    netloc = parts.netloc
    nodes: list[tuple[str, int]] = []
    if cluster:
        auth, _, hosts = netloc.rpartition("@")
        for item in hosts.split(","):
            host, _, port = item.rpartition(":")
            if not host:
                host, port = item, "6379"
            try:
                nodes.append((host.strip("[]"), int(port)))
            except ValueError as e:
                raise ConfigError(f"bad host:port {item!r} in {url!r}") from e
        first = hosts.split(",")[0]
        netloc = f"{auth}@{first}" if auth else first
        if parts.path.strip("/") not in ("", "0"):
            raise ConfigError(f"Redis Cluster has only database 0: {url!r}")
    elif not parts.path.strip("/").isdigit() and parts.path.strip("/"):
        raise ConfigError(f"the database of a Redis URL is a number, not {parts.path!r}: {url!r}")
    client_url = urlunsplit((base_scheme, netloc, parts.path, urlencode(rest), ""))
    where = netloc.rpartition("@")[2] or "localhost:6379"
    return RedisOptions(client_url, cluster, chosen, tuple(nodes), timeout, where)


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
