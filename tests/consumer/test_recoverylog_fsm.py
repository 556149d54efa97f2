"""Recovery-log format and FSM without a broker: the checksum and fence encodings, record decoding,
sequencing outcomes, segment merging, and a model test that playback from the recorder's hints
rebuilds exactly the files the recorder's operations left."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gazette.consumer.recoverylog import (
    FSM,
    FSMHints,
    OpDecoder,
    Outcome,
    RecordedOp,
    Recorder,
    RecoveryLogError,
    Segment,
    author_fence,
    crc32c,
)
from gazette.consumer.recoverylog.hints import add_segment
from gazette.consumer.recoverylog.ops import encode_op

LOG = "tests/recovery/model"


def test_crc32c_and_author_fence() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")  # chaining
    assert [author_fence(a) for a in (1, 31, 32, 1025, 0xFFFFFFFF)] == ["1", "v", "10", "101", "3vvvvvv"]
    with pytest.raises(RecoveryLogError, match="not in"):
        author_fence(0)


def test_records_decode_and_corruption_is_named() -> None:
    ops = [
        RecordedOp(1, 0, 7),
        RecordedOp(2, 123, 7, "create", "a/b"),
        RecordedOp(3, 456, 7, "write", fnode=2, offset=5, length=4),
        RecordedOp(4, 789, 7, "link", "c", 2),
        RecordedOp(5, 1, 7, "unlink", "a/b", 2),
    ]
    stream = b""
    for op in ops:
        stream += encode_op(op)[0] + (b"DATA" if op.kind == "write" else b"")
    decoder = OpDecoder(LOG, 100)
    records = []
    for i in range(0, len(stream), 7):  # arbitrary chunking, splitting frames and write contents
        records += decoder.feed(stream[i : i + 7])
    assert [r.op.kind for r in records] == ["", "create", "write", "link", "unlink"]
    assert records[2].data == b"DATA" and records[2].op.fnode == 2
    assert records[0].op.first_offset == 100 and decoder.offset == 100 + len(stream)
    assert all(a.op.last_offset == b.op.first_offset for a, b in zip(records, records[1:], strict=False))

    decoder = OpDecoder(LOG, 0)
    assert decoder.feed(encode_op(ops[0])[0] + b"garbage!") != []
    with pytest.raises(RecoveryLogError, match="no record at offset"):
        decoder.check()
    bad = encode_op(ops[1])[0].replace(b'"create"', b'"chmodx"')
    with pytest.raises(RecoveryLogError, match="at most one of"):
        OpDecoder(LOG, 0).feed(bad)


def test_fsm_sequencing_outcomes() -> None:
    fsm = FSM(FSMHints(LOG))

    def apply(op: RecordedOp) -> Outcome:
        return fsm.apply(op, encode_op(op)[1])

    assert apply(RecordedOp(1, 0, 9, "create", "x")) is Outcome.APPLIED
    checksum = fsm.next_checksum
    assert apply(RecordedOp(1, 0, 9, "create", "y")) is Outcome.WRONG_SEQ_NO  # a duplicate
    assert apply(RecordedOp(2, checksum + 1, 9, "create", "y")) is Outcome.CHECKSUM_MISMATCH  # a dead branch
    assert apply(RecordedOp(2, checksum, 9, "create", "x")) is Outcome.LINK_EXISTS
    assert apply(RecordedOp(2, checksum, 9, "unlink", "x", 7)) is Outcome.NOT_TRACKED
    assert fsm.next_seq_no == 3 and fsm.links == {"x": 1} and not fsm.live_nodes.get(7)
    assert apply(RecordedOp(3, fsm.next_checksum, 9, "unlink", "x", 1)) is Outcome.APPLIED
    assert fsm.links == {} and fsm.live_nodes == {}


def test_segments_merge() -> None:
    segments: list[Segment] = []
    add_segment(segments, Segment(1, 5, 100, 11, 8, 200))
    add_segment(segments, Segment(1, 9, 200, 12, 12, 300))  # adjacent, same author: merged
    add_segment(segments, Segment(2, 13, 300, 13, 14, 0))  # adjacent, another author: kept apart
    add_segment(segments, Segment(1, 1, 10, 0, 2, 50))
    assert segments == [
        Segment(1, 1, 10, 0, 2, 50),
        Segment(1, 5, 100, 11, 12, 300),
        Segment(2, 13, 300, 13, 14, 0),
    ]
    with pytest.raises(RecoveryLogError, match="different authors"):
        add_segment(segments, Segment(3, 6, 100, 99, 7, 150))
    with pytest.raises(RecoveryLogError, match="first_seq_no"):
        add_segment(segments, Segment(1, 0, 0, 0, 0))


# ---- model test: recorder -> bytes -> FSM from hints


class _Writer:
    def __init__(self, out: bytearray) -> None:
        self.out = out
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def write(self, data: bytes) -> None:
        self.out += data


class _Section:
    def __init__(self, out: bytearray) -> None:
        self.out = out
        self.mark = len(out)
        self.writer = _Writer(out)

    def __enter__(self) -> _Writer:
        return self.writer

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            del self.out[self.mark :]
        else:  # committed at once: the recorder learns the write head from the append's end
            self.writer.future.set_result(SimpleNamespace(end=len(self.out)))


class _Service:
    """Just enough of an AsyncAppendService for a Recorder: appends land in `log` at once."""

    def __init__(self) -> None:
        self.log = bytearray()

    def start_append(self, journal: str, **_: Any) -> _Section:
        return _Section(self.log)


PATHS = ("a", "b", "d/c")
_op = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(PATHS)),
    st.tuples(st.just("write"), st.sampled_from(PATHS), st.binary(max_size=8), st.integers(0, 6)),
    st.tuples(st.just("rename"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
    st.tuples(st.just("link"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
    st.tuples(st.just("remove"), st.sampled_from(PATHS)),
)


def _play(stream: bytes, hints: FSMHints) -> tuple[FSM, dict[str, bytes]]:
    """Plays the stream as a Player does: records before the next hinted segment are skipped."""
    fsm, files = FSM(hints), {}
    for rec in OpDecoder(LOG, 0).feed(stream):
        op = rec.op
        if fsm.hinted_segments and op.first_offset < fsm.hinted_segments[0].first_offset:
            continue
        if fsm.apply(op, rec.payload) is not Outcome.APPLIED:
            continue
        if op.kind == "create":
            files[op.seq_no] = bytearray()
        elif op.kind == "write":
            f = files[op.fnode]
            f.extend(b"\0" * max(0, op.offset - len(f)))
            f[op.offset : op.offset + op.length] = rec.data
    return fsm, {path: bytes(files[fnode]) for path, fnode in fsm.links.items()}


_GAP = [("create", "a"), ("write", "a", b"x", 0), ("create", "b"), ("remove", "b"), ("create", "d/c")]


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=40), st.integers(0, 40))
@example(_GAP + [("write", "d/c", b"y", 2)], 40)  # hinted segments with a dead file between them
@example(_GAP + [("rename", "d/c", "b"), ("create", "d/c"), ("remove", "a")], 5)
def test_hints_rebuild_what_was_recorded(ops: list[tuple[Any, ...]], hint_at: int) -> None:
    service = _Service()
    rec = Recorder(service, FSM(FSMHints(LOG)), 12345, "/tmp/model-dir")  # type: ignore[arg-type]
    expected: dict[str, bytearray] = {}  # path -> contents, hard links sharing one bytearray
    hints = rec.fsm.build_hints()
    for i, (kind, path, *args) in enumerate(ops):
        if i == hint_at:
            hints = rec.fsm.build_hints()
        if kind == "create":
            rec.record_create(path)
            expected[path] = bytearray()
        elif path not in expected:
            with pytest.raises(RecoveryLogError):
                with rec.transaction() as txn:
                    getattr(txn, "write" if kind == "write" else kind)(path, *args)
            assert rec.error is None  # refused before anything was sequenced
            continue
        elif kind == "write":
            data, offset = args
            with rec.transaction() as txn:
                txn.write(path, data, offset)
            f = expected[path]
            f.extend(b"\0" * max(0, offset - len(f)))
            f[offset : offset + len(data)] = data
        elif kind == "remove":
            rec.record_remove(path)
            del expected[path]
        elif kind == "rename":
            rec.record_rename(path, args[0])
            expected[args[0]] = expected.pop(path)
        elif kind == "link" and args[0] in expected:
            with pytest.raises(RecoveryLogError, match="already exists"):
                rec.record_link(path, args[0])
        else:
            rec.record_link(path, args[0])
            expected[args[0]] = expected[path]
    if hint_at >= len(ops):
        hints = rec.fsm.build_hints()
    final_hints = rec.fsm.build_hints()
    assert FSMHints.from_json(final_hints.to_json()) == final_hints

    stream = bytes(service.log)
    want = {p: bytes(c) for p, c in expected.items()}
    for h in (FSMHints(LOG), hints, final_hints):  # from the start, mid-way, and final hints
        fsm, files = _play(stream, h)
        assert files == want
        assert (fsm.next_seq_no, fsm.next_checksum) == (rec.fsm.next_seq_no, rec.fsm.next_checksum)
        assert not fsm.has_remaining_hints()
