"""The MongoDB backend's URL and options.

``mongodb://host:port/database?...``: the database defaults to ``relaymq``; every query option
goes to PyMongo, which must know it (``replicaSet``, ``authSource``, ``tls``, ...). Unless
the URL says otherwise, writes use write concern ``majority`` with journal and server
selection gives up after 5 s, so a server that never answers fails connect and every call
that needs a server. A call already in flight when its server freezes waits
unless the URL sets ``socketTimeoutMS`` or ``timeoutMS``: neither is set by default, because
with either set a worker took the whole timeout to get past a killed and restarted server
(tests/mongodb/test_restart.py: 66 s with 60 s, 19 s with timeoutMS, 5 s without).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from pymongo import common

from relaymq.backends.urls import split_options
from relaymq.errors import ConfigError

DEFAULT_DATABASE: Final = "relaymq"
DRIVER: Final = frozenset(
    [
        *common.URI_OPTIONS_VALIDATOR_MAP,
        *(a for v in common.URI_OPTIONS_ALIAS_MAP.values() for a in v),
    ]
)
"""The URI options PyMongo documents (lower case: PyMongo reads them in any case); any other
name is a ``ConfigError`` (PyMongo would only warn and ignore it)."""


@dataclass(frozen=True, slots=True)
class Options:
    database: str
    client_options: dict[str, Any]
    """Keyword options for ``AsyncMongoClient`` (the URL's own options are in the URL)."""
    where: str = ""
    """The URL's hosts (``host:port,...``), for messages."""


def parse(
    url: str,
    *,
    database: str | None,
    write_concern: str | int,
    journal: bool,
    server_selection_timeout: float,
    client_options: dict[str, Any],
) -> Options:
    parts = urlsplit(url)
    if parts.scheme != "mongodb":
        raise ConfigError(f"not a mongodb:// URL: {url!r}")
    name = database or unquote(parts.path.lstrip("/")) or DEFAULT_DATABASE
    split_options(parts.query, (), DRIVER, "MongoDB", fold=True)
    given = {k.lower() for k, _ in parse_qsl(parts.query)}
    options: dict[str, Any] = {"tz_aware": True, "appname": "relaymq"}
    if "w" not in given:
        options["w"] = write_concern
    if "journal" not in given:
        options["journal"] = journal
    if "serverselectiontimeoutms" not in given:
        options["serverSelectionTimeoutMS"] = round(server_selection_timeout * 1000)
    return Options(name, options | client_options, parts.netloc.rpartition("@")[2])
