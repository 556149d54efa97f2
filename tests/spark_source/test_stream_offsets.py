"""The streaming source's micro-batch logic without Spark: offsets, admission control, planning and
read() driven as Spark drives them (offsets through JSON, partitions and readers pickled), compared
batch by batch with a Sequencer over the same journal prefixes."""

from __future__ import annotations

import json
import logging
import pickle
import random

import pytest
from fio_journals import FRAMING, envelopes_of, persist_fragment, random_journal
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from fragments_io.committed import committed_reference
from fragments_io.errors import FragmentsIOError, OptionError
from fragments_io.options import parse_options
from fragments_io.source import inferred_schema
from fragments_io.streaming import GazetteStreamReader, fair_shares, walk
from gazette.fragment.fragment import Fragment
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, new_producer_id
from gazette.protocol.codec import Codec

CODECS = (Codec.NONE, Codec.GZIP, Codec.ZSTANDARD, Codec.SNAPPY)


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


def _reader(**options):
    opts = parse_options({k: str(v) for k, v in options.items()})
    return GazetteStreamReader(opts, inferred_schema(opts))


def _roundtrip(offset):
    return json.loads(json.dumps(offset))


def _batch(reader, start, limit):
    """One micro-batch as Spark runs it: (end offset, rows as (journal, begin) in output order), or
    None when latestOffset returns `start`."""
    end = _roundtrip(reader.latestOffset(_roundtrip(start), limit))
    if end == start:
        return None
    parts = reader.partitions(start, end)
    assert parts == reader.partitions(_roundtrip(start), _roundtrip(end))  # deterministic
    executor = pickle.loads(pickle.dumps(reader))
    rows = []
    for p in parts:
        for batch in executor.read(pickle.loads(pickle.dumps(p))):
            assert batch.schema == reader.shaper.target
            rows.extend(
                zip(batch.column("journal").to_pylist(), batch.column("begin").to_pylist(), strict=True)
            )
    return end, rows


class _Journal:
    """Frames of one journal persisted chunk by chunk; the reference's committed set of any prefix."""

    def __init__(self, store, name, frames, rng):
        self.store, self.name, self.frames, self.rng = store, name, frames, rng
        self.written = 0  # frames persisted
        self.offset = 0

    def persist(self, count):
        chunk = self.frames[self.written : self.written + count]
        while chunk:
            k = self.rng.randint(1, len(chunk))
            content = b"".join(chunk[:k])
            persist_fragment(self.store, self.name, self.offset, content, self.rng.choice(CODECS))
            self.offset += len(content)
            self.written += k
            chunk = chunk[k:]

    def committed_through(self, offset):
        envs = [e for e in envelopes_of(self.name, self.frames) if e.end <= offset]
        return {(self.name, e.begin) for e in committed_reference(envs)}


def _drain(reader, start, limit, journals, batches):
    """Runs micro-batches until none is new; each must return exactly the messages committed between
    its start and end offsets. Returns the last offset."""
    while True:
        out = _batch(reader, start, limit)
        if out is None:
            return start
        end, rows = out
        assert len(rows) == len(set(rows)), "a message was returned twice in one batch"
        want = set()
        for j in journals:
            lo, hi = start["offsets"].get(j.name, 0), end["offsets"].get(j.name, 0)
            want |= j.committed_through(hi) - j.committed_through(lo)
        assert set(rows) == want
        batches.append((start, end, rows))
        start = end


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**16),
    chunks=st.integers(1, 5),
    max_bytes=st.sampled_from([None, 1, 700, 3000]),
)
def test_batches_return_newly_committed_messages_exactly_once(tmp_path_factory, seed, chunks, max_bytes):
    rng = random.Random(seed)
    store = f"file://{tmp_path_factory.mktemp('stream')}/"
    journals = [
        _Journal(store, f"st/j{k}", random_journal(seed + k, rng.randint(5, 80), 3), rng) for k in range(3)
    ]
    journals[0].persist(rng.randint(1, 10))  # present when the query starts
    reader = _reader(store=store, journals="st/", maxBytesPerTrigger=max_bytes or 1 << 30)
    limit = reader.getDefaultReadLimit() if max_bytes else ReadAllAvailable()
    start = _roundtrip(reader.initialOffset())
    assert start["offsets"] == {"st/j0": 0} and start["producers"] == []
    batches = []
    for c in range(chunks):
        for j in journals:
            j.persist(len(j.frames) // chunks + 1 if c < chunks - 1 else len(j.frames))
        start = _drain(reader, start, limit, journals, batches)
    for j in journals:
        assert start["offsets"][j.name] == j.offset
    got = [r for _, _, rows in batches for r in rows]
    want = set().union(*(j.committed_through(j.offset) for j in journals))
    assert len(got) == len(set(got)) and set(got) == want
    if max_bytes:
        envs = {j.name: list(envelopes_of(j.name, j.frames)) for j in journals}
        for s, e, _ in batches:  # admission control: within the limit, or a single message
            spans = {n: (s["offsets"][n], e["offsets"][n]) for n in e["offsets"] if n in s["offsets"]}
            admitted = sum(hi - lo for lo, hi in spans.values())
            messages = sum(lo <= m.begin < hi for n, (lo, hi) in spans.items() for m in envs[n])
            assert admitted <= max_bytes or messages == 1


def test_a_transaction_spanning_batches_is_returned_with_its_ack(tmp_path):
    """CONTINUEs in one batch (and a rolled-back span, and a duplicate), the ACK two batches later:
    the messages come in the ACK's batch, read back from before its start."""
    store = f"file://{tmp_path}/"
    pid, other = new_producer_id(), new_producer_id()
    clock = 1 << 60

    def msg(p, c, flag, **body):
        return FRAMING.encode(body, build_uuid(p, c, flag))

    part1 = [msg(pid, clock + i * CLOCK_TICK, Flags.CONTINUE_TXN, n=i) for i in range(1, 4)]
    part1.append(msg(other, clock, Flags.OUTSIDE_TXN, n=100))
    part2 = [msg(pid, clock + 4 * CLOCK_TICK, Flags.CONTINUE_TXN, n=4), part1[1]]  # a duplicate
    part2.append(msg(other, clock + CLOCK_TICK, Flags.OUTSIDE_TXN, n=101))
    part3 = [FRAMING.encode_ack(build_uuid(pid, clock + 5 * CLOCK_TICK, Flags.ACK_TXN))]
    part3.append(msg(pid, clock + 6 * CLOCK_TICK, Flags.CONTINUE_TXN, n=6))
    part3.append(FRAMING.encode_ack(build_uuid(pid, clock + 5 * CLOCK_TICK, Flags.ACK_TXN)))  # rolls n=6 back
    offset = 0
    reader = _reader(store=store, journals="tx/", inferSchema="false")
    start = None
    got = []
    for part in (part1, part2, part3):
        content = b"".join(part)
        persist_fragment(store, "tx/j", offset, content, Codec.ZSTANDARD)
        offset += len(content)
        if start is None:
            start = _roundtrip(reader.initialOffset())
        out = _batch(reader, start, ReadAllAvailable())
        assert out is not None
        start, rows = out
        got.append(sorted(b for _, b in rows))
    b1 = [sum(len(f) for f in part1[:i]) for i in range(len(part1))]
    p2 = len(b"".join(part1))
    assert got[0] == [b1[3]]  # only the other producer's message
    assert got[1] == [p2 + len(part2[0]) + len(part2[1])]
    assert got[2] == sorted(b1[:3] + [p2])  # the whole transaction, once, in the ACK's batch
    states = {s["producer"]: s for s in start["producers"]}
    assert states[pid.hex()]["begin"] == -1 and states[pid.hex()]["last_ack"] == clock + 5 * CLOCK_TICK


def test_read_limits_and_progress(tmp_path):
    store = f"file://{tmp_path}/"
    frames = random_journal(5, 60, 2)
    persist_fragment(store, "lim/a", 0, b"".join(frames), Codec.GZIP)
    reader = _reader(store=store, journals="lim/", maxBytesPerTrigger=1)
    assert reader.getDefaultReadLimit() == ReadMaxBytes(1)
    start = _roundtrip(reader.initialOffset())
    end = reader.latestOffset(start, ReadMaxBytes(1))
    assert end["offsets"]["lim/a"] == len(frames[0])  # nothing fits: one message anyway
    end = reader.latestOffset(start, ReadMaxRows(5))
    assert end["offsets"]["lim/a"] == sum(len(f) for f in frames[:5])
    full = reader.latestOffset(start, ReadAllAvailable())
    assert full["offsets"]["lim/a"] == sum(len(f) for f in frames)
    assert reader.latestOffset(full, ReadAllAvailable()) is full  # nothing new: start itself
    assert fair_shares({"a": 10, "b": 1000, "c": 1000}, 100) == {"a": 10, "b": 45, "c": 45}


def test_available_now_stops_at_what_was_persisted(tmp_path):
    store = f"file://{tmp_path}/"
    frames = random_journal(6, 40, 2)
    half = len(frames) // 2
    first = b"".join(frames[:half])
    persist_fragment(store, "an/a", 0, first)
    reader = _reader(store=store, journals="an/", inferSchema="false")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    persist_fragment(store, "an/a", len(first), b"".join(frames[half:]))
    persist_fragment(store, "an/b", 0, b"".join(frames))
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {"an/a": len(first)}


def test_gaps_wait_and_overlaps_read_once(tmp_path):
    store = f"file://{tmp_path}/"
    frames = random_journal(7, 30, 2)
    data = b"".join(frames)
    cuts = [0, len(b"".join(frames[:10])), len(b"".join(frames[:20])), len(data)]
    a = persist_fragment(store, "gap/a", cuts[0], data[cuts[0] : cuts[1]])
    c = persist_fragment(store, "gap/a", cuts[2], data[cuts[2] : cuts[3]])
    pieces, reach = walk([a, c], 0)
    assert reach == cuts[1] and [p.fragment for p in pieces] == [a]
    reader = _reader(store=store, journals="gap/", inferSchema="false")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["offsets"]["gap/a"] == cuts[1]  # waits at the gap
    # The gap is persisted within a larger fragment overlapping both neighbours.
    b = persist_fragment(store, "gap/a", cuts[0], data[: cuts[2] + 5], Codec.GZIP, postfix="broker=b")
    pieces, reach = walk([a, b, c], cuts[1])
    assert reach == len(data) and [(p.fragment, p.begin) for p in pieces] == [(b, cuts[1]), (c, cuts[2] + 5)]
    out = _batch(reader, _roundtrip(end), ReadAllAvailable())
    assert out is not None and out[0]["offsets"]["gap/a"] == len(data)
    envs = list(envelopes_of("gap/a", frames))
    want = {e.begin for e in committed_reference(envs)} - {
        e.begin for e in committed_reference([e for e in envs if e.end <= cuts[1]])
    }
    assert sorted(b for _, b in out[1]) == sorted(want)


def test_stream_options_and_offsets_are_checked(tmp_path):
    store = f"file://{tmp_path}/"
    with pytest.raises(OptionError, match=r"\['beginOffset'\] apply to batch reads only"):
        _reader(store=store, beginOffset=5)
    with pytest.raises(OptionError, match="option checkpoint is not JSON"):
        _reader(store=store, checkpoint="{nope")
    with pytest.raises(OptionError, match="checkpoint.producers"):
        _reader(store=store, checkpoint=json.dumps({"offsets": {}, "producers": {}}))
    reader = _reader(store=store, inferSchema="false")
    with pytest.raises(
        FragmentsIOError, match="start offset of the gazette stream is not a consumer checkpoint"
    ):
        reader.latestOffset({"journal": 5}, ReadAllAvailable())
    # A stream may start from a consumer checkpoint: its offsets and producer states.
    persist_fragment(store, "cp/a", 0, b"".join(random_journal(8, 20, 1)))
    cp = {
        "offsets": {"cp/a": 0},
        "producers": [{"journal": "cp/a", "producer": "0a0b0c0d0e0f", "last_ack": 7, "begin": -1}],
    }
    assert _reader(store=store, checkpoint=json.dumps(cp)).initialOffset() == cp
    gone = {"offsets": {"cp/zz": 0}, "producers": []}
    with pytest.raises(FragmentsIOError, match="journal cp/zz has offsets"):
        reader.partitions(gone, {"offsets": {"cp/zz": 10}, "producers": []})
    assert reader.partitions(gone, gone) == []


def test_a_replay_needing_lost_bytes_names_them(tmp_path):
    store = f"file://{tmp_path}/"
    pid = new_producer_id()
    clock = 1 << 60
    frames = [
        FRAMING.encode({"n": i}, build_uuid(pid, clock + i * CLOCK_TICK, Flags.CONTINUE_TXN)) for i in (1, 2)
    ]
    frames.append(FRAMING.encode_ack(build_uuid(pid, clock + 3 * CLOCK_TICK, Flags.ACK_TXN)))
    head = b"".join(frames[:2])
    first = persist_fragment(store, "lost/a", 0, head)
    persist_fragment(store, "lost/a", len(head), frames[2])
    reader = _reader(store=store, inferSchema="false")
    start = reader.initialOffset()
    mid = {"offsets": {"lost/a": len(head)}, "producers": [
        {"journal": "lost/a", "producer": pid.hex(), "last_ack": clock, "begin": 0}
    ]}  # fmt: skip
    end = reader.latestOffset(mid, ReadAllAvailable())
    assert end["producers"][0]["begin"] == -1
    (tmp_path / first.content_path).unlink()
    parts = reader.partitions(mid, end)
    with pytest.raises(FragmentsIOError, match=r"transaction begun at offset 0 .* offsets \[0, "):
        list(reader.read(parts[0]))
    assert start == {"offsets": {"lost/a": 0}, "producers": []}


def test_uncommitted_stream_returns_every_message_once(tmp_path):
    store = f"file://{tmp_path}/"
    frames = random_journal(9, 80, 3)
    rng = random.Random(9)
    j = _Journal(store, "unc/a", frames, rng)
    j.persist(30)
    reader = _reader(store=store, isolation="uncommitted", inferSchema="false")
    start = reader.initialOffset()
    got = []
    for count in (25, 25, len(frames)):
        while (out := _batch(reader, start, ReadMaxBytes(500))) is not None:
            start, rows = out
            assert start["producers"] == []
            got.extend(rows)
        j.persist(count)
    while (out := _batch(reader, start, ReadAllAvailable())) is not None:
        start, rows = out
        got.extend(rows)
    assert sorted(got) == sorted(("unc/a", e.begin) for e in envelopes_of("unc/a", frames))


def test_walk_reads_each_offset_from_the_longest_fragment():
    f = [Fragment("w", 0, 10, backing_store="file:///x/"), Fragment("w", 5, 30, backing_store="file:///x/")]
    pieces, reach = walk(f, 2, 20)
    assert [(p.begin, p.end) for p in pieces] == [(2, 10), (10, 20)] and reach == 20
    assert walk(f, 40) == ([], 40)
