"""The worker's own threads for plain (non-async) handlers: one per slot, none that holds the
process open."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class ThreadPool(Executor):
    """Runs plain handlers on up to ``size`` threads, started as needed.

    Sized to the worker's concurrency: asyncio's default pool stops at CPU count + 4, so a
    worker with more slots would queue plain handlers behind each other. Not a
    ``ThreadPoolExecutor`` because its threads are joined at interpreter exit even after
    ``shutdown(wait=False)``, so one handler that never returns keeps the process alive. These
    threads are daemons: a worker that must exit leaves a running handler behind, and that
    job's claim, no longer renewed, is recovered as stalled.
    """

    def __init__(self, size: int, name: str = "relaymq-handler") -> None:
        if size < 1:
            raise ValueError("a thread pool needs at least one thread")
        self.size = size
        self.name = name
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run a handler after the thread pool was shut down")
            self._work.put((future, functools.partial(fn, *args, **kwargs)))
            if self._idle > 0:
                self._idle -= 1
            elif len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more handlers; ``cancel_futures`` cancels those not started; ``wait`` joins the
        threads (``wait=False`` leaves running handlers to end, or to die with the process)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            threads = list(self._threads)
            for _ in threads:
                self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, call = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as e:
                    future.set_exception(e)
                else:
                    future.set_result(result)
            del future, call
            with self._lock:
                self._idle += 1
