"""What a soak runs (``Profile``), on what (``Target``), and the record of what it did to whom
(``Chaos``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.hosts.faults import Partition
    from tests.hosts.servers import Network


@dataclass(frozen=True)
class Profile:
    jobs: int
    workers: int
    kills: int
    freezes: int
    restarts: int
    deadline: float
    """Seconds the whole soak may take before unfinished jobs count as stuck."""
    partitions: tuple[str, ...] = ()
    """Network faults (``tests.hosts.faults.KINDS``), done in this order, one at a time; only
    on a target whose workers run on test hosts."""
    work: float = 0.0
    """Mean seconds a handler awaits (0: up to 10 ms). Longer handlers keep claims held
    through the network faults."""
    lossy: float = 60.0
    """Seconds a ``lossy`` fault lasts."""
    cut: float = 0.0
    """Seconds a ``cut`` or ``server`` fault lasts (0: 1.6 stalled thresholds)."""
    flaps: int = 2
    """Times a ``flap`` takes its link down and up."""
    backlog: int = 0
    """Jobs enqueued ahead of those completed (0: all at once). With network faults, ``jobs``
    is a floor: jobs are enqueued until the last fault is over, so handlers run through every
    fault, and a job taken over waits behind ``backlog`` jobs at most."""
    calm: float = 0.0
    """Seconds of calm after each network fault (0: half a stalled threshold)."""
    repeat: bool = False
    """Do ``partitions`` over and over until ``jobs`` jobs have completed (then the faults
    stop and the enqueueing with them): every stretch of a long run goes through them."""


SHORT = Profile(jobs=600, workers=3, kills=3, freezes=1, restarts=1, deadline=120)
LONG = Profile(jobs=100_000, workers=4, kills=200, freezes=40, restarts=10, deadline=3600)


@dataclass
class Target:
    """A backend to soak: its URL and, for a server, how to crash and restart it."""

    name: str
    url: str
    stop: Callable[[], Awaitable[None]] | None = None
    """Crash the server (SIGKILL or an immediate shutdown: no clean checkpoint)."""
    start: Callable[[], Awaitable[None]] | None = None
    """Start it again on the same data."""
    stalled_threshold: float = 1.5
    """The workers' (heartbeats and recovery scale with it): longer for a slow server."""
    share: float = 1.0
    """The share of a profile's jobs this target runs (a slow test server runs fewer)."""
    worker_module: str = "tests.soak.worker"
    """What each worker process runs (``python -m``): the harness's own tests give one that
    cannot start."""
    network: Network | None = None
    """The test hosts the workers run on, spread over them in turn (None: this host)."""
    reconnect: float = 10.0
    """Seconds within which a worker on a healed link is back at work on its own."""
    heartbeat_p99: float = 0.0
    """The heartbeat latency the threshold was made to follow (calibrate.py), or 0."""

    async def restart(self) -> None:
        assert self.stop is not None and self.start is not None
        await self.stop()
        await self.start()


@dataclass
class Chaos:
    """What the soak did to whom, and when (monotonic clock; partitions: wall clock)."""

    killed: dict[int, float] = field(default_factory=dict)
    frozen: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Each worker frozen once at most, from SIGSTOP to SIGCONT."""
    stopped: set[int] = field(default_factory=set)
    """Workers frozen now or before."""
    restarts: list[tuple[float, float]] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)


PARTITIONS_SHORT = Profile(
    jobs=200,
    workers=3,
    kills=0,
    freezes=0,
    restarts=0,
    deadline=100,
    partitions=("blip", "cut", "lossy", "server", "flap"),
    work=0.25,
    lossy=4.0,
    backlog=48,
)
"""``make test``'s partition profile: every kind of network fault once, no other chaos."""

PARTITIONS_LONG = Profile(
    jobs=20_000,
    workers=3,
    kills=20,
    freezes=5,
    restarts=3,
    deadline=3600,
    partitions=("blip", "cut", "lossy", "server", "flap") * 3,
    work=0.25,
    lossy=60.0,
    cut=30.0,
    flaps=5,
    backlog=48,
)
"""``make soak``'s partition profile: every kind of network fault three times (cuts of 30 s,
a minute of lossy link), with kills, freezes and server restarts among them."""

PARTITIONS_MEMORY = Profile(
    jobs=200_000,
    workers=1,
    kills=0,
    freezes=0,
    restarts=0,
    deadline=3 * 3600,
    partitions=("blip", "cut", "lossy", "server", "flap"),
    lossy=10.0,
    cut=12.0,
    flaps=3,
    backlog=2000,
    calm=10.0,
    repeat=True,
)
"""The issue's memory figure under partitions (``--memory``): one worker on one test host runs
200,000 short jobs while every kind of network fault hits its link in turn, again and again,
with 10 s of calm after each (cuts of 12 s, longer than the stall threshold and than the
backends' 10 s timeouts; blips shorter than the threshold; 10 s of lossy, slow link; flaps),
and nothing else to restart it. Its RSS is read from its journal: growth from a tenth of its
runs to its last."""
