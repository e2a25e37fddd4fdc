"""The RabbitMQ backend's URL: the broker address plus relaymq's own query options.

``amqp://guest:guest@127.0.0.1:5672/?store=<URL-encoded backend URL>&prefix=relaymq.``

Options (query parameters; every other parameter is passed on to aio-pika):

``store``           the metadata store's URL, another relaymq backend that declares
                    ``capabilities.delivery_store`` (default ``redis://127.0.0.1:6379/0``)
``prefix``          prepended to every broker queue name (default ``relaymq.``)
``max_priority``    the broker queues' ``x-max-priority`` (default 10; 1-255)
``prefetch``        the smallest delivery window of a handle (default 1): the channel's prefetch
                    is the deliveries a worker holds plus the free slots it claims for
``queue_expires``   ``x-expires`` in milliseconds for the broker queues (default unset;
                    tests use it as a safety net for queues a crashed test left behind)
``promote_interval``  seconds between two promotions of due delayed jobs per queue (0.5)
``timeout``         seconds the broker may take to accept the connection (10)
``reconcile_after``  seconds a job may wait at the head of its queue, with nothing ready on the
                    broker, before maintenance republishes its delivery (60)
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from relaymq.errors import ConfigError

DEFAULT_STORE = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True, slots=True)
class Options:
    broker_url: str
    """The URL given to aio-pika: relaymq's own options removed."""
    store: str = DEFAULT_STORE
    prefix: str = "relaymq."
    max_priority: int = 10
    prefetch: int = 1
    queue_expires: int | None = None
    promote_interval: float = 0.5
    reconcile_after: float = 60.0
    timeout: float = 10.0

    @property
    def call_timeout(self) -> float:
        """Seconds one broker operation (a batch of publishes, a declare) may take."""
        return 3 * self.timeout


def parse(url: str) -> Options:
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps"):
        raise ConfigError(f"a RabbitMQ URL starts with amqp:// or amqps://, got {url!r}")
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _FIELDS:
            ours[key] = value
        else:
            theirs.append((key, value))
    broker = urlunsplit(parts._replace(query=urlencode(theirs)))
    try:
        options = Options(
            broker_url=broker,
            store=ours.get("store", DEFAULT_STORE),
            prefix=ours.get("prefix", "relaymq."),
            max_priority=int(ours.get("max_priority", 10)),
            prefetch=int(ours.get("prefetch", 1)),
            queue_expires=int(ours["queue_expires"]) if "queue_expires" in ours else None,
            promote_interval=float(ours.get("promote_interval", 0.5)),
            reconcile_after=float(ours.get("reconcile_after", 60.0)),
            timeout=float(ours.get("timeout", 10.0)),
        )
    except ValueError as e:
        raise ConfigError(f"bad option in RabbitMQ URL {url!r}: {e}") from e
    if not 1 <= options.max_priority <= 255:
        raise ConfigError(f"max_priority must be between 1 and 255, got {options.max_priority}")
    if options.prefetch < 1:
        raise ConfigError(f"prefetch must be at least 1, got {options.prefetch}")
    if options.store.split("://", 1)[0] in ("amqp", "amqps"):
        raise ConfigError("the metadata store of a RabbitMQ backend cannot be RabbitMQ itself")
    return options


_FIELDS = {
    "store",
    "prefix",
    "max_priority",
    "prefetch",
    "queue_expires",
    "promote_interval",
    "reconcile_after",
    "timeout",
}
