"""Run a peer job queue's benchmark N times and report the median.

Standard library only (Python 3.11), so relaymq's own benchmark can import it:

    from run import run_peer        # with benchmarks/peers on sys.path
    summary = run_peer("huey", "redis", None, 10_000, 3)
    summary["e2e_per_s"], summary["enqueue_per_s"]

or, from the command line:

    python benchmarks/peers/run.py --peer huey --backend redis --runs 3
    python benchmarks/peers/run.py --peer all --runs 1

Each run is a fresh subprocess: ``<peer>_bench.py`` under the peer's own
venv (benchmarks/.venvs/<peer>/, created on first use by venvs.py).  The
bench script prints one JSON line; run.py prints every such line and then a
summary line with ``"stat": "median"``.  Each bench script starts in its own
session, so if it overruns its deadline (plus a margin) run.py kills its
whole process group, worker included.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent

# peer -> backend -> default number of jobs.  asyncmq is slow enough on
# PostgreSQL and RabbitMQ that 10,000 jobs would not finish in a bounded run;
# the JSON always says how many jobs were actually used.
PEERS: dict[str, dict[str, int]] = {
    "huey": {"redis": 10_000},
    "bullmq": {"redis": 10_000},
    "asyncmq": {"redis": 10_000, "postgres": 1_000, "rabbitmq": 200},
    "pgqueuer": {"postgres": 10_000},
    "oban": {"postgres": 10_000},
    "dramatiq": {"rabbitmq": 10_000},
}
DEFAULT_RUNS = 3
DEFAULT_DEADLINE_S = 120.0
KILL_MARGIN_S = 30.0  # on top of the bench script's own deadline


class PeerRunError(RuntimeError):
    """A peer benchmark run failed or produced no result."""


def _load_venvs() -> ModuleType:
    # Loaded by path so run.py works whether it is run as a script, imported
    # as a top-level module or as part of a package.
    spec = importlib.util.spec_from_file_location("_relaymq_peer_venvs", HERE / "venvs.py")
    if spec is None or spec.loader is None:
        raise ImportError("cannot load venvs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


venvs = _load_venvs()


def default_jobs(peer: str, backend: str) -> int:
    _check(peer, backend)
    return PEERS[peer][backend]


def _check(peer: str, backend: str) -> None:
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}; known: {', '.join(PEERS)}")
    if backend not in PEERS[peer]:
        raise ValueError(f"{peer} has no {backend!r} backend here; known: {', '.join(PEERS[peer])}")


def bench_command(
    python: Path,
    peer: str,
    backend: str,
    url: str | None,
    jobs: int,
    deadline_s: float,
    extra_args: Sequence[str] = (),
) -> list[str]:
    cmd = [
        str(python),
        str(HERE / f"{peer}_bench.py"),
        "--jobs",
        str(jobs),
        "--deadline",
        str(deadline_s),
    ]
    if peer == "asyncmq":
        cmd += ["--backend", backend]
    if url:
        cmd += ["--url", url]
    return cmd + list(extra_args)


def run_once(
    peer: str,
    backend: str,
    url: str | None = None,
    jobs: int = 0,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    extra_args: Sequence[str] = (),
) -> dict[str, Any]:
    """One run in a fresh subprocess; returns the bench script's JSON result."""
    _check(peer, backend)
    jobs = jobs or PEERS[peer][backend]
    python = venvs.ensure_venv(peer)
    cmd = bench_command(python, peer, backend, url, jobs, deadline_s, extra_args)
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=deadline_s + KILL_MARGIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the bench script and its worker
        proc.communicate()
        raise PeerRunError(
            f"{peer}/{backend}: killed after {deadline_s + KILL_MARGIN_S:g} s"
        ) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-40:])
        raise PeerRunError(f"{peer}/{backend}: exit code {proc.returncode}\n{tail}")
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            if result.get("peer") == peer:
                return result
    raise PeerRunError(f"{peer}/{backend}: no JSON result in output:\n{out}\n{err}")


def run_peer(
    peer: str,
    backend: str,
    url: str | None = None,
    jobs: int = 0,
    runs: int = DEFAULT_RUNS,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    extra_args: Sequence[str] = (),
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run ``peer`` on ``backend`` ``runs`` times, each in a fresh subprocess.

    ``url`` None means the bench script's default server URL; ``jobs`` 0 means
    the default for that peer and backend (see PEERS).  ``on_result`` is called
    with each run's JSON result as it arrives.  Returns the median figures:
    ``{"peer", "version", "backend", "jobs", "runs", "enqueue_per_s",
    "e2e_per_s", "samples": [each run's result]}``.  Raises PeerRunError if a
    run fails.
    """
    if runs < 1:
        raise ValueError("runs must be >= 1")
    samples: list[dict[str, Any]] = []
    for _ in range(runs):
        result = run_once(peer, backend, url, jobs, deadline_s=deadline_s, extra_args=extra_args)
        samples.append(result)
        if on_result is not None:
            on_result(result)
    return {
        "peer": peer,
        "version": samples[0]["version"],
        "backend": backend,
        "jobs": samples[0]["jobs"],
        "runs": runs,
        "enqueue_per_s": statistics.median(s["enqueue_per_s"] for s in samples),
        "e2e_per_s": statistics.median(s["e2e_per_s"] for s in samples),
        "worker_cpu_us_per_job": (
            statistics.median(s["worker_cpu_us_per_job"] for s in samples)
            if all("worker_cpu_us_per_job" in s for s in samples)
            else None
        ),
        "samples": samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Benchmark a peer job queue (median of N runs).")
    p.add_argument("--peer", required=True, choices=[*PEERS, "all"])
    p.add_argument(
        "--backend",
        default=None,
        help="redis, postgres or rabbitmq (default: the peer's first; ignored with --peer all)",
    )
    p.add_argument("--url", default=None, help="server URL (default: the bench script's)")
    p.add_argument("--jobs", type=int, default=0, help="jobs per run (default: per peer/backend)")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    p.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_S,
        help="per-run hard deadline in seconds (default %(default)s)",
    )
    args, extra = p.parse_known_args(argv)  # anything else goes to the bench script

    if args.peer == "all":
        combos = [(peer, backend) for peer, backends in PEERS.items() for backend in backends]
    else:
        combos = [(args.peer, args.backend or next(iter(PEERS[args.peer])))]

    def echo(result: dict[str, Any]) -> None:
        print(json.dumps(result), flush=True)

    failed = 0
    for peer, backend in combos:
        try:
            summary = run_peer(
                peer,
                backend,
                args.url if args.peer != "all" else None,
                args.jobs,
                args.runs,
                deadline_s=args.deadline,
                extra_args=extra,
                on_result=echo,
            )
        except (PeerRunError, ValueError, venvs.VenvError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            failed += 1
            continue
        median = {k: v for k, v in summary.items() if k != "samples"}
        print(json.dumps({"stat": "median", **median}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
