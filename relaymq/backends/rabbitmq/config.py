"""The RabbitMQ backend's URL: the broker address plus relaymq's own query options.

``amqp://guest:guest@127.0.0.1:5672/?store=<URL-encoded backend URL>&prefix=relaymq.``

Several brokers (the nodes of a cluster): ``amqp://u:p@h1:5672,h2:5672,h3:5672/vhost``; the
connection goes to the first that answers, and after a lost connection to the next one.

Options (query parameters; aiormq's and aio-pika's own, ``heartbeat``, ``name`` and the TLS
files of ``amqps://``, pass on to them; any other name is a ``ConfigError`` listing the
options that exist):

``store``           the metadata store's URL, another relaymq backend that declares
                    ``capabilities.delivery_store`` (default ``redis://127.0.0.1:6379/0``)
``prefix``          prepended to every broker queue name (default ``relaymq.``)
``max_priority``    the broker queues' ``x-max-priority`` (default 10; 1-255)
``prefetch``        the smallest delivery window of a handle (default 1): the channel's prefetch
                    is the deliveries a worker holds plus the free slots it claims for
``queue_expires``   ``x-expires`` in milliseconds for the broker queues (default unset;
                    tests use it as a safety net for queues a crashed test left behind)
``promote_interval``  seconds between two promotions of due delayed jobs per queue (0.5)
``timeout``         seconds the broker may take to accept the connection (10); also how long
                    data sent may stay unacknowledged before the connection is dropped and a
                    fresh one made (Linux), and the AMQP ``heartbeat`` unless the URL sets one
                    (at least 5)
``reconcile_after``  seconds a job may wait at the head of its queue, with nothing ready on the
                    broker, before maintenance republishes its delivery (60)
``queue_type``      ``classic`` (default: one priority queue per relaymq queue) or ``quorum``
                    (replicated; RabbitMQ 3.x quorum queues have no priorities, so relaymq
                    keeps them: one quorum queue per priority band, taken highest band first)
``priority_bands``  the bands of a quorum queue (default 3; 1 to max_priority + 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

from relaymq.backends.urls import hosts, split_options
from relaymq.errors import ConfigError

DEFAULT_STORE = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True, slots=True)
class Options:
    broker_url: str
    """The URL given to aio-pika: relaymq's own options removed (the first broker's)."""
    store: str = DEFAULT_STORE
    prefix: str = "relaymq."
    max_priority: int = 10
    prefetch: int = 1
    queue_expires: int | None = None
    promote_interval: float = 0.5
    reconcile_after: float = 60.0
    timeout: float = 10.0
    queue_type: str = "classic"
    priority_bands: int = 1
    broker_urls: tuple[str, ...] = ()
    """One URL per broker listed, in order (``broker_url`` is the first)."""

    @property
    def call_timeout(self) -> float:
        """Seconds one broker operation (a batch of publishes, a declare) may take."""
        return 3 * self.timeout


def parse(url: str) -> Options:
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps"):
        raise ConfigError(f"a RabbitMQ URL starts with amqp:// or amqps://, got {url!r}")
    ours, theirs = split_options(parts.query, _FIELDS, DRIVER, "RabbitMQ")
    auth, _, _ = parts.netloc.rpartition("@")
    brokers = tuple(
        urlunsplit(
            parts._replace(
                netloc=f"{auth}@{h}:{p}" if auth else f"{h}:{p}", query=urlencode(theirs)
            )
        )
        for h, p in hosts(parts.netloc, 5671 if parts.scheme == "amqps" else 5672, url)
    )
    queue_type = ours.get("queue_type", "classic")
    if queue_type not in ("classic", "quorum"):
        raise ConfigError(f"queue_type must be classic or quorum, not {queue_type!r}")
    try:
        options = Options(
            broker_url=brokers[0],
            store=ours.get("store", DEFAULT_STORE),
            prefix=ours.get("prefix", "relaymq."),
            max_priority=int(ours.get("max_priority", 10)),
            prefetch=int(ours.get("prefetch", 1)),
            queue_expires=int(ours["queue_expires"]) if "queue_expires" in ours else None,
            promote_interval=float(ours.get("promote_interval", 0.5)),
            reconcile_after=float(ours.get("reconcile_after", 60.0)),
            timeout=float(ours.get("timeout", 10.0)),
            queue_type=queue_type,
            priority_bands=int(ours.get("priority_bands", 3 if queue_type == "quorum" else 1)),
            broker_urls=brokers,
        )
    except ValueError as e:
        raise ConfigError(f"bad option in RabbitMQ URL {url!r}: {e}") from e
    if not 1 <= options.max_priority <= 255:
        raise ConfigError(f"max_priority must be between 1 and 255, got {options.max_priority}")
    if options.prefetch < 1:
        raise ConfigError(f"prefetch must be at least 1, got {options.prefetch}")
    if queue_type == "classic" and "priority_bands" in ours:
        raise ConfigError(
            "priority_bands is for queue_type=quorum (a classic queue has priorities)"
        )
    if not 1 <= options.priority_bands <= options.max_priority + 1:
        raise ConfigError(
            f"priority_bands must be between 1 and max_priority + 1 ({options.max_priority + 1})"
        )
    if options.store.split("://", 1)[0] in ("amqp", "amqps"):
        raise ConfigError("the metadata store of a RabbitMQ backend cannot be RabbitMQ itself")
    return options


DRIVER = (
    "name",
    "heartbeat",
    "auth",
    "cafile",
    "capath",
    "cadata",
    "keyfile",
    "certfile",
    "no_verify_ssl",
    "interleave",
    "happy_eyeballs_delay",
    "reconnect_interval",
    "fail_fast",
)
"""The connection options aio-pika and aiormq read from a URL's query."""

_FIELDS = {
    "store",
    "prefix",
    "max_priority",
    "prefetch",
    "queue_expires",
    "promote_interval",
    "reconcile_after",
    "timeout",
    "queue_type",
    "priority_bands",
}
