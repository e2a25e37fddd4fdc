"""The long soak: ``make soak`` runs it on every backend, then the partition profile on every
backend that workers share over a network; or ``python -m tests.soak.run [--jobs N] [--seed S]
[--partitions [--memory]] [--short] [BACKEND ...]`` (``--memory``: one worker's RSS over
200,000 jobs under the network faults, ``PARTITIONS_MEMORY``). Prints each backend's report;
exits 1 when any soak finds a job lost, stuck, written stale or run twice without a cause that
explains it, or a healed worker that did not come back on its own."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from tests.soak.harness import Report, soak
from tests.soak.plan import (
    LONG,
    PARTITIONS_LONG,
    PARTITIONS_MEMORY,
    PARTITIONS_SHORT,
    SHORT,
    Profile,
)
from tests.soak.targets import NAMES, OPENERS, unavailable


async def run(
    names: list[str], profile: Profile, seed: int | None, partitions: bool, keep: bool = False
) -> list[Report]:
    reports = []
    for name in names:
        reason = unavailable(name)
        if partitions and reason is None:
            from tests.hosts import net

            reason = net.unavailable()
        if reason:
            print(f"{name}: not soaked: {reason}", flush=True)
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f"soak-{name}-"))
        if partitions:
            from tests.hosts.servers import on_hosts

            opened = on_hosts(name, tmp, workers=min(3, profile.workers))
        else:
            opened = OPENERS[name](tmp)
        async with opened as target:
            report = await soak(target, profile, tmp, seed)
        print(report.summary(), flush=True)
        if report.ok and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # the workers' stderr files, the ledger and the journals, to look into
            print(f"  kept {tmp}", flush=True)
        if report.aborted:
            print(f"  aborted: {report.aborted}", flush=True)
        for problem in report.problems():
            print(f"  {problem}", flush=True)
        reports.append(report)
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backends", nargs="*", metavar="BACKEND", help=", ".join(NAMES))
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--partitions",
        action="store_true",
        help="the long partition profile, on test hosts (network namespaces; needs root)",
    )
    parser.add_argument("--short", action="store_true", help="the short profile (make test's)")
    parser.add_argument(
        "--memory",
        action="store_true",
        help="with --partitions: one worker's RSS over 200,000 jobs under the network faults",
    )
    parser.add_argument("--keep", action="store_true", help="keep the ledgers of a good soak too")
    args = parser.parse_args()
    # the soak crashes servers on purpose: the drivers' reconnect tracebacks are not news
    for driver in ("asyncpg", "aio_pika", "aiormq", "pymongo"):
        logging.getLogger(driver).setLevel(logging.CRITICAL)
    names = list(NAMES)
    if args.partitions:
        from tests.hosts.servers import NAMES as SHARED

        names = list(SHARED)
    if unknown := set(args.backends) - set(names):
        parser.error(
            f"unknown backend {', '.join(sorted(unknown))}: choose from {', '.join(names)}"
        )
    profile = {
        (False, False): LONG,
        (False, True): SHORT,
        (True, False): PARTITIONS_LONG,
        (True, True): PARTITIONS_SHORT,
    }[args.partitions, args.short]
    if args.memory:
        if not args.partitions or args.short:
            parser.error("--memory goes with --partitions, not --short")
        profile = PARTITIONS_MEMORY
    if args.jobs is not None:
        profile = dataclasses.replace(profile, jobs=args.jobs)
    # a SIGTERM unwinds like ^C: every server, worker and test host made is removed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    chosen = args.backends or names
    reports = asyncio.run(run(chosen, profile, args.seed, args.partitions, args.keep))
    sys.exit(0 if reports and all(r.ok for r in reports) else 1)


if __name__ == "__main__":
    main()
