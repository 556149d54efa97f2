"""Recovery-log format and FSM without a broker: the checksum and fence encodings, record decoding,
sequencing outcomes, segment merging, and a model test that playback from the recorder's hints
rebuilds exactly the files the recorder's operations left."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from consumer.recoverylog_legacy import legacy_payload
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gazette.consumer.recoverylog import (
    FSM,
    FSMHints,
    OpDecoder,
    Outcome,
    Property,
    RecordedOp,
    Recorder,
    RecoveryLogError,
    Segment,
    author_fence,
    crc32c,
)
from gazette.consumer.recoverylog.hints import add_segment
from gazette.consumer.recoverylog.ops import decode_payload, encode_op
from gazette.message.framing.fixed import frame
from gazette.protocol import recoverylog_pb2

LOG = "tests/recovery/model"


def test_crc32c_and_author_fence() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")  # chaining
    assert [author_fence(a) for a in (1, 31, 32, 1025, 0xFFFFFFFF)] == ["1", "v", "10", "101", "3vvvvvv"]
    with pytest.raises(RecoveryLogError, match="not in"):
        author_fence(0)


# Records as Gazette v0.103.0 writes them: message.EncodeFixedProtoFrame of these recoverylog.RecordedOps
# (printed by a Go program against go.gazette.dev/core), and the FSM checksum after all seven.
GAZETTE_RECORDS = [
    (RecordedOp(1, 0, 0x01020304), "663393360700000008011d04030201"),
    (RecordedOp(2, 0xDEADBEEF, 0xFFFFFFFF, "create", "/state.json"),
     "663393361b000000080215efbeadde1dffffffff220d0a0b2f73746174652e6a736f6e"),
    (RecordedOp(300, 7, 9, "link", "/a/b", 2), "663393361700000008ac0215070000001d090000002a08080212042f612f62"),
    (RecordedOp(301, 8, 9, "unlink", "/a/b", 2), "663393361700000008ad0215080000001d090000003208080212042f612f62"),
    (RecordedOp(302, 9, 9, "write", fnode=2, length=1 << 20),
     "663393361500000008ae0215090000001d090000003a06080218808040"),
    (RecordedOp(303, 10, 9, "write", fnode=2, offset=5), "663393361300000008af02150a0000001d090000003a0408021005"),
    (RecordedOp(304, 11, 9, "property", "/IDENTITY", content="a-guid\n"),
     "663393362300000008b002150b0000001d0900000042140a092f4944454e544954591207612d677569640a"),
]  # fmt: skip
GAZETTE_CHAIN = 1643261950


def test_records_are_gazettes_bytes() -> None:
    checksum = 0
    for op, hex_record in GAZETTE_RECORDS:
        record, payload = encode_op(op)
        assert record.hex() == hex_record, op
        assert record[8:] == payload
        checksum = crc32c(payload, checksum)  # the chain covers payloads only, never headers
        decoded = decode_payload(payload, log=LOG, first_offset=10, end_offset=10 + len(record))
        assert decoded == dataclasses.replace(op, first_offset=10, last_offset=10 + len(record) + op.length,
                                              log=LOG)  # fmt: skip
        msg = recoverylog_pb2.RecordedOp.FromString(payload)  # protobuf's own reading agrees
        assert msg.seq_no == op.seq_no and msg.checksum == op.checksum and msg.author == op.author
        assert [f.name for f, _ in msg.ListFields() if f.message_type] == ([op.kind] if op.kind else [])
        assert msg.SerializeToString(deterministic=True) == payload
    assert checksum == GAZETTE_CHAIN


_proto_ops = st.builds(
    RecordedOp,
    seq_no=st.integers(1, 2**63 - 1),
    checksum=st.integers(0, 2**32 - 1),
    author=st.integers(1, 2**32 - 1),
    kind=st.sampled_from(["", "create", "link", "unlink", "write", "property"]),
    path=st.text(max_size=12),
    fnode=st.integers(0, 2**63 - 1),
    offset=st.integers(0, 2**63 - 1),
    length=st.integers(0, 2**40),
    content=st.text(max_size=12),
)


@settings(max_examples=200, deadline=None)
@given(_proto_ops)
def test_records_round_trip_as_protobuf_reads_them(op: RecordedOp) -> None:
    """Whatever fields a kind has survive our encoding, protobuf's decoding and re-encoding, and ours."""
    keep = {
        "": (), "create": ("path",), "link": ("path", "fnode"), "unlink": ("path", "fnode"),
        "write": ("fnode", "offset", "length"), "property": ("path", "content"),
    }[op.kind]  # fmt: skip
    op = RecordedOp(op.seq_no, op.checksum, op.author, op.kind, **{f: getattr(op, f) for f in keep})
    payload = op.payload()
    assert recoverylog_pb2.RecordedOp.FromString(payload).SerializeToString(deterministic=True) == payload
    assert dataclasses.replace(decode_payload(payload), last_offset=0) == op


def test_records_decode_and_corruption_is_named() -> None:
    ops = [
        RecordedOp(1, 0, 7),
        RecordedOp(2, 123, 7, "create", "/a/b"),
        RecordedOp(3, 456, 7, "write", fnode=2, offset=5, length=4),
        RecordedOp(4, 789, 7, "link", "/c", 2),
        RecordedOp(5, 1, 7, "unlink", "/a/b", 2),
        RecordedOp(6, 2, 7, "property", "/IDENTITY", content="guid"),
    ]
    stream = b""
    for op in ops:
        stream += encode_op(op)[0] + (b"DATA" if op.kind == "write" else b"")
    decoder = OpDecoder(LOG, 100)
    records = []
    for i in range(0, len(stream), 7):  # arbitrary chunking, splitting frames and write contents
        records += decoder.feed(stream[i : i + 7])
    assert [r.op.kind for r in records] == ["", "create", "write", "link", "unlink", "property"]
    assert records[2].data == b"DATA" and records[2].op.fnode == 2
    assert records[5].op.content == "guid" and not any(r.legacy for r in records)
    assert records[0].op.first_offset == 100 and decoder.offset == 100 + len(stream)
    assert all(a.op.last_offset == b.op.first_offset for a, b in zip(records, records[1:], strict=False))

    decoder = OpDecoder(LOG, 0)
    assert decoder.feed(encode_op(ops[0])[0] + b"garbage!") != []
    with pytest.raises(RecoveryLogError, match="no record at offset"):
        decoder.check()
    both = ops[1].payload() + RecordedOp(0, 0, 0, "link", "/x", 2).payload()  # create and link set
    for payload, problem in [
        (b"\x08", "not a marshaled recoverylog.RecordedOp .truncated varint"),
        (b"\x08\x01\x22\x05/a", "claims 5 bytes"),
        (b"\x0b\x0c", "wire type 3"),  # a group
        (b"\x15\x01", "truncated fixed32"),
        (b"\x08\x01\x15\x01\x00", "truncated fixed32"),
        (b"\x10\x01", "field checksum .2. has wire type 0, expected 5"),
        (both, r"sets \['create', 'link'\]"),
        (RecordedOp(1, 0, 7, "write", fnode=2, length=-1).payload(), "length is -1"),
    ]:
        with pytest.raises(RecoveryLogError, match=f"offset 0 of recovery log '{LOG}'.*{problem}"):
            OpDecoder(LOG, 0).feed(frame(payload))
    # Unknown fields and the meta fields (never written) are skipped, as Gazette's unmarshaler does.
    extra = ops[1].payload() + b"\x48\x05\x5a\x01x\xa0\x06\x01"
    assert OpDecoder(LOG, 0).feed(frame(extra))[0].op.path == "/a/b"


# ---- gazette-py's earlier JSON records


def test_legacy_json_records_play_and_chain_into_protobuf_ones() -> None:
    """A log begun in the JSON encoding and continued in protobuf (an upgraded recorder): both play,
    the checksum chain runs through both, and JSON paths take Gazette's leading "/"."""
    fsm = FSM(FSMHints(LOG))
    stream = b""
    legacy = [RecordedOp(0, 0, 5), RecordedOp(0, 0, 5, "create", "state"),
              RecordedOp(0, 0, 5, "write", fnode=2, length=3)]  # fmt: skip
    for op in legacy:
        op = dataclasses.replace(op, seq_no=fsm.next_seq_no, checksum=fsm.next_checksum)
        payload = legacy_payload(op)
        assert fsm.apply(dataclasses.replace(op, path="/" + op.path if op.path else ""), payload).advanced
        stream += frame(payload) + (b"old" if op.kind == "write" else b"")
    for op in [RecordedOp(0, 0, 6), RecordedOp(0, 0, 6, "create", "/next"),
               RecordedOp(0, 0, 6, "unlink", "/state", 2), RecordedOp(0, 0, 6, "link", "/state", 5),
               RecordedOp(0, 0, 6, "unlink", "/next", 5)]:  # fmt: skip
        op = dataclasses.replace(op, seq_no=fsm.next_seq_no, checksum=fsm.next_checksum)
        record, payload = encode_op(op)
        assert fsm.apply(op, payload) is Outcome.APPLIED
        stream += record
    records = OpDecoder(LOG, 0).feed(stream)
    assert [r.legacy for r in records] == [True] * 3 + [False] * 5
    assert records[1].op.path == "/state" and records[2].data == b"old"
    played = FSM(FSMHints(LOG))
    assert all(played.apply(r.op, r.payload) is Outcome.APPLIED for r in records)
    assert (played.next_seq_no, played.next_checksum, played.links) == (9, fsm.next_checksum, {"/state": 5})
    # A JSON record that is not one of the old format is refused by name, never guessed at.
    for bad, problem in [(b'{"seq_no": 1, "chmod": {}}', "at most one of"), (b"{nope", "not a JSON object")]:
        with pytest.raises(RecoveryLogError, match=f"earlier JSON encoding.*{problem}"):
            OpDecoder(LOG, 0).feed(frame(bad))


def test_properties_are_kept_and_hinted() -> None:
    fsm = FSM(FSMHints(LOG))

    def apply(op: RecordedOp) -> Outcome:
        op = dataclasses.replace(op, seq_no=fsm.next_seq_no, checksum=fsm.next_checksum)
        return fsm.apply(op, op.payload())

    assert apply(RecordedOp(0, 0, 3, "create", "/tmp-id")) is Outcome.APPLIED
    assert apply(RecordedOp(0, 0, 3, "property", "/tmp-id", content="x")) is Outcome.LINK_EXISTS
    assert apply(RecordedOp(0, 0, 3, "property", "/IDENTITY", content="guid\n")) is Outcome.APPLIED
    assert apply(RecordedOp(0, 0, 3, "create", "/IDENTITY")) is Outcome.PROPERTY_EXISTS
    assert apply(RecordedOp(0, 0, 3, "link", "/IDENTITY", 1)) is Outcome.PROPERTY_EXISTS
    hints = fsm.build_hints()
    assert hints.properties == (Property("/IDENTITY", "guid\n"),)
    assert hints.to_dict()["properties"] == [{"path": "/IDENTITY", "content": "guid\n"}]
    for again in (FSMHints.from_json(hints.to_json()), FSMHints.from_proto(hints.to_proto()),
                  FSMHints.from_bytes(hints.to_proto().SerializeToString())):  # fmt: skip
        assert again == hints
    assert FSM(hints).properties == {"/IDENTITY": "guid\n"}
    assert "properties" not in FSMHints(LOG).to_dict()  # none: as before
    with pytest.raises(RecoveryLogError, match=r"properties\[0\]"):
        FSMHints.from_dict({"log": LOG, "properties": [{"content": "no path"}]})


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
    return fsm, {path.removeprefix("/"): bytes(files[fnode]) for path, fnode in fsm.links.items()}


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
