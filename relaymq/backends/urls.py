"""The one rule for backend URL options, and the host lists of URLs that name several servers.

Every backend's ``config.py`` reads its URL through ``split_options``: a query option is either
relaymq's own (the backend's ``OURS``) or one its driver documents (the backend's ``DRIVER``),
and passes to the driver unchanged; any other name is a ``ConfigError`` that lists the options
that exist, so a misspelt ``queue_type=quorum`` or ``shema=`` is never ignored nor sent to the
server as something else. ``hosts`` reads ``host:port[,host:port...]``.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import parse_qsl

from relaymq.errors import ConfigError


def split_options(
    query: str, ours: Collection[str], driver: Collection[str], backend: str, fold: bool = False
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``(ours, the driver's)`` out of a URL's query string; a ``ConfigError`` naming every
    option that exists for any other name. A name given twice keeps its last value for our
    own options (as a mapping does). ``fold``: the driver's names are case-insensitive
    (``driver`` in lower case)."""
    mine: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    unknown: list[str] = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in ours:
            mine[key] = value
        elif (key.lower() if fold else key) in driver:
            theirs.append((key, value))
        else:
            unknown.append(key)
    if unknown:
        raise ConfigError(
            f"unknown {backend} URL option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(sorted(set(unknown)))}: relaymq's options are "
            f"{', '.join(sorted(ours)) or '(none)'}; the driver's are "
            f"{', '.join(sorted(driver)) or '(none)'}"
        )
    return mine, theirs


def hosts(netloc: str, default_port: int, url: str) -> list[tuple[str, int]]:
    """Every ``host:port`` of a netloc (``user:pass@h1:p1,h2:p2``; credentials ignored, a
    missing port is ``default_port``, IPv6 in brackets); a ``ConfigError`` for a bad port."""
    listed = netloc.rpartition("@")[2]
    found: list[tuple[str, int]] = []
    for item in listed.split(","):
        if not item:
            continue
        if item.startswith("["):  # [::1]:port
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":")
        elif item.count(":") == 1:
            host, _, port_text = item.partition(":")
        else:
            host, port_text = item, ""
        try:
            port = int(port_text) if port_text else default_port
        except ValueError:
            port = -1
        if not 0 < port < 65536:
            raise ConfigError(f"bad port {port_text!r} of host {item!r} in backend URL {url!r}")
        found.append((host or "localhost", port))
    return found or [("localhost", default_port)]


def where(found: list[tuple[str, int]]) -> str:
    """``host:port[,host:port...]``, for messages."""
    return ",".join(f"{h}:{p}" for h, p in found)
