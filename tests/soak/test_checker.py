"""The soak's checker holds a healed worker to the heal of the last fault that hit its host: a
worker cut off again before its time to come back after the first fault is not counted late
for that one (the long partition profile reported a worker 31 s late after a blip, when a 30 s
cut of its host began 0.75 s after the blip healed; it was back 0.75 s after that cut)."""

from __future__ import annotations

from collections import Counter

from tests.hosts.faults import Partition
from tests.soak.checker import Facts, Report, Run, _resumed, _taken_over
from tests.soak.journal import Entry
from tests.soak.plan import Chaos

RECONNECT = 10.0


def check(partitions: list[Partition]) -> Report:
    report = Report("t", 3, 1.5)
    ledger = {
        "a": [Run(1, pid=1, at=5.0)],  # the worker on host 1 at work before the faults
        "b": [Run(1, pid=1, at=42.25)],  # and again 0.75 s after the cut healed
        "c": [Run(1, pid=2, at=60.0)],  # work was left for it all along (host 2's worker)
    }
    facts = Facts({}, {}, [], {1: 1, 2: 2}, {}, {}, 1.5, RECONNECT)
    for p in partitions:
        _resumed(report, ledger, p, facts, partitions)
    return report


def test_a_worker_cut_off_again_is_held_to_the_later_heal() -> None:
    blip = Partition("blip", (1,), 10.0, 10.75)
    cut = Partition("cut", (1,), 11.5, 41.5)
    report = check([blip, cut])
    assert report.not_resumed == []
    assert report.reconnected == [0.75]  # the cut's heal to its next run


def test_a_worker_late_after_its_hosts_last_fault_is_reported() -> None:
    blip = Partition("blip", (1,), 10.0, 10.75)
    report = check([blip])  # nothing else hit host 1: 31.5 s to its next run is late
    assert [line.split(":")[0] for line in report.not_resumed] == ["pid 1 on host 1"]
    assert "31.5s after the blip healed" in report.not_resumed[0]


def test_a_takeover_is_put_down_to_the_fault_that_made_the_claim_stale() -> None:
    """Seen in the long partition profile on Redis: a job started on host 2 as the server was
    cut off for 30 s; at the heal its own worker's recovery put it back in line and its settle
    was refused; another worker ran it as a flap of host 2 began 0.5 s later. The checker put
    the takeover down to the flap and, looking for the refusal after the flap began, reported
    the worker as never told."""
    server = Partition("server", (1, 2), 15.0, 45.0)
    flap = Partition("flap", (2,), 46.5, 52.5)
    ledger = {"j": [Run(1, pid=2, at=14.9), Run(2, pid=1, at=47.0)]}
    journals = {
        2: [
            Entry(45.9, "recovered", ok=True, job="j"),
            Entry(46.1, "refused", ok=True, job="j"),
            Entry(70.0, "beat", ok=True),  # at work long after
        ]
    }
    facts = Facts({}, {}, [], {1: 1, 2: 2}, journals, {}, 1.5, RECONNECT)
    chaos = Chaos(partitions=[server, flap])
    assert facts.cause(ledger["j"][0], 47.0, chaos) == "partition (server)"
    report = Report("t", 3, 1.5)
    for p in chaos.partitions:
        _taken_over(report, {}, ledger, chaos, p, facts)
    assert report.unaware == [] and report.told == Counter({"refused": 1})
