"""Stream-sum: the exactly-once oracle (chunker, summer, verifier; docs/semantics.md#stream-sum-oracle).

A `Chunker` publishes (committed) chunks `{"id", "seq", "data"}` of many streams, modulo-mapped by
stream id over `examples/stream-sum/chunks/part-NNN`; a final chunk has empty data. `Summer` shards keep
each stream's last seq and running CRC-64 in an SQLStore, fail loudly on any sequence gap or repeat,
and publish the stream's `{"id", "seq", "sum"}` (uncommitted) to `examples/stream-sum/sums` on its final
chunk. `verify` reads the sums read-committed and checks each stream's sum appears once and is right.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from typing import Any

from gazette.client.sync import Client
from gazette.consumer import Application, ReplicaCode, Shard, ShardInfo, ShardSpec, SQLStore
from gazette.consumer.json_store import JSONFileStore
from gazette.consumer.store import Store
from gazette.message import Envelope, Publisher, ReadCommitted
from gazette.protocol.spec import JournalSpec
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG

CHUNKS_PREFIX = "examples/stream-sum/chunks/part-"
SUMS_JOURNAL = "examples/stream-sum/sums"
RECOVERY_PREFIX = "examples/stream-sum/recovery"
JSON_LABELS = {"content-type": "application/x-ndjson"}
RECOVERY_LABELS = {"content-type": CONTENT_TYPE_RECOVERY_LOG}
CHUNK_DATA_BYTES = 32
VERIFY_POLL_INTERVAL_S = 0.05

_CRC64_POLY_REFLECTED = 0xC96C5795D7870F42  # CRC-64/ECMA-182 reflected, as Go's crc64.ECMA table
_CRC64_MASK = (1 << 64) - 1


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC64_POLY_REFLECTED if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64_TABLE = _crc64_table()


def crc64_update(crc: int, data: bytes) -> int:
    """Go's `crc64.Update(crc, crc64.MakeTable(crc64.ECMA), data)` (CRC-64/XZ)."""
    crc = ~crc & _CRC64_MASK
    for b in data:
        crc = _CRC64_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return ~crc & _CRC64_MASK


class SequenceError(ValueError):
    """A chunk whose seq is not its stream's previous seq + 1: a skipped or repeated chunk."""


def chunks_journal(i: int) -> str:
    return f"{CHUNKS_PREFIX}{i:03d}"


def partition_of(stream_id: str, partitions: int) -> int:
    """Modulo mapping of a stream id (hex) over the chunk partitions."""
    return int(stream_id, 16) % partitions


def journals(
    partitions: int, replication: int = 1, recovery_logs: bool = False, store: str | None = None
) -> list[JournalSpec]:
    """The chunk partitions and the sums journal (and, for JSONSummer, each shard's recovery log),
    persisted to `store` (e.g. a LocalCluster's `.store`). Without one they have no store: their
    content lives only in the brokers' spools."""
    stores = [store] if store else []
    specs = [
        JournalSpec(name=chunks_journal(i), replication=replication, labels=JSON_LABELS, stores=stores)
        for i in range(partitions)
    ]
    specs.append(JournalSpec(name=SUMS_JOURNAL, replication=replication, labels=JSON_LABELS, stores=stores))
    if recovery_logs:
        specs.extend(
            JournalSpec(
                name=f"{RECOVERY_PREFIX}/{shard_id(i)}",
                replication=replication,
                labels=RECOVERY_LABELS,
                stores=stores,
            )  # fmt: skip
            for i in range(partitions)
        )
    return specs


def shard_id(i: int) -> str:
    return f"summer-{i:03d}"


def shards(
    partitions: int,
    hot_standbys: int = 1,
    max_txn_duration: str = "1s",
    hint_prefix: str = "",
    min_txn_duration: str = "0s",
) -> list[ShardSpec]:
    """One summer shard per chunk partition (reference: hot_standbys 1, max txn 1 s). With a
    `hint_prefix` (an etcd path) each shard records to its recovery log, as JSONSummer needs."""
    return [
        ShardSpec(
            shard_id(i),
            [chunks_journal(i)],
            max_txn_duration=max_txn_duration,
            min_txn_duration=min_txn_duration,
            hot_standbys=hot_standbys,
            recovery_log_prefix=RECOVERY_PREFIX if hint_prefix else "",
            hint_prefix=hint_prefix,
        )
        for i in range(partitions)
    ]


class Chunker:
    """Generates `streams` streams of `chunks` data chunks (plus a final empty one), randomly
    interleaved (deterministic for a `seed`), and publishes them committed in steps of `publish(n)`.
    `expected` maps each stream id to its final `{"seq", "sum"}`."""

    def __init__(self, client: Client, partitions: int, streams: int, chunks: int = 3, seed: int = 0) -> None:
        if partitions < 1 or streams < 1 or chunks < 0:
            raise ValueError(
                f"Chunker needs partitions >= 1, streams >= 1 and chunks >= 0; got {partitions}, {streams}, {chunks}"
            )
        self.client = client
        self.partitions = partitions
        rng = random.Random(seed)
        ids = [rng.randbytes(16).hex() for _ in range(streams)]
        pending: dict[str, list[dict[str, Any]]] = {}
        self.expected: dict[str, dict[str, Any]] = {}
        for sid in ids:
            crc, msgs = 0, []
            for seq in range(1, chunks + 1):
                data = rng.randbytes(CHUNK_DATA_BYTES)
                crc = crc64_update(crc, data)
                msgs.append({"id": sid, "seq": seq, "data": data.hex()})
            msgs.append({"id": sid, "seq": chunks + 1, "data": ""})
            pending[sid] = msgs
            self.expected[sid] = {"seq": chunks + 1, "sum": f"{crc:016x}"}
        # Random interleaving that keeps each stream's order.
        order = [sid for sid in ids for _ in pending[sid]]
        rng.shuffle(order)
        cursors = dict.fromkeys(ids, 0)
        self._queue: list[dict[str, Any]] = []
        for sid in order:
            self._queue.append(pending[sid][cursors[sid]])
            cursors[sid] += 1
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._queue) - self._next

    def publish(self, n: int | None = None) -> int:
        """Publishes (committed) the next `n` chunks (all remaining by default); returns how many."""
        batch = self._queue[self._next : None if n is None else self._next + n]
        pub = Publisher(self.client)
        try:
            for msg in batch:
                pub.publish_committed(chunks_journal(partition_of(msg["id"], self.partitions)), msg)
            pub.flush()
        finally:
            pub.close()
        self._next += len(batch)
        return len(batch)


class SumStore(SQLStore):
    """The shard's sqlite file with `sums(id, seq, crc)`, plus this transaction's changed streams."""

    def __init__(self, shard: Shard, url: str) -> None:
        super().__init__(shard, url)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS sums (id TEXT PRIMARY KEY NOT NULL, seq INTEGER NOT NULL, crc TEXT NOT NULL)"
        )
        self.changed: dict[str, tuple[int, int]] = {}

    def state_of(self, stream_id: str) -> tuple[int, int]:
        """(last seq, running crc) of a stream; (0, 0) for a new one."""
        if stream_id in self.changed:
            return self.changed[stream_id]
        row = self.execute("SELECT seq, crc FROM sums WHERE id = ?", (stream_id,)).fetchone()
        return (int(row[0]), int(row[1], 16)) if row else (0, 0)

    def save_changed(self) -> None:
        """Writes this transaction's changed streams into `sums` (committed with the checkpoint)."""
        self.executemany(
            "INSERT INTO sums (id, seq, crc) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, crc = excluded.crc",
            [(sid, seq, f"{crc:016x}") for sid, (seq, crc) in self.changed.items()],
        )
        self.changed.clear()


class JSONSumStore(JSONFileStore):
    """The same per-stream state as SumStore, as `{id: [seq, crc hex]}` in a JSONFileStore on the
    shard's recovery log (fenced by the log's author register instead of a fence column)."""

    def __init__(self, recorder: Any) -> None:
        super().__init__(recorder)
        self.changed: dict[str, tuple[int, int]] = {}

    def state_of(self, stream_id: str) -> tuple[int, int]:
        if stream_id in self.changed:
            return self.changed[stream_id]
        seq, crc = self.state.get(stream_id, (0, "0"))
        return int(seq), int(crc, 16)

    def save_changed(self) -> None:
        for sid, (seq, crc) in self.changed.items():
            self.state[sid] = [seq, f"{crc:016x}"]
        self.changed.clear()


class Summer(Application):
    """Sums chunks per stream into `<db_dir>/<shard id>.db`; a seq gap or repeat raises SequenceError
    (the shard goes FAILED with it); publishes a stream's sum (uncommitted) on its final chunk."""

    def __init__(self, db_dir: str, output: str = SUMS_JOURNAL) -> None:
        self.db_dir = db_dir
        self.output = output

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        return SumStore(shard, os.path.join(self.db_dir, shard.id.replace("/", "_") + ".db"))

    def consume_message(self, shard: Shard, store: Store, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        assert isinstance(store, SumStore | JSONSumStore)
        chunk = env.message
        sid, seq = chunk["id"], int(chunk["seq"])
        last, crc = store.state_of(sid)
        if seq != last + 1:
            kind = "repeated" if seq <= last else "skipped"
            raise SequenceError(
                f"stream {sid}: chunk seq {seq} at offset {env.begin} of {env.journal} follows seq {last} "
                f"(a {kind} chunk; expected seq {last + 1})"
            )
        data = bytes.fromhex(chunk["data"])
        if data:
            crc = crc64_update(crc, data)
        else:
            pub.publish_uncommitted(self.output, {"id": sid, "seq": seq, "sum": f"{crc:016x}"})
        store.changed[sid] = (seq, crc)

    def finalize_txn(self, shard: Shard, store: Store, pub: Publisher) -> None:
        assert isinstance(store, SumStore | JSONSumStore)
        store.save_changed()


class JSONSummer(Summer):
    """Summer whose state lives in a JSONFileStore on each shard's recovery log (give its shards a
    `recovery_log_prefix` and `hint_prefix`: `shards(..., recovery_logs=True)`)."""

    def __init__(self, output: str = SUMS_JOURNAL) -> None:
        super().__init__("", output)

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        return JSONSumStore(recorder)


class VerificationError(AssertionError):
    """A stream's published sum is wrong, duplicated, unknown, or a summer shard FAILED."""


def read_sums(client: Client, journal: str = SUMS_JOURNAL, offset: int = 0) -> list[dict[str, Any]]:
    """Every committed sum of the output journal from `offset`, in order (non-blocking)."""
    return [dict(e.message) for e in ReadCommitted(client, journal, offset=offset, skip_acks=True)]


def failed_shards(shards: list[ShardInfo]) -> dict[str, str]:
    """Shard id -> error of every shard with a FAILED replica."""
    return {
        s.spec.id: r.status.error for s in shards for r in s.replicas if r.status.code == ReplicaCode.FAILED
    }


def check(expected: dict[str, dict[str, Any]], sums: list[dict[str, Any]]) -> int:
    """Raises VerificationError on a wrong, duplicated or unknown sum; returns how many streams verified."""
    seen: set[str] = set()
    for s in sums:
        sid = s["id"]
        if sid not in expected:
            raise VerificationError(f"a sum for unknown stream {sid}: {s}")
        if sid in seen:
            raise VerificationError(f"stream {sid}: its sum was read twice (second: {s})")
        want = expected[sid]
        if s["seq"] != want["seq"] or s["sum"] != want["sum"]:
            raise VerificationError(f"stream {sid}: sum {s} differs from the chunker's {want}")
        seen.add(sid)
    return len(seen)


def verify(
    client: Client,
    expected: dict[str, dict[str, Any]],
    *,
    offset: int = 0,
    timeout: float = 60.0,
    list_shards: Any = None,
) -> list[dict[str, Any]]:
    """Waits until every expected stream's sum is readable (read-committed) from `offset` and checks
    each appears once with the right value; fails fast when `list_shards()` shows a FAILED shard."""
    deadline = time.monotonic() + timeout
    while True:
        sums = read_sums(client, offset=offset)
        if check(expected, sums) == len(expected):
            return sums
        if list_shards is not None and (failed := failed_shards(list_shards())):
            raise VerificationError(f"summer shards FAILED: {failed}")
        if time.monotonic() > deadline:
            missing = sorted(set(expected) - {s["id"] for s in sums})
            raise VerificationError(
                f"{len(missing)} of {len(expected)} streams have no sum after {timeout:.0f} s"
            )
        time.sleep(VERIFY_POLL_INTERVAL_S)


def run(
    cluster: Any,
    *,
    partitions: int = 4,
    streams: int = 40,
    chunks: int = 3,
    processes: int = 2,
    seed: int = 0,
    db_dir: str | None = None,
    timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """Runs chunker, summers (one hot standby each) and verifier on `cluster`; returns the verified sums."""
    client = cluster.client()
    client.apply_journals(journals(partitions, store=getattr(cluster, "store", None)))
    cluster.wait_for_routes()
    start = client.read_head(SUMS_JOURNAL)
    db_dir = db_dir or tempfile.mkdtemp(prefix="stream-sum-")
    group = cluster.run_consumer(
        Summer(db_dir), shards(partitions, hot_standbys=1 if processes > 1 else 0), processes=processes
    )
    chunker = Chunker(client, partitions, streams, chunks, seed)
    chunker.publish()
    return verify(client, chunker.expected, offset=start, timeout=timeout, list_shards=group.list_shards)
