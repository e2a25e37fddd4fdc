"""What a command costs a Redis server, command by command: ``INFO commandstats`` around it.

    python benchmarks/commandstats.py --redis redis://127.0.0.1:6733 --per 6000 -- \
        .venv/bin/python benchmarks/single_enqueue.py --url redis://127.0.0.1:6733/0

Resets the server's statistics (``CONFIG RESETSTAT``: use a server of your own, nobody else's
figures are kept), runs the command, then prints for each Redis command it ran: calls, total
microseconds inside the command, microseconds per call, and with ``--per N`` the microseconds
per one of the N operations the command made (6,000 enqueues for ``single_enqueue.py``'s three
loops of 2,000; warm-up calls make the figure a touch high). These are the server's own times
of the commands, steadier than CPU counted per process on a shared machine; they leave out
reading and writing the sockets. Standard library and redis-py only, so it also measures a
peer's script (``benchmarks/peers/huey_bench.py --enqueue-only``) run in its own virtualenv.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from redis import Redis


def stats(client: Redis) -> dict[str, dict[str, float]]:
    info = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): v for k, v in info.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", required=True, help="the server (its own: stats are reset)")
    parser.add_argument("--per", type=int, default=0, help="operations the command makes")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    client = Redis.from_url(args.redis)
    client.config_resetstat()
    subprocess.run(command, check=True)
    found = stats(client)
    found.pop("info", None)
    total = sum(s["usec"] for s in found.values())
    for name, s in sorted(found.items(), key=lambda kv: -kv[1]["usec"]):
        calls, usec, each = s["calls"], s["usec"], s["usec_per_call"]
        print(f"  {name:<16} {calls:>8} calls {usec:>10,} us {each:>8.2f} us/call")
    per = f", {total / args.per:.1f} us per operation of {args.per}" if args.per else ""
    print(f"total {total:,} us inside Redis commands{per}")
    client.close()


if __name__ == "__main__":
    sys.exit(main())
