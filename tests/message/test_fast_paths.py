"""The publisher's and the JSON decoder's fast paths against the general ones they stand in for.

JSONFraming's spliced encoding (encode and encode_uuid_text) must give byte for byte what encoding a
copy of the message with the UUID member added gives; UUIDText must give str(build_uuid(...)); the
decoder's memoized UUID splitter must agree with split_uuid_text on any string, valid or not.
"""

from __future__ import annotations

import copy
import string
import uuid as std_uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.message.framing import FramingError, JSONFraming
from gazette.message.framing.base import split_uuid_text
from gazette.message.framing.json_lines import UUID_TAIL_MEMO_ENTRIES, _UUIDTextSplitter, _with_member
from gazette.message.uuid import UUID_TEXT_MEMO_ENTRIES, UUIDText, build_uuid, new_producer_id

POINTERS = ["/_meta/uuid", "/UUID", "/a~1b/c~0d", "/x/y/z", "/_meta"]
keys = st.sampled_from(["word", "count", "_meta", "UUID", "a/b", "x", "y", "é", 'q"uote']) | st.text(
    max_size=6
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)
messages = st.dictionaries(keys, json_values, max_size=5)
uuids = st.builds(
    build_uuid,
    st.binary(min_size=6, max_size=6),
    st.integers(0, 2**64 - 1),
    st.integers(0, 0x3FF),
)


def general_encode(framing: JSONFraming, message: Any, uuid: std_uuid.UUID) -> bytes:
    """The general path: a copy of the message with the UUID at the pointer, then orjson."""
    doc = _with_member(message, framing._tokens, uuid, framing.uuid_pointer)
    return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(POINTERS), messages, uuids)
def test_spliced_frames_equal_the_general_path(
    pointer: str, message: dict[str, Any], u: std_uuid.UUID
) -> None:
    framing = JSONFraming(uuid_pointer=pointer)
    before = copy.deepcopy(message)
    try:
        expected = general_encode(framing, message, u)
    except FramingError as exc:  # e.g. "/x/y/z" where the message holds a non-object at /x
        with pytest.raises(FramingError, match="cannot write the UUID"):
            framing.encode(message, u)
        with pytest.raises(FramingError, match="cannot write the UUID"):
            framing.encode_uuid_text(message, str(u))
        assert "cannot write the UUID" in str(exc)
    else:
        assert framing.encode(message, u) == expected
        assert framing.encode_uuid_text(message, str(u)) == expected
        decoded = framing.decoder("j", 0).feed(expected)
        assert [e.uuid for e in decoded] == [u]
    assert message == before  # never mutated


@pytest.mark.parametrize("pointer", POINTERS)
def test_splice_shapes(pointer: str) -> None:
    """The splice's edge cases: an empty message, the pointer's top member present (general path)."""
    framing = JSONFraming(uuid_pointer=pointer)
    u = build_uuid(bytes.fromhex("0b0000000001"), 0x1E9F9B70D2B91190, 1)
    top = framing._tokens[0]
    for message in ({}, {"w": 1}, {top: None}, {top: {}}, {top: {"other": [1, 2]}}, {"w": {top: 1}}):
        expected = general_encode(framing, message, u)
        assert framing.encode(message, u) == expected, message
        assert framing.encode_uuid_text(message, str(u)) == expected, message
    assert JSONFraming().encode_uuid_text({"word": "a"}, str(u)) == (
        b'{"word":"a","_meta":{"uuid":"' + str(u).encode() + b'"}}\n'
    )


def test_splice_refuses_what_the_general_path_refuses() -> None:
    framing = JSONFraming()
    u = build_uuid(bytes.fromhex("0b0000000001"), 0x1E9F9B70D2B91190, 1)
    for bad in ({1: "int key"}, {"x": object()}, {"n": 2**64}):
        with pytest.raises(FramingError, match="cannot encode message as JSON"):
            framing.encode(bad, u)
        with pytest.raises(FramingError, match="cannot encode message as JSON"):
            framing.encode_uuid_text(bad, str(u))
    for not_a_dict in ([1, 2], "text", None):
        with pytest.raises(FramingError, match="not a dict"):
            framing.encode_uuid_text(not_a_dict, str(u))


# --- UUIDText ---------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    st.binary(min_size=6, max_size=6),
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 0x3FF)), max_size=8),
)
def test_uuid_text_equals_build_uuid(producer: bytes, stamps: list[tuple[int, int]]) -> None:
    text = UUIDText(producer).text
    for clock, flags in stamps:
        assert text(clock, flags) == str(build_uuid(producer, clock, flags))
        tick = clock + 160 if clock + 160 < 2**64 else clock - 160  # next tick: served from the memo
        assert text(tick, flags) == str(build_uuid(producer, tick, flags))


def test_uuid_text_refuses_bad_fields_even_when_their_key_is_memoized() -> None:
    pid = new_producer_id()
    text = UUIDText(pid).text
    clock = 0x1E9F9B70D2B91190
    text(clock, 1)  # memoizes the key of (clock, 1), which (clock + 2**64, 0) would share
    with pytest.raises(ValueError, match="not an unsigned 64-bit value"):
        text(clock + 2**64, 0)
    with pytest.raises(ValueError, match="not an unsigned 64-bit value"):
        text(-clock, 1)
    with pytest.raises(ValueError, match="do not fit in 10 bits"):
        text(clock, 0x400)
    with pytest.raises(ValueError, match="do not fit in 10 bits"):
        text(clock, -1)
    with pytest.raises(ValueError, match="is not 6 bytes"):
        UUIDText(b"short")


def test_uuid_text_memo_stays_bounded() -> None:
    pid = new_producer_id()
    t = UUIDText(pid)
    for i in range(UUID_TEXT_MEMO_ENTRIES * 2 + 5):
        clock = i << 36  # a new time_mid each: a new memo key
        assert t.text(clock, 2) == str(build_uuid(pid, clock, 2))
    assert 0 < len(t._rest) <= UUID_TEXT_MEMO_ENTRIES


# --- the publisher's batch path: UUIDText.runs and JSONFraming.encode_uuid_runs --------------------

# Clocks near a time_low wrap (clock bits 4..35 all ones) as well as anywhere.
batch_clocks = st.integers(0, 2**64 - 1 - 64 * 160) | st.builds(
    lambda hi, back, low: (hi << 36 | (0xFFFFFFFF << 4)) - back * 160 + low,
    st.integers(1, 2**27),
    st.integers(0, 40),
    st.integers(0, 15),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=6, max_size=6), batch_clocks, st.integers(0, 40), st.integers(0, 0x3FF))
def test_uuid_text_runs_are_the_texts_of_each_tick(
    producer: bytes, clock: int, count: int, flags: int
) -> None:
    runs = UUIDText(producer).runs(clock, count, flags)
    texts = [f"{tl:08x}{rest}" for lows, rest in runs for tl in lows]
    assert texts == [str(build_uuid(producer, clock + i * 160, flags)) for i in range(count)]
    assert len(runs) <= 2  # 40 ticks cross at most one time_low wrap
    if count and (clock >> 4) & 0xFFFFFFFF > 0xFFFFFFFF - 10 * (count - 1):
        assert len(runs) == 2  # they crossed one here


def test_uuid_text_runs_refuse_a_last_tick_out_of_range() -> None:
    t = UUIDText(new_producer_id())
    with pytest.raises(ValueError, match="not an unsigned 64-bit value"):
        t.runs(2**64 - 200, 3, 2)
    with pytest.raises(ValueError, match="do not fit in 10 bits"):
        t.runs(1 << 40, 3, 0x400)
    assert t.runs(1 << 40, 0, 2) == []


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(POINTERS), st.lists(messages, max_size=6), batch_clocks, st.booleans())
def test_batch_frames_equal_each_message_framed_alone(
    pointer: str, batch: list[dict[str, Any]], clock: int, plain: bool
) -> None:
    framing = JSONFraming(uuid_pointer=pointer)
    if plain:  # the fast path's messages: non-empty dicts without the pointer's top member
        batch = [{k: v for k, v in m.items() if k != framing._tokens[0]} or {"w": 1} for m in batch]
    producer = new_producer_id()
    runs = UUIDText(producer).runs(clock, len(batch), 1)
    before = copy.deepcopy(batch)
    try:
        expected = b"".join(
            framing.encode_uuid_text(m, str(build_uuid(producer, clock + i * 160, 1)))
            for i, m in enumerate(batch)
        )
    except FramingError as exc:
        with pytest.raises(FramingError, match=str(exc).split(":")[0]):
            framing.encode_uuid_runs(batch, runs)
    else:
        assert framing.encode_uuid_runs(batch, runs) == expected
    assert batch == before


def test_batch_frames_refuse_what_framing_alone_refuses() -> None:
    framing = JSONFraming()
    runs = UUIDText(new_producer_id()).runs(1 << 40, 2, 1)
    with pytest.raises(FramingError, match="cannot encode message as JSON"):
        framing.encode_uuid_runs([{"n": 1}, {"x": object()}], runs)
    with pytest.raises(FramingError, match="not a dict"):
        framing.encode_uuid_runs([{"n": 1}, [1, 2]], runs)
    with pytest.raises(ValueError, match="2 UUID texts for 3 messages"):
        framing.encode_uuid_runs([{"n": 1}] * 3, runs)


# --- the decoder's memoized UUID splitter -----------------------------------------------------------

hexdigits = st.sampled_from("0123456789abcdefABCDEF")
noise = st.sampled_from(" \t\n-+_gG0x٣") | hexdigits


@st.composite
def uuid_texts(draw: st.DrawFn) -> str:
    """Valid canonical texts, some with a character or two replaced (whitespace, signs, non-hex...)."""
    u = draw(uuids)
    text = list(str(u) if draw(st.booleans()) else str(u).upper())
    for _ in range(draw(st.integers(0, 2))):
        text[draw(st.integers(0, len(text) - 1))] = draw(noise)
    return "".join(text)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(uuid_texts() | st.text(alphabet=string.hexdigits + "- ", min_size=30, max_size=40), max_size=6)
)
def test_memoized_split_equals_split_uuid_text(texts: list[str]) -> None:
    split = _UUIDTextSplitter().split
    for text in texts + texts:  # the second pass hits the memo
        assert split(text) == split_uuid_text(text), text


def test_memoized_split_of_successive_ticks_and_its_bound() -> None:
    pid = new_producer_id()
    s = _UUIDTextSplitter()
    clock = 0x1E9F9B70D2B91193
    for i in range(3 * UUID_TAIL_MEMO_ENTRIES):
        c = clock + i * (160 << 20)  # moves time_mid too, so the memo keeps growing
        text = str(build_uuid(pid, c, i % 3))
        assert s.split(text) == (pid, c, i % 3)
    assert 0 < len(s._tails) <= UUID_TAIL_MEMO_ENTRIES
    garbage = _UUIDTextSplitter()
    for i in range(100):
        assert garbage.split(f"{i:08x}-0000-0000-0000-000000000000") is None  # version 0: invalid
    assert not garbage._tails  # invalid tails are not memoized
