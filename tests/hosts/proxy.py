"""A TCP proxy that adds delay, for a worker host whose link is made slow (the kernel here has
no ``netem``): ``python -m tests.hosts.proxy LISTEN TARGET PORT...`` forwards each
``LISTEN:PORT`` to ``TARGET:PORT``. SIGUSR1 turns the delay on, SIGUSR2 off: then every chunk
read, in each direction, is passed on ``DELAY`` seconds later, give or take ``JITTER``, never
ahead of the chunk before it (a stream stays in order): about 200 ms more per round trip.
Prints ``READY`` once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys

DELAY = 0.1
JITTER = 0.025


class Link:
    slow = False


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    loop = asyncio.get_running_loop()
    last = 0.0
    try:
        while chunk := await reader.read(65536):
            if Link.slow:
                last = max(last, loop.time() + DELAY + random.uniform(-JITTER, JITTER))
                await asyncio.sleep(last - loop.time())
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _forward(target: str, port: int) -> object:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return serve


async def main(listen: str, target: str, ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(Link, "slow", True))
    loop.add_signal_handler(signal.SIGUSR2, lambda: setattr(Link, "slow", False))
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    servers = [await asyncio.start_server(_forward(target, p), listen, p) for p in ports]  # type: ignore[arg-type]
    print("READY", flush=True)
    await stop.wait()
    for s in servers:
        s.close()
        with contextlib.suppress(Exception):
            await s.wait_closed()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]))
