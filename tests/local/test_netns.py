"""Brokers on two "hosts": network namespaces on one bridge, one etcd, a shared file:// store.

Each broker runs in its own namespace (`ip netns exec`), binds and advertises that namespace's
address and replicates to the other across the bridge; etcd and the client stay in the root
namespace. This is the README's multi-machine recipe, run. Needs CAP_NET_ADMIN; skipped otherwise,
saying why, and a failure under CI (tests/needs.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from needs import NETNS_STEP, missing

from gazette.client.aio import Route
from gazette.client.sync import Client
from gazette.fragment.fragment import Fragment
from gazette.keyspace.etcd import EmbeddedEtcd
from gazette.keyspace.procutil import read_ready_line, spawn, terminate
from gazette.protocol.spec import JournalSpec
from gazette.testing import wait_for

BROKERS = 2
LEASE_TTL_S = 3  # a killed broker's assignments are released this long after its death
BROKER_START_TIMEOUT_S = 30.0
IP_COMMAND_TIMEOUT_S = 10.0
SUBNET_PREFIX = "10.77"  # the lab uses 10.77.<x>.0/24, <x> free in the root namespace
PROXY_VARIABLES = {"http_proxy", "https_proxy", "grpc_proxy", "all_proxy"}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def _free_subnet() -> str:
    """A 10.77.<x> prefix no root-namespace address uses, starting from one derived from the pid."""
    used = _ip("-o", "-4", "addr", "show").stdout
    start = os.getpid() % 250
    for k in range(250):
        candidate = f"{SUBNET_PREFIX}.{1 + (start + k) % 250}"
        if f" {candidate}." not in used:
            return candidate
    raise RuntimeError(f"every {SUBNET_PREFIX}.x.0/24 subnet is in use in the root namespace")


@dataclasses.dataclass
class NetnsBroker:
    namespace: str
    address: str
    suffix: str
    proc: subprocess.Popen[Any]
    endpoint: str
    log_path: Path

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""


@dataclasses.dataclass
class NetnsLab:
    """What the fixture made, so teardown removes exactly that (and the test can address it)."""

    tag: str
    subnet: str = ""
    bridge: str = ""
    namespaces: list[str] = dataclasses.field(default_factory=list)
    etcd: EmbeddedEtcd | None = None
    brokers: list[NetnsBroker] = dataclasses.field(default_factory=list)
    store_dir: Path = Path()

    @property
    def store(self) -> str:
        return f"file://{self.store_dir}/"

    def close(self) -> None:
        for b in self.brokers:
            terminate(b.proc, timeout=5.0)
            if b.proc.stdout is not None:
                b.proc.stdout.close()
        if self.etcd is not None:
            self.etcd.stop()
        for ns in self.namespaces:  # deleting a namespace deletes its veth and the peer with it
            _ip("netns", "del", ns, check=False)
        if self.bridge:
            _ip("link", "del", self.bridge, check=False)


def _add_namespace(lab: NetnsLab, i: int) -> str:
    ns, host_veth, ns_veth = f"{lab.tag}ns{i}", f"{lab.tag}h{i}", f"{lab.tag}n{i}"
    address = f"{lab.subnet}.{10 + i}"
    if ns not in lab.namespaces:  # the first one was made by the fixture's probe
        _ip("netns", "add", ns)
        lab.namespaces.append(ns)
    _ip("link", "add", host_veth, "type", "veth", "peer", "name", ns_veth, "netns", ns)
    _ip("link", "set", host_veth, "master", lab.bridge, "up")
    _ip("-n", ns, "addr", "add", f"{address}/24", "dev", ns_veth)
    _ip("-n", ns, "link", "set", ns_veth, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    return address


def _start_broker(lab: NetnsLab, i: int, address: str, tmp_path: Path) -> NetnsBroker:
    """`ip netns exec NS gazette broker serve --host <namespace address>` (it execs, keeping the pid)."""
    assert lab.etcd is not None
    gazette_bin = Path(sys.executable).with_name("gazette")
    program = [str(gazette_bin)] if gazette_bin.exists() else [sys.executable, "-m", "gazette.cli.main"]
    ns, suffix = lab.namespaces[i], f"host-{i}"
    spool_dir = tmp_path / f"spool-{i}"
    spool_dir.mkdir()
    cmd = [
        "ip", "netns", "exec", ns, *program, "broker", "serve",
        "--etcd", lab.etcd.endpoint, "--zone", f"zone-{i}", "--suffix", suffix,
        "--host", address, "--port", "0", "--lease-ttl", str(LEASE_TTL_S), "--exit-drain", "1",
        "--spool-dir", str(spool_dir), "--log-level", "INFO",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARIABLES}
    log_path = tmp_path / f"broker-{i}.log"
    with open(log_path, "ab") as log_file:
        proc = spawn(cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, env=env)
    broker = NetnsBroker(ns, address, suffix, proc, "", log_path)
    lab.brokers.append(broker)
    ready = read_ready_line(proc, BROKER_START_TIMEOUT_S)
    if ready is None:
        raise AssertionError(f"broker in {ns} did not start; its log ends with:\n{broker.log_tail()}")
    assert ready["pid"] == proc.pid, "ip netns exec should exec the broker, not fork it"
    broker.endpoint = ready["endpoint"]
    return broker


def _reachable_across(lab: NetnsLab, source: int, target: NetnsBroker) -> str | None:
    """None if a TCP connection from namespace `source` to `target` works, else why not."""
    host, port = target.endpoint.removeprefix("http://").rsplit(":", 1)
    probe = f"import socket; socket.create_connection(({host!r}, {port}), 3).close()"
    proc = subprocess.run(
        ["ip", "netns", "exec", lab.namespaces[source], sys.executable, "-I", "-S", "-c", probe],
        capture_output=True, text=True, timeout=IP_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["no output"])[-1]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[NetnsLab]:
    if shutil.which("ip") is None:
        missing("the `ip` command (iproute2) is not installed", NETNS_STEP)
    made = NetnsLab(tag=f"gz{os.getpid() % 100000}")
    try:
        # Probe first: without root / CAP_NET_ADMIN (or in a sandbox) `ip netns add` fails.
        probe = _ip("netns", "add", f"{made.tag}ns0", check=False)
        if probe.returncode != 0:
            missing(f"cannot create network namespaces (`ip netns add`: {probe.stderr.strip()})", NETNS_STEP)
        made.namespaces.append(f"{made.tag}ns0")
        made.subnet = _free_subnet()
        made.bridge = f"{made.tag}br"
        _ip("link", "add", made.bridge, "type", "bridge", "forward_delay", "0")
        _ip("addr", "add", f"{made.subnet}.1/24", "dev", made.bridge)
        _ip("link", "set", made.bridge, "up")
        addresses = [_add_namespace(made, i) for i in range(BROKERS)]

        # etcd on the root namespace's bridge address: the "etcd host" every broker dials.
        made.etcd = EmbeddedEtcd(data_dir=str(tmp_path / "etcd"), host=f"{made.subnet}.1").start()
        made.store_dir = tmp_path / "store"  # on disk all "hosts" share, like a network mount
        made.store_dir.mkdir()
        for i, address in enumerate(addresses):
            _start_broker(made, i, address, tmp_path)
        why = _reachable_across(made, 0, made.brokers[1])
        if why is not None:
            filtered = f"traffic between namespaces over a bridge is filtered here (br_netfilter?): {why}"
            missing(filtered, NETNS_STEP)
        yield made
    finally:
        made.close()


def _full_route(clients: list[Client], journal: str) -> Route | None:
    """The journal's route if every broker reports the same one, with a primary and both members."""
    routes = []
    for c in clients:
        infos = [i for i in c.list_journals(f"name={journal}") if i.spec.name == journal]
        if len(infos) != 1:
            return None
        routes.append(infos[0].route)
    first = routes[0]
    if first.primary < 0 or len(first.members) != BROKERS or any(r != first for r in routes):
        return None
    return first


def _fragment_files(store_dir: Path, journal: str) -> list[Path]:
    return sorted(p for p in (store_dir / journal).rglob("*") if p.is_file())


def test_brokers_in_separate_namespaces_replicate_through_one_etcd(lab: NetnsLab) -> None:
    endpoints = [b.endpoint for b in lab.brokers]
    for b in lab.brokers:  # bound and advertised on its namespace's address, not loopback
        assert b.endpoint.startswith(f"http://{b.address}:"), b.endpoint
    clients = [Client(ep) for ep in endpoints]  # from the root namespace, one per "host"
    try:
        journal = "netns/words/part-000"
        clients[0].apply_journals(
            [
                JournalSpec(
                    journal, replication=BROKERS, stores=[lab.store], labels={"content-type": "text/plain"}
                )
            ]
        )
        route = wait_for(
            "both brokers to hold the journal's full route", lambda: _full_route(clients, journal)
        )
        assert set(route.endpoints) == set(endpoints), route  # peers dial what each advertised
        suffixes = [b.suffix for b in lab.brokers]
        assert sorted(suffix for _, suffix in route.members) == sorted(suffixes)
        primary = suffixes.index(route.members[route.primary][1])
        other = 1 - primary

        # Through the non-primary broker: proxied across namespaces to the primary.
        persisted_part = b"".join(b"word-%d\n" % n for n in range(100))
        res = clients[other].append(journal, persisted_part)
        assert (res.begin, res.end) == (0, len(persisted_part))
        clients[primary].flush(journal)  # None when a roll of the journal's first write persisted it already

        def persisted() -> Fragment | None:
            done = [f for f in clients[primary].list_fragments(journal) if f.backing_store]
            return done[0] if done else None

        fragment = wait_for("the first fragment to be persisted", persisted)
        assert fragment.backing_store == lab.store
        assert (fragment.begin, fragment.end) == (0, len(persisted_part))
        stored = _fragment_files(lab.store_dir, journal)
        assert [p.relative_to(lab.store_dir).as_posix() for p in stored] == [fragment.content_path]

        spooled_part = b"only-in-spools\n" * 10
        res = clients[primary].append(journal, spooled_part)
        assert (res.begin, res.end) == (len(persisted_part), len(persisted_part) + len(spooled_part))
        everything = persisted_part + spooled_part
        for c in clients:
            assert c.read_all(journal) == everything

        # SIGKILL the primary: the tail was never persisted (the store holds only the flushed
        # fragment), so the survivor can serve it only from the replica it got over the bridge.
        lab.brokers[primary].proc.send_signal(signal.SIGKILL)
        lab.brokers[primary].proc.wait(timeout=10)
        assert _fragment_files(lab.store_dir, journal) == stored
        survivor = clients[other]
        assert wait_for(
            "the surviving broker to read everything", lambda: survivor.read_all(journal) == everything
        )
        tail = [f for f in survivor.list_fragments(journal) if f.end == len(everything)]
        assert tail and tail[0].backing_store == "", tail  # spooled on the survivor, not persisted
    finally:
        for c in clients:
            c.close()
