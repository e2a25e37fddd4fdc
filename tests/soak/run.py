"""The long soak: ``make soak`` (every backend) or ``python -m tests.soak.run [--jobs N]
[--seed S] [BACKEND ...]``. Prints each backend's report; exits 1 when any soak finds a job
lost, stuck, written stale or run twice without a crash that explains it."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from tests.soak.harness import LONG, Report, soak
from tests.soak.targets import NAMES, OPENERS, unavailable


async def run(names: list[str], jobs: int, seed: int | None) -> list[Report]:
    profile = dataclasses.replace(LONG, jobs=jobs)
    reports = []
    for name in names:
        reason = unavailable(name)
        if reason:
            print(f"{name}: not soaked: {reason}", flush=True)
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f"soak-{name}-"))
        async with OPENERS[name](tmp) as target:
            report = await soak(target, profile, tmp, seed)
        print(report.summary(), flush=True)
        if report.ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # the workers' stderr files and the ledger, to look into
            print(f"  kept {tmp}", flush=True)
        if report.aborted:
            print(f"  aborted: {report.aborted}", flush=True)
        for problem in report.unexplained[:5] + report.lost[:5] + report.stuck[:5]:
            print(f"  {problem}", flush=True)
        for problem in report.stale[:5] + report.worker_exits[:5]:
            print(f"  {problem}", flush=True)
        reports.append(report)
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backends", nargs="*", metavar="BACKEND", help=", ".join(NAMES))
    parser.add_argument("--jobs", type=int, default=LONG.jobs)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    # the soak crashes servers on purpose: the drivers' reconnect tracebacks are not news
    for driver in ("asyncpg", "aio_pika", "aiormq", "pymongo"):
        logging.getLogger(driver).setLevel(logging.CRITICAL)
    if unknown := set(args.backends) - set(NAMES):
        parser.error(
            f"unknown backend {', '.join(sorted(unknown))}: choose from {', '.join(NAMES)}"
        )
    reports = asyncio.run(run(args.backends or list(NAMES), args.jobs, args.seed))
    sys.exit(0 if reports and all(r.ok for r in reports) else 1)


if __name__ == "__main__":
    main()
