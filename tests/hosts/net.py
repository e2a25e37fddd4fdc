"""Test hosts as network namespaces on this machine, for partition tests (needs root, Debian's
iproute2 for ``ip`` and nftables for ``nft``; the kernel here has no ``netem``, so delay comes
from proxy.py and loss from an nftables rule).

A run tagged ``T`` (this process's pid and a letter) makes, all named ``rq`` + ``T`` + a suffix
so that a later run can tell its own leftovers (the pid is dead) from another run's:

- the server host ``rqTs``: a bridge ``rqTbr`` with ``10.231.N.1/24``, where the servers listen,
  and ``10.231.N.2``, where the delay proxy does;
- worker hosts ``rqTw1``...: each a veth ``rqTwI`` (``10.231.N.1I``) whose peer ``rqTpI`` is a
  port of the bridge: setting that port down cuts the host off, as a pulled cable does (no
  reset reaches either end: connections hang until the link heals or a timeout ends them);
- a link from this process's own namespace, ``rqTh`` (``10.231.N.254``) to the bridge port
  ``rqTph``, which no fault touches: the test reaches the servers through it.

``N`` is a /24 of 10.231.0.0/16 that no route of this namespace uses yet. ``close`` kills every
process still in the hosts and deletes them; ``sweep`` does that for runs whose process died.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Sequence

PREFIX = "rq"
SUBNET = "10.231"
STALE = re.compile(rf"^{PREFIX}(\d+)[a-z](s|w\d+|h)$")
"""The names a run makes (namespaces, and its one link in this namespace): ``rq`` + the pid of
the process that made them + a letter + the role."""
_letters = itertools.cycle("abcdefghijklmnopqrstuvwxyz")


class HostsError(RuntimeError):
    """A command that makes or changes the test hosts failed."""


def run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise HostsError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why test hosts cannot be made here, or None (tries to make and delete a namespace)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install {package}; 'make services' does)"
    probe = f"{PREFIX}{os.getpid()}zs"
    try:
        run("ip", "netns", "add", probe)
    except HostsError as e:
        return f"cannot make a network namespace: {e}"
    run("ip", "netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """SIGKILL every process still in ``namespace`` (servers, workers, proxies: all ours)."""
    for pid in run("ip", "netns", "pids", namespace, check=False).split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass


def sweep() -> list[str]:
    """Delete what runs that died left behind (their pid is gone); the names deleted."""
    gone = []
    for line in run("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        found = STALE.match(name)
        if found and not _alive(int(found.group(1))):
            _kill_inside(name)
            run("ip", "netns", "del", name, check=False)
            gone.append(name)
    for line in run("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        found = STALE.match(name)
        if found and found.group(2) == "h" and not _alive(int(found.group(1))):
            run("ip", "link", "del", name, check=False)
            gone.append(name)
    return gone


def _free_subnet(tag: str) -> str:
    used = run("ip", "-4", "-o", "addr", "show") + run("ip", "-4", "route", "show")
    start = int(tag.rstrip("abcdefghijklmnopqrstuvwxyz")) % 250
    for n in range(250):
        net = f"{SUBNET}.{(start + n) % 250 + 1}"
        if f"{net}." not in used:
            return net
    raise HostsError(f"no free /24 left in {SUBNET}.0.0/16")


class Hosts:
    """One server host and ``workers`` worker hosts (numbered from 1)."""

    def __init__(self, workers: int) -> None:
        self.tag = f"{os.getpid()}{next(_letters)}"
        self.workers = workers
        self.server = f"{PREFIX}{self.tag}s"
        self.net = ""
        self.made: list[str] = []
        """Namespaces made so far (deleted by ``close``)."""
        self.link = f"{PREFIX}{self.tag}h"
        self._lossy: set[int] = set()

    @property
    def address(self) -> str:
        """The server host's address, where its servers listen."""
        return f"{self.net}.1"

    @property
    def slow_address(self) -> str:
        """The server host's second address, where the delay proxy listens."""
        return f"{self.net}.2"

    def namespace(self, host: int) -> str:
        return f"{PREFIX}{self.tag}w{host}"

    def port(self, host: int) -> str:
        """The server-side end of worker host ``host``'s link (a bridge port)."""
        return f"{PREFIX}{self.tag}p{host}"

    def inside(self, host: int | None) -> list[str]:
        """The argv prefix that runs a command on worker host ``host`` (None: the server)."""
        return ["ip", "netns", "exec", self.server if host is None else self.namespace(host)]

    def open(self) -> None:
        sweep()
        self.net = _free_subnet(self.tag)
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        s, br = self.server, f"{PREFIX}{self.tag}br"
        run("ip", "netns", "add", s)
        self.made.append(s)
        run("ip", "-n", s, "link", "set", "lo", "up")
        run("ip", "-n", s, "link", "add", br, "type", "bridge")
        run("ip", "-n", s, "addr", "add", f"{self.address}/24", "dev", br)
        run("ip", "-n", s, "addr", "add", f"{self.slow_address}/24", "dev", br)
        run("ip", "-n", s, "link", "set", br, "up")
        for host in range(1, self.workers + 1):
            ns = self.namespace(host)
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            self._join(ns, ns, self.port(host), f"{self.net}.{10 + host}")
        self._join("", self.link, f"{PREFIX}{self.tag}ph", f"{self.net}.254")

    def _join(self, ns: str, end: str, port: str, address: str) -> None:
        """Link ``end`` in namespace ``ns`` ("": this one) to a new port of the bridge."""
        where = ["-n", ns] if ns else []
        run("ip", *where, "link", "add", end, "type", "veth", "peer", "name", port)
        run("ip", *where, "link", "set", port, "netns", self.server)
        run("ip", *where, "addr", "add", f"{address}/24", "dev", end)
        run("ip", *where, "link", "set", end, "up")
        run("ip", "-n", self.server, "link", "set", port, "master", f"{PREFIX}{self.tag}br")
        run("ip", "-n", self.server, "link", "set", port, "up")

    def close(self) -> None:
        """Kill every process in the hosts and delete them (also after a failed ``open``)."""
        for ns in self.made:
            _kill_inside(ns)
        for ns in self.made:
            run("ip", "netns", "del", ns, check=False)
        run("ip", "link", "del", self.link, check=False)
        self.made = []

    # -- faults -----------------------------------------------------------------------------

    def cut(self, hosts: Sequence[int]) -> None:
        """Pull the cable of each worker host in ``hosts``: its bridge port goes down."""
        for host in hosts:
            run("ip", "-n", self.server, "link", "set", self.port(host), "down")

    def heal(self, hosts: Sequence[int]) -> None:
        for host in hosts:
            run("ip", "-n", self.server, "link", "set", self.port(host), "up")

    def isolate_server(
        self, on: bool, *, from_self: bool = False, ports: Sequence[int] = ()
    ) -> None:
        """Drop every packet between the server and the worker hosts (``from_self``: this
        namespace instead, which otherwise still reaches it; ``ports``: only those of the
        servers listening on these ports). The links stay up: the server's own firewall drops
        the packets silently, so the other end's TCP backs off as it does when a router on the
        way loses them (a link that goes down makes Linux retry sooner)."""
        table = "rqself" if from_self else "rq"
        if not on:
            run("ip", "netns", "exec", self.server, "nft", "delete", "table", "inet", table)
            return
        peers = f"{self.net}.254" if from_self else f"{self.net}.11-{self.net}.{10 + self.workers}"
        listed = ", ".join(map(str, ports))
        into, out = (
            (f"tcp dport {{ {listed} }} ", f"tcp sport {{ {listed} }} ") if ports else ("", "")
        )
        rules = (
            f"table inet {table} {{\n"
            f"  chain in {{ type filter hook input priority 0; ip saddr {peers} {into}drop; }}\n"
            f"  chain out {{ type filter hook output priority 0; ip daddr {peers} {out}drop; }}\n"
            "}\n"
        )
        _nft(self.server, rules)

    def lossy(self, host: int, percent: int) -> None:
        """Drop ``percent`` % of the packets in and out of worker host ``host`` (0: none)."""
        ns, dev = self.namespace(host), self.namespace(host)
        if host in self._lossy:
            run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "rq")
            self._lossy.discard(host)
        if percent <= 0:
            return
        drop = f"numgen random mod 100 < {percent} drop"
        rules = (
            "table inet rq {\n"
            f'  chain in {{ type filter hook input priority 0; iifname "{dev}" {drop}; }}\n'
            f'  chain out {{ type filter hook output priority 0; oifname "{dev}" {drop}; }}\n'
            "}\n"
        )
        _nft(ns, rules)
        self._lossy.add(host)


def _nft(namespace: str, rules: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "-f", "-"],
        input=rules,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise HostsError(f"nft in {namespace}: {done.stderr.strip()}")
