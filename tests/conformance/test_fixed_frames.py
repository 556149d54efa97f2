"""Fixed protobuf frames (reference 6.2) as literal bytes: magic 66 33 93 36, uint32 LE length.

Frames are written out by hand (header bytes and the protobuf wire bytes of a small test message),
then decoded with exact offsets, through garbage, truncation, oversize lengths and one-byte feeds.
"""

from __future__ import annotations

import logging
import uuid as std_uuid
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gazette.message.framing import FIXED_CONTENT_TYPE, FixedFraming, FramingError, frame, framing_for
from gazette.message.uuid import Flags

REF_UUID = "0d2b9119-f9b7-11e9-9002-6fb7f64cdd31"
# Hand split of REF_UUID (see test_uuid_vectors.py): producer 6f b7 f6 4c dd 31,
# clock 0x1E9F9B70D2B9119 << 4 | 4, flags 0x002 (ACK_TXN).
REF_PRODUCER = bytes.fromhex("6fb7f64cdd31")
REF_CLOCK = 0x1E9F9B70D2B91194
# The same producer with flags 0x001 and sequence 4: bytes 8..9 = 0x8000 | 4 << 10 | 1 = 0x9001.
CONT_UUID = "0d2b9119-f9b7-11e9-9001-6fb7f64cdd31"


def word_type() -> Any:
    """message Word { string uuid = 1; string word = 2; int64 n = 3; } in a private pool."""
    fdp = descriptor_pb2.FileDescriptorProto(name="conformance_word.proto", package="gztest", syntax="proto3")
    msg = fdp.message_type.add(name="Word")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="uuid", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="word", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="n", number=3, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gztest.Word"))


Word = word_type()

# Word{uuid: REF_UUID, word: "hi", n: 5} on the wire, fields in number order:
#   0a 24 <36 ASCII bytes>   field 1, wire type 2 (0x08 | 2), length 36
#   12 02 68 69              field 2, wire type 2, "hi"
#   18 05                    field 3, wire type 0 (3 << 3), varint 5
# = 38 + 4 + 2 = 44 = 0x2c payload bytes.
WORD_PAYLOAD = b"\x0a\x24" + REF_UUID.encode() + b"\x12\x02hi" + b"\x18\x05"
WORD_FRAME = bytes.fromhex("66339336 2c000000") + WORD_PAYLOAD
# Word{uuid: CONT_UUID, word: "yo"}: 38 + 4 = 42 = 0x2a.
YO_FRAME = bytes.fromhex("66339336 2a000000") + b"\x0a\x24" + CONT_UUID.encode() + b"\x12\x02yo"


def test_headers_are_magic_and_little_endian_length() -> None:
    assert frame(b"hello") == bytes.fromhex("66339336 05000000") + b"hello"
    assert frame(b"") == bytes.fromhex("66339336 00000000")
    assert frame(b"x" * 300) == bytes.fromhex("66339336 2c010000") + b"x" * 300  # 300 = 0x012c
    assert frame(b"x" * 0x10203) == bytes.fromhex("66339336 03020100") + b"x" * 0x10203


def test_encode_writes_the_uuid_field_and_the_hand_written_frame() -> None:
    framing = framing_for(FIXED_CONTENT_TYPE, message_type=Word)
    msg = Word(word="hi", n=5)
    assert framing.encode(msg, std_uuid.UUID(REF_UUID)) == WORD_FRAME
    assert msg.uuid == ""  # the caller's message is untouched


def test_encode_ack_is_an_empty_message_with_only_the_uuid() -> None:
    framing = FixedFraming(message_type=Word)
    # Word{uuid: REF_UUID}: 0a 24 <36 bytes> = 38 = 0x26 payload bytes.
    expected = bytes.fromhex("66339336 26000000") + b"\x0a\x24" + REF_UUID.encode()
    assert framing.encode_ack(std_uuid.UUID(REF_UUID)) == expected


def test_decode_literal_frames_with_exact_offsets() -> None:
    dec = FixedFraming(message_type=Word).decoder("logs/a", 1000)
    envs = dec.feed(WORD_FRAME + YO_FRAME)
    assert [(e.journal, e.begin, e.end) for e in envs] == [("logs/a", 1000, 1052), ("logs/a", 1052, 1102)]
    first, second = envs
    assert (first.message.word, first.message.n, first.message.uuid) == ("hi", 5, REF_UUID)
    assert (first.producer, first.clock, first.flags) == (REF_PRODUCER, REF_CLOCK, Flags.ACK_TXN)
    assert first.uuid == std_uuid.UUID(REF_UUID)
    assert (second.producer, second.clock, second.flags) == (REF_PRODUCER, REF_CLOCK, Flags.CONTINUE_TXN)
    assert dec.offset == 1102 and dec.buffered == 0 and dec.skipped == []
    dec.close()


def test_raw_payloads_without_message_type_carry_no_uuid() -> None:
    dec = FixedFraming().decoder("raw", 0)
    envs = dec.feed(WORD_FRAME + frame(b""))
    assert [(e.begin, e.end, e.message) for e in envs] == [(0, 52, WORD_PAYLOAD), (52, 60, b"")]
    assert all((e.clock, e.producer, e.uuid) == (0, b"", None) for e in envs)
    assert (
        FixedFraming().encode(b"abc", std_uuid.UUID(REF_UUID)) == bytes.fromhex("66339336 03000000") + b"abc"
    )


def test_garbage_between_frames_is_skipped_and_recorded(caplog: pytest.LogCaptureFixture) -> None:
    data = b"junk!" + WORD_FRAME + b"\x00\x66\x33\x93garbage\x66\x33" + YO_FRAME
    # WORD_FRAME spans [5, 57); garbage [57, 70) holds two false magic prefixes; YO_FRAME [70, 120).
    with caplog.at_level(logging.WARNING):
        dec = FixedFraming(message_type=Word).decoder("logs/g", 0)
        envs = dec.feed(data)
    assert [(e.begin, e.end) for e in envs] == [(5, 57), (70, 120)]
    assert dec.skipped == [(0, 5), (57, 70)]
    messages = [r.getMessage() for r in caplog.records]
    assert any("logs/g" in m and "[0, 5)" in m for m in messages)
    assert any("logs/g" in m and "[57, 70)" in m for m in messages)
    dec.close()


def test_one_byte_at_a_time_matches_whole_feed() -> None:
    data = b"xx" + WORD_FRAME + b"\x66\x33\x93\x66" + YO_FRAME + b"\x66" + WORD_FRAME + b"\n"
    whole = FixedFraming(message_type=Word).decoder("j", 7)
    expected = whole.feed(data)
    whole.close()
    single = FixedFraming(message_type=Word).decoder("j", 7)
    got = []
    for i in range(len(data)):
        got.extend(single.feed(data[i : i + 1]))
    single.close()
    assert got == expected
    assert [(e.begin, e.end) for e in got] == [(9, 61), (65, 115), (116, 168)]
    assert single.skipped == whole.skipped == [(7, 9), (61, 65), (115, 116)]


def test_lone_trailing_newline_is_tolerated() -> None:
    dec = FixedFraming(message_type=Word).decoder("j", 0)
    assert len(dec.feed(WORD_FRAME + b"\n")) == 1
    dec.close()
    assert dec.skipped == []


def test_trailing_bytes_that_cannot_start_a_frame_are_skipped_at_close() -> None:
    dec = FixedFraming(message_type=Word).decoder("j", 0)
    assert len(dec.feed(WORD_FRAME + b"\n\n")) == 1
    dec.close()
    assert dec.skipped == [(52, 54)]


@pytest.mark.parametrize(
    ("cut", "what"),
    [
        (2, "magic prefix"),
        (4, "magic only"),
        (7, "header"),
        (8, "header only"),
        (30, "payload"),
        (51, "payload"),
    ],
)
def test_truncated_frames_fail_at_close(cut: int, what: str) -> None:
    dec = FixedFraming(message_type=Word).decoder("logs/t", 100)
    assert len(dec.feed(YO_FRAME + WORD_FRAME[:cut])) == 1
    assert (dec.offset, dec.buffered) == (150, cut)
    with pytest.raises(FramingError, match=rf"'logs/t'.*\[150, {150 + cut}\)") as info:
        dec.close()
    assert (info.value.begin, info.value.end, info.value.journal) == (150, 150 + cut, "logs/t")


def test_oversize_length_is_an_error_and_decoding_can_continue() -> None:
    framing = FixedFraming(message_type=Word, max_frame_bytes=43)  # WORD_FRAME's payload is 44
    dec = framing.decoder("logs/o", 0)
    with pytest.raises(FramingError, match=r"'logs/o'.*44 payload bytes.*max_frame_bytes=43") as info:
        dec.feed(YO_FRAME + WORD_FRAME + YO_FRAME)
    assert (info.value.begin, info.value.end) == (50, 102)
    assert [(e.begin, e.end) for e in info.value.envelopes] == [(0, 50)]
    # The header was passed over; its payload is garbage up to the next magic word.
    envs = dec.feed(b"")
    assert [(e.begin, e.end) for e in envs] == [(102, 152)]
    assert dec.skipped == [(58, 102)]
    with pytest.raises(FramingError, match="exceeds max_frame_bytes=43"):
        framing.encode(Word(word="hi", n=5), std_uuid.UUID(REF_UUID))


def test_default_limit_is_64_mib() -> None:
    dec = FixedFraming().decoder("j", 0)
    assert dec.feed(bytes.fromhex("66339336 00000004")) == []  # 64 MiB = 0x04000000: allowed, waits
    dec = FixedFraming().decoder("j", 0)
    with pytest.raises(FramingError, match="67108865 payload bytes"):
        dec.feed(bytes.fromhex("66339336 01000004"))


def test_invalid_protobuf_payload_is_an_error_past_which_decoding_continues() -> None:
    bad = frame(b"\x0a\x30abc")  # field 1 claims 48 bytes, 3 follow
    dec = FixedFraming(message_type=Word).decoder("logs/p", 0)
    with pytest.raises(FramingError, match=r"\[0, 13\) of journal 'logs/p' is not a valid gztest.Word"):
        dec.feed(bad + YO_FRAME)
    assert [(e.begin, e.end) for e in dec.feed(b"")] == [(13, 63)]


def test_invalid_uuid_string_names_the_value() -> None:
    v4 = "0d2b9119-f9b7-41e9-9002-6fb7f64cdd31"
    payload = b"\x0a\x24" + v4.encode()
    dec = FixedFraming(message_type=Word).decoder("logs/u", 0)
    with pytest.raises(FramingError, match=rf"\[0, 46\) of journal 'logs/u' has UUID '{v4}'"):
        dec.feed(frame(payload))


def test_unknown_flags_are_delivered_as_they_are(caplog: pytest.LogCaptureFixture) -> None:
    # bytes 8..9 = 0x8000 | 4 << 10 | 0x005 = 0x9005: flags 5 are not defined by reference 6.1.
    odd = "0d2b9119-f9b7-11e9-9005-6fb7f64cdd31"
    one = frame(b"\x0a\x24" + odd.encode())
    with caplog.at_level(logging.WARNING):
        envs = FixedFraming(message_type=Word).decoder("logs/f", 0).feed(one + one + one)
    assert [e.flags for e in envs] == [5, 5, 5]
    assert all(e.clock == REF_CLOCK and e.producer == REF_PRODUCER for e in envs)
    warned = [r.getMessage() for r in caplog.records if "unknown UUID flags" in r.getMessage()]
    assert len(warned) == 1 and "6fb7f64cdd31" in warned[0] and "0x5" in warned[0]


def test_message_without_uuid_has_clock_zero() -> None:
    env = FixedFraming(message_type=Word).decoder("j", 0).feed(frame(b"\x12\x02hi"))[0]
    assert (env.message.word, env.clock, env.producer, env.uuid) == ("hi", 0, b"", None)
