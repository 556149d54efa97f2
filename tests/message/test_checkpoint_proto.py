"""Sequencer checkpoints in Gazette's encoding: `Checkpoint.to_proto`/`from_proto` against
consumer.Checkpoint bytes built by hand from protocol.proto's field numbers (not by our converter),
the layout of Gazette's BuildCheckpoint / FlattenReadThrough, and validation naming the field."""

from __future__ import annotations

import pytest

from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.protocol import shard_pb2
from gazette.protocol.errors import ValidationError

P1 = bytes.fromhex("0a0b0c0d0e0f")
P2 = bytes.fromhex("010203040506")


# ---- a protobuf wire writer for the test: consumer.Checkpoint by field number and wire type


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values are ten-byte two's complement varints
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _vi(field: int, n: int) -> bytes:  # wire type 0
    return _varint(field << 3) + _varint(n)


def _f64(field: int, n: int) -> bytes:  # wire type 1
    return _varint(field << 3 | 1) + n.to_bytes(8, "little")


def _ld(field: int, payload: bytes) -> bytes:  # wire type 2
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _state(last_ack: int, begin: int) -> bytes:  # ProducerState: fixed64 last_ack = 1, int64 begin = 2
    return (_f64(1, last_ack) if last_ack else b"") + (_vi(2, begin) if begin else b"")


def _entry(producer: bytes, last_ack: int, begin: int) -> bytes:  # ProducerEntry: bytes id = 1, state = 2
    return _ld(1, producer) + _ld(2, _state(last_ack, begin))


def _source(journal: str, read_through: int, *entries: bytes) -> bytes:
    """A `map<string, Source> sources = 1` entry: key = 1, value (read_through = 1, producers = 2) = 2."""
    value = (_vi(1, read_through) if read_through else b"") + b"".join(_ld(2, e) for e in entries)
    return _ld(1, _ld(1, journal.encode()) + _ld(2, value))


def _parse(raw: bytes) -> shard_pb2.Checkpoint:
    return shard_pb2.Checkpoint.FromString(raw)


def test_to_proto_is_gazettes_build_checkpoint_layout() -> None:
    cp = Checkpoint(
        {"a/one": 1234, "b/two": 0},
        [ProducerState("a/one", P1, (1 << 64) - 1, 77), ProducerState("a/one", P2, 5, -1)],
    )  # producers in an order of our choosing: entries follow it
    wire = _source("a/one", 1234, _entry(P1, (1 << 64) - 1, 77), _entry(P2, 5, -1)) + _source("b/two", 0)
    assert cp.to_proto().SerializeToString(deterministic=True) == wire  # gogo's layout, keys sorted
    back = Checkpoint.from_proto(_parse(wire))
    assert back.offsets == cp.offsets
    assert back.producers == [cp.producers[1], cp.producers[0]]  # sorted by (journal, producer)
    assert back.to_proto().SerializeToString(deterministic=True) == _source(
        "a/one", 1234, _entry(P2, 5, -1), _entry(P1, (1 << 64) - 1, 77)
    ) + _source("b/two", 0)


def test_a_zero_producer_state_is_still_written_and_map_order_does_not_matter() -> None:
    """Gazette writes ProducerEntry.state even when zero (non-nullable), and its map order is Go's
    random iteration order: both read the same."""
    cp = Checkpoint({"x": 9, "y": 10}, [ProducerState("x", P1, 0, 0)])
    wire_sorted = _source("x", 9, _entry(P1, 0, 0)) + _source("y", 10)
    assert cp.to_proto().SerializeToString(deterministic=True) == wire_sorted
    assert wire_sorted.count(b"\x12\x00") == 1  # the empty state, present
    assert Checkpoint.from_proto(_parse(_source("y", 10) + _source("x", 9, _entry(P1, 0, 0)))) == cp


def test_producers_of_a_journal_without_an_offset_read_back_at_offset_zero() -> None:
    """As Gazette's BuildCheckpoint then FlattenReadThrough: a Source with read_through 0."""
    cp = Checkpoint({}, [ProducerState("only/producers", P1, 3, -1)])
    assert cp.to_proto().SerializeToString(deterministic=True) == _source(
        "only/producers", 0, _entry(P1, 3, -1)
    )
    assert Checkpoint.from_proto(cp.to_proto()) == Checkpoint({"only/producers": 0}, cp.producers)


def test_a_checkpoint_written_by_gazette() -> None:
    """The bytes Gazette's docs show its SQLStore kept (examples-bike-share.rst, PostgreSQL bytea)."""
    raw = bytes.fromhex(
        "0a4b0a226578616d706c65732f62696b652d73686172652f72696465732f706172742d303031122508c4e09642121e"
        "0a060d04970419de121409b5cf95c4709b9f1e10ffffffffffffffffff01"
    )
    cp = Checkpoint.from_proto(_parse(raw))
    journal = "examples/bike-share/rides/part-001"
    assert cp == Checkpoint(
        {journal: 138784836},
        [ProducerState(journal, bytes.fromhex("0d04970419de"), 0x1E9F9B70C495CFB5, -1)],
    )
    assert cp.to_proto().SerializeToString(deterministic=True) == raw


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (_source("j", -5), r"checkpoint\.sources\['j'\]\.read_through -5 is not an offset >= 0"),
        (_source("j", 1, _ld(1, b"\x01\x02")), r"sources\['j'\]\.producers\[0\]\.id 0102 is not a 6-byte"),
        (_source("j", 1, _ld(2, b"")), r"producers\[0\]\.id \(empty\) is not a 6-byte"),
        (_source("j", 1, _entry(P1, 1, -2)), r"producers\[0\]\.state\.begin -2 is not an offset >= -1"),
        (
            _source("j", 1, _entry(P1, 1, -1), _entry(P1, 2, -1)),
            r"producers\[1\] lists producer 0a0b0c0d0e0f",
        ),
        (_source("", 1), "sources has an empty journal name"),
        (_vi(7, 1), r"checkpoint holds field number\(s\) \[7\] that consumer\.Checkpoint does not define"),
        (_source("j", 1, _entry(P1, 1, -1) + _vi(9, 1)), r"producers\[0\] holds field number\(s\) \[9\]"),
    ],
)
def test_malformed_sources_are_refused_naming_the_field(wire: bytes, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Checkpoint.from_proto(_parse(wire))


def test_from_proto_needs_a_consumer_checkpoint() -> None:
    with pytest.raises(ValidationError, match="shard x is a ShardSpec, expected a consumer.Checkpoint"):
        Checkpoint.from_proto(shard_pb2.ShardSpec(), where="shard x")  # type: ignore[arg-type]


def test_offsets_beyond_int64_are_refused() -> None:
    with pytest.raises(ValidationError, match="is not an offset >= 0"):
        Checkpoint({"j": 1 << 63}, [])
