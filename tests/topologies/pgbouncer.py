"""A private PgBouncer (Debian's package, default settings) in front of a PostgreSQL server,
with one pooled database per pool mode: ``session`` and ``transaction`` (both on the
server's database ``relaymq_test``). It runs as user postgres (``-u``: PgBouncer refuses
root), on a free port, in the test's own folder; ``stop`` ends it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.topologies.servers import await_port, free_port, give, need_binary, need_root


class PgBouncer:
    def __init__(self, folder: Path, upstream_port: int, database: str = "relaymq_test") -> None:
        self.dir = folder
        self.port = free_port()
        self.upstream_port = upstream_port
        self.database = database
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, mode: str) -> str:
        """The pooled URL of pool mode ``mode`` (``session`` or ``transaction``)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{mode}"

    def start(self) -> None:
        binary = need_binary("pgbouncer", "apt-get install pgbouncer; make test does it")
        need_root("PgBouncer")
        self.dir.mkdir(parents=True, exist_ok=True)
        upstream = f"host=127.0.0.1 port={self.upstream_port} dbname={self.database}"
        (self.dir / "users.txt").write_text('"postgres" ""\n')
        # Only what a pooler needs to run here; every other setting is PgBouncer's default
        # (no ignore_startup_parameters, server_reset_query DISCARD ALL, ...).
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"session = {upstream} pool_mode=session\n"
            f"transaction = {upstream} pool_mode=transaction\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'users.txt'}\n"
        )
        give(self.dir, "postgres")
        log = self.dir / "pgbouncer.log"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [binary, "-u", "postgres", str(self.dir / "pgbouncer.ini")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        await_port(self.port, 10, "PgBouncer", log)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
