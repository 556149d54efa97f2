"""Framings: the content-type registry, round trips through any chunking, and bad input.

Round trips are property tests (random messages, UUIDs and feed boundaries); bad input covers
truncation, invalid JSON, non-object lines, invalid UUIDs, unknown flags and messages without UUIDs.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import uuid as std_uuid
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.message.envelope import Envelope
from gazette.message.framing import (
    CSV_CONTENT_TYPE,
    FIXED_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    CSVFraming,
    Decoder,
    FixedFraming,
    Framing,
    FramingError,
    JSONFraming,
    content_types,
    framing_for,
    register_framing,
)
from gazette.message.uuid import Flags, build_uuid, get_clock, get_flags, get_producer_id

PRODUCER = bytes.fromhex("0b0000000001")
UUID_A = build_uuid(PRODUCER, 0x1E9F9B70D2B91190, Flags.OUTSIDE_TXN)
UUID_B = build_uuid(PRODUCER, 0x1E9F9B70D2B91230, Flags.CONTINUE_TXN)


def word_type() -> Any:
    """message Word { string uuid = 1; string word = 2; int64 n = 3; } in a private pool."""
    fdp = descriptor_pb2.FileDescriptorProto(name="framing_word.proto", package="gztest", syntax="proto3")
    msg = fdp.message_type.add(name="Word")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="uuid", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="word", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="n", number=3, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    msg.field.add(name="tags", number=4, type=f.TYPE_STRING, label=f.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gztest.Word"))


Word = word_type()


def feed_in_pieces(dec: Decoder, data: bytes, cuts: list[int]) -> list[Envelope]:
    out: list[Envelope] = []
    prev = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out.extend(dec.feed(data[prev:cut]))
        prev = cut
    return out


# --- registry ---------------------------------------------------------------------------------


def test_registry_builds_each_framing_with_its_options() -> None:
    assert content_types() == sorted([JSON_CONTENT_TYPE, FIXED_CONTENT_TYPE, CSV_CONTENT_TYPE])
    json_framing = framing_for("application/x-ndjson", uuid_pointer="/UUID")
    assert isinstance(json_framing, JSONFraming) and json_framing.uuid_pointer == "/UUID"
    fixed = framing_for("application/x-protobuf-fixed", message_type=Word, max_frame_bytes=1024)
    assert isinstance(fixed, FixedFraming) and fixed.message_type is Word and fixed.max_frame_bytes == 1024
    csv_framing = framing_for("text/csv", columns=4)
    assert isinstance(csv_framing, CSVFraming) and csv_framing.columns == 4
    assert {f.content_type for f in (json_framing, fixed, csv_framing)} == set(content_types())


def test_unknown_content_type_names_it_and_the_known_ones() -> None:
    with pytest.raises(
        FramingError,
        match=r"'application/json'.*known: application/x-ndjson, application/x-protobuf-fixed, text/csv",
    ):
        framing_for("application/json")


def test_register_a_framing() -> None:
    class Upper(JSONFraming):
        content_type = "application/x-test-upper"

    register_framing(Upper.content_type, Upper)
    register_framing(Upper.content_type, Upper)  # the same factory again is fine
    assert isinstance(framing_for(Upper.content_type, uuid_pointer="/U"), Upper)
    assert Upper.content_type in content_types()
    with pytest.raises(FramingError, match="already has a framing"):
        register_framing(JSON_CONTENT_TYPE, Upper)
    with pytest.raises(FramingError, match="not a non-empty string"):
        register_framing("", Upper)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"uuid_pointer": ""}, "must start with '/'"),
        ({"uuid_pointer": "_meta/uuid"}, "must start with '/'"),
        ({"uuid_pointer": "/a~2b"}, r"'~' not followed by 0 or 1"),
        ({"uuid_pointer": "/a~"}, r"'~' not followed by 0 or 1"),
    ],
)
def test_bad_json_pointer(options: dict[str, Any], match: str) -> None:
    with pytest.raises(FramingError, match=match):
        framing_for(JSON_CONTENT_TYPE, **options)


def test_bad_fixed_and_csv_options() -> None:
    with pytest.raises(FramingError, match="no field 'id'"):
        FixedFraming(message_type=Word, uuid_field="id")
    with pytest.raises(FramingError, match="gztest.Word.n must be a singular string field"):
        FixedFraming(message_type=Word, uuid_field="n")
    with pytest.raises(FramingError, match="gztest.Word.tags must be a singular string field"):
        FixedFraming(message_type=Word, uuid_field="tags")
    with pytest.raises(FramingError, match="not a protobuf message class"):
        FixedFraming(message_type=dict)  # type: ignore[arg-type]
    with pytest.raises(FramingError, match="max_frame_bytes=0"):
        FixedFraming(max_frame_bytes=0)
    with pytest.raises(FramingError, match="columns=0"):
        CSVFraming(columns=0)
    with pytest.raises(TypeError, match="uuid_pointer"):
        framing_for(CSV_CONTENT_TYPE, uuid_pointer="/x")


# --- round trips ------------------------------------------------------------------------------

uuids = st.builds(
    build_uuid,
    st.binary(min_size=6, max_size=6),
    st.integers(1, (1 << 64) - 1),
    st.sampled_from([Flags.OUTSIDE_TXN, Flags.CONTINUE_TXN, Flags.ACK_TXN]),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 63) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
json_messages = st.dictionaries(st.text(max_size=8).filter(lambda k: k != "_meta"), json_values, max_size=5)


def check_envelopes(envs: list[Envelope], frames: list[bytes], uids: list[std_uuid.UUID], start: int) -> None:
    assert len(envs) == len(frames)
    offset = start
    for env, frame, u in zip(envs, frames, uids, strict=True):
        assert (env.begin, env.end) == (offset, offset + len(frame))
        assert (env.producer, env.clock, env.flags) == (get_producer_id(u), get_clock(u), get_flags(u))
        assert env.uuid == u
        offset = env.end


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    messages=st.lists(json_messages, min_size=1, max_size=6),
    uids=st.lists(uuids, min_size=6, max_size=6),
    start=st.integers(0, 1 << 40),
    cuts=st.lists(st.integers(0, 2000), max_size=8),
)
def test_json_round_trip(messages: list[dict], uids: list, start: int, cuts: list[int]) -> None:
    framing = JSONFraming()
    before = copy.deepcopy(messages)
    frames = [framing.encode(m, u) for m, u in zip(messages, uids, strict=False)]
    assert messages == before  # encode never mutates the caller's message
    dec = framing.decoder("rt/json", start)
    envs = feed_in_pieces(dec, b"".join(frames), cuts)
    dec.close()
    check_envelopes(envs, frames, uids[: len(frames)], start)
    for env, m, u in zip(envs, messages, uids, strict=False):
        assert env.message == {**m, "_meta": {"uuid": str(u)}}
    assert dec.offset == start + sum(map(len, frames)) and dec.buffered == 0


fields = st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=12)
# Rows of one width: a read fails at a record whose width differs from the first one's.
same_width_rows = st.integers(1, 5).flatmap(
    lambda n: st.lists(st.lists(fields, min_size=n, max_size=n), min_size=1, max_size=6)
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    messages=same_width_rows,
    uids=st.lists(uuids, min_size=6, max_size=6),
    cuts=st.lists(st.integers(0, 600), max_size=8),
)
def test_csv_round_trip(messages: list[list[str]], uids: list, cuts: list[int]) -> None:
    framing = CSVFraming()
    before = copy.deepcopy(messages)
    frames = [framing.encode(m, u) for m, u in zip(messages, uids, strict=False)]
    assert messages == before
    dec = framing.decoder("rt/csv", 0)
    envs = feed_in_pieces(dec, b"".join(frames), cuts)
    dec.close()
    check_envelopes(envs, frames, uids[: len(frames)], 0)
    for env, m, u in zip(envs, messages, uids, strict=False):
        assert env.message == [str(u), *m[1:]]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    words=st.lists(
        st.tuples(st.text(max_size=20), st.integers(-(1 << 63), (1 << 63) - 1)), min_size=1, max_size=6
    ),
    uids=st.lists(uuids, min_size=6, max_size=6),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_fixed_round_trip(words: list[tuple[str, int]], uids: list, cuts: list[int]) -> None:
    framing = FixedFraming(message_type=Word)
    messages = [Word(word=w, n=n) for w, n in words]
    frames = [framing.encode(m, u) for m, u in zip(messages, uids, strict=False)]
    assert all(m.uuid == "" for m in messages)
    dec = framing.decoder("rt/fixed", 3)
    envs = feed_in_pieces(dec, b"".join(frames), cuts)
    dec.close()
    check_envelopes(envs, frames, uids[: len(frames)], 3)
    for env, (w, n), u in zip(envs, words, uids, strict=False):
        assert (env.message.word, env.message.n, env.message.uuid) == (w, n, str(u))
    assert dec.skipped == []


@pytest.mark.parametrize("framing", [JSONFraming(), CSVFraming(), FixedFraming(message_type=Word)], ids=repr)
def test_ack_frames_decode_as_acks(framing: Framing) -> None:
    like: Any = ["", "a", "b"] if isinstance(framing, CSVFraming) else None
    envs = framing.decoder("acks", 0).feed(framing.encode_ack(UUID_B, like=like))
    [env] = envs
    assert env.uuid == UUID_B and env.flags == Flags.CONTINUE_TXN
    ack = framing.encode_ack(build_uuid(PRODUCER, 99 << 4, Flags.ACK_TXN), like=like)
    assert framing.decoder("acks", 0).feed(ack)[0].is_ack


def test_big_line_fed_in_small_chunks() -> None:
    framing = JSONFraming()
    big = framing.encode({"blob": "z" * 300_000}, UUID_A)
    dec = framing.decoder("big", 0)
    got: list[Envelope] = []
    for i in range(0, len(big), 1000):
        got.extend(dec.feed(big[i : i + 1000]))
        if i + 1000 < len(big):
            assert dec.buffered == i + 1000 and dec.offset == 0
    assert [(e.begin, e.end, len(e.message["blob"])) for e in got] == [(0, len(big), 300_000)]


# --- JSON bad input ---------------------------------------------------------------------------


def test_json_without_trailing_newline_is_truncated_at_close() -> None:
    dec = JSONFraming().decoder("bad/trunc", 7)
    data = JSONFraming().encode({"n": 1}, UUID_A) + b'{"n": 2}'
    assert len(dec.feed(data)) == 1
    assert dec.buffered == 8
    start = 7 + len(data) - 8
    with pytest.raises(
        FramingError, match=rf"'bad/trunc' ends inside a frame: bytes \[{start}, {start + 8}\)"
    ):
        dec.finish()


def test_invalid_json_line_names_offsets_and_decoding_continues() -> None:
    good1 = JSONFraming().encode({"n": 1}, UUID_A)
    good2 = JSONFraming().encode({"n": 2}, UUID_B)
    bad = b'{"n": oops}\n'
    dec = JSONFraming().decoder("bad/json", 100)
    b0, b1 = 100 + len(good1), 100 + len(good1) + len(bad)
    with pytest.raises(
        FramingError, match=rf"invalid JSON at \[{b0}, {b1}\) of journal 'bad/json': "
    ) as info:
        dec.feed(good1 + bad + good2)
    err = info.value
    assert (err.journal, err.begin, err.end) == ("bad/json", b0, b1)
    assert "unexpected character" in str(err).lower()  # orjson's own message
    assert [e.message for e in err.envelopes] == [{"n": 1, "_meta": {"uuid": str(UUID_A)}}]
    assert dec.offset == b1 and dec.buffered == len(good2)
    [env] = dec.feed(b"")
    assert (env.begin, env.message["n"], env.uuid) == (b1, 2, UUID_B)


@pytest.mark.parametrize(
    ("line", "kind"),
    [(b"42\n", "int"), (b"[1, 2]\n", "list"), (b'"text"\n', "str"), (b"null\n", "NoneType"), (b"\n", None)],
)
def test_json_lines_that_are_not_objects(line: bytes, kind: str | None) -> None:
    dec = JSONFraming().decoder("bad/kind", 0)
    match = (
        rf"\[0, {len(line)}\) of journal 'bad/kind' is a {kind}, not an object" if kind else "invalid JSON"
    )
    with pytest.raises(FramingError, match=match):
        dec.feed(line + JSONFraming().encode({}, UUID_A))
    assert len(dec.feed(b"")) == 1


@pytest.mark.parametrize(
    "value",
    [
        "0d2b9119-f9b7-41e9-9002-6fb7f64cdd31",
        "not-a-uuid",
        "0d2b9119f9b711e990026fb7f64cdd31",
        17,
        ["x"],
        {"a": 1},
    ],
)
def test_invalid_uuid_values_are_errors_naming_the_value(value: Any) -> None:
    line = JSONFraming().encode_ack(UUID_A).replace(f'"{UUID_A}"'.encode(), repr_json(value))
    dec = JSONFraming().decoder("bad/uuid", 5)
    with pytest.raises(FramingError, match=rf"\[5, {5 + len(line)}\) of journal 'bad/uuid' has UUID") as info:
        dec.feed(line)
    assert repr(value) in str(info.value)
    assert dec.offset == 5 + len(line)


def repr_json(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value)


@pytest.mark.parametrize(
    "line",
    [
        b'{"n":1}\n',
        b'{"_meta":{}}\n',
        b'{"_meta":{"uuid":null}}\n',
        b'{"_meta":{"uuid":""}}\n',
        b'{"_meta":[1]}\n',
    ],
)
def test_messages_without_uuid_get_clock_zero(line: bytes) -> None:
    [env] = JSONFraming().decoder("j", 0).feed(line)
    assert (env.clock, env.producer, env.flags, env.uuid) == (0, b"", Flags.OUTSIDE_TXN, None)


def test_unknown_flags_warned_once_per_producer(caplog: pytest.LogCaptureFixture) -> None:
    framing = JSONFraming()
    p1, p2 = bytes.fromhex("010000000001"), bytes.fromhex("010000000002")
    data = b"".join(
        framing.encode({"i": i}, build_uuid(p, (1000 + i) << 4, 7))
        for i, p in enumerate([p1, p1, p2, p1, p2])
    )
    with caplog.at_level(logging.WARNING):
        envs = framing.decoder("odd/flags", 0).feed(data)
    assert [e.flags for e in envs] == [7] * 5 and not any(e.is_ack for e in envs)
    warned = [r.getMessage() for r in caplog.records if "unknown UUID flags" in r.getMessage()]
    assert len(warned) == 2
    assert "010000000001" in warned[0] and "010000000002" in warned[1] and "'odd/flags'" in warned[0]


def test_json_one_byte_at_a_time_matches_whole() -> None:
    framing = JSONFraming(uuid_pointer="/UUID")
    data = (
        framing.encode({"a": "x\ny"}, UUID_A)
        + b'{"no": "uuid"}\r\n'
        + framing.encode({"b": [1, {"c": None}]}, UUID_B)
    )
    whole = framing.decoder("j", 9).feed(data)
    dec = framing.decoder("j", 9)
    single = [env for i in range(len(data)) for env in dec.feed(data[i : i + 1])]
    assert single == whole and len(whole) == 3
    assert [e.begin for e in whole] == [9, 9 + data.index(b"{", 1), 9 + data.index(b'{"b"')]


def test_csv_one_byte_at_a_time_matches_whole() -> None:
    framing = CSVFraming()
    data = (
        framing.encode(["", 'q"\n"', "\r\n"], UUID_A)
        + b",plain,\r\n"
        + b"\n\r\n"  # blank lines are skipped
        + framing.encode(["", "", '""'], UUID_B)
        + b'"","",\n'
    )
    whole = framing.decoder("c", 0).feed(data)
    dec = framing.decoder("c", 0)
    single = [env for i in range(len(data)) for env in dec.feed(data[i : i + 1])]
    assert single == whole
    assert [e.message for e in whole] == [
        [str(UUID_A), 'q"\n"', "\r\n"],
        ["", "plain", ""],
        [str(UUID_B), "", '""'],
        ["", "", ""],
    ]
    assert whole[2].begin == data.index(str(UUID_B).encode())  # a record's bytes, not the blank lines
    assert whole[-1].end == len(data)


def test_csv_record_of_another_width_fails_the_read_there() -> None:
    """As Gazette's TestCSVFramingErrorsIfFieldsChange: the first record read fixes the width."""
    framing = CSVFraming()
    first, second = framing.encode(["", "foo", "bar"], UUID_A), framing.encode(["", "baz"], UUID_B)
    third = framing.encode(["", "x", "y"], UUID_B)
    dec = framing.decoder("w/csv", 100)
    with pytest.raises(FramingError) as exc:
        dec.feed(first + second + third)
    err = exc.value
    assert [e.message for e in err.envelopes] == [[str(UUID_A), "foo", "bar"]]
    b = 100 + len(first)
    assert (err.journal, err.begin, err.end) == ("w/csv", b, b + len(second))
    assert str(err) == (
        f"CSV record at [{b}, {b + len(second)}) of journal 'w/csv' has 2 fields, but the first record read "
        "(at offset 100) has 3: every record must have as many"
    )
    # Past the bad record, records of the first width decode on.
    assert [e.message for e in dec.feed(b"")] == [[str(UUID_B), "x", "y"]]
    # Each decoder (each read) takes its width from its own first record.
    assert [e.message for e in framing.decoder("w/csv", b).feed(second)] == [[str(UUID_B), "baz"]]


def test_csv_bad_records() -> None:
    dec = CSVFraming().decoder("bad/csv", 0)
    with pytest.raises(FramingError, match=r"CSV record at \[0, 7\) of journal 'bad/csv' is not valid"):
        dec.feed(b'"a"b,c\n,ok\n')
    assert [e.message for e in dec.feed(b"")] == [["", "ok"]]
    with pytest.raises(FramingError, match=r"\[11, 14\) of journal 'bad/csv' is not valid: .*utf-8"):
        dec.feed(b"\xff,\n")
    with pytest.raises(FramingError, match="has UUID 'nope'"):
        dec.feed(b"nope,1\n")


# --- encode errors ----------------------------------------------------------------------------


def test_encode_errors_name_the_problem() -> None:
    with pytest.raises(FramingError, match="JSON message is a list, not a dict"):
        JSONFraming().encode([1], UUID_A)
    with pytest.raises(FramingError, match=r"cannot write the UUID at '/_meta/uuid': '/_meta' holds a str"):
        JSONFraming().encode({"_meta": "x"}, UUID_A)
    with pytest.raises(FramingError, match="cannot encode message as JSON"):
        JSONFraming().encode({"s": {1, 2}}, UUID_A)
    with pytest.raises(FramingError, match="CSV message is a str, not a row"):
        CSVFraming().encode("a,b", UUID_A)
    with pytest.raises(FramingError, match="empty row"):
        CSVFraming().encode([], UUID_A)
    with pytest.raises(FramingError, match="row has 2 columns, this framing's columns=3"):
        CSVFraming(columns=3).encode(["", "x"], UUID_A)
    with pytest.raises(FramingError, match="not this framing's Word"):
        FixedFraming(message_type=Word).encode(b"raw", UUID_A)
    with pytest.raises(FramingError, match="frames bytes, not a dict"):
        FixedFraming().encode({}, UUID_A)
    with pytest.raises(FramingError, match="no ACK message"):
        FixedFraming().encode_ack(UUID_A)


def test_encode_copies_nested_meta() -> None:
    meta = {"src": "x"}
    msg = {"_meta": meta, "n": 1}
    out = JSONFraming().encode(msg, UUID_A)
    assert msg == {"_meta": {"src": "x"}, "n": 1} and meta == {"src": "x"}
    assert b'"uuid":"' + str(UUID_A).encode() in out


# --- Envelope ---------------------------------------------------------------------------------


def test_envelope_uuid_is_derived_from_its_fields() -> None:
    env = Envelope("j", 0, 10, {}, UUID_B)
    assert (env.producer, env.clock, env.flags) == (PRODUCER, get_clock(UUID_B), Flags.CONTINUE_TXN)
    assert env == Envelope("j", 0, 10, {}, None, PRODUCER, get_clock(UUID_B), Flags.CONTINUE_TXN)
    moved = dataclasses.replace(env, begin=5)
    assert (moved.begin, moved.uuid) == (5, UUID_B)
    assert Envelope("j", 0, 1, {}).uuid is None
    with pytest.raises(ValueError, match="not the given"):
        Envelope("j", 0, 1, {}, UUID_B, PRODUCER, 1, 0)
