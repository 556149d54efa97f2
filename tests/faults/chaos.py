"""One seeded chaos scheduler: faults of every kind a deployment meets, under a live workload.

A `Rig` is three brokers (R=3, a file store), an embedded etcd and two stream-sum consumer members
(`gazette.examples.streamsum`, one hot standby per shard). Where network namespaces can be made
(CAP_NET_ADMIN), each broker and consumer member runs on its own "host" of the project's
network-namespace lab (tests/local/test_netns.py: a bridge, 10.77.x addresses), etcd listens on a
second address of the bridge and this process (the clients and the checker) on the first; without
them everything runs on loopback and the partition faults are skipped, saying why.

While the faults run, two workloads are live: `faults.workload.Workload` writers whose every
acknowledged append is later read back whole and in order, and a `Feeder` publishing stream-sum
chunks (committed) that the summers turn into one sum per stream (uncommitted, then ACKed).

`plan(seed, rounds, kinds)` draws every round up front from the seed: the fault kind (families
interleaved, so a few rounds cover brokers, consumers, etcd and the network), which process or
pair it hits (by role: the primary of a journal, a member holding primaries...) and how long it
lasts. Each round waits for a steady cluster, lets the workload run a random while, injects the
fault, holds it, heals it, and waits for recovery (routes, shard placement, acknowledgements and
summer progress again), printing one line. Replaying a seed replays the same plan.

The check at the end is independent of the code under test wherever possible:
  * the journals are read as raw bytes with plain Read RPCs and, after a flush, compared with the
    fragment files the brokers persisted to the file store (bytes and SHA-1 of every file);
  * acknowledged appends are checked by `faults.workload.verify` (whole, in order, nowhere else);
  * the stream-sum journals are decoded here (JSON lines, UUIDs with the stdlib) and sequenced by
    `committed()`, a re-implementation of Gazette's read-committed rules written from Gazette's
    message/sequencer.go, not from gazette-py: the committed chunks of each stream must be its
    chunks 1..n once each (their CRC-64 equal to the chunker's), and each stream's sum must be
    committed exactly once with the right value; the summers' sqlite stores must agree;
  * liveness: after the last fault heals, every stream's sum is committed within LIVENESS_BOUND_S
    and a blocking read-committed reader (gazette-py's ReadCommitted) of every pipeline journal
    reaches the journal's head within the same bound, delivering what `committed()` found.

A dirty read fails the round, named as such: the raw reader served, whole, an append that was never
acknowledged and that the journal does not keep, which a primary would do if it served a commit its
peers never got and then lost its lease (Gazette's broker does; gazette-py's serves a commit only
once every member holds it: tests/faults/test_dirty_read.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid as stdlib_uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from faults.harness import LEASE_TTL_S, ZONES, _list, route_of, say, wait_for
from faults.test_consumer_faults import _member_of, _placed, _replicas
from faults.workload import ACKED, READ_RETRY_S, RECORD, Attempt, Workload, read_journal, verify
from local.test_netns import PROXY_VARIABLES, NetnsLab, _add_namespace, _free_subnet, _ip

from gazette.consumer import ReplicaCode
from gazette.examples import streamsum
from gazette.fragment.fragment import parse_content_name
from gazette.keyspace import procutil
from gazette.keyspace.etcd import EmbeddedEtcd
from gazette.local.cluster import LocalCluster
from gazette.message import ReadCommitted
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.codec import Codec
from gazette.protocol.errors import ValidationError

SEED_ENV = "GAZETTE_FAULT_SEED"  # as the other fault tests: set it to replay a printed seed
BROKERS = 3
MEMBERS = 2  # consumer processes
PARTITIONS = 4  # stream-sum chunk partitions (= summer shards)
APPENDS = "faults/chaos/appends"
JOURNAL_FIELDS = dict(replication=3, fragment_length=256 * 1024, compression="none", refresh_interval="1s")
MAX_TXN = "200ms"
CHUNKS_PER_STREAM = 3
STREAMS_PER_CHUNKER = 6
FEED_STEP = 2  # chunks per publish
FEED_INTERVAL_S = 0.1
PROBE_INTERVAL_S = 0.1

PAST_LEASE_S = (LEASE_TTL_S + 1.0, LEASE_TTL_S + 3.0)  # SIGSTOPs and etcd pauses outlive every lease
PARTITION_S = (2.0, LEASE_TTL_S + 4.0)  # some partitions heal before a lease expires, some after
KILL_DOWN_S = (0.0, 1.5)
WARMUP_ACKS = (3, 30)  # the workload runs this many acknowledged appends before the fault
STEADY_BOUND_S = 120.0  # a round starts on a steady cluster within this
RECOVERY_BOUND_S = 120.0  # after a heal: routes, placement, acks and summer progress again
LIVENESS_BOUND_S = 120.0  # after the last heal: every stream committed, every reader at its head
READ_BACK_DEADLINE_S = 180.0  # raw reads of whole journals (a fragment only a replica holds waits)
FLUSH_RETRY_S = 30.0  # a flush answered with an error (routes still settling) is retried this long

# Fault kinds by family. Partitions need the network-namespace hosts.
FAMILIES: dict[str, tuple[str, ...]] = {
    "broker": ("broker-sigkill", "broker-sigstop"),
    "consumer": ("consumer-sigkill", "consumer-sigstop"),
    "etcd": ("etcd-sigterm", "etcd-sigstop"),
    "network": (
        "partition-brokers",
        "partition-isolate-primary",
        "partition-etcd",
        "partition-consumer-brokers",
    ),
}
KINDS = tuple(k for family in FAMILIES.values() for k in family)
PARTITION_KINDS = FAMILIES["network"]


# ---- the plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Round:
    n: int
    kind: str
    hold_s: float  # how long the fault lasts (a kill: how long the process stays down)
    warmup_acks: int
    pick: int  # chooses the victim among the candidates the kind names at run time
    journal: int  # whose roles pick the victim: 0 the appends journal, else Rig.journals[journal % 6]

    def __str__(self) -> str:
        return f"round {self.n}: {self.kind} for {self.hold_s:.1f} s"


def plan(seed: int, rounds: int, kinds: Iterable[str] = KINDS) -> list[Round]:
    """Every round, drawn from `seed` alone. Each cycle shuffles the kinds within each family and
    the order of the families, then takes one kind per family in turn: the first rounds of a cycle
    (the first four, with the network) cover every family, and the kinds of a family take turns.
    A round's own draws (hold, warm-up, victim pick) come from (seed, round number) alone, so the
    first n rounds of a longer plan are those of a plan of n rounds."""
    allowed = set(kinds)
    families = [[k for k in family if k in allowed] for family in FAMILIES.values()]
    families = [f for f in families if f]
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < rounds:
        cycle = [rng.sample(f, len(f)) for f in families]
        rng.shuffle(cycle)
        for i in range(max(len(f) for f in cycle)):
            order.extend(f[i] for f in cycle if i < len(f))
    out = []
    for n, kind in enumerate(order[:rounds]):
        r = random.Random(f"{seed}:{n}")  # a round's draws do not depend on how many rounds there are
        if kind in ("broker-sigstop", "consumer-sigstop", "etcd-sigstop"):
            hold = r.uniform(*PAST_LEASE_S)
        elif kind in PARTITION_KINDS:
            hold = r.uniform(*PARTITION_S)
        elif kind == "etcd-sigterm":
            hold = 0.0
        else:
            hold = r.uniform(*KILL_DOWN_S)
        out.append(
            Round(
                n,
                kind,
                round(hold, 2),
                r.randint(*WARMUP_ACKS),
                r.randrange(1 << 30),
                r.randrange(2 + PARTITIONS),
            )
        )
    return out


def seed_from_env() -> int:
    return int(os.environ.get(SEED_ENV, time.time_ns() % 1_000_000))


# ---- the network -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    address: str
    namespace: str = ""  # "" for the root namespace (this process, etcd)


DEAD_HOP = 254  # a bridge address nobody holds: traffic routed via it is dropped silently


class Network:
    """The lab's bridge and one namespace per broker and consumer member (made with the helpers of
    tests/local/test_netns.py), etcd's address beside this process's on the bridge, and partitions.

    A partition routes one side's packets for the other via DEAD_HOP, in each namespace involved:
    nothing answers its ARP, so packets vanish as on a cut link (connections hang, new ones time
    out), unlike a refused connection. Healing deletes those routes."""

    def __init__(
        self, lab: NetnsLab, client: Host, etcd: Host, brokers: list[Host], members: list[Host]
    ) -> None:
        self.lab = lab
        self.client = client
        self.etcd = etcd
        self.brokers = brokers
        self.members = members
        self._routes: set[tuple[str, str]] = set()  # (namespace, destination address)

    @classmethod
    def make(cls, brokers: int, members: int) -> tuple[Network | None, str]:
        """The lab, or None and why it cannot be made here."""
        if shutil.which("ip") is None:
            return None, "the `ip` command (iproute2) is not installed"
        lab = NetnsLab(tag=f"gc{os.getpid() % 100000}")
        try:
            probe = _ip("netns", "add", f"{lab.tag}ns0", check=False)
            if probe.returncode != 0:
                return None, f"cannot create network namespaces (`ip netns add`: {probe.stderr.strip()})"
            lab.namespaces.append(f"{lab.tag}ns0")
            lab.subnet = _free_subnet()
            lab.bridge = f"{lab.tag}br"
            _ip("link", "add", lab.bridge, "type", "bridge", "forward_delay", "0")
            _ip("addr", "add", f"{lab.subnet}.1/24", "dev", lab.bridge)  # first: this process's source
            _ip("addr", "add", f"{lab.subnet}.2/24", "dev", lab.bridge)  # etcd's own address
            _ip("link", "set", lab.bridge, "up")
            addresses = [_add_namespace(lab, i) for i in range(brokers + members)]
            hosts = [Host(f"broker-{i}" if i < brokers else f"member-{i - brokers}", a, lab.namespaces[i])
                     for i, a in enumerate(addresses)]  # fmt: skip
            net = cls(lab, Host("client", f"{lab.subnet}.1"), Host("etcd", f"{lab.subnet}.2"),
                      hosts[:brokers], hosts[brokers:])  # fmt: skip
            why = net.reachable(hosts[0], hosts[1].address)
            if why is not None:
                lab.close()
                return None, f"traffic between namespaces over a bridge is filtered here: {why}"
            return net, ""
        except Exception as exc:
            lab.close()
            return None, f"the network-namespace lab could not be made: {exc}"

    def reachable(self, source: Host, address: str, port: int | None = None) -> str | None:
        """None if `source` reaches `address` (a TCP connection to `port`, else an ICMP-free probe:
        a connection refused counts as reached), else why not."""
        probe = (
            "import socket\n"
            f"try: socket.create_connection(({address!r}, {port or 9}), 3).close()\n"
            "except ConnectionRefusedError: pass\n"
        )
        proc = subprocess.run(
            ["ip", "netns", "exec", source.namespace, sys.executable, "-I", "-S", "-c", probe],
            capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["no output"])[-1]

    def host_of_suffix(self, suffix: str) -> Host | None:
        """The host a process of this suffix runs on: broker-<i>, consumer-<i>-<nonce>."""
        kind, _, rest = suffix.partition("-")
        index = rest.split("-")[0]
        if not index.isdigit():
            return None
        hosts = self.brokers if kind == "broker" else self.members if kind == "consumer" else []
        return hosts[int(index)] if int(index) < len(hosts) else None

    def partition(self, side_a: list[Host], side_b: list[Host]) -> None:
        """No packet passes between any host of side_a and any of side_b (until `heal`)."""
        for a in side_a:
            for b in side_b:
                for src, dst in ((a, b), (b, a)):
                    if src.namespace and (src.namespace, dst.address) not in self._routes:
                        _ip("-n", src.namespace, "route", "add", f"{dst.address}/32",
                            "via", f"{self.lab.subnet}.{DEAD_HOP}")  # fmt: skip
                        self._routes.add((src.namespace, dst.address))

    def heal(self) -> None:
        for ns, dst in sorted(self._routes):
            _ip("-n", ns, "route", "del", f"{dst}/32", check=False)
        self._routes.clear()

    @property
    def everyone(self) -> list[Host]:
        return [self.client, self.etcd, *self.brokers, *self.members]

    def close(self) -> None:
        self.heal()
        self.lab.close()


def placed_spawn(net: Network) -> Callable[..., subprocess.Popen]:
    """procutil.spawn, but a broker or consumer member (found by its --suffix) starts on its host:
    `ip netns exec <namespace> ... --host <address>` (which execs: the pid is the program's).
    Proxy variables are dropped, as the netns test does: 10.77.x addresses are not loopback."""

    def spawn(args: Iterable[str], **kw: Any) -> subprocess.Popen:
        argv = list(args)
        host = net.host_of_suffix(argv[argv.index("--suffix") + 1]) if "--suffix" in argv else None
        if host is not None and host.namespace:
            argv = ["ip", "netns", "exec", host.namespace, *argv, "--host", host.address]
        env = kw.pop("env", None) or os.environ
        kw["env"] = {k: v for k, v in env.items() if k.lower() not in PROXY_VARIABLES}
        return procutil.spawn(argv, **kw)

    return spawn


# ---- the workload's parts ----------------------------------------------------------------------
class TracedWorkload(Workload):
    """faults.workload.Workload whose blocking reader also logs where each piece came from
    (time, endpoint, offset, length): a reader that saw bytes the journal does not hold is then
    traced to the broker that served them."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.read_log: list[tuple[float, str, int, int]] = []

    async def _reader(self) -> None:
        assert self._channels is not None
        turn = 0
        while True:
            endpoints = self.endpoints()
            endpoint = endpoints[turn % len(endpoints)]
            call = self._channels.stub(endpoint).Read(
                pb.ReadRequest(journal=self.journal, offset=len(self.read_bytes), block=True)
            )
            try:
                async for resp in call:
                    if resp.content:
                        if resp.offset != len(self.read_bytes):
                            self.reader_errors.append(
                                f"content at {resp.offset} while reading at {len(self.read_bytes)}"
                            )
                            return
                        self.read_log.append((time.monotonic(), endpoint, resp.offset, len(resp.content)))
                        self.read_bytes += resp.content
                    elif resp.status not in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
                        break
            except grpc.aio.AioRpcError:
                pass
            finally:
                call.cancel()
            turn += 1
            await asyncio.sleep(READ_RETRY_S)

    def divergence(self, content: bytes, t0: float = 0.0) -> tuple[str, bool]:
        """Where what the reader saw first differs from the journal ("" if nowhere): who served it,
        when, and the records each side holds there (with their attempts' outcomes); and whether it
        is the known dirty read (tests/faults/test_dirty_read.py): the reader was served, whole, an
        append that was never acknowledged and that the journal does not keep there."""
        seen = bytes(self.read_bytes)
        at = next((i for i, (x, y) in enumerate(zip(seen, content, strict=False)) if x != y), None)
        if at is None:
            return "", False
        line_start = max(seen.rfind(b"\n", 0, at), content.rfind(b"\n", 0, at)) + 1
        served = [e for e in self.read_log if e[2] <= at < e[2] + e[3]]
        by_key = {a.key: a for a in self.attempts}

        def attempt_at(data: bytes) -> Attempt | None:
            m = RECORD.match(data[line_start:].split(b"\n", 1)[0])
            return by_key.get((m.group(1).decode(), int(m.group(2)), int(m.group(3)))) if m else None

        def records(data: bytes) -> list[str]:
            out = []
            for line in data[line_start:].split(b"\n")[:3]:
                m = RECORD.match(line)
                a = by_key.get((m.group(1).decode(), int(m.group(2)), int(m.group(3)))) if m else None
                if a is None:
                    out.append(repr(line[:60]))
                else:
                    out.append(f"{line[:24].decode()}... attempt {a.key} {a.outcome} [{a.begin}, {a.end}) via "
                               f"{a.endpoint} {a.detail}")  # fmt: skip
            return out

        dirty = attempt_at(seen)
        known = (
            dirty is not None
            and dirty.outcome != ACKED
            and seen[line_start : line_start + len(dirty.content)] == dirty.content
            and content[line_start : line_start + len(dirty.content)] != dirty.content
        )
        text = (f"the reader's bytes differ from the journal's at {at} (records from {line_start}); served by "
                f"{[(f'+{t - t0:.2f} s', ep, off, n) for t, ep, off, n in served]}\n  reader saw: {records(seen)}\n"
                f"  journal holds: {records(content)}")  # fmt: skip
        return text, known


class Feeder:
    """Publishes stream-sum chunks, committed, on its own thread: FEED_STEP chunks each
    FEED_INTERVAL_S, a new Chunker of STREAMS_PER_CHUNKER streams whenever the last is exhausted.
    `done` lists (time exhausted, expected sums) per chunker. A publish that raises ends the feeder
    (republishing could duplicate chunks): `errors` says why."""

    def __init__(self, client: Any, seed: int) -> None:
        self.client = client
        self.seed = seed
        self.done: list[tuple[float, dict[str, dict[str, Any]]]] = []
        self.chunks = 0
        self.errors: list[str] = []
        self._finish = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-feeder")

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        k = 0
        while not (self._finish.is_set() or self._stop.is_set()):
            chunker = streamsum.Chunker(
                self.client, PARTITIONS, STREAMS_PER_CHUNKER, CHUNKS_PER_STREAM, seed=self.seed * 100_000 + k
            )
            k += 1
            while chunker.remaining and not self._stop.is_set():
                try:
                    self.chunks += chunker.publish(FEED_STEP)
                except Exception as exc:
                    self.errors.append(f"publishing chunks failed: {type(exc).__name__}: {exc}")
                    return
                if not self._finish.is_set():
                    time.sleep(FEED_INTERVAL_S)
            if not chunker.remaining:
                self.done.append((time.monotonic(), chunker.expected))

    @property
    def expected(self) -> dict[str, dict[str, Any]]:
        return {sid: want for _, exp in list(self.done) for sid, want in exp.items()}

    def finish(self, timeout: float) -> None:
        """Publishes what its current chunker has left (so every stream ends), then stops."""
        self._finish.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append(f"the feeder was still publishing {timeout:.0f} s after being asked to finish")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class Progress:
    """Polls each summer shard's sqlite store (read here, not through the consumer): per shard, the
    times its `sums` table moved (the sum of every stream's last seq grew), so a stalled pipeline
    shows as a gap."""

    def __init__(self, db_dir: str) -> None:
        self.paths = {
            streamsum.shard_id(i): os.path.join(db_dir, f"{streamsum.shard_id(i)}.db")
            for i in range(PARTITIONS)
        }
        self.moves: dict[str, list[float]] = {s: [] for s in self.paths}
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-progress")

    def start(self) -> Progress:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(PROBE_INTERVAL_S):
            for shard, path in self.paths.items():
                total = _store_total(path)
                if total is not None and total > self._last.get(shard, 0):
                    self._last[shard] = total
                    with self._lock:
                        self.moves[shard].append(time.monotonic())

    def moved_since(self, t: float) -> list[str]:
        """Shards that have not moved since `t`."""
        with self._lock:
            return [s for s, m in self.moves.items() if not m or m[-1] <= t]

    def longest_stall(self, t0: float, t1: float) -> float:
        """The longest time within [t0, t1] (from each shard's last move before t0) in which a shard
        did not move, over the shards."""
        worst = 0.0
        with self._lock:
            for moves in self.moves.values():
                before = [t for t in moves if t <= t0]
                points = [before[-1] if before else t0, *(t for t in moves if t0 < t <= t1), t1]
                worst = max(worst, *(b - a for a, b in zip(points, points[1:], strict=False)))
        return worst


def _store_total(path: str) -> int | None:
    if not os.path.exists(path):
        return None
    try:
        conn = sqlite3.connect(path, timeout=1.0)
        try:
            return int(conn.execute("SELECT COALESCE(SUM(seq), 0) FROM sums").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return None  # not created yet, or busy: the next poll sees it


def store_sums(db_dir: str) -> dict[str, tuple[int, str]]:
    """Every stream's (last seq, crc) over the summers' sqlite stores."""
    out: dict[str, tuple[int, str]] = {}
    for i in range(PARTITIONS):
        path = os.path.join(db_dir, f"{streamsum.shard_id(i)}.db")
        conn = sqlite3.connect(path, timeout=10.0)
        try:
            out.update({sid: (seq, crc) for sid, seq, crc in conn.execute("SELECT id, seq, crc FROM sums")})
        finally:
            conn.close()
    return out


# ---- the independent checker -------------------------------------------------------------------
OUTSIDE_TXN, CONTINUE_TXN, ACK_TXN = 0, 1, 2  # Gazette's message/uuid.go flags


@dataclasses.dataclass
class Message:
    begin: int
    end: int
    producer: bytes
    clock: int
    flags: int
    body: dict  # without "_meta"; {} for an ACK


def decode_json_lines(content: bytes, journal: str) -> tuple[list[Message], list[str]]:
    """Every message of a JSON-lines journal: the UUID at /_meta/uuid read with the stdlib's uuid
    and Gazette's layout (clock = 60-bit timestamp << 4 | the sequence counter's 4 bits; flags the
    low 10 bits of clock_seq; producer the node bytes). Problems name bytes that are no message."""
    out: list[Message] = []
    problems: list[str] = []
    offset = 0
    lines = content.split(b"\n")
    if lines[-1]:
        problems.append(f"{journal}: the journal ends in a partial line at {len(content) - len(lines[-1])}")
    for line in lines[:-1]:
        begin, offset = offset, offset + len(line) + 1
        try:
            doc = json.loads(line)
            u = stdlib_uuid.UUID(doc.pop("_meta")["uuid"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{journal}: undecodable bytes [{begin}, {offset}): {line[:80]!r} ({exc})")
            continue
        if u.version != 1:
            problems.append(f"{journal}: a message at {begin} has a UUID of version {u.version}")
            continue
        out.append(
            Message(
                begin, offset, u.bytes[10:], (u.time << 4) | (u.clock_seq >> 10), u.clock_seq & 0x3FF, doc
            )
        )
    return out, problems


@dataclasses.dataclass
class _Producer:
    min_clock: int  # everything at or below it is acknowledged or rolled back
    max_clock: int
    span: list[Message]


def committed(messages: Iterable[Message]) -> tuple[list[Message], dict[str, int]]:
    """The committed messages (ACKs included), in the order a read-committed reader delivers them,
    by Gazette's rules (message/sequencer.go, QueueUncommitted and Step), per producer:
    OUTSIDE_TXN commits itself unless its clock is at or below the last acknowledged one;
    CONTINUE_TXN joins the open span unless its clock is not above the span's (a duplicate);
    ACK_TXN at or below the last acknowledged clock rolls the span back; above it, it commits the
    span's messages of clock (last acknowledged, its own], in order, itself last. Counts outcomes."""
    producers: dict[bytes, _Producer] = {}
    out: list[Message] = []
    counts = {"duplicate": 0, "rolled back": 0, "rollback acks": 0}
    for m in messages:
        if m.clock == 0:  # no clock: commits itself, never deduplicated
            out.append(m)
            continue
        p = producers.setdefault(m.producer, _Producer(m.clock - 1, m.clock - 1, []))
        if m.flags == CONTINUE_TXN:
            if m.clock <= p.max_clock:  # at or below the acknowledged clock, or the span's
                counts["duplicate"] += 1
            else:
                p.span.append(m)
                p.max_clock = m.clock
        elif m.flags == ACK_TXN:
            if m.clock <= p.min_clock:
                counts["rollback acks"] += 1
                counts["rolled back"] += len(p.span)
                p.min_clock = p.max_clock = m.clock
                p.span = []
            else:
                running = p.min_clock
                for x in [*p.span, m]:
                    if running < x.clock <= m.clock:
                        out.append(x)
                        running = x.clock
                    else:
                        counts["rolled back"] += 1
                p.min_clock = p.max_clock = running
                p.span = []
        else:  # OUTSIDE_TXN (and unknown flags, as Gazette): commits only itself
            if m.clock <= p.min_clock:
                counts["duplicate"] += 1
            else:
                counts["rolled back"] += len(p.span)
                out.append(m)
                p.min_clock = p.max_clock = m.clock
                p.span = []
    return out, counts


def check_chunks(journal: str, msgs: list[Message], expected: dict[str, dict[str, Any]]) -> list[str]:
    """The committed chunks of one partition: per stream, seqs 1..n each once and in order, and
    for a finished stream the CRC-64 of its data equal to the chunker's sum."""
    problems = []
    state: dict[str, tuple[int, int]] = {}
    for m in msgs:
        if m.flags == ACK_TXN:
            continue
        sid, seq = m.body["id"], m.body["seq"]
        last, crc = state.get(sid, (0, 0))
        if seq != last + 1:
            problems.append(
                f"{journal}: stream {sid} committed chunk {seq} after chunk {last} (at {m.begin})"
            )
        if m.body["data"]:
            crc = streamsum.crc64_update(crc, bytes.fromhex(m.body["data"]))
        state[sid] = (seq, crc)
    for sid, (seq, crc) in state.items():
        want = expected.get(sid)
        if want is not None and (seq, f"{crc:016x}") != (want["seq"], want["sum"]):
            problems.append(
                f"{journal}: stream {sid} committed chunks up to {seq} summing {crc:016x}, chunker {want}"
            )
    return problems


def check_sums(msgs: list[Message], expected: dict[str, dict[str, Any]]) -> tuple[list[str], set[str]]:
    """Each finished stream's sum committed exactly once and right; returns problems and the
    streams whose sum is missing (not yet, or lost)."""
    problems = []
    seen: dict[str, dict] = {}
    for m in msgs:
        if m.flags == ACK_TXN:
            continue
        sid = m.body.get("id")
        if sid in seen:
            problems.append(f"sums: stream {sid} committed twice ({seen[sid]} and, at {m.begin}, {m.body})")
        seen[sid] = m.body
        want = expected.get(sid)
        if want is None:  # every finished stream is expected: this one never had its final chunk
            problems.append(f"sums: a sum for stream {sid}, which the chunker never finished: {m.body}")
        elif (m.body.get("seq"), m.body.get("sum")) != (want["seq"], want["sum"]):
            problems.append(f"sums: stream {sid} committed {m.body}, chunker {want}")
    return problems, set(expected) - set(seen)


def store_content(store_dir: str, journal: str, head: int) -> tuple[bytes, list[tuple[int, int]]]:
    """The journal [0, head) as the store's fragment files hold it (codec none), and the ranges no
    file covers (zero bytes in the content): a read that stalls on a hole still gets checked."""
    out = bytearray(head)
    covered: list[tuple[int, int]] = []
    root = Path(store_dir) / journal
    for path in sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []:
        try:
            begin, end, _, codec = parse_content_name(path.name)
        except ValidationError:
            continue
        if codec == Codec.NONE and begin < head:
            data = path.read_bytes()[: head - begin]
            out[begin : begin + len(data)] = data
            covered.append((begin, begin + len(data)))
    holes, reach = [], 0
    for begin, end in sorted(covered):
        if begin > reach:
            holes.append((reach, begin))
        reach = max(reach, end)
    if reach < head:
        holes.append((reach, head))
    return bytes(out), holes


def store_fragments(store_dir: str, journal: str, content: bytes) -> tuple[int, int, list[str]]:
    """Every fragment file persisted for `journal` (uncompressed: the chaos journals use codec
    none) compared with the raw bytes read: (files, bytes covered, problems)."""
    root = Path(store_dir) / journal
    files = covered = 0
    problems = []
    spans = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []:
        try:
            begin, end, sha1, codec = parse_content_name(path.name)
        except ValidationError:
            continue  # not a fragment (an upload's temporary file)
        data = path.read_bytes()
        files += 1
        if codec != Codec.NONE:
            problems.append(f"{journal}: fragment {path.name} is compressed ({codec.name}); expected none")
            continue
        if len(data) != end - begin or hashlib.sha1(data).digest() != sha1:
            problems.append(
                f"{journal}: fragment file {path.name} does not hold [{begin}, {end}) with its SHA-1"
            )
        elif end > len(content) or content[begin:end] != data:
            problems.append(f"{journal}: fragment file {path.name} differs from the bytes the brokers served")
        spans.append((begin, end))
    reach = 0
    for begin, end in sorted(spans):
        covered += max(0, end - max(begin, reach))
        reach = max(reach, end)
    return files, covered, problems


# ---- the rig -----------------------------------------------------------------------------------
@dataclasses.dataclass
class RoundResult:
    round: Round
    line: str = ""
    appends_unavailable_s: float = 0.0
    pipeline_stall_s: float = 0.0
    recovery_s: float = 0.0
    t_start: float = 0.0
    t_end: float = 0.0


class Rig:
    """The cluster under chaos, its workloads and its faults (see the module docstring)."""

    def __init__(self, tmp_path: Path, net: Network | None, seed: int, report: list[str]) -> None:
        self.tmp = tmp_path
        self.net = net
        self.seed = seed
        self.report = report
        self.paused: set[int] = set()  # brokers stopped or cut off: not offered to the writers
        self.results: list[RoundResult] = []
        self.etcd: EmbeddedEtcd | None = None
        self.cluster: LocalCluster | None = None
        self.group: Any = None
        self.work: TracedWorkload | None = None
        self.feeder: Feeder | None = None
        self.progress: Progress | None = None
        self._stopped_members: set[int] = set()
        self._etcd_paused = False
        self.exits: list[str] = []  # processes that exited by themselves and were restarted
        self.last_heal = 0.0
        self.t0 = 0.0
        self.db_dir = str(tmp_path / "summer-db")

    # -- setup and teardown
    def start(self) -> Rig:
        self.t0 = time.monotonic()  # round lines and traces give times relative to it
        os.makedirs(self.db_dir)
        host = self.net.etcd.address if self.net else "127.0.0.1"
        self.etcd = EmbeddedEtcd(data_dir=str(self.tmp / "etcd"), host=host, fsync=False).start()
        self.cluster = LocalCluster(
            brokers=BROKERS, mode="subprocess", zones=ZONES, lease_ttl_s=LEASE_TTL_S, data_dir=str(self.tmp / "cluster"),
            exit_drain_s=2.0, log_level="INFO", etcd=self.etcd.endpoint,
        ).start()  # fmt: skip
        client = self.cluster.client()
        specs = [self.cluster.journal_spec(APPENDS, **JOURNAL_FIELDS)] + [
            self.cluster.journal_spec(j.name, labels=streamsum.JSON_LABELS, **JOURNAL_FIELDS)
            for j in streamsum.journals(PARTITIONS)
        ]
        client.apply_journals(specs)
        self.journals = [s.name for s in specs]
        self.cluster.wait_for_routes(timeout=STEADY_BOUND_S)
        self.group = self.cluster.run_consumer(
            streamsum.Summer(self.db_dir),
            streamsum.shards(PARTITIONS, hot_standbys=1, max_txn_duration=MAX_TXN),
            processes=MEMBERS,
        )
        self.group.wait_for(_placed, STEADY_BOUND_S, "a PRIMARY and a STANDBY of every shard")
        self.work = TracedWorkload(APPENDS, self._writer_endpoints, writers=2, seed=self.seed).start()
        self.feeder = Feeder(client, self.seed).start()
        self.progress = Progress(self.db_dir).start()
        return self

    def _writer_endpoints(self) -> list[str]:
        assert self.cluster is not None
        live = [h.endpoint for h in self.cluster.brokers if h.running and h.index not in self.paused]
        return live or [h.endpoint for h in self.cluster.brokers]

    def close(self) -> None:
        self._heal_everything()
        for part in (self.feeder, self.progress):
            if part is not None:
                part.stop()
        if self.work is not None:
            self.work.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.etcd is not None:
            self.etcd.stop()

    def _heal_everything(self) -> None:
        """What a failed round may have left: partitions, stopped processes, a paused etcd."""
        if self.net is not None:
            self.net.heal()
        if self._etcd_paused and self.etcd is not None:
            self.etcd.resume()
            self._etcd_paused = False
        if self.cluster is not None:
            for h in self.cluster.brokers:
                if h.running and h.proc is not None:
                    os.kill(h.proc.pid, signal.SIGCONT)
        if self.group is not None:
            for m in self.group.members:
                if m.proc is not None and m.proc.poll() is None:
                    os.kill(m.proc.pid, signal.SIGCONT)
        self.paused.clear()

    # -- roles
    def _role_journal(self, r: Round) -> str:
        return self.journals[r.journal % len(self.journals)] if r.journal else APPENDS

    def _members_by_primaries(self) -> list[int]:
        """Consumer members, those holding the most primaries first."""
        counts = {i: 0 for i in range(MEMBERS)}
        for codes in _replicas(self.group.list_shards()).values():
            for suffix, code in codes.items():
                if code == ReplicaCode.PRIMARY:
                    counts[_member_of(suffix)] = counts.get(_member_of(suffix), 0) + 1
        return sorted(counts, key=lambda i: -counts[i])

    # -- one round
    def run_round(self, r: Round) -> RoundResult:
        assert self.work is not None and self.progress is not None and self.cluster is not None
        res = RoundResult(r, t_start=time.monotonic())
        self._steady(r)
        exits_before = len(self.group.exits)
        t0 = time.monotonic()
        wait_for(
            f"{r}: the writers' progress", lambda: self.work.acks_after(t0) >= r.warmup_acks, STEADY_BOUND_S
        )
        t_fault, _ = self.work.busy_moment()
        heal, what = self._inject(r)
        try:
            time.sleep(r.hold_s)  # the fault itself: how long it lasts
        finally:
            heal()
        t_heal = self.last_heal = time.monotonic()
        recovered = self._recover(r, t_heal)
        t_end = time.monotonic()
        res.t_end = t_end
        res.recovery_s = t_end - t_heal
        res.appends_unavailable_s = appends_gap(self.work, t_fault, recovered)
        res.pipeline_stall_s = self.progress.longest_stall(t_fault, recovered)
        res.line = (
            f"{r}: {what} (at +{t_fault - self.t0:.1f} s); round took {t_end - res.t_start:.1f} s; appends unavailable {res.appends_unavailable_s:.1f} s, "
            f"pipeline stalled {res.pipeline_stall_s:.1f} s, recovered {res.recovery_s:.1f} s after the heal"
        )
        exited = self.group.exits[exits_before:]
        if exited:
            res.line += (
                "; consumer members that exited by themselves (restarted by their group): "
                + ", ".join(f"{e.index} ({e.reason[:60]})" for e in exited)
            )
        say(self.report, res.line)
        self.results.append(res)
        return res

    def _steady(self, r: Round) -> None:
        """A full route for every journal and a PRIMARY and STANDBY of every shard (restarting, as a
        supervisor would, and reporting any process that exited by itself meanwhile)."""
        assert self.cluster is not None
        for j in self.journals:
            wait_for(f"{r}: a full route of {j}, the same at every broker",
                     lambda j=j: self._restart_exited(r) or self._full_everywhere(j), STEADY_BOUND_S)  # fmt: skip
        self.group.wait_for(
            lambda shards: self._restart_exited(r) or _placed(shards), STEADY_BOUND_S,
            f"{r}: a PRIMARY and a STANDBY of every shard",
        )  # fmt: skip
        if self.feeder is not None and self.feeder.errors:
            raise AssertionError(self.feeder.errors[0])

    def _restart_exited(self, r: Round) -> bool:
        """Restarts a broker that exited by itself (lease loss should announce again instead), and a
        consumer member that exited and that its ConsumerGroup did not restart. Always False."""
        assert self.cluster is not None
        for h in self.cluster.brokers:
            if not h.running:
                code = h.proc.returncode if h.proc is not None else None
                self.exits.append(f"{r}: broker-{h.index} exited by itself (status {code}); restarted")
                say(self.report, self.exits[-1])
                self.cluster.restart_broker(h.index)
        for m in self.group.members:
            last_exit = next((e for e in reversed(self.group.exits) if e.index == m.index), None)
            if (
                not m.running
                and last_exit is not None
                and not last_exit.restarted
                and m.index not in self._stopped_members
            ):
                self.exits.append(
                    f"{r}: consumer member {m.index} exited and was not restarted by its group; restarted"
                )
                say(self.report, self.exits[-1])
                self.group.restart(m.index)
        return False

    def _inject(self, r: Round) -> tuple[Callable[[], None], str]:
        """Starts the fault; returns how to heal it and what it did."""
        assert self.cluster is not None and self.etcd is not None
        rng = random.Random(r.pick)
        cluster, kind = self.cluster, r.kind
        journal = self._role_journal(r)
        members, primary = route_of(cluster, journal)
        if kind in ("broker-sigkill", "broker-sigstop"):
            victim = rng.choice(sorted(members))
            role = f"{'primary' if victim == primary else 'replica'} of {journal}"
            if kind == "broker-sigkill":
                cluster.kill_broker(victim)
                return (
                    lambda: cluster.restart_broker(victim)
                ), f"SIGKILL broker-{victim} ({role}), down {r.hold_s:.1f} s"
            cluster.pause_broker(victim)
            self.paused.add(victim)

            def resume_broker() -> None:
                cluster.resume_broker(victim)
                self.paused.discard(victim)

            return resume_broker, f"SIGSTOP broker-{victim} ({role})"
        if kind in ("consumer-sigkill", "consumer-sigstop"):
            ranked = self._members_by_primaries()
            victim = ranked[0] if rng.random() < 0.75 else rng.choice(ranked)
            what = f"member {victim} ({'most primaries' if victim == ranked[0] else 'any'})"
            if kind == "consumer-sigkill":
                self.group.kill(victim)
                self._stopped_members.add(victim)

                def restart_member() -> None:
                    self.group.restart(victim)
                    self._stopped_members.discard(victim)

                return restart_member, f"SIGKILL consumer {what}, down {r.hold_s:.1f} s"
            cluster.pause_consumer(victim, self.group)
            return (lambda: cluster.resume_consumer(victim, self.group)), f"SIGSTOP consumer {what}"
        if kind == "etcd-sigterm":
            self.etcd.restart()  # SIGTERM, then the same ports and data (never SIGKILL: see test_etcd_faults)
            return (lambda: None), "SIGTERM etcd and restart it"
        if kind == "etcd-sigstop":
            self.etcd.pause()
            self._etcd_paused = True

            def resume_etcd() -> None:
                assert self.etcd is not None
                self.etcd.resume()
                self._etcd_paused = False

            return resume_etcd, "SIGSTOP etcd"
        net = self.net
        assert net is not None, f"{kind} needs the network-namespace hosts"

        def heal() -> None:
            net.heal()
            self.paused.clear()

        if kind == "partition-brokers":
            a, b = rng.sample(sorted(members), 2)
            net.partition([net.brokers[a]], [net.brokers[b]])
            roles = {i: "primary" if i == primary else "replica" for i in (a, b)}
            return heal, f"partition broker-{a} ({roles[a]}) | broker-{b} ({roles[b]}) of {journal}"
        if kind == "partition-isolate-primary":
            victim = primary if primary >= 0 else rng.choice(sorted(members))
            host = net.brokers[victim]
            net.partition([host], [h for h in net.everyone if h != host])
            self.paused.add(victim)
            return heal, f"isolate broker-{victim} (primary of {journal}) from every host"
        if kind == "partition-etcd":
            hosts = [*net.brokers, *net.members]
            host = hosts[rng.randrange(len(hosts))]
            net.partition([host], [net.etcd])
            return heal, f"partition {host.name} | etcd"
        if kind == "partition-consumer-brokers":
            ranked = self._members_by_primaries()
            victim = ranked[0] if rng.random() < 0.75 else rng.choice(ranked)
            net.partition([net.members[victim]], net.brokers)
            return heal, f"partition member {victim} | every broker"
        raise AssertionError(f"unknown fault kind {kind}")

    def _recover(self, r: Round, t_heal: float) -> float:
        """Waits until the cluster works again after the heal; returns when it did."""
        assert self.cluster is not None and self.work is not None and self.progress is not None
        deadline = t_heal + RECOVERY_BOUND_S
        self._steady(r)
        left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        wait_for(
            f"{r}: an acknowledged append after the heal", lambda: self.work.acks_after(t_heal) > 0, left()
        )
        wait_for(
            f"{r}: every summer shard to move after the heal",
            lambda: not self.progress.moved_since(t_heal),
            left(),
        )
        return time.monotonic()

    # -- the end
    def _read_raw(self, journal: str) -> bytes:
        """The whole journal below its write head, by plain Read RPCs (faults.workload.read_journal)."""
        assert self.work is not None
        return self.work.run(
            read_journal(self.work._channels, self._writer_endpoints(), journal, READ_BACK_DEADLINE_S)
        )

    def liveness(self) -> list[str]:
        """After the last heal (bounded by LIVENESS_BOUND_S from it): the feeder ends its streams and
        the writers stop; every stream's sum is committed (as the checker reads the sums journal);
        the workload's raw reader and a blocking ReadCommitted of each pipeline journal reach the
        journal's head. Returns the problems; keeps what the readers delivered for the check."""
        assert self.cluster is not None and self.work is not None and self.feeder is not None
        work, feeder = self.work, self.feeder
        t_heal = self.last_heal or time.monotonic()
        deadline = t_heal + LIVENESS_BOUND_S
        left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        problems: list[str] = []
        feeder.finish(left())
        problems += feeder.errors
        work.stop_writers(left())
        self.expected = expected = feeder.expected
        missing: set[str] = set(expected)
        while True:
            msgs, _ = decode_json_lines(self._read_raw(streamsum.SUMS_JOURNAL), streamsum.SUMS_JOURNAL)
            _, missing = check_sums(committed(msgs)[0], expected)
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        say(self.report, f"liveness: {len(expected) - len(missing)} of {len(expected)} streams committed "
                         f"{time.monotonic() - t_heal:.1f} s after the last heal (bound {LIVENESS_BOUND_S:.0f} s)")  # fmt: skip
        if missing:
            problems.append(f"{len(missing)} streams have no committed sum {LIVENESS_BOUND_S:.0f} s after the last "
                            f"heal: {sorted(missing)[:5]}")  # fmt: skip
        client = self.cluster.client()
        head = client.read_head(APPENDS)
        try:
            wait_for(
                "the raw reader to reach the appends journal's head",
                lambda: len(work.read_bytes) >= head,
                left(),
            )
        except Exception as exc:
            problems.append(f"{exc} (it read {len(work.read_bytes)} of {head} bytes)")
        self.heads: dict[str, int] = {}
        self.delivered: dict[str, list[dict]] = {}
        for j in self.journals[1:]:
            self.heads[j] = head = client.read_head(j)
            t = time.monotonic()
            got, err = read_committed_to(client, j, head, left())
            if err:
                problems.append(err)
                print(self.diagnose_read(j, head), flush=True)
                continue
            self.delivered[j] = got
            say(self.report, f"liveness: ReadCommitted of {j} reached its head {head} in "
                             f"{time.monotonic() - t:.1f} s ({len(got)} messages), "
                             f"{time.monotonic() - t_heal:.1f} s after the last heal")  # fmt: skip
        return problems

    def check(self) -> dict[str, Any]:
        """The independent check of every journal (see the module docstring): stats and problems."""
        assert self.cluster is not None and self.work is not None and self.feeder is not None
        work, expected = self.work, self.expected
        problems: list[str] = []
        flushed = self._flush()
        stats: dict[str, Any] = {"bytes": 0, "messages": 0, "lost": 0}
        try:
            appends = self._read_raw(APPENDS)
        except AssertionError as exc:  # a range no broker serves: check what the store holds instead
            head = self.cluster.client().read_head(APPENDS)
            appends, holes = store_content(self.cluster.store.removeprefix("file://"), APPENDS, head)
            in_holes = [a for a in work.acked() if any(a.begin < e and b < a.end for b, e in holes)]
            problems.append(
                f"{exc}; the store's fragments leave holes {holes[:5]} in [0, {head}), holding "
                f"{len(in_holes)} acknowledged appends (lost): {[a.key for a in in_holes[:5]]}"
            )
            say(self.report, problems[-1])
        verdict = verify(appends, work.attempts, bytes(work.read_bytes))
        divergence, known = work.divergence(appends, self.t0)
        stats["dirty reads"] = 0
        if divergence:
            say(self.report, divergence)
            (self.tmp / "appends-journal.bin").write_bytes(appends)
            (self.tmp / "appends-reader.bin").write_bytes(bytes(work.read_bytes))
        if known:
            # Readers are served only what every replica acknowledged (docs/semantics.md#no-dirty-reads):
            # this is a failure, named as the dirty read it is (tests/faults/test_dirty_read.py).
            stats["dirty reads"] = 1
            problems.append("dirty read: the raw reader was served a never-acknowledged append that the journal "
                            "does not keep (tests/faults/test_dirty_read.py)")  # fmt: skip
        problems += verdict.problems
        acked = work.acked()
        lost_appends = {a.key for a in acked if appends[a.begin : a.end] != a.content}
        stats["lost"] += len(lost_appends)
        stats["bytes"] += len(appends)
        stats["messages"] += verdict.records
        say(self.report, f"check: appends journal {len(appends)} bytes, {verdict.records} records, {len(acked)} "
                         f"acknowledged appends ({len(lost_appends)} lost), outcomes {work.outcomes()}, "
                         f"ambiguous attempts that landed {verdict.ambiguous_landed}")  # fmt: skip
        contents = {APPENDS: appends}
        missing: set[str] = set()
        chunks = 0
        for j in self.journals[1:]:
            raw = contents[j] = self._read_raw(j)
            msgs, bad = decode_json_lines(raw, j)
            problems += bad
            out, counts = committed(msgs)
            stats["bytes"] += len(raw)
            stats["messages"] += len(msgs)
            if j == streamsum.SUMS_JOURNAL:
                sum_problems, missing = check_sums(out, expected)
                problems += sum_problems
                stats["lost"] += len(missing)
                say(self.report, f"check: sums journal {len(raw)} bytes, {len(msgs)} messages, "
                                 f"{sum(m.flags != ACK_TXN for m in out)} committed sums for {len(expected)} streams "
                                 f"({len(missing)} missing); not committed: {counts}")  # fmt: skip
            else:
                problems += check_chunks(j, out, expected)
                chunks += sum(m.flags != ACK_TXN for m in out)
            if j in self.delivered:  # gazette-py's ReadCommitted delivered the same messages below the head
                mine = sorted(
                    json.dumps(m.body, sort_keys=True)
                    for m in out
                    if m.flags != ACK_TXN and m.end <= self.heads[j]
                )
                theirs = sorted(json.dumps({k: v for k, v in b.items() if k != "_meta"}, sort_keys=True)
                                for b in self.delivered[j])  # fmt: skip
                if mine != theirs:
                    problems.append(f"{j}: ReadCommitted delivered {len(theirs)} messages below {self.heads[j]}, "
                                    f"the checker found {len(mine)} committed, {len(set(mine) ^ set(theirs))} differ")  # fmt: skip
        say(self.report, f"check: {chunks} committed chunks in {PARTITIONS} partitions ({self.feeder.chunks} "
                         f"published), every stream's chunks once and in order")  # fmt: skip
        stored = store_sums(self.db_dir)
        wrong = {
            sid: stored.get(sid)
            for sid, want in expected.items()
            if stored.get(sid) != (want["seq"], want["sum"])
        }
        if wrong:
            problems.append(
                f"summer stores: {len(wrong)} streams differ from the chunker, e.g. {list(wrong.items())[:3]}"
            )
        files = covered = 0
        for j, raw in contents.items():
            n, c, bad = store_fragments(self.cluster.store.removeprefix("file://"), j, raw)
            problems += bad
            files, covered = files + n, covered + c
        say(self.report, f"check: {files} fragment files in the store ({flushed} journals flushed) cover {covered} of "
                         f"{sum(map(len, contents.values()))} bytes, each equal to what the brokers served")  # fmt: skip
        skipped = self._undecodable_in_logs()
        if skipped:
            problems.append(
                "a consumer skipped undecodable bytes (a read mid-message): " + "; ".join(skipped[:3])
            )
        stats.update(
            streams=len(expected), lost_appends=lost_appends, missing_streams=missing, problems=problems
        )
        return stats

    def _flush(self) -> int:
        """Rolls and persists every journal's spool (so the store check sees the latest bytes);
        a flush answered with an error is retried for FLUSH_RETRY_S, then reported."""
        assert self.cluster is not None
        client = self.cluster.client()
        n = 0
        for j in self.journals:
            deadline = time.monotonic() + FLUSH_RETRY_S
            while True:
                try:
                    client.flush(j, timeout=30)
                    n += 1
                    break
                except Exception as exc:
                    if time.monotonic() > deadline:
                        say(self.report, f"flush of {j} failed for {FLUSH_RETRY_S:.0f} s: {exc}; routes: "
                                         f"{self.routes_everywhere(j)}")  # fmt: skip
                        break
                    time.sleep(0.5)
        return n

    def _full_everywhere(self, journal: str) -> bool:
        """Every running broker lists the same route of the journal, with a primary and R members."""
        views = [v for k, v in self.routes_everywhere(journal).items() if v != "not running"]
        return bool(views) and all(
            isinstance(v, tuple)
            and v == views[0]
            and v[1] >= 0
            and len(v[0]) == JOURNAL_FIELDS["replication"]
            for v in views
        )

    def routes_everywhere(self, journal: str) -> dict[str, Any]:
        """Each running broker's view of the journal's route (members, primary), or its error."""
        assert self.cluster is not None
        out: dict[str, Any] = {}
        for h in self.cluster.brokers:
            if not h.running:
                out[h.suffix] = "not running"
                continue
            try:
                route = _list(h.endpoint, journal)
                out[h.suffix] = None if route is None else ([m.suffix for m in route.members], route.primary)
            except Exception as exc:
                out[h.suffix] = f"{type(exc).__name__}"
        return out

    def _undecodable_in_logs(self) -> list[str]:
        found = []
        for path in Path(self.group.data_dir).glob("*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if "undecodable" in line:
                    found.append(f"{path.name}: {line.strip()[:300]}")
        return found

    def diagnose_read(self, journal: str, head: int) -> str:
        """What a stalled reader of `journal` meets: each broker's fragment listing and its tasks."""
        assert self.cluster is not None
        lines = [f"--- {journal}: head {head}"]
        for h in self.cluster.brokers:
            try:
                from gazette.client.sync import Client

                with Client(h.endpoint) as c:
                    frags = c.list_fragments(journal, timeout=10)
                lines.append(
                    f"{h.suffix}: "
                    + ", ".join(f"[{f.begin},{f.end}){'*' if f.backing_store else ''}" for f in frags)
                )
            except Exception as exc:
                lines.append(f"{h.suffix}: list_fragments failed: {exc}")
        return "\n".join(lines)

    def own_state(self) -> str:
        """This process's side: the feeder's and writers' progress, every thread's stack and the
        tasks of the clients' event loop (a client call that hangs shows where)."""
        import faulthandler
        import io
        import tempfile

        from gazette.client.loop import default_loop
        from gazette.tasks import dump_tasks

        out = []
        if self.feeder is not None:
            f = self.feeder
            out.append(f"feeder: {f.chunks} chunks published, {len(f.done)} chunkers done, errors {f.errors}, "
                       f"running {f._thread.is_alive()}")  # fmt: skip
        if self.work is not None:
            out.append(
                f"writers: outcomes {self.work.outcomes()}, in flight {sorted(self.work.inflight_keys())}"
            )
        with tempfile.TemporaryFile("w+") as tmp:
            faulthandler.dump_traceback(tmp, all_threads=True)
            tmp.seek(0)
            out.append("--- this process's threads\n" + tmp.read())
        buf = io.StringIO()

        async def dump() -> None:
            dump_tasks(buf)

        try:
            default_loop().run(dump(), timeout=10)
        except Exception as exc:
            buf.write(f"(the clients' loop did not answer: {exc!r})")
        out.append("--- the clients' loop\n" + buf.getvalue())
        return "\n".join(out)

    def logs(self) -> str:
        """The brokers' log tails and task dumps (faults.harness.log_tails), then each consumer
        member's log tail, after asking it (SIGUSR2) to write its tasks."""
        from faults.harness import TASK_DUMP_MARK, log_tails

        before = {}
        if self.cluster is not None:
            before = {
                h.index: os.path.getsize(h.log_path)
                for h in self.cluster.brokers
                if h.log_path and os.path.exists(h.log_path)
            }
        out = [log_tails(self.cluster)] if self.cluster is not None else []
        if self.cluster is not None:  # a process whose loop is stuck writes no dump: its state says where
            for h in self.cluster.brokers:
                if h.pid is None or not h.running or h.index not in before:
                    continue
                out.append(f"--- {h.suffix} (pid {h.pid}) " + _proc_state(h.pid))
                with open(h.log_path, errors="replace") as f:
                    f.seek(before[h.index])
                    answered = TASK_DUMP_MARK in f.read()
                if (
                    not answered
                ):  # its event loop is stuck: faulthandler (PYTHONFAULTHANDLER) shows every thread
                    size = os.path.getsize(h.log_path)
                    os.kill(h.pid, signal.SIGABRT)
                    time.sleep(2.0)
                    with open(h.log_path, errors="replace") as f:
                        f.seek(size)
                        out.append(
                            f"--- {h.suffix} did not answer SIGUSR2; its threads at SIGABRT:\n"
                            + f.read()[-6000:]
                        )
        if self.group is not None:
            sizes = {}
            for m in self.group.members:
                if m.proc is not None and m.proc.poll() is None and m.log_path:
                    sizes[m.index] = os.path.getsize(m.log_path)
                    os.kill(m.proc.pid, signal.SIGUSR2)
            time.sleep(2.0)  # a diagnostic on the failure path: the members write their dumps
            for m in self.group.members:
                if m.log_path and os.path.exists(m.log_path):
                    with open(m.log_path, errors="replace") as f:
                        text = f.read()
                    start = sizes.get(m.index, len(text))
                    out.append(
                        f"--- consumer {m.index} ({m.log_path})\n"
                        + "\n".join(text[:start].splitlines()[-40:])
                    )
                    if start < len(text):
                        out.append(
                            f"--- consumer {m.index} tasks\n" + "\n".join(text[start:].splitlines()[:400])
                        )
        return "\n".join(out)


def _proc_state(pid: int) -> str:
    """A process's state and each thread's kernel wait channel, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        threads = []
        for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int)[:40]:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wchan = f.read().strip()
            threads.append(f"{tid} {comm}:{wchan}")
        return f"state {state}; threads: " + ", ".join(threads)
    except OSError as exc:
        return f"(no /proc state: {exc})"


def appends_gap(work: Workload, t0: float, t1: float) -> float:
    """The longest time without an acknowledged append within [t0, t1], counted from the last
    acknowledgement at or before t0."""
    times = sorted(a.ended for a in work.acked())
    before = [t for t in times if t <= t0]
    points = [before[-1] if before else t0, *(t for t in times if t0 < t <= t1), t1]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def read_committed_to(client: Any, journal: str, head: int, bound_s: float) -> tuple[list[dict], str]:
    """gazette-py's ReadCommitted(offset=0, block=True, end_offset=head) of `journal`, on a thread:
    (the committed messages, "") if it reached `head` within `bound_s`, else ([], why)."""
    got: list[dict] = []
    state: dict[str, Any] = {"offset": 0}

    def run() -> None:
        try:
            for env in ReadCommitted(client, journal, offset=0, block=True, end_offset=head, skip_acks=True):
                got.append(dict(env.message))
                state["offset"] = env.end
            state["done"] = True
        except Exception as exc:
            state["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=run, daemon=True, name=f"read-committed {journal}")
    thread.start()
    thread.join(bound_s)
    if state.get("done"):
        return got, ""
    why = state.get("error") or f"no end after {bound_s:.0f} s"
    return [], (f"ReadCommitted of {journal} to its head {head} did not complete ({why}); it delivered "
                f"{len(got)} messages, the last ending at {state['offset']}")  # fmt: skip


# ---- the report --------------------------------------------------------------------------------
def table(results: list[RoundResult], stats: dict[str, Any], work: Workload, feeder: Feeder) -> str:
    """Per fault kind: rounds, the longest unavailability of appends and of the pipeline, the
    longest recovery after a heal, what was written during its rounds and checked, and lost."""
    acked = work.acked()
    lost_appends = stats.get("lost_appends", set())
    missing = stats.get("missing_streams", set())
    header = ("fault kind", "rounds", "appends unavail. s", "pipeline stall s", "recovery s",
              "appends checked", "bytes", "streams checked", "lost")  # fmt: skip
    rows = []
    for kind in KINDS:
        rs = [r for r in results if r.round.kind == kind]
        if not rs:
            continue
        windows = [(r.t_start, r.t_end) for r in rs]
        inside = lambda t, windows=windows: any(a <= t <= b for a, b in windows)  # noqa: E731
        appends = [a for a in acked if inside(a.ended)]
        streams = [sid for t, exp in feeder.done if inside(t) for sid in exp]
        lost = sum(1 for a in appends if a.key in lost_appends) + sum(1 for s in streams if s in missing)
        rows.append((kind, len(rs), f"{max(r.appends_unavailable_s for r in rs):.1f}",
                     f"{max(r.pipeline_stall_s for r in rs):.1f}", f"{max(r.recovery_s for r in rs):.1f}",
                     len(appends), sum(len(a.content) for a in appends), len(streams), lost))  # fmt: skip
    rows.append(("all (whole run)", len(results), "", "", "", len(acked), stats.get("bytes", 0),
                 stats.get("streams", 0), stats.get("lost", 0)))  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    fmt = lambda row: " | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False))  # noqa: E731
    out = [fmt(header), "-+-".join("-" * w for w in widths), *map(fmt, rows)]
    out.append(f"bytes checked {stats.get('bytes', 0)} (appends + stream-sum journals), messages checked "
               f"{stats.get('messages', 0)}, lost {stats.get('lost', 0)}; dirty reads of a never-acknowledged "
               f"append: {stats.get('dirty reads', 0)}")  # fmt: skip
    return "\n".join(out)
