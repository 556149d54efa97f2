"""JSON-lines and CSV frames (reference 6.2) as literal strings with known UUIDs.

The expected clock/flags/producer of each UUID are hand-computed in test_uuid_vectors.py; here they
are literals, and the frames are the exact bytes a Gazette producer of that content type writes.
"""

from __future__ import annotations

import uuid as std_uuid

import pytest

from gazette.message.framing import (
    CSV_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    CSVFraming,
    FramingError,
    JSONFraming,
    framing_for,
)
from gazette.message.uuid import Flags

REF_UUID = "0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"
# 0x1e9 << 48 | 0xf9b7 << 32 | 0x0d2b9119 = 0x1E9F9B70D2B9119; sequence (0x9002 >> 10) & 0xF = 4.
REF_CLOCK = 0x1E9F9B70D2B91194
REF_PRODUCER = bytes.fromhex("6fb7f64cdd31")  # bytes 10..15
REF_FLAGS = Flags.ACK_TXN  # 0x9002 & 0x3FF = 2
# "789abcde-3456-1012-bc01-010203040506": clock 0x0123456789ABCDEF, CONTINUE_TXN, producer 01..06.
VEC_UUID = "789abcde-3456-1012-bc01-010203040506"
VEC_CLOCK = 0x0123456789ABCDEF
VEC_PRODUCER = bytes.fromhex("010203040506")


def test_gazette_example_line_with_top_level_uuid_field() -> None:
    line = b'{"UUID":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31","word":"hi"}\n'
    dec = framing_for(JSON_CONTENT_TYPE, uuid_pointer="/UUID").decoder("ex/words", 40)
    [env] = dec.feed(line)
    assert (env.journal, env.begin, env.end) == ("ex/words", 40, 40 + 60)
    assert len(line) == 60
    assert env.message == {"UUID": REF_UUID, "word": "hi"}
    assert (env.producer, env.clock, env.flags) == (REF_PRODUCER, REF_CLOCK, REF_FLAGS)
    assert env.is_ack
    assert env.uuid == std_uuid.UUID(REF_UUID)


def test_default_pointer_is_meta_uuid() -> None:
    data = (
        b'{"_meta":{"uuid":"789abcde-3456-1012-bc01-010203040506"},"n":1}\n'
        b'{"n":2,"_meta":{"uuid":"0D2B9119-F9B7-11E9-9002-6FB7F64CDD31"}}\r\n'
    )
    a, b = framing_for(JSON_CONTENT_TYPE).decoder("j", 0).feed(data)
    assert (a.begin, a.end, b.begin, b.end) == (0, 64, 64, 129)
    assert (a.producer, a.clock, a.flags) == (VEC_PRODUCER, VEC_CLOCK, Flags.CONTINUE_TXN)
    assert (b.producer, b.clock, b.flags) == (REF_PRODUCER, REF_CLOCK, REF_FLAGS)  # upper case reads the same


def test_encode_writes_the_canonical_string_at_the_pointer() -> None:
    u = std_uuid.UUID(REF_UUID)
    assert JSONFraming().encode({"word": "hi"}, u) == (
        b'{"word":"hi","_meta":{"uuid":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"}}\n'
    )
    assert JSONFraming().encode({"_meta": {"src": "x"}, "n": 1}, u) == (
        b'{"_meta":{"src":"x","uuid":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"},"n":1}\n'
    )
    assert JSONFraming(uuid_pointer="/UUID").encode({"word": "hi"}, u) == (
        b'{"word":"hi","UUID":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"}\n'
    )
    # RFC 6901 escapes: "~1" is "/", "~0" is "~".
    assert JSONFraming(uuid_pointer="/a~1b/c~0d").encode({}, u) == (
        b'{"a/b":{"c~d":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"}}\n'
    )
    assert JSONFraming().encode({"s": "line\nbreak"}, u).count(b"\n") == 1  # escaped inside strings


def test_encode_ack_holds_only_the_uuid() -> None:
    u = std_uuid.UUID(REF_UUID)
    assert JSONFraming().encode_ack(u) == b'{"_meta":{"uuid":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"}}\n'
    assert JSONFraming(uuid_pointer="/UUID").encode_ack(u, like={"word": "x"}) == (
        b'{"UUID":"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"}\n'
    )


def test_csv_records_with_uuid_in_column_zero() -> None:
    data = (
        b'0d2b9119-f9b7-11e9-9002-6fb7f64cdd31,hello,"a,b"\n'
        b'789abcde-3456-1012-bc01-010203040506,"two\nlines","say ""hi"""\r\n'
        b",no uuid,\n"
    )
    dec = framing_for(CSV_CONTENT_TYPE).decoder("csv/j", 10)
    a, b, c = dec.feed(data)
    assert a.message == [REF_UUID, "hello", "a,b"]
    assert (a.begin, a.end) == (10, 10 + 49)
    assert (a.producer, a.clock, a.flags) == (REF_PRODUCER, REF_CLOCK, REF_FLAGS)
    assert b.message == [VEC_UUID, "two\nlines", 'say "hi"']
    assert (b.begin, b.end) == (59, 59 + 63)
    assert (b.producer, b.clock, b.flags) == (VEC_PRODUCER, VEC_CLOCK, Flags.CONTINUE_TXN)
    assert c.message == ["", "no uuid", ""]
    assert (c.begin, c.end, c.clock, c.producer, c.uuid) == (122, 132, 0, b"", None)
    assert dec.offset == 132 and dec.buffered == 0


def test_csv_encode_and_ack_rows() -> None:
    u = std_uuid.UUID(REF_UUID)
    assert CSVFraming().encode(["", "hello", "a,b", 'q"t', "l1\nl2"], u) == (
        b'0d2b9119-f9b7-11e9-9002-6fb7f64cdd31,hello,"a,b","q""t","l1\nl2"\n'
    )
    assert CSVFraming(columns=3).encode_ack(u) == b"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31,,\n"
    assert CSVFraming().encode_ack(u, like=["x", "y"]) == b"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31,\n"
    assert CSVFraming().encode_ack(u) == b"0d2b9119-f9b7-11e9-9002-6fb7f64cdd31\n"


@pytest.mark.parametrize(
    ("content_type", "data", "begin", "end"),
    [
        (JSON_CONTENT_TYPE, b'{"a":1}\n{"a":', 8, 13),
        (CSV_CONTENT_TYPE, b',y\n,"open\nquote', 3, 15),
    ],
)
def test_truncated_last_record(content_type: str, data: bytes, begin: int, end: int) -> None:
    dec = framing_for(content_type).decoder("t/j", 0)
    assert len(dec.feed(data)) == 1
    with pytest.raises(FramingError, match=rf"'t/j' ends inside a frame: bytes \[{begin}, {end}\)"):
        dec.close()
