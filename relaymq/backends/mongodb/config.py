"""The MongoDB backend's URL and options.

``mongodb://host:port/database?...``: the database defaults to ``relaymq``; every query option
goes to PyMongo. Unless the URL says otherwise, writes use write concern ``majority`` with
journal, server selection gives up after 5 s and a call whose server stops answering after 60 s
(``socketTimeoutMS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from relaymq.errors import ConfigError

DEFAULT_DATABASE: Final = "relaymq"
SOCKET_TIMEOUT_MS: Final = 60_000


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
    given = {k.lower() for k, _ in parse_qsl(parts.query)}
    options: dict[str, Any] = {"tz_aware": True, "appname": "relaymq"}
    if "w" not in given:
        options["w"] = write_concern
    if "journal" not in given:
        options["journal"] = journal
    if "serverselectiontimeoutms" not in given:
        options["serverSelectionTimeoutMS"] = round(server_selection_timeout * 1000)
    if "sockettimeoutms" not in given:  # a server that stops answering fails the call
        options["socketTimeoutMS"] = SOCKET_TIMEOUT_MS
    return Options(name, options | client_options, parts.netloc.rpartition("@")[2])
