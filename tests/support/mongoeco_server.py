"""Run the MongoDB-protocol test server mongoeco: ``python mongoeco_server.py PORT PATH|memory``.

mongoeco has no server CLI, so this is the project's launcher (tested recipe:
/work/shared/services.md section 1). It runs under its own Python 3.13 virtualenv
(``.venv-mongo``, made by scripts/services.d/mongodb.sh), never under the project's Python.
``PATH`` is the SQLite data file (data survives SIGKILL and restarts); ``memory`` selects the
in-memory engine. Prints ``READY <uri>`` once it accepts connections; stops on SIGTERM/SIGINT.
"""

import asyncio
import signal
import sys

from mongoeco.engines.memory import MemoryEngine
from mongoeco.engines.sqlite import SQLiteEngine
from mongoeco.wire import AsyncMongoEcoProxyServer


async def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    engine = MemoryEngine() if path == "memory" else SQLiteEngine(path)
    server = AsyncMongoEcoProxyServer(engine=engine, host="127.0.0.1", port=port)
    addr = await server.start()
    print("READY", addr.uri, flush=True)
    stop = asyncio.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(s, stop.set)
    await stop.wait()
    await server.close()


if __name__ == "__main__":
    asyncio.run(main())
