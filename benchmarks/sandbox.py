import asyncio, time, statistics
from relaymq import Queue, Worker, Settings
from relaymq.backends.memory import InMemoryBackend
from relaymq.job import JobState
from tests import tasks, sandbox_tasks

async def run(task_call, n, conc):
    b = InMemoryBackend(); q = Queue("ov", b)
    w = Worker(b, ["ov"], settings=Settings(concurrency=conc))
    r = asyncio.create_task(w.run()); await w.started.wait()
    # warm the sandbox children
    await q.add_bulk([task_call() for _ in range(conc)])
    await w.until(lambda s: s.completed >= conc, "warm", 60)
    t = time.perf_counter()
    await q.add_bulk([task_call() for _ in range(n)])
    await w.until(lambda s: s.completed >= conc + n, "done", 120)
    dt = time.perf_counter() - t
    w.stop(); await r
    return dt / n * 1e6

async def main():
    for conc in (1, 10):
        for name, call in [("in-process async", lambda: tasks.add.call(1, 2)), ("sandboxed async", lambda: sandbox_tasks.whose_pid.call(1, 2))]:
            xs = [await run(call, 2000, conc) for _ in range(3)]
            print(f"concurrency {conc:2d} {name:18s} median {statistics.median(xs):7.0f} us/job  runs {[round(x) for x in xs]}")
asyncio.run(main())
