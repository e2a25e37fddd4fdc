"""Run the MongoDB-protocol test server mongoeco: ``python mongoeco_server.py PORT PATH|memory
[HOST]`` (HOST: 127.0.0.1 unless given).

mongoeco has no server CLI, so this is the project's launcher (tested recipe:
/work/shared/services.md section 1). It runs under its own Python 3.13 virtualenv
(``.venv-mongo``, made by scripts/services.d/mongodb.sh), never under the project's Python.
``PATH`` is the SQLite data file (data survives SIGKILL and restarts); ``memory`` selects the
in-memory engine. Prints ``READY <uri>`` once it accepts connections; stops on SIGTERM/SIGINT.

mongoeco writes through more than one SQLite connection to the file, and SQLite's default
busy timeout (5 s) lets a write that waits longer for another's lock fail with "database is
locked": an error a real mongod never gives, which on a loaded 2-core CI machine failed an
enqueue late in the whole suite. The engine's connections wait up to ``BUSY_TIMEOUT_MS``.
Some of its lock conflicts do not wait at all (SQLite returns them at once, for instance to a
connection whose read snapshot another connection's commit has made stale), and the same error
failed an event publish in a later run, with that timeout in place: a command that failed for
"database is locked" alone is run again, until ``LOCKED_RETRY_FOR`` seconds have passed: a
write that met it could not take SQLite's write lock and changed nothing, so running it again
is what a server that had waited would have done.
"""

import asyncio
import os
import signal
import sys

from mongoeco.engines.memory import MemoryEngine
from mongoeco.engines.sqlite import SQLiteEngine
from mongoeco.wire import AsyncMongoEcoProxyServer
from mongoeco.wire.executor import WireCommandExecutor

BUSY_TIMEOUT_MS = int(os.environ.get("MONGOECO_BUSY_TIMEOUT_MS", "120000"))
"""(The environment's value: for the test of the retry below, which sets 0.)"""
LOCKED_RETRY_FOR = 60.0
LOCKED = "database is locked"


class PatientSQLiteEngine(SQLiteEngine):
    """mongoeco's SQLite engine with connections that wait out each other's write locks."""

    def _create_sqlite_connection(self):  # type: ignore[no-untyped-def]  # mongoeco 4.11.0
        connection = super()._create_sqlite_connection()
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return connection


def run_again_while_locked() -> None:
    """Make every command that fails for "database is locked" alone run again (mongoeco
    4.11.0: its ``WireCommandExecutor.execute_prepared`` runs one decoded command)."""
    once = WireCommandExecutor.execute_prepared

    async def patient(self, context):  # type: ignore[no-untyped-def]
        loop = asyncio.get_running_loop()
        until, pause = loop.time() + LOCKED_RETRY_FOR, 0.005
        while True:
            try:
                result = await once(self, context)
            except Exception as e:
                if LOCKED not in str(e) or loop.time() > until:
                    raise
            else:
                failed = isinstance(result, dict) and result.get("ok") == 0
                if not (failed and result.get("errmsg") == LOCKED) or loop.time() > until:
                    return result
            await asyncio.sleep(pause)  # the other connection's commit
            pause = min(pause * 2, 0.2)

    WireCommandExecutor.execute_prepared = patient  # type: ignore[method-assign]


async def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    run_again_while_locked()
    engine = MemoryEngine() if path == "memory" else PatientSQLiteEngine(path)
    server = AsyncMongoEcoProxyServer(engine=engine, host=host, port=port)
    addr = await server.start()
    print("READY", addr.uri, flush=True)
    stop = asyncio.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(s, stop.set)
    await stop.wait()
    await server.close()


if __name__ == "__main__":
    asyncio.run(main())
