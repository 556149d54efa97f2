"""ReadUncommitted and ReadCommitted against a real broker: exact offsets in JSON, CSV and fixed
journals; committed reading of Publisher-written data with rollbacks; replay when the ring is too
small; resuming from checkpoints mid-transaction; blocking tails; offset jumps; bad journals and
garbage frames."""

from __future__ import annotations

import asyncio
import concurrent.futures
import glob
import json
import logging
import os
import time
import uuid as std_uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gazette.client.aio import AsyncClient, ReadChunk
from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.message import (
    Envelope,
    Flags,
    Publisher,
    ReadCommitted,
    ReadUncommitted,
    build_uuid,
    framing_for,
)
from gazette.message.checkpoint import Checkpoint
from gazette.message.framing import CSVFraming, FixedFraming, FramingError, JSONFraming
from gazette.message.reader import replay_reader
from gazette.message.sequencer import QueueOutcome
from gazette.message.uuid import CLOCK_TICK, new_producer_id
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.status import Status

NDJSON = "application/x-ndjson"
WAIT_S = 30.0
OUT, CONT, ACK = int(Flags.OUTSIDE_TXN), int(Flags.CONTINUE_TXN), int(Flags.ACK_TXN)
BASE_CLOCK = 0x1EF00000_00000000


@pytest.fixture(scope="module")
def cluster(etcd, module_etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("reader")
    os.makedirs(data / "store", exist_ok=True)
    with LocalCluster(brokers=1, mode="inprocess", store=f"file://{data}/store/", etcd=etcd.endpoint,
                      root=module_etcd_root, data_dir=str(data / "data")) as c:  # fmt: skip
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Client:
    return cluster.client()


_names = iter(range(1 << 30))


def _journal(cluster: LocalCluster, client: Client, content_type: str | None = NDJSON, **fields: Any) -> str:
    name = f"reader/j-{next(_names):04d}"
    labels = {"content-type": content_type} if content_type else {}
    fields.setdefault("fragment_length", 1 << 20)
    client.apply_journals([cluster.journal_spec(name, labels=labels, **fields)])
    return name


def _append(client: Client, journal: str, frames: list[bytes]) -> list[tuple[int, int]]:
    """Appends `frames` in one append; returns each frame's [begin, end)."""
    res = client.append(journal, frames)
    out, pos = [], res.begin
    for f in frames:
        out.append((pos, pos + len(f)))
        pos += len(f)
    assert pos == res.end
    return out


def _take(it: Iterator[Envelope], n: int) -> list[Envelope]:
    """The next `n` envelopes of a (blocking) iterator, failing rather than hanging if they don't come."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: [next(it) for _ in range(n)]).result(WAIT_S)


def _where(envs: Iterable[Envelope]) -> list[tuple[int, int]]:
    return [(e.begin, e.end) for e in envs]


class Producer:
    """Frames JSON messages for one producer with exactly the clocks and flags asked for."""

    def __init__(self, n: int = 0) -> None:
        self.pid = new_producer_id()
        self.clock = BASE_CLOCK + n * 1000 * CLOCK_TICK
        self.framing = JSONFraming()

    def frame(self, flags: int, body: Any = None, clock: int | None = None) -> bytes:
        if clock is None:
            self.clock += CLOCK_TICK
            clock = self.clock
        uuid = build_uuid(self.pid, clock, flags)
        if flags == ACK:
            return self.framing.encode_ack(uuid)
        return self.framing.encode({"body": body}, uuid)


# --- uncommitted reading: framings and exact offsets ----------------------------------------------


def test_uncommitted_json_yields_every_frame_with_exact_offsets(cluster, client):
    journal = _journal(cluster, client)
    p = Producer()
    frames = [p.frame(OUT, "a"), p.frame(CONT, "b" * 300), p.frame(ACK)]
    frames2 = [p.frame(CONT, {"nested": [1, 2]}), p.frame(OUT, "é")]
    where = _append(client, journal, frames) + _append(client, journal, frames2)

    envs = list(ReadUncommitted(client, journal))
    assert _where(envs) == where
    assert [e.flags for e in envs] == [OUT, CONT, ACK, CONT, OUT]
    assert [e.message.get("body") for e in envs] == ["a", "b" * 300, None, {"nested": [1, 2]}, "é"]
    assert all(e.producer == p.pid and e.journal == journal for e in envs)
    assert envs[2].is_ack and envs[2].uuid == build_uuid(p.pid, envs[2].clock, ACK)

    # From a frame boundary in the middle, up to an end offset.
    part = list(ReadUncommitted(client, journal, where[1][0], end_offset=where[3][1]))
    assert _where(part) == where[1:4]


def test_uncommitted_csv_and_fixed_journals(cluster, client):
    p = Producer()
    csv_j = _journal(cluster, client, "text/csv")
    csv = CSVFraming()
    rows = [["", "plain", "1"], ["", 'quoted "x", and\na newline', ""], ["", "ünï", "3"]]
    clocks = [p.clock + i * CLOCK_TICK for i in range(1, 4)]
    frames = [csv.encode(r, build_uuid(p.pid, c, OUT)) for r, c in zip(rows, clocks, strict=True)]
    where = _append(client, csv_j, frames)
    envs = list(ReadUncommitted(client, csv_j))
    assert _where(envs) == where
    assert [e.message[1:] for e in envs] == [r[1:] for r in rows]
    assert [e.clock for e in envs] == clocks

    fixed_j = _journal(cluster, client, "application/x-protobuf-fixed")
    fixed = FixedFraming(message_type=Word)
    msgs = [Word(word="w" * n, n=n) for n in (0, 5, 500)]
    frames = [fixed.encode(m, build_uuid(p.pid, c, CONT)) for m, c in zip(msgs, clocks, strict=True)]
    frames.append(fixed.encode_ack(build_uuid(p.pid, clocks[-1] + CLOCK_TICK, ACK)))
    where = _append(client, fixed_j, frames)
    envs = list(ReadUncommitted(client, fixed_j, framing_options={"message_type": Word}))
    assert _where(envs) == where
    assert [e.message.word for e in envs] == ["", "w" * 5, "w" * 500, ""]
    committed = list(ReadCommitted(client, fixed_j, framing_options={"message_type": Word}))
    assert _where(committed) == where and committed[-1].is_ack

    # Raw fixed payloads carry no UUID: every one is delivered, none deduplicated.
    raw = [b"x", b"x", b""]
    where = _append(client, fixed_j, [FixedFraming().encode(r, build_uuid(p.pid, 1, OUT)) for r in raw])
    envs = list(ReadCommitted(client, fixed_j, where[0][0]))
    assert _where(envs) == where and [e.message for e in envs] == raw and not any(e.clock for e in envs)


def _word_type() -> Any:
    """message Word { string uuid = 1; string word = 2; int64 n = 3; } in a private pool."""
    fdp = descriptor_pb2.FileDescriptorProto(name="reader_word.proto", package="gzreader", syntax="proto3")
    msg = fdp.message_type.add(name="Word")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="uuid", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="word", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="n", number=3, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gzreader.Word"))


Word = _word_type()


async def test_async_iteration_over_an_async_client(cluster, client):
    journal = _journal(cluster, client)
    a, b = Producer(0), Producer(1)
    frames = [a.frame(CONT, 1), b.frame(CONT, 2), a.frame(CONT, 3), b.frame(ACK), a.frame(ACK)]
    where = _append(client, journal, frames)
    async with AsyncClient(client.broker) as aio:
        assert _where([e async for e in ReadUncommitted(aio, journal)]) == where
        reader = ReadCommitted(aio, journal, ring_size=1)
        got = [e async for e in reader]
        # b's span is [1], its ACK [3]; a's span [0, 2], its ACK [4]: both replayed (ring of one).
        assert _where(got) == [where[1], where[3], where[0], where[2], where[4]]
        assert reader.replays == 2
        with pytest.raises(TypeError, match="async iterator"):
            next(iter(ReadCommitted(aio, journal)))
    with pytest.raises(TypeError, match="plain iterator"):
        await anext(aiter(ReadUncommitted(client, journal)))


# --- committed reading ------------------------------------------------------------------------------


def test_committed_reading_of_publisher_data_with_rollback(cluster, client):
    journal = _journal(cluster, client)
    txn, plain = Publisher(client), Publisher(client)
    try:
        for i in range(3):
            txn.publish_uncommitted(journal, {"t": 1, "i": i})
        plain.publish_committed(journal, {"plain": 0})
        txn.flush(WAIT_S)
        acks1 = txn.build_ack_intents()
        for j, data in acks1:
            client.append(j, data)
        for i in range(2):  # a transaction that "crashes": its ACK intent is never appended ...
            txn.publish_uncommitted(journal, {"t": 2, "i": i})
        plain.publish_committed(journal, {"plain": 1})
        txn.flush(WAIT_S)
        plain.flush(WAIT_S)
        lost = txn.build_ack_intents()
        for j, data in acks1:  # ... and the restarted producer re-appends its last committed ACK
            client.append(j, data)
        for i in range(2):
            txn.publish_uncommitted(journal, {"t": 3, "i": i})
        txn.flush(WAIT_S)
        for j, data in txn.build_ack_intents():
            client.append(j, data)
    finally:
        txn.close()
        plain.close()
    assert [j for j, _ in lost] == [journal]

    def label(e: Envelope) -> str:
        if e.is_ack:
            return "ack"
        m = e.message
        return f"p{m['plain']}" if "plain" in m else f"t{m['t']}.{m['i']}"

    reader = ReadCommitted(client, journal)
    got = [label(e) for e in reader]
    assert got == ["p0", "t1.0", "t1.1", "t1.2", "ack", "p1", "t3.0", "t3.1", "ack"]
    queued = reader.sequencer.queued
    assert queued[("ACK_TXN", QueueOutcome.ACK_ROLLBACK)] == 1
    assert queued[("ACK_TXN", QueueOutcome.ACK_COMMIT_RING)] == 2
    assert reader.replays == 0

    assert [label(e) for e in ReadCommitted(client, journal, skip_acks=True)] == [
        g for g in got if g != "ack"
    ]
    # Every offset of the journal was read through.
    assert reader.checkpoint().offsets == {journal: client.read_head(journal)}


def test_replay_after_ring_eviction_reads_the_real_journal(cluster, client):
    journal = _journal(cluster, client)
    producers = [Producer(n) for n in range(3)]
    frames, expected = [], []
    for k in range(4):  # interleaved open spans of three producers
        for p in producers:
            frames.append(p.frame(CONT, f"{p.pid.hex()}-{k}"))
    frames.append(producers[1].frame(OUT, "outside-1"))  # clobbers producer 1's open span
    for p in producers:
        frames.append(p.frame(ACK))
    where = _append(client, journal, frames)
    n = len(producers)
    for i in range(n):
        span = [] if i == 1 else [where[k * n + i] for k in range(4)]
        expected.append(span + [where[-n + i]])
    expected[1] = [where[4 * n], where[-n + 1]]  # the OUTSIDE message; then an empty ACK

    for ring_size, replays in ((1, 2), (2, 2), (64, 0)):
        reader = ReadCommitted(client, journal, ring_size=ring_size)
        got = _where(reader)
        # Per producer, in order; across producers, in order of their commits.
        assert got == [where[4 * n]] + expected[0] + expected[1][1:] + expected[2], ring_size
        assert reader.replays == replays, ring_size
        assert (reader.sequencer.queued[("ACK_TXN", QueueOutcome.ACK_COMMIT_REPLAY)] > 0) == (replays > 0)
        assert (reader.sequencer.replayed > 0) == (replays > 0)


def test_resume_from_a_checkpoint_at_every_point(cluster, client):
    journal = _journal(cluster, client)
    a, b = Producer(0), Producer(1)
    frames = [a.frame(CONT, 0), b.frame(OUT, 1), a.frame(CONT, 2), b.frame(CONT, 3), a.frame(CONT, 4)]
    frames += [b.frame(ACK), a.frame(ACK), b.frame(OUT, 7)]
    where = _append(client, journal, frames)
    full = _where(ReadCommitted(client, journal))
    assert full == [where[i] for i in (1, 3, 5, 0, 2, 4, 6, 7)]

    for k in range(len(full) + 1):
        first = ReadCommitted(client, journal, ring_size=4)
        it = iter(first)
        head = [next(it) for _ in range(k)]
        cp = Checkpoint.from_dict(json.loads(json.dumps(first.checkpoint().to_dict())))
        first.close()
        second = ReadCommitted(client, journal, checkpoint=cp, ring_size=4)
        assert _where(head) + _where(second) == full, k


def test_checkpoint_with_an_open_transaction_replays_it_when_the_ack_comes(cluster, client):
    journal = _journal(cluster, client)
    p, other = Producer(0), Producer(1)
    span = _append(client, journal, [p.frame(CONT, 0), other.frame(OUT, "x"), p.frame(CONT, 1)])
    first = ReadCommitted(client, journal)
    assert _where(first) == [span[1]]  # the open span is held, not delivered
    cp = first.checkpoint()
    assert cp.offsets == {journal: span[-1][1]}  # read through the CONTINUE messages
    (state,) = [s for s in cp.producers if s.producer == p.pid]
    assert state.begin == span[0][0]  # ... but the span's begin is kept for its replay

    ack = _append(client, journal, [p.frame(ACK)])
    second = ReadCommitted(client, journal, checkpoint=cp.to_dict())
    assert _where(second) == [span[0], span[2], ack[0]]
    assert second.replays == 1


def test_a_replay_read_waits_for_its_whole_range(cluster, client):
    """A replay covers a committed range, so a broker answering OFFSET_NOT_YET_AVAILABLE inside it
    (a primary whose spool missed a range a replica still holds) means "wait", never "done": a
    replay that stopped there would let the ACK commit the unread messages unseen. Here the range's
    tail is appended only after the read has delivered all that was readable."""
    journal = _journal(cluster, client)
    p = Producer()
    frames = [p.frame(CONT, k) for k in range(4)]
    readable = _append(client, journal, frames[:2])
    end = readable[-1][1] + len(frames[2]) + len(frames[3])
    replay = iter(replay_reader(client, journal, 0, end, JSONFraming()))
    assert _where(_take(replay, 2)) == readable  # all that is readable so far
    rest = _append(client, journal, frames[2:])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        remaining = pool.submit(list, replay).result(WAIT_S)
    assert _where(remaining) == rest, "the replay ended at the write head instead of its range's end"


def test_blocking_readers_tail_the_journal(cluster, client):
    journal = _journal(cluster, client)
    p = Producer()
    first = _append(client, journal, [p.frame(OUT, 0), p.frame(OUT, 1)])
    with (
        ReadCommitted(client, journal, block=True) as committed,
        ReadUncommitted(client, journal, block=True) as uncommitted,
    ):
        c_it, u_it = iter(committed), iter(uncommitted)
        assert _where(_take(c_it, 2)) == first
        assert _where(_take(u_it, 2)) == first
        later = _append(client, journal, [p.frame(CONT, 2)])
        assert _where(_take(u_it, 1)) == later  # uncommitted: seen at once
        later += _append(client, journal, [p.frame(CONT, 3), p.frame(ACK)])
        assert _where(_take(c_it, 3)) == later  # committed: once the ACK lands

    # From the write head (-1): only what is appended after the read starts.
    with (
        ReadCommitted(client, journal, -1, block=True) as tail,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        pending = pool.submit(next, iter(tail))
        # Wait until the read has started at the head (its sequencer is seeded with it) ...
        deadline = time.monotonic() + WAIT_S
        while tail.offset == -1:
            assert time.monotonic() < deadline, "the tail never resolved the write head"
            time.sleep(0.001)
        assert tail.checkpoint().offsets == {journal: client.read_head(journal)}
        newest = _append(client, journal, [p.frame(OUT, 5)])  # ... so this comes after it
        assert _where([pending.result(WAIT_S)]) == newest
    assert _where(ReadCommitted(client, journal, -1)) == []


async def test_async_blocking_reader_tails(cluster, client):
    journal = _journal(cluster, client)
    p = Producer()
    async with AsyncClient(client.broker) as aio:
        first = _append(client, journal, [p.frame(OUT, 0)])
        async with ReadCommitted(aio, journal, block=True) as reader:
            it = aiter(reader)
            assert _where([await asyncio.wait_for(anext(it), WAIT_S)]) == first
            later = _append(client, journal, [p.frame(CONT, 1), p.frame(ACK)])
            assert _where([await asyncio.wait_for(anext(it), WAIT_S) for _ in range(2)]) == later


# --- offset jumps ----------------------------------------------------------------------------------


def test_read_that_starts_past_deleted_content_logs_the_jump(cluster, client, caplog):
    journal = _journal(cluster, client, refresh_interval="1s")
    p = Producer()
    gone = _append(client, journal, [p.frame(OUT, 0), p.frame(OUT, 1)])
    client.flush(journal)
    kept = _append(client, journal, [p.frame(OUT, 2), p.frame(OUT, 3)])
    client.flush(journal)
    store = cluster.store[len("file://") :]
    (path,) = glob.glob(os.path.join(store, journal, f"{0:016x}-*"))
    os.remove(path)
    deadline = time.monotonic() + WAIT_S
    while True:  # until the broker's index refresh forgets the deleted fragment
        try:
            if next(iter(client.read(journal, 0))).offset == kept[0][0]:
                break
        except GazetteError:
            pass  # listed but gone from the store
        assert time.monotonic() < deadline, "the broker kept serving the deleted fragment"
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="gazette.message.reader"):
        assert _where(ReadCommitted(client, journal)) == kept
    assert f"journal {journal}: read from offset 0 starts at {gone[-1][1]}" in caplog.text


class JumpingClient(AsyncClient):
    """A real client whose reads lose bytes [lose_begin, lose_end), as a broker read does when it
    resumes past content that is gone (reference 12.8): chunk offsets jump over the gap."""

    def __init__(self, broker: str, lose_begin: int, lose_end: int) -> None:
        super().__init__(broker)
        self.lose = (lose_begin, lose_end)

    async def read(self, journal: str, offset: int = 0, **kw: Any) -> AsyncIterator[ReadChunk]:  # type: ignore[override]
        lo, hi = self.lose
        async for chunk in super().read(journal, offset, **kw):
            end = chunk.offset + len(chunk.content)
            if chunk.offset < lo:
                yield ReadChunk(chunk.offset, chunk.content[: lo - chunk.offset], chunk.write_head, None)
            if end > hi:
                start = max(hi, chunk.offset)
                yield ReadChunk(start, chunk.content[start - chunk.offset :], chunk.write_head, None)


async def test_offset_jump_mid_read_restarts_decoding_and_drops_the_cut_frame(cluster, client, caplog):
    journal = _journal(cluster, client)
    p = Producer()
    where = _append(client, journal, [p.frame(OUT, i) for i in range(6)])
    lose_begin = where[1][0] + 5  # inside frame 1: its first bytes are decoded, the rest is gone
    lose_end = where[3][0]
    async with JumpingClient(client.broker, lose_begin, lose_end) as aio:
        with caplog.at_level(logging.WARNING, logger="gazette.message.reader"):
            got = [e async for e in ReadUncommitted(aio, journal)]
    assert _where(got) == [where[0]] + where[3:]
    assert (
        f"journal {journal}: read jumped from offset {lose_begin} to {lose_end} (that content is gone), "
        f"decoding restarts there; 5 bytes of an incomplete frame at {where[1][0]} are dropped"
    ) in caplog.text


# --- bad journals and bad frames ------------------------------------------------------------------


def test_journals_without_a_known_content_type(cluster, client):
    bare = _journal(cluster, client, content_type=None)
    with pytest.raises(FramingError, match=f"journal '{bare}' has no \"content-type\" label"):
        list(ReadCommitted(client, bare))
    odd = _journal(cluster, client, content_type="text/plain")
    with pytest.raises(
        FramingError, match=f"journal '{odd}' has label content-type=\"text/plain\", which has no"
    ):
        list(ReadUncommitted(client, odd))
    with pytest.raises(GazetteError, match="reader/missing: it does not exist") as err:
        list(ReadUncommitted(client, "reader/missing"))
    assert err.value.status == Status.JOURNAL_NOT_FOUND

    # An explicit framing reads an unlabelled journal.
    where = _append(client, bare, [Producer().frame(OUT, 1)])
    assert _where(ReadUncommitted(client, bare, framing=framing_for(NDJSON))) == where


def test_bad_arguments_are_refused(client):
    with pytest.raises(ValidationError, match="read offset -2 of journal 'ab/cd' is not an offset >= -1"):
        ReadUncommitted(client, "ab/cd", -2)
    with pytest.raises(
        ValidationError, match="end_offset 5 of journal 'ab/cd' is not None or an offset >= offset 9"
    ):
        ReadCommitted(client, "ab/cd", 9, end_offset=5)
    with pytest.raises(ValidationError, match="journal name"):
        ReadCommitted(client, "/bad")
    with pytest.raises(ValidationError, match="ring_size 0"):
        ReadCommitted(client, "ab/cd", ring_size=0)
    with pytest.raises(ValidationError, match="checkpoint lacks key"):
        ReadCommitted(client, "ab/cd", checkpoint={"offsets": {}})
    with pytest.raises(TypeError, match="neither a gazette Client nor an AsyncClient"):
        ReadCommitted("http://localhost:8080", "ab/cd")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not both"):
        ReadUncommitted(client, "ab/cd", framing=JSONFraming(), framing_options={"uuid_pointer": "/u"})


def test_garbage_frames_are_logged_and_skipped_or_raised_when_strict(cluster, client, caplog):
    journal = _journal(cluster, client)
    p = Producer()
    frames = [
        p.frame(OUT, 0),
        b"not json\n",
        p.frame(CONT, 1),
        b'{"_meta": {"uuid": "' + str(std_uuid.uuid4()).encode() + b'"}}\n',  # a v4 UUID
        b"[1, 2]\n",
        p.frame(ACK),
        b'{"cut": ',  # a frame cut off at the end of the journal
    ]
    where = _append(client, journal, frames)
    with caplog.at_level(logging.WARNING, logger="gazette.message.reader"):
        assert _where(ReadUncommitted(client, journal)) == [where[0], where[2], where[5]]
        assert _where(ReadCommitted(client, journal)) == [where[0], where[2], where[5]]
    for i in (1, 3, 4, 6):
        assert (
            f"journal {journal}: skipping the undecodable bytes [{where[i][0]}, {where[i][1]})" in caplog.text
        )

    strict = iter(ReadUncommitted(client, journal, strict=True))
    assert _where([next(strict)]) == [where[0]]
    with pytest.raises(FramingError, match=f"invalid JSON at \\[{where[1][0]}, {where[1][1]}\\)") as err:
        next(strict)
    assert (err.value.begin, err.value.end) == where[1]
    with pytest.raises(FramingError, match="ends inside a frame") as err:
        list(ReadCommitted(client, journal, where[5][0], strict=True))
    assert (err.value.begin, err.value.end) == where[6]

    # Fixed framing: garbage between frames is skipped; strict reads refuse it.
    fixed_j = _journal(cluster, client, "application/x-protobuf-fixed")
    fixed = FixedFraming()
    where = _append(client, fixed_j, [fixed.encode(b"a", build_uuid(p.pid, 1, OUT)), b"garbage!",
                                      fixed.encode(b"b", build_uuid(p.pid, 1, OUT))])  # fmt: skip
    assert [e.message for e in ReadUncommitted(client, fixed_j)] == [b"a", b"b"]
    with pytest.raises(FramingError, match=f"8 bytes of garbage at \\[{where[1][0]}, {where[1][1]}\\)"):
        list(ReadUncommitted(client, fixed_j, strict=True))
