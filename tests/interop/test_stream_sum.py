"""Gazette's own exactly-once oracle on gazette-py brokers: the stream-sum example of Gazette v0.103.0.

Gazette's stream-sum (go.gazette.dev/core/examples/stream-sum) is the application Gazette's CI and
crash tests run to check its processing guarantees. `make peers` builds it from tests/interop/streamsum:

* `stream-sum-summer` is Gazette's summer command itself: a consumer on Gazette's consumer library
  (mainboilerplate/runconsumer) that folds each stream's chunks into a CRC-64 (a chunk whose SeqNo
  does not follow the last one, i.e. a lost or repeated chunk, is its log.Fatal), keeps the partial
  sums in a RocksDB or SQLite store recorded to a recovery log (appends fenced by the log's "author"
  register), and publishes each finished stream's sum to examples/stream-sum/sums within its consumer
  transaction (ACK intents written at commit).
* `stream-sum-chunker` runs Gazette's chunker (stream_sum.GenerateAndVerifyStreams): workers publish
  chunks of pseudo-random streams and, as each stream completes, read the summer's sum back (read
  committed) and compare it with their own; a wrong sum, or none within Gazette's own 40 s bound, is
  log.Fatal, and exit status 0 means every stream of every worker was verified. (The command is ours
  only in leaving out the diagnostics server Gazette's chunker binds on a fixed :8080.)

They run against three gazette-py broker subprocesses and the cluster's etcd: journals applied through
our client (R=2, so a killed broker's journals move to the other two), four shards (RocksDB and SQLite
alternately, one hot standby each) applied with real gazctl to two summer processes under their own
etcd root. Each round is one chunker run with one fault landing while its chunks flow: SIGKILL of a
gazette-py broker and its restart (twice), SIGKILL of the summer holding the primaries and its
restart, and that summer as a zombie (SIGSTOP until its lease expired and its standbys took over,
then SIGCONT). Every wait is on a condition (the failover seen, sums appended, the process back as
hot standby, journals flushed after a broker fault), with a bound.

Verified: every chunker run exits 0 (Gazette's verdict); no summer died but by our hand (a repeated
or lost chunk kills it); and an independent check with gazette-py's reader: read committed, the chunk
journals hold every chunk of every stream exactly once, and the sums journal exactly one sum per
stream, equal to the CRC-64 we compute over that stream's chunks. `make soak` runs eighteen rounds with
the faults rotating over every broker and the summers.

It found a gazette-py broker bug, fixed since and kept as the last test here: an Append cancelled
while its commit was being sent to the replicas could commit there and not at the primary, leaving a
hole in the primary's index that a read (the chunker's) waited on for minutes. A failed chunker run
prints such holes among its diagnosis.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import yaml
from interop.conftest import Gazctl, gazctl_for, require_peer, start_cluster

from gazette.keyspace.procutil import free_port, spawn
from gazette.local import LocalCluster
from gazette.message import ReadCommitted, ReadUncommitted
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.testing import wait_for

ROOT = "/gazette/consumers/gosum"  # the summers' etcd root
HINTS = "/gazette/hints/gosum"  # recovery-log hints: outside ROOT, whose every key the consumers decode
PREFIX = "examples/stream-sum"  # the example's journal names (its sums journal is a Go constant)
SUMS = f"{PREFIX}/sums"
PARTS = 4
CHUNK_JOURNALS = [f"{PREFIX}/chunks/part-{i:03d}" for i in range(PARTS)]
SHARDS = [f"chunks-part-{i:03d}" for i in range(PARTS)]
RECOVERY_LOGS = [f"{PREFIX}/recovery-logs/{s}" for s in SHARDS]
REPLICATION = 2
LEASE_S = 5  # the summers' etcd lease (the brokers' is LocalCluster's 5 s)
# Each round (one chunker run): WORKERS x STREAMS streams of CHUNKS chunks, plus an empty last chunk.
WORKERS, STREAMS, CHUNKS = 4, 10, 20
WAIT_S = 90.0  # bound of each condition waited on
CHUNKER_WAIT_S = 240.0  # bound of a chunker run after its fault (Gazette's chunker also bounds itself)
NDJSON = "application/x-ndjson"
GO_JSON = {"uuid_pointer": "/UUID"}  # Gazette's Go examples keep the message UUID at /UUID

# Faults, one per round: "kill-broker-<i>" (SIGKILL of gazette-py broker i, then its restart),
# "kill-summer" (SIGKILL of the summer holding the most primaries, then its restart) and "pause-summer"
# (that summer SIGSTOPped until its standbys took over, then SIGCONT: a zombie primary).
CI_FAULTS = ["kill-broker-1", "kill-summer", "kill-broker-2", "pause-summer"]
SOAK_FAULTS = [
    "kill-broker-1",
    "kill-summer",
    "kill-broker-2",
    "pause-summer",
    "kill-broker-0",
    "kill-summer",
] * 3


# --- CRC-64 as Go's hash/crc64 with the ECMA table computes it (what stream_sum.Sum holds) ------------

_CRC64_POLY = 0xC96C5795D7870F42  # ECMA-182, bit-reversed
_MASK64 = (1 << 64) - 1


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC64_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64 = _crc64_table()


def crc64_update(crc: int, data: bytes) -> int:
    crc = ~crc & _MASK64
    for b in data:
        crc = _CRC64[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return ~crc & _MASK64


def test_crc64_is_gos() -> None:
    """The vectors of Gazette's stream_sum_test.go: one chunk or two, the same sum."""
    assert crc64_update(0, b"battery horse") == 0xAE763109C1192ED6
    assert crc64_update(crc64_update(0, b"battery"), b" horse") == 0xAE763109C1192ED6


# --- processes -----------------------------------------------------------------------------------


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@dataclass
class Summer:
    """One `stream-sum-summer serve` process of the consumer group (consumer id gosum-<index>)."""

    index: int
    binary: str
    cluster: LocalCluster
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def id(self) -> str:
        return f"gosum-{self.index}"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.id}.log"

    def start(self) -> None:
        tmp = self.workdir / f"{self.id}-tmp"  # its RocksDB / SQLite files (played back, then recorded)
        tmp.mkdir(parents=True, exist_ok=True)
        # Each summer dials a different broker first; the route cache then reaches every broker directly.
        broker = self.cluster.broker_endpoints[self.index % len(self.cluster.brokers)]
        cmd = [
            self.binary, "serve",
            "--consumer.zone=local", f"--consumer.id={self.id}", "--consumer.host=127.0.0.1",
            f"--consumer.port={self.port}", "--consumer.watch-delay=10ms",
            f"--broker.address={broker}", "--broker.cache.size=256", "--broker.file-root=/",
            f"--etcd.address={self.cluster.etcd_endpoint}", f"--etcd.prefix={ROOT}", f"--etcd.lease={LEASE_S}s",
            "--log.level=info", "--log.format=text",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            log.flush()
            self.proc = spawn(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(self.workdir),
                env=dict(os.environ, TMPDIR=str(tmp)),
            )  # fmt: skip
        self.starts += 1

    def _running(self) -> subprocess.Popen:
        assert self.proc is not None and self.proc.poll() is None, f"{self.id} is not running"
        return self.proc

    def kill(self) -> None:
        proc = self._running()
        proc.kill()
        proc.wait()

    def pause(self) -> None:
        """SIGSTOP, returning once /proc shows the process stopped."""
        pid = self._running().pid
        os.kill(pid, signal.SIGSTOP)
        wait_for(f"{self.id} stopped", lambda: _proc_state(pid) in ("T", "t"), WAIT_S)

    def resume(self) -> None:
        os.kill(self._running().pid, signal.SIGCONT)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


# --- specs and status --------------------------------------------------------------------------------


def _shards_yaml() -> str:
    """gazctl's shardspace YAML of the example's shards, as Gazette's generate-shards.sh writes it."""
    return yaml.safe_dump(
        {
            "common": {
                "recovery_log_prefix": f"{PREFIX}/recovery-logs",
                "hint_prefix": HINTS,
                "hint_backups": 2,
                "max_txn_duration": "1s",
                "hot_standbys": 1,
            },
            "shards": [
                {
                    "id": shard,
                    "sources": [{"journal": journal}],
                    "labels": [{"name": "store", "value": ("rocksdb", "sqlite")[i % 2]}],
                }
                for i, (shard, journal) in enumerate(zip(SHARDS, CHUNK_JOURNALS, strict=True))
            ],
        },
        sort_keys=False,
    )


def _apply_journals(cluster: LocalCluster) -> None:
    """The example's journals (its examples.journalspace.yaml, at R=2) through gazette-py's client.
    Fragments roll at 256 KiB and stores are listed every second, so fragments of every journal are
    persisted to the cluster's file:// store while the rounds run (recovery logs grow past 256 KiB)."""

    def spec(name: str, labels: dict[str, str]):
        return cluster.journal_spec(
            name, replication=REPLICATION, labels=labels, fragment_length=256 * 1024, refresh_interval="1s"
        )

    chunks = {"app.gazette.dev/message-type": "stream_sum.Chunk", "content-type": NDJSON}
    specs = [spec(j, chunks) for j in CHUNK_JOURNALS]
    specs += [spec(j, {"content-type": "application/x-gazette-recoverylog"}) for j in RECOVERY_LOGS]
    specs.append(spec(SUMS, {"app.gazette.dev/message-type": "stream_sum.Sum", "content-type": NDJSON}))
    cluster.client().apply_journals(specs)
    cluster.wait_for_routes([*CHUNK_JOURNALS, *RECOVERY_LOGS, SUMS], timeout=WAIT_S)


def _shard_replicas(gz: Gazctl, via: Summer) -> dict[str, list[tuple[str, str]]] | None:
    """Each shard's replicas as (consumer id, status code), as `gazctl shards list` shows them through
    summer `via`; None when it does not answer."""
    proc = gz("shards", "list", "-o", "json", f"--consumer.address={via.endpoint}", check=False, timeout=20)
    if proc.returncode != 0:
        return None
    out = {}
    for shard in json.loads(proc.stdout).get("shards", []):
        members = shard.get("route", {}).get("members", [])
        codes = [s.get("code", "IDLE") for s in shard.get("status", [])]
        out[shard["spec"]["id"]] = [(m.get("suffix", ""), c) for m, c in zip(members, codes, strict=False)]
    return out


def _routes_without(cluster: LocalCluster, suffix: str) -> bool:
    """Every journal has a primary and R members, none of them broker `suffix`."""
    infos = cluster.client().list_journals()
    return len(infos) == len(CHUNK_JOURNALS) + len(RECOVERY_LOGS) + 1 and all(
        i.route.primary >= 0
        and len(i.route.members) == REPLICATION
        and all(s != suffix for _, s in i.route.members)
        for i in infos
    )


# --- the run -----------------------------------------------------------------------------------------


class Run:
    """A cluster, its summers, gazctl, and the report of what happened."""

    def __init__(self, cluster: LocalCluster, gz: Gazctl, summers: list[Summer], chunker: str, workdir: Path):
        self.cluster = cluster
        self.gz = gz
        self.summers = summers
        self.chunker = chunker
        self.workdir = workdir
        self.chunkers: list[subprocess.Popen] = []
        self.report: list[str] = []
        self.t0 = time.monotonic()

    def say(self, line: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f} s] {line}"
        self.report.append(line)
        print(line, flush=True)

    def sums_head(self) -> int:
        return self.cluster.client().read_head(SUMS)

    def progress_after(self, head: int, chunker: subprocess.Popen, what: str) -> None:
        """Waits until sums were appended past `head` (or the chunker has ended)."""
        wait_for(what, lambda: chunker.poll() is not None or self.sums_head() > head, WAIT_S)

    def chunker_log(self, n: int) -> Path:
        return self.workdir / f"chunker-{n}.log"

    def start_chunker(self) -> subprocess.Popen:
        cmd = [
            self.chunker, "run",
            f"--chunker.workers={WORKERS}", f"--chunker.streams={STREAMS}", f"--chunker.chunks={CHUNKS}",
            f"--broker.address={self.cluster.broker_endpoints[0]}", "--broker.cache.size=256",
            "--log.level=info", "--log.format=text",
        ]  # fmt: skip
        with open(self.chunker_log(len(self.chunkers)), "wb") as log:
            proc = spawn(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(self.workdir)
            )
        self.chunkers.append(proc)
        return proc

    def assert_summers_alive(self) -> None:
        for s in self.summers:
            assert s.proc is not None and s.proc.poll() is None, (
                f"summer {s.id} exited ({s.proc and s.proc.returncode}) by itself (a repeated or lost chunk "
                f"is a log.Fatal of Gazette's summer); its log ends with:\n{s.log_text()[-4000:]}"
            )

    def serving(self, via: Summer) -> bool:
        """Every shard has a primary and a ready standby, and each summer holds replicas."""
        shards = _shard_replicas(self.gz, via)
        if shards is None or sorted(shards) != SHARDS:
            return False
        holders = {who for replicas in shards.values() for who, _ in replicas}
        return holders == {s.id for s in self.summers} and all(
            sorted(code for _, code in replicas) == ["PRIMARY", "STANDBY"] for replicas in shards.values()
        )

    def only_on(self, survivor: Summer) -> bool:
        """Every shard has exactly one replica, its primary on `survivor`: the other summer's lease is
        gone and its assignments with it."""
        shards = _shard_replicas(self.gz, survivor)
        return (
            shards is not None
            and sorted(shards) == SHARDS
            and all(replicas == [(survivor.id, "PRIMARY")] for replicas in shards.values())
        )

    def primary_holder(self) -> tuple[Summer, int]:
        """The summer holding the most shard primaries (the first on a tie), and how many it holds."""
        shards = _shard_replicas(self.gz, self.summers[0]) or {}
        primaries = Counter(
            who for replicas in shards.values() for who, code in replicas if code == "PRIMARY"
        )
        holder = max(self.summers, key=lambda s: (primaries[s.id], -s.index))
        return holder, primaries[holder.id]

    # --- faults --------------------------------------------------------------------------------------

    def fault(self, kind: str, chunker: subprocess.Popen) -> str:
        head = self.sums_head()
        t = time.monotonic()
        if kind.startswith("kill-broker-"):
            i = int(kind.rsplit("-", 1)[1])
            # Restarted once its journals moved: not held down until sums flow without it, since
            # the Go processes whose --broker.address it is (stand-in for a Kubernetes Service) block
            # a route-less RPC on that address until it answers again (Gazette's dispatcher waits on
            # its default SubConn), and the chunker allows 40 s per sum.
            suffix = self.cluster.brokers[i].suffix
            self.cluster.kill_broker(i)
            wait_for(
                f"journals to move off killed {suffix}", lambda: _routes_without(self.cluster, suffix), WAIT_S
            )
            moved = time.monotonic() - t
            self.cluster.restart_broker(i)
            self.cluster.wait_for_routes(timeout=WAIT_S)
            self.progress_after(head, chunker, f"sums appended after SIGKILL and restart of {suffix}")
            # R=2 outlives one lost broker until what it held is persisted: the survivor persists the
            # spools it completed as a replica only after its replica delay (120 s; Gazette's takes
            # 1-3 min), so killing the other holder sooner can lose them (the journal's first
            # fragment, say, when the dead primary's own upload had not finished) on Gazette as on
            # ours. A Flush of every journal (persisting what each primary holds) ends that window
            # before the next broker fault.
            wait_for(
                "every journal flushed to the store", lambda: self.cluster.flush_fragments() or True, WAIT_S
            )
            return (f"SIGKILL gazette-py {suffix}: its journals moved in {moved:.1f} s, restarted, routes full, "
                    f"sums flowing and journals flushed after {time.monotonic() - t:.1f} s")  # fmt: skip

        victim, primaries = self.primary_holder()
        survivor = self.summers[1 - victim.index]
        t = time.monotonic()
        if kind == "kill-summer":
            victim.kill()
        else:
            victim.pause()
        wait_for(f"every shard on {survivor.id} alone, as primary ({kind} {victim.id})", lambda: self.only_on(survivor),
                 WAIT_S)  # fmt: skip
        took_over = time.monotonic() - t
        self.progress_after(head, chunker, f"sums appended after {kind} {victim.id}")
        what = f"SIGKILL summer {victim.id} (primary of {primaries} shards)"
        if kind == "pause-summer":
            # The zombie, resumed, finds its lease gone: Gazette's consumer then exits. Had it appended
            # to a recovery log first, the author register check would fail (REGISTER_MISMATCH).
            mismatches = victim.log_text().count("REGISTER_MISMATCH")
            victim.resume()
            proc = victim.proc
            assert proc is not None
            wait_for(f"{victim.id} to exit or rejoin after SIGCONT", lambda: proc.poll() is not None or self.serving(survivor),
                     WAIT_S)  # fmt: skip
            fenced = victim.log_text().count("REGISTER_MISMATCH") - mismatches
            outcome = f"exited {proc.returncode}" if proc.poll() is not None else "stayed"
            what = f"SIGSTOP summer {victim.id} (primary of {primaries} shards; SIGCONT: {outcome}, {fenced} REGISTER_MISMATCH)"
        if victim.proc is None or victim.proc.poll() is not None:
            victim.start()
        wait_for(f"{victim.id} back in the group", lambda: self.serving(survivor), WAIT_S)
        return (f"{what}: standbys on {survivor.id} took over in {took_over:.1f} s, sums kept coming, "
                f"{victim.id} back as standby after {time.monotonic() - t:.1f} s")  # fmt: skip


def _fragments(endpoint: str, journal: str) -> tuple[list[tuple[int, int, bool]], str] | None:
    """A broker's own fragment index of `journal` as (begin, end, persisted), and the primary's suffix
    in its route; None when it does not answer or holds no replica."""
    with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
        try:
            resp = pb_grpc.JournalStub(channel).ListFragments(
                pb.FragmentsRequest(journal=journal, do_not_proxy=True), timeout=5
            )
        except grpc.RpcError:
            return None
    if resp.status != pb.OK:
        return None
    route = resp.header.route
    primary = route.members[route.primary].suffix if 0 <= route.primary < len(route.members) else ""
    return [(f.spec.begin, f.spec.end, bool(f.spec.mod_time)) for f in resp.fragments], primary


def _holes(frags: list[tuple[int, int, bool]]) -> list[tuple[int, int]]:
    """Offset ranges between a broker's first fragment and its last one that none of them covers."""
    holes: list[tuple[int, int]] = []
    end: int | None = None
    for begin, stop, _ in sorted(frags):
        if end is not None and begin > end:
            holes.append((end, begin))
        end = stop if end is None else max(end, stop)
    return holes


def _primary_holes(endpoints: dict[str, str], journals: list[str]) -> list[str]:
    """Ranges missing from a journal's primary where another member holds content only in unpersisted
    spools: what a commit applied by the replicas and not the primary leaves."""
    found = []
    for journal in journals:
        views = {suffix: _fragments(ep, journal) for suffix, ep in endpoints.items()}
        primaries = {v[1] for v in views.values() if v is not None}
        for suffix, view in views.items():
            if view is None or suffix not in primaries:
                continue
            for lo, hi in _holes(view[0]):
                holders = [
                    other for other, v in views.items()
                    if other != suffix and v is not None
                    and any(b < hi and lo < e and not persisted for b, e, persisted in v[0])
                ]  # fmt: skip
                if holders:
                    found.append(
                        f"{journal} [{lo}, {hi}) missing at primary {suffix}, unpersisted at {holders}"
                    )
    return found


def _diagnose(run: Run) -> list[str]:
    """What a stuck pipeline waits on, printed and written to the logs under tmp_path: shards with
    their lag (gazctl), journal heads and routes, each broker's own fragments, the summers'
    connections, our brokers' asyncio tasks and the summers' goroutines (SIGQUIT: Go prints every
    goroutine's stack and exits). Returns the primary holes of `_primary_holes`."""
    for s in run.summers:
        if s.proc is not None and s.proc.poll() is None:
            proc = run.gz(
                "shards", "list", "--lag", "-r", f"--consumer.address={s.endpoint}", check=False, timeout=20
            )
            print(f"--- gazctl shards list --lag -r via {s.id} ---\n{proc.stdout}{proc.stderr}")
            break
    try:
        for info in run.cluster.client().list_journals():
            print(
                f"journal {info.spec.name}: head {run.cluster.client().read_head(info.spec.name)}, route {info.route}"
            )
    except Exception as exc:
        print(f"listing journals failed: {exc!r}")
    print(f"brokers: {run.cluster.broker_endpoints}")
    endpoints = {h.suffix: h.endpoint for h in run.cluster.brokers if h.running}
    for suffix, endpoint in endpoints.items():  # a hole in a broker's index is a read waiting there
        for journal in [*CHUNK_JOURNALS, SUMS]:
            view = _fragments(endpoint, journal)
            if view is not None:
                print(f"{suffix} {journal}: primary {view[1]}, fragments {view[0][-5:]}")
    holes = _primary_holes(endpoints, [*CHUNK_JOURNALS, *RECOVERY_LOGS, SUMS])
    print(f"primary holes: {holes}")
    pids = {str(s.proc.pid): s.id for s in run.summers if s.proc is not None and s.proc.poll() is None}
    try:  # the summers' connections: which broker a stuck read or append waits on
        ss = subprocess.run(["ss", "-tnp"], capture_output=True, text=True, timeout=20).stdout.splitlines()
        print("\n".join(f"{pids[p]}: {ln}" for ln in ss for p in pids if f"pid={p}," in ln))
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"ss -tnp failed: {exc!r}")
    print("our brokers' tasks are in", run.cluster.dump_tasks())
    for s in run.summers:
        if s.proc is not None and s.proc.poll() is None:
            s.proc.send_signal(signal.SIGQUIT)
            try:
                s.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    print(f"logs: {run.workdir} (summers, chunkers) and {run.cluster.data_dir} (brokers)")
    return holes


def _verify_journals(run: Run, rounds: int) -> str:
    """gazette-py's own reading of what the Go processes wrote: every chunk of every stream exactly
    once (read committed), and one sum per stream equal to the CRC-64 of its chunks."""
    client = run.cluster.client()
    streams: dict[bytes, dict[int, bytes]] = defaultdict(dict)
    repeated_chunks = 0
    for journal in CHUNK_JOURNALS:
        for env in ReadCommitted(client, journal, framing_options=GO_JSON, skip_acks=True):
            chunk = env.message
            seq = streams[bytes(chunk["ID"])]
            repeated_chunks += chunk["SeqNo"] in seq
            seq[chunk["SeqNo"]] = base64.b64decode(chunk.get("Data") or "")
    sums: dict[bytes, list[dict]] = defaultdict(list)
    for env in ReadCommitted(client, SUMS, framing_options=GO_JSON, skip_acks=True):
        sums[bytes(env.message["ID"])].append(env.message)
    appended = sum(1 for e in ReadUncommitted(client, SUMS, framing_options=GO_JSON) if not e.is_ack)

    expect = rounds * WORKERS * STREAMS
    assert repeated_chunks == 0, f"{repeated_chunks} chunks read committed more than once"
    assert len(streams) == expect, f"{len(streams)} streams in the chunk journals, expected {expect}"
    for sid, seq in streams.items():
        assert sorted(seq) == list(range(1, CHUNKS + 2)), f"stream {sid.hex()}: chunks {sorted(seq)}"
    assert sums.keys() == streams.keys(), "streams without a sum, or sums without a stream"
    for sid, found in sums.items():
        assert len(found) == 1, f"stream {sid.hex()} summed {len(found)} times: {found}"
        value = 0
        for n in range(1, CHUNKS + 2):
            value = crc64_update(value, streams[sid][n])
        assert (found[0]["SeqNo"], found[0]["Value"]) == (CHUNKS + 1, value), (sid.hex(), found[0], value)
    return (f"{len(streams)} streams of {CHUNKS + 1} chunks each read committed exactly once, one sum each equal "
            f"to our CRC-64 of its chunks ({appended} sums appended, {appended - len(sums)} of them never "
            f"committed)")  # fmt: skip


def _stream_sum(tmp_path: Path, faults: list[str]) -> None:
    summer_bin = require_peer("stream-sum-summer")
    chunker_bin = require_peer("stream-sum-chunker")
    gazctl_bin = require_peer("gazctl")
    started = time.monotonic()
    # The cluster's data (broker logs among them) stays under tmp_path for a failure's post-mortem.
    with LocalCluster(brokers=3, mode="subprocess", data_dir=str(tmp_path / "cluster")) as cluster:
        summers = [Summer(k, summer_bin, cluster, tmp_path) for k in range(2)]
        run = Run(cluster, gazctl_for(gazctl_bin, cluster, str(tmp_path)), summers, chunker_bin, tmp_path)
        try:
            _apply_journals(cluster)
            for s in summers:
                s.start()
            wait_for("the summers to answer gazctl", lambda: all(_shard_replicas(run.gz, s) is not None for s in summers),
                     WAIT_S)  # fmt: skip
            run.gz(
                "shards",
                "apply",
                f"--consumer.address={summers[0].endpoint}",
                input=_shards_yaml(),
                timeout=WAIT_S,
            )
            wait_for("each shard's primary and hot standby", lambda: run.serving(summers[0]), WAIT_S)
            run.say(f"{len(SHARDS)} shards (rocksdb, sqlite alternately), primary and hot standby on "
                    f"{[s.id for s in summers]}; {len(CHUNK_JOURNALS) + len(RECOVERY_LOGS) + 1} journals "
                    f"at R={REPLICATION} on 3 gazette-py brokers")  # fmt: skip

            pending = list(faults)
            rounds = 0
            while pending:
                rounds += 1
                assert rounds <= 3 * len(faults), "the chunker keeps finishing before a fault could land"
                head = run.sums_head()
                chunker = run.start_chunker()
                run.progress_after(head, chunker, f"round {rounds}: first sums")
                done = "none (the chunker had finished)"
                # The fault lands while chunks flow; had the chunker finished already, the next round has it.
                if chunker.poll() is None:
                    done = run.fault(pending.pop(0), chunker)
                    run.assert_summers_alive()
                try:
                    rc = chunker.wait(timeout=CHUNKER_WAIT_S)
                except subprocess.TimeoutExpired:
                    chunker.kill()
                    rc = chunker.wait()
                log = run.chunker_log(len(run.chunkers) - 1).read_text(errors="replace")
                if rc != 0:
                    run.say(f"round {rounds}: {done}")
                    _diagnose(run)
                assert rc == 0, (
                    f"round {rounds}: Gazette's chunker failed ({rc}); its log ends with:\n{log[-4000:]}"
                )
                run.say(f"round {rounds}: {done}")
                run.say(f"round {rounds}: Gazette's chunker verified {WORKERS * STREAMS} streams "
                        f"({log.count('delay waiting for expected sum')} 'delay waiting for expected sum' warnings)")  # fmt: skip
                run.assert_summers_alive()

            run.say(_verify_journals(run, rounds))
            for s in summers:
                fatal = [ln for ln in s.log_text().splitlines() if "level=fatal" in ln and "lease" not in ln]
                assert not fatal, f"{s.id} died otherwise than by losing its lease: {fatal}"
            run.say(f"{rounds} rounds, {rounds * WORKERS * STREAMS} streams verified exactly once; summer starts "
                    f"{[s.starts for s in summers]}; {time.monotonic() - started:.0f} s in all")  # fmt: skip
        except BaseException:
            print("\n".join(run.report))
            for s in summers:
                print(f"--- {s.id} log tail ---\n{s.log_text()[-3000:]}")
            raise
        finally:  # the cluster is thrown away: no hand-off to wait for
            for proc in [s.proc for s in summers] + run.chunkers:
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()


def test_stream_sum_exactly_once_while_brokers_and_summers_fail(tmp_path: Path) -> None:
    """Four rounds: SIGKILL + restart of broker 1, of the primaries' summer, of broker 2; then a zombie
    primary summer (SIGSTOP, takeover, SIGCONT)."""
    _stream_sum(tmp_path, CI_FAULTS)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_stream_sum_exactly_once_soak(tmp_path: Path) -> None:
    """Eighteen rounds, the faults rotating over every broker and whichever summer holds the primaries."""
    _stream_sum(tmp_path, SOAK_FAULTS)


# --- the broker difference this oracle found, on its own -----------------------------------------------

CANCELLED_APPENDS = 200
CANCEL_JOURNAL = "interop/cancelled/appends"


async def _cancel_commits(endpoint: str, journal: str, n: int) -> None:
    """`n` Appends of 100 bytes to `journal` at `endpoint`, each cancelled just after its commit message
    (as when its client dies), the cancellation landing at a different moment of the commit each time."""
    async with grpc.aio.insecure_channel(endpoint.removeprefix("http://")) as channel:
        stub = pb_grpc.JournalStub(channel)
        for k in range(n):
            call = stub.Append()
            await call.write(pb.AppendRequest(journal=journal))
            await call.write(pb.AppendRequest(content=b"x" * 99 + b"\n"))
            await call.write(pb.AppendRequest())  # the empty chunk that commits
            await asyncio.sleep((k % 20) * 0.0002)  # part of the fault: where the cancellation lands
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await call


@pytest.mark.parametrize("kind", ["gazette", "gazette-py"])
def test_cancelled_appends_leave_primary_and_replicas_alike(kind: str) -> None:
    """Two brokers, an R=2 journal, 200 Appends each cancelled by its client right after the commit
    message: whichever of them commit, the primary and the replica must hold the same offsets (no hole
    in either's fragment index). gazette-py once committed many on the replica only (its pipeline's
    scatter could be cancelled between the sends and the primary's own apply), which stalled the
    stream-sum test's chunker now and then."""
    if kind == "gazette":
        require_peer("gazette")
    cluster = start_cluster([kind, kind])
    try:
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(CANCEL_JOURNAL, replication=2)])
        cluster.wait_for_routes([CANCEL_JOURNAL])
        client.append(CANCEL_JOURNAL, b"first\n")
        info = next(i for i in client.list_journals() if i.spec.name == CANCEL_JOURNAL)
        primary = info.route.primary_id
        assert primary is not None
        endpoint = next(h.endpoint for h in cluster.brokers if h.suffix == primary[1])
        asyncio.run(_cancel_commits(endpoint, CANCEL_JOURNAL, CANCELLED_APPENDS))
        end = client.append(CANCEL_JOURNAL, b"last\n").end
        committed = (end - len(b"first\n") - len(b"last\n")) // 100
        for h in cluster.brokers:
            view = _fragments(h.endpoint, CANCEL_JOURNAL)
            assert view is not None, f"{h.suffix} lists no fragments of {CANCEL_JOURNAL}"
            role = "primary" if h.suffix == primary[1] else "replica"
            assert max(e for _, e, _ in view[0]) == end, (role, view[0][-3:], end)
            assert not _holes(view[0]), (
                f"{kind} {role} {h.suffix} lacks {_holes(view[0])} of the {committed} cancelled appends that "
                f"committed (journal end {end})"
            )
    finally:
        cluster.close()
