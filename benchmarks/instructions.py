"""Instructions per job, counted by valgrind: a figure that other processes on the machine
do not move, for comparing two versions of relaymq on a shared, noisy machine.

    python benchmarks/instructions.py --url memory:// --workload drain
    python benchmarks/instructions.py --url redis://127.0.0.1:6379/0 --workload add

Runs the workload in a child process under ``valgrind --tool=callgrind`` twice, with ``--small``
and ``--large`` jobs, and prints (instructions at large - at small) / (large - small): the cost
of one more job, without the start-up (imports, connections) both runs share. Only this
process's user-space instructions count: the server's work and the kernel's are not in it.

Workloads: ``drain`` enqueues the jobs in bulk (``add_bulk``, chunks of 1,000), then one
in-process worker (concurrency 10) runs them all, as ``drain.py`` does; ``add`` makes one
``Queue.add`` per job, with no worker. Run it from the checkout to measure: it imports the
relaymq next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def add(url: str, jobs: int) -> None:
    from benchmarks.tasks import noop
    from relaymq import Queue, connect

    backend = await connect(url)
    queue = Queue(f"bench-ins-{uuid.uuid4().hex[:8]}", backend)
    bound = noop.with_options(queue=queue.name)
    try:
        for _ in range(jobs):
            await queue.add(bound.call())
    finally:
        await queue.obliterate()
        await backend.close()


async def drain(url: str, jobs: int) -> None:
    from benchmarks.drain import one_run
    from benchmarks.peers.common import Calls

    await one_run(url, jobs, Calls(""))


WORKLOADS = {"add": add, "drain": drain}


def count(url: str, workload: str, jobs: int) -> int:
    """Instructions of one child process running ``workload`` with ``jobs`` jobs."""
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-W",
            "ignore",
            __file__,
            "--child",
            "--url",
            url,
            "--workload",
            workload,
            "--jobs",
            str(jobs),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="drain")
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(WORKLOADS[args.workload](args.url, args.jobs))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    small = count(args.url, args.workload, args.small)
    large = count(args.url, args.workload, args.large)
    per_job = (large - small) / (args.large - args.small)
    print(
        f"{args.workload} on {args.url.split('://', 1)[0]}: {per_job:,.0f} instructions per "
        f"job ({args.small:,} and {args.large:,} jobs: {small:,} and {large:,})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
