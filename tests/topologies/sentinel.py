"""A private Redis primary, its replica and three sentinels (``redis-server --sentinel``), on
free loopback ports, in the test's folder.

The sentinels watch service ``topo`` (quorum 2, the primary counted down after 2 s without an
answer). ``kill_primary`` is a SIGKILL; ``await_failover`` waits until the sentinels name the
replica as the primary; ``restart_old_primary`` starts the killed one again as a replica of the
new primary. Given ``tls``, every server and sentinel listens on TLS only (replication and the
sentinels' own links too), and ``url`` is a ``rediss+sentinel://`` URL trusting its authority.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from tests.topologies.servers import await_port, free_port, need_binary
from tests.topologies.tls import Certificates

SERVICE = "topo"


class SentinelSet:
    def __init__(self, folder: Path, tls: Certificates | None = None) -> None:
        self.dir = folder
        self.tls = tls
        self.binary = need_binary("redis-server", "apt-get install redis-server")
        self.ports = {"a": free_port(), "b": free_port()}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.primary = "a"

    def url(self, options: str = "") -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        if self.tls is None:
            return f"redis+sentinel://{hosts}/{SERVICE}/0{options}"
        trust = f"ssl_ca_certs={self.tls.ca}"
        options = f"{options}&{trust}" if options else f"?{trust}"
        return f"rediss+sentinel://{hosts}/{SERVICE}/0{options}"

    def _listen(self, port: int) -> dict[str, str]:
        """A server's (or sentinel's) settings for where and how it listens."""
        if self.tls is None:
            return {"port": str(port)}
        return {
            "port": "0",  # TLS only
            "tls-port": str(port),
            "tls-cert-file": str(self.tls.cert),
            "tls-key-file": str(self.tls.key),
            "tls-ca-cert-file": str(self.tls.ca),
            "tls-auth-clients": "no",
            "tls-replication": "yes",  # replicas and sentinels reach servers over TLS too
        }

    def _client(self, port: int) -> redis.Redis:
        if self.tls is None:
            return redis.Redis(port=port)
        return redis.Redis(port=port, ssl=True, ssl_ca_certs=str(self.tls.ca))

    def _server(self, name: str, *extra: str) -> None:
        folder = self.dir / name
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "log"
        self.procs[name] = subprocess.Popen(
            [
                self.binary,
                *(w for k, v in self._listen(self.ports[name]).items() for w in (f"--{k}", v)),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(folder),
                "--appendonly",  # replication is what carries the jobs here (an fsync per
                "no",  # write stalled a busy 2-core machine past down-after: a second failover)
                "--save",
                "",
                "--logfile",
                str(log),
                *extra,
            ]
        )
        await_port(self.ports[name], 10, f"redis-server {name}", log)

    def start(self) -> None:
        self._server("a")
        self._server("b", "--replicaof", "127.0.0.1", str(self.ports["a"]))
        for n, port in enumerate(self.sentinel_ports):
            folder = self.dir / f"sentinel{n}"
            folder.mkdir(parents=True, exist_ok=True)
            conf = folder / "sentinel.conf"  # the sentinel rewrites it: a file of its own
            conf.write_text(
                "".join(f"{k} {v}\n" for k, v in self._listen(port).items())
                + f"bind 127.0.0.1\ndir {folder}\nlogfile {folder / 'log'}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports['a']} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 2000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
            )
            self.procs[f"sentinel{n}"] = subprocess.Popen([self.binary, str(conf), "--sentinel"])
            await_port(port, 10, f"sentinel {n}", folder / "log")
        # ready once the replica is in sync and every sentinel knows it (else no failover)
        self._until(self._ready, 30, "the replica in sync and known to every sentinel")

    def _ready(self) -> bool:
        primary = self._client(self.ports["a"])
        try:
            info = primary.info("replication")
            if info.get("connected_slaves") != 1 or info.get("slave0", {}).get("state") != "online":
                return False
        finally:
            primary.close()
        for port in self.sentinel_ports:
            s = self._client(port)
            try:
                if len(s.sentinel_slaves(SERVICE)) != 1 or len(s.sentinel_sentinels(SERVICE)) != 2:
                    return False
            finally:
                s.close()
        return True

    def named_primary(self) -> int | None:
        """The primary's port as the first sentinel names it."""
        s = self._client(self.sentinel_ports[0])
        try:
            found = s.sentinel_get_master_addr_by_name(SERVICE)
            return int(found[1]) if found else None
        finally:
            s.close()

    def replication_port(self) -> int:
        """The replica's end (client port) of its replication connection to the primary."""
        r = self._client(self.ports[self.primary])
        try:
            [replica] = r.client_list(_type="replica")
            return int(replica["addr"].rpartition(":")[2])
        finally:
            r.close()

    def kill_primary(self) -> None:
        self.procs[self.primary].kill()
        self.procs[self.primary].wait()

    def await_failover(self, within: float = 30.0) -> None:
        old = self.ports[self.primary]
        self._until(lambda: self.named_primary() not in (None, old), within, "a new primary")
        self.primary = "b" if self.primary == "a" else "a"

    def restart_old_primary(self) -> None:
        old = "b" if self.primary == "a" else "a"
        # as an orchestrator does: back as a replica of the new primary (the sentinels would
        # turn it into one too, some seconds later)
        self._server(old, "--replicaof", "127.0.0.1", str(self.ports[self.primary]))
        self._until(lambda: self._replicas(self.primary) >= 1, 30, f"{old} back as a replica")

    def _replicas(self, name: str) -> int:
        r = self._client(self.ports[name])
        try:
            info = r.info("replication")
            return sum(
                1
                for k, v in info.items()
                if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
            )
        finally:
            r.close()

    def _until(self, check: object, within: float, what: str) -> None:
        assert callable(check)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except redis.RedisError:
                pass  # a server restarting
            time.sleep(0.1)  # the sentinels act on their own timers: a look every 0.1 s
        raise AssertionError(f"waited {within}s for {what}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
