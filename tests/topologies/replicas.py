"""A private PostgreSQL primary and its streaming replica (``pg_basebackup -R``), on free
loopback ports, in a folder of their own under /tmp, run as user postgres.

``synchronous=True`` names the replica in the primary's ``synchronous_standby_names``, so a
commit returns only once the replica has flushed it; otherwise replication is asynchronous
(the default). ``kill_primary`` is a crash (``pg_ctl stop -m immediate``: no checkpoint, no
last WAL sent), ``promote`` makes the replica the primary. ``url`` lists both hosts with
``target_session_attrs=read-write``: clients find whichever is the primary.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.topologies.servers import as_user, free_port, missing, need_root

BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_basebackup"))


class Pair:
    def __init__(self, *, synchronous: bool) -> None:
        if not BIN:
            missing("no PostgreSQL server binaries under /usr/lib/postgresql (apt postgresql)")
        need_root("a private PostgreSQL primary and replica")
        self.bin = BIN[-1].parent
        # under /tmp itself: user postgres cannot enter pytest's folders (root's, mode 0700)
        self.dir = Path(tempfile.mkdtemp(prefix="topo-pg-"))
        self.synchronous = synchronous
        self.primary_port = free_port()
        self.replica_port = free_port()
        self.running: list[str] = []

    @property
    def url(self) -> str:
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.replica_port}"
            "/postgres?target_session_attrs=read-write"
        )

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            as_user("postgres", [*args]), capture_output=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"{args[0]} failed: {done.stderr.decode(errors='replace')}")

    def _ctl(self, name: str, *args: str) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / name), *args)

    def start(self) -> None:
        shutil.chown(self.dir, "postgres")
        primary = self.dir / "primary"
        self._run(str(self.bin / "initdb"), "-D", str(primary), "-A", "trust", "-U", "postgres")
        conf = ["fsync = on", "wal_level = replica", "listen_addresses = '127.0.0.1'"]
        if self.synchronous:
            conf.append("synchronous_standby_names = 'replica'")
        with (primary / "postgresql.conf").open("a") as f:
            f.write("\n".join(conf) + "\n")
        self._start("primary", self.primary_port)
        self._run(
            str(self.bin / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-D",
            str(self.dir / "replica"),
            "-R",  # standby.signal and primary_conninfo
            "-X",
            "stream",
            "-d",
            f"host=127.0.0.1 port={self.primary_port} user=postgres application_name=replica",
        )
        if self.synchronous:
            # Once promoted, the replica has no standby of its own: as a failover manager
            # does, it must not wait for one (its commits would hang for ever).
            with (self.dir / "replica" / "postgresql.conf").open("a") as f:
                f.write("synchronous_standby_names = ''\n")
        self._start("replica", self.replica_port)

    def _start(self, name: str, port: int) -> None:
        opts = f"-p {port} -k {self.dir}"
        self._ctl(name, "-l", str(self.dir / f"{name}.log"), "-o", opts, "-w", "start")
        self.running.append(name)

    def replication_port(self) -> int:
        """The replica's end (client port) of its replication connection to the primary."""
        psql = self.bin / "psql"
        query = "SELECT client_port FROM pg_stat_replication"
        argv = [str(psql), "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres"]
        done = subprocess.run(
            as_user("postgres", [*argv, "-Atc", query]), capture_output=True, text=True
        )
        return int(done.stdout.split()[0])

    def kill_primary(self) -> None:
        """The primary crashes: an immediate stop (no checkpoint, nothing more sent)."""
        self._ctl("primary", "-m", "immediate", "-w", "stop")
        self.running.remove("primary")

    def promote(self) -> None:
        """The replica becomes the primary (what an operator or Patroni does)."""
        self._ctl("replica", "-w", "promote")

    def stop(self) -> None:
        for name in list(self.running):
            try:
                self._ctl(name, "-m", "immediate", "-w", "stop")
            except AssertionError:
                pass  # already gone
            self.running.remove(name)
        shutil.rmtree(self.dir, ignore_errors=True)
