"""The failover figures of docs/deploying.md: each topology's failover run, ``--runs`` times,
one table row per run (``python -m tests.topologies.run --runs 3 [postgres sentinel rabbitmq]``).
Needs root and the Debian packages of scripts/topologies.sh."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from tests.topologies.failover import Failover, failover

Run = Callable[[Path], Awaitable[Failover]]


LAG = 0.5
"""Seconds the replication stream is cut before the primary is killed, in the lagging runs: a
replica behind its primary (a slow link, a loaded host), then a primary whose host is gone."""


async def lagging(primary: int, replica_end: int, kill: Callable[[], None]) -> None:
    """Drop the packets from ``primary``'s port to the replica's end of the replication
    connection (port ``replica_end``; clients still get their answers), ``LAG`` seconds later
    kill the primary; the packets stay dropped (the dead host's kernel sends nothing more)
    until the end of the run. An nftables table of its own, ``topo_lag``."""
    script = (
        "table inet topo_lag {\n chain out {\n  type filter hook output priority 0;\n"
        f"  tcp sport {primary} tcp dport {replica_end} drop\n }}\n}}\n"
    )
    nft = ["nft", "-f", "-"]
    await asyncio.to_thread(subprocess.run, nft, input=script, text=True, check=True)
    await asyncio.sleep(LAG)  # the lag itself: writes go on that the replica does not get
    await asyncio.to_thread(kill)


def lag_done() -> None:
    subprocess.run(["nft", "delete", "table", "inet", "topo_lag"], capture_output=True)


def postgres(synchronous: bool, lag: bool = False) -> Run:
    async def run(tmp: Path) -> Failover:
        from tests.topologies.replicas import Pair

        pair = Pair(synchronous=synchronous)
        await asyncio.to_thread(pair.start)

        async def fault() -> None:
            if lag:
                end = await asyncio.to_thread(pair.replication_port)
                await lagging(pair.primary_port, end, pair.kill_primary)
            else:
                await asyncio.to_thread(pair.kill_primary)
            await asyncio.to_thread(pair.promote)

        mode = "synchronous" if synchronous else "asynchronous"
        try:
            return await failover(
                "PostgreSQL primary + streaming replica",
                f"{mode} replication" + (f", replica {LAG}s behind" if lag else ""),
                f"{pair.url}&migrate=true",
                ("primary killed, replica promoted", fault),
                tmp,
            )
        finally:
            lag_done()
            await asyncio.to_thread(pair.stop)

    return run


def sentinel(wait: bool, lag: bool = False) -> Run:
    async def run(tmp: Path) -> Failover:
        from tests.topologies.sentinel import SentinelSet

        servers = SentinelSet(tmp / "servers")
        await asyncio.to_thread(servers.start)

        async def fault() -> None:
            if lag:
                primary = servers.ports[servers.primary]
                end = await asyncio.to_thread(servers.replication_port)
                await lagging(primary, end, servers.kill_primary)
            else:
                await asyncio.to_thread(servers.kill_primary)
            await asyncio.to_thread(servers.await_failover)
            await asyncio.to_thread(servers.restart_old_primary)

        options = "?prefix=topo" + ("&wait_replicas=1&wait_timeout=0.5" if wait else "")
        try:
            return await failover(
                "Redis primary + replica + 3 sentinels",
                ("wait_replicas=1" if wait else "no WAIT")
                + (f", replica {LAG}s behind" if lag else ""),
                servers.url(options),
                ("primary killed, sentinels promote the replica", fault),
                tmp / "run",
            )
        finally:
            lag_done()
            servers.stop()

    return run


async def rabbitmq(tmp: Path) -> Failover:
    from tests.redis.support import delete_prefix
    from tests.support import case_redis
    from tests.topologies.rabbit_cluster import RabbitCluster

    cluster = RabbitCluster()
    await asyncio.to_thread(cluster.start)
    prefix = f"topo-{uuid.uuid4().hex[:8]}"
    store = quote(f"{case_redis.URL}?prefix={prefix}", safe="")

    async def fault() -> None:
        await asyncio.to_thread(cluster.kill, "topo1")

    try:
        return await failover(
            "RabbitMQ cluster of 3 (metadata on Redis)",
            "quorum queues",
            cluster.url(f"queue_type=quorum&prefix={prefix}.&store={store}"),
            ("the clients' node killed", fault),
            tmp,
            jobs=300,
        )
    finally:
        await asyncio.to_thread(cluster.stop)
        await delete_prefix(case_redis.URL, prefix)


TOPOLOGIES: dict[str, list[Run]] = {
    "postgres": [postgres(True), postgres(False)],
    "postgres-lag": [postgres(True, lag=True), postgres(False, lag=True)],
    "sentinel": [sentinel(True), sentinel(False)],
    "sentinel-lag": [sentinel(True, lag=True), sentinel(False, lag=True)],
    "rabbitmq": [rabbitmq],
}


async def main(names: list[str], runs: int) -> None:
    print(
        "| topology | durability | jobs | fault | workers ran jobs again p50 / p99 "
        "| accepted jobs lost | duplicates (explained by the fault) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        for make in TOPOLOGIES[name]:
            for _ in range(runs):
                result = await make(Path(tempfile.mkdtemp(prefix="topo-run-")))
                print(result.row(), *result.problems(), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("names", nargs="*", default=list(TOPOLOGIES))
    args = parser.parse_args()
    asyncio.run(main(args.names, args.runs))
