"""The columnar read-committed path (gazette.message.columnar) against the Sequencer.

Histories are test_sequencing's (two journals interleaved, duplicates, clock regressions, rollbacks,
unknown flags, clockless rows) cut into tables at random points; the ring is small enough that
replays happen. Every comparison is exact: the rows committed (as a set and in journal order), and
the checkpoint (offsets and producer states) after every table, through checkpoint restores (with
history reads of the rows before them) and deferrals (snapshot, restore, add again).
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message.test_sequencing import ACK, COMMITS, JOURNALS, histories

from gazette.message.columnar import ColumnarSequencer, decode_json_lines, meta_schema
from gazette.message.envelope import Envelope
from gazette.message.framing import FramingError, framing_for
from gazette.message.sequencer import QueueOutcome, Sequencer
from gazette.message.uuid import build_uuid

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIELDS = pa.schema([pa.field("id", pa.int64())])


def table_of(envs: list[Envelope]) -> pa.Table:
    return pa.Table.from_arrays(
        [
            pa.array([e.begin for e in envs], pa.int64()),
            pa.array([e.end for e in envs], pa.int64()),
            pa.array([e.producer.hex() or None for e in envs], pa.string()),
            pa.array([e.clock for e in envs], pa.int64()),
            pa.array([e.flags for e in envs], pa.int32()),
            pa.array([e.message for e in envs], pa.int64()),
        ],
        schema=meta_schema(FIELDS),
    )


def drain(seq: Sequencer, envs: list[Envelope], everything: list[Envelope]) -> list[int]:
    """Queues `envs` into `seq`, draining each commit (replays served from `everything`); the ids of
    the committed envelopes, ACKs excluded, in the Sequencer's order."""
    out = []
    for e in envs:
        outcome = seq.queue(e)
        if outcome in COMMITS:
            if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
                j, lo, hi = seq.replay_range()
                seq.start_replay([r for r in everything if r.journal == j and lo <= r.begin and r.end <= hi])
            while (done := seq.step()) is not None:
                if done.flags != ACK:
                    out.append(done.message)
    return out


def cut(envs: list[Envelope], points: list[int]) -> list[list[Envelope]]:
    bounds = [0, *sorted(set(p for p in points if 0 < p < len(envs))), len(envs)]
    return [envs[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def compare(
    envs: list[Envelope],
    tables: list[list[Envelope]],
    seq: Sequencer,
    col: ColumnarSequencer,
    everything: list[Envelope],
    defer: set[int] = frozenset(),  # type: ignore[assignment]
) -> None:
    """Feeds `tables` (in this order) to both; after each, the same rows and the same checkpoint.
    Tables in `defer` are added once, taken back (restore), then added for good."""
    for k, chunk in enumerate(tables):
        want = drain(seq, chunk, everything)
        if k in defer:
            snap = col.snapshot()
            col.add(chunk[0].journal, table_of(chunk))
            col.restore(snap)
        got = col.add(chunk[0].journal, table_of(chunk))
        ids = got.column("id").to_pylist()
        assert sorted(ids) == sorted(set(want))  # a Sequencer replay can hand out a clockless row twice
        by_offset = {e.message: (e.journal, e.begin) for e in everything}
        assert [by_offset[i] for i in ids] == sorted(by_offset[i] for i in ids)  # journal order
        assert set(got.column("_flags").to_pylist()) <= {0, 1, 4}  # no ACKs
        assert col.checkpoint().to_dict() == seq.checkpoint().to_dict()


@SETTINGS
@given(envs=histories(), data=st.data(), ring_size=st.sampled_from([1, 2, 3, 5, 64]))
def test_one_journal_equals_the_sequencer(envs, data, ring_size):
    envs = [e for e in envs if e.journal == JOURNALS[0]]
    tables = cut(envs, data.draw(st.lists(st.integers(1, max(len(envs), 1)), max_size=6)))
    defer = set(data.draw(st.lists(st.integers(0, max(len(tables) - 1, 0)), max_size=2)))
    compare(envs, tables, Sequencer(ring_size=ring_size), ColumnarSequencer(ring_size), envs, defer)


@SETTINGS
@given(envs=histories(), data=st.data())
def test_two_journals_equal_the_sequencer(envs, data):
    """Tables of both journals, interleaved as read chunks arrive (a ring the history never fills:
    a shard's journals share the Sequencer's ring, the Decider models one per journal)."""
    parts = {j: cut([e for e in envs if e.journal == j], data.draw(st.lists(st.integers(1, 60), max_size=5)))
             for j in JOURNALS}  # fmt: skip
    order = data.draw(st.permutations([j for j in JOURNALS for _ in parts[j]]))
    tables = [parts[j].pop(0) for j in order]
    ordered = [e for t in tables for e in t]
    compare(ordered, tables, Sequencer(ring_size=8192), ColumnarSequencer(8192), envs)


@SETTINGS
@given(envs=histories(), data=st.data(), ring_size=st.sampled_from([1, 2, 3, 5, 64]))
def test_restores_from_a_sequencer_checkpoint_and_back(envs, data, ring_size):
    """A Sequencer checkpointed part-way; a ColumnarSequencer restored from it (replays of spans
    begun before reading history) equals a restored Sequencer, and a Sequencer restored from the
    columnar checkpoint equals it too."""
    envs = [e for e in envs if e.journal == JOURNALS[0]]
    split = data.draw(st.integers(0, len(envs)))
    before, after = envs[:split], envs[split:]
    seq = Sequencer(ring_size=ring_size)
    drain(seq, before, envs)
    cp = seq.checkpoint()
    reads = []

    def history(journal: str, lo: int, hi: int) -> pa.Table:
        reads.append((journal, lo, hi))
        return table_of([e for e in before if e.journal == journal and lo <= e.begin and e.end <= hi])

    col = ColumnarSequencer(ring_size, cp, history)
    assert col.checkpoint().to_dict() == cp.to_dict()
    tables = cut(after, data.draw(st.lists(st.integers(1, max(len(after), 1)), max_size=4)))
    mid = data.draw(st.integers(0, len(tables)))
    compare(after, tables[:mid], Sequencer.from_checkpoint(cp, ring_size), col, envs)
    # ...and across a second restore, from the columnar checkpoint this time, both ways.
    cp2 = col.checkpoint()
    rest = [e for t in tables[mid:] for e in t]
    seq2 = Sequencer.from_checkpoint(cp2, ring_size)
    col2 = ColumnarSequencer(
        ring_size, cp2, lambda j, lo, hi: table_of([e for e in envs if lo <= e.begin and e.end <= hi])
    )
    compare(rest, tables[mid:], seq2, col2, envs)
    assert all(hi <= (after[0].begin if after else hi) for _, _, hi in reads)


def test_a_replay_from_history_is_reached_and_needs_a_reader():
    """A span open at the checkpoint whose head left the ring commits from history; without a
    history reader that is an error naming the journal and the range."""
    p = bytes.fromhex("0100000000b1")
    j = JOURNALS[0]
    envs = [Envelope(j, 3 * i, 3 * i + 3, i, None, p, 1000 + i, 1) for i in range(3)]
    envs.append(Envelope(j, 9, 12, 3, None, p, 1003, ACK))
    seq = Sequencer(ring_size=1)
    drain(seq, envs[:2], envs)
    cp = seq.checkpoint()
    assert cp.producers[0].begin == 0  # the span is open across the checkpoint
    col = ColumnarSequencer(
        1, cp, lambda jn, lo, hi: table_of([e for e in envs if lo <= e.begin and e.end <= hi])
    )
    got = col.add(j, table_of(envs[2:]))
    assert got.column("id").to_pylist() == [0, 1, 2]
    with pytest.raises(Exception, match=r"needs a replay of \[0, 6\)"):
        ColumnarSequencer(1, cp).add(j, table_of(envs[2:]))


# -- decoding --------------------------------------------------------------------------------------


def test_decode_equals_the_json_framing():
    producer = bytes.fromhex("0a0b0c0d0e0f")
    lines = []
    for i, flags in enumerate([1, 1, 2, 0, 4]):
        u = build_uuid(producer, 0x1EF00000000000 * 16 + i * 16 + 3, flags)
        lines.append(json.dumps({"word": f"w{i}", "_meta": {"uuid": str(u).upper() if i == 1 else str(u)}}))
    lines.append(json.dumps({"word": "bare"}))
    data = ("\n".join(lines) + "\n").encode()
    want = framing_for("application/x-ndjson").decoder("j/x", 100).feed(data)
    got = decode_json_lines("j/x", data, 100, pa.schema([pa.field("word", pa.string())]))
    assert got.column("word").to_pylist() == [e.message["word"] for e in want]
    assert got.column("_begin").to_pylist() == [e.begin for e in want]
    assert got.column("_end").to_pylist() == [e.end for e in want]
    assert got.column("_producer").to_pylist() == [e.producer.hex() or None for e in want]
    assert got.column("_clock").to_pylist() == [e.clock for e in want]
    assert got.column("_flags").to_pylist() == [e.flags for e in want]


@pytest.mark.parametrize(
    "bad, why",
    [
        (b'{"word": "a"}\nnot json\n', "JSON"),
        (b'{"word": "a"}\n\n{"word": "b"}\n', "blank line"),
        (b'{"word": 1.5}\n', "cannot be decoded"),
        (b'{"word": "a", "_meta": {"uuid": "zz"}}\n', "not a canonical"),
        (b'{"word": "a", "_meta": {"uuid": "' + str(uuid.uuid4()).encode() + b'"}}\n', "not a canonical"),
    ],
)
def test_undecodable_lines_name_the_journal_and_offsets(bad, why):
    with pytest.raises(FramingError, match=why) as err:
        decode_json_lines("j/bad", bad, 500, pa.schema([pa.field("word", pa.string())]))
    assert err.value.journal == "j/bad" and (err.value.begin, err.value.end) == (500, 500 + len(bad))
    assert f"[500, {500 + len(bad)})" in str(err.value) and "'j/bad'" in str(err.value)


@pytest.mark.parametrize("pointer", ["/_meta/uuid", "/UUID"])
def test_encoded_tables_decode_to_their_rows_and_uuids(pointer):
    """Frames built column-wise (plain and escaped strings, integers, nulls, floats) decode, with
    the JSON framing, to the rows as dicts and the UUIDs the publisher's runs name, across a
    time_low wrap."""
    from gazette.message.columnar import encode_json_lines
    from gazette.message.uuid import CLOCK_TICK, UUIDText

    table = pa.table(
        {
            "word": ["a", 'q"uote', "back\\slash", "tab\there", None, "ünï"],
            "count": pa.array([1, 2, None, 4, 5, -6], pa.int64()),
            "f": [0.5, 1.0, None, 2.25, 3.0, 1e300],
        }
    )
    texts = UUIDText(bytes.fromhex("0a0b0c0d0e0f"))
    clock = ((0xFFFFFFFF - 2 * (CLOCK_TICK >> 4)) << 4) + (1 << 40 << 4)  # time_low wraps inside the batch
    runs = texts.runs(clock, table.num_rows, 1)
    assert len(runs) == 2
    data = encode_json_lines(table, pointer, runs)
    envs = framing_for("application/x-ndjson", uuid_pointer=pointer).decoder("j/x", 0).feed(data)
    top = pointer.split("/")[1]
    assert [{k: v for k, v in e.message.items() if k != top} for e in envs] == table.to_pylist()
    assert [str(e.uuid) for e in envs] == [
        texts.text(clock + i * CLOCK_TICK, 1) for i in range(table.num_rows)
    ]


def test_describe_has_the_sequencers_keys():
    """Inspect reads a shard's sequencer description whichever path it takes."""
    col = ColumnarSequencer(4)
    p = bytes.fromhex("0100000000b1")
    col.add("j/d", table_of([Envelope("j/d", 0, 3, 0, None, p, 1000, 1)]))
    described = col.describe()
    assert set(Sequencer().describe()) <= set(described) and described["columnar"] is True
    assert described["producers"][0]["begin"] == 0 and described["producers"][0]["pending"] is True
    assert described["offsets"] == {"j/d": 3}
