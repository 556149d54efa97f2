"""UUID layout vectors of reference 6.1, computed by hand (not by the code under test).

Each vector is (producer, clock, flags) and the 16 UUID bytes written out in hex; the comments show
the arithmetic. Checked both ways, against uuid.UUID(fields=...) and against the reference's own
extraction formula, plus the Clock, epoch and ProducerID facts of 6.1.
"""

from __future__ import annotations

import uuid as std_uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.message.envelope import Envelope
from gazette.message.framing import split_uuid_text
from gazette.message.uuid import (
    CLOCK_TICK,
    GREGORIAN_OFFSET_100NS,
    Clock,
    Flags,
    build_uuid,
    clock_from_unix_ns,
    clock_to_unix_ns,
    get_clock,
    get_flags,
    get_producer_id,
    new_producer_id,
)

# (producer, clock, flags, canonical UUID)
VECTORS = [
    # clock 0x0123456789ABCDEF: timestamp = clock >> 4 = 0x0123456789ABCDE, sequence = 0xF.
    #   bytes 0..3 = timestamp & 0xFFFFFFFF          = 78 9a bc de
    #   bytes 4..5 = (timestamp >> 32) & 0xFFFF      = 34 56
    #   bytes 6..7 = (timestamp >> 48) | 0x1000      = 0x012 | 0x1000 = 10 12
    #   bytes 8..9 = 0x8000 | 0xF << 10 | 0x001      = 0x8000 | 0x3C00 | 0x1 = bc 01
    (
        bytes.fromhex("010203040506"),
        0x0123456789ABCDEF,
        Flags.CONTINUE_TXN,
        "789abcde-3456-1012-bc01-010203040506",
    ),
    # All ones: timestamp 0xFFFFFFFFFFFFFFF, sequence 0xF, flags 0x3FF:
    #   ff ff ff ff | ff ff | 0xFFF | 0x1000 = 1f ff | 0x8000 | 0x3C00 | 0x3FF = bf ff
    (b"\xff" * 6, (1 << 64) - 1, 0x3FF, "ffffffff-ffff-1fff-bfff-ffffffffffff"),
    # Zero clock and flags: only the version nibble and the variant bits are set.
    (bytes.fromhex("010000000000"), 0, Flags.OUTSIDE_TXN, "00000000-0000-1000-8000-010000000000"),
    # Reference 6.2's example UUID, read backwards:
    #   timestamp = 0x1e9 << 48 | 0xf9b7 << 32 | 0x0d2b9119 = 0x1E9F9B70D2B9119
    #   0x9002 = 0b10_0100_0000000010: variant 10, sequence 0b0100 = 4, flags 0x002 = ACK_TXN
    #   clock = 0x1E9F9B70D2B9119 << 4 | 4 = 0x1E9F9B70D2B91194
    (
        bytes.fromhex("6fb7f64cdd31"),
        0x1E9F9B70D2B91194,
        Flags.ACK_TXN,
        "0d2b9119-f9b7-11e9-9002-6fb7f64cdd31",
    ),
]

# (60-bit timestamp, clock_seq = sequence << 10 | flags) of each vector, as uuid.UUID names them.
FIELDS = [
    (0x0123456789ABCDE, 0xF << 10 | 0x001),
    (0xFFFFFFFFFFFFFFF, 0x3FFF),
    (0, 0),
    (0x1E9F9B70D2B9119, 4 << 10 | 0x002),
]


@pytest.mark.parametrize(("producer", "clock", "flags", "text"), VECTORS)
def test_build_gives_the_hand_computed_bytes(producer: bytes, clock: int, flags: int, text: str) -> None:
    u = build_uuid(producer, clock, flags)
    assert u.bytes == bytes.fromhex(text.replace("-", ""))
    assert str(u) == text


@pytest.mark.parametrize(("producer", "clock", "flags", "text"), VECTORS)
def test_hand_computed_bytes_split_back(producer: bytes, clock: int, flags: int, text: str) -> None:
    u = std_uuid.UUID(text)
    assert (get_producer_id(u), get_clock(u), get_flags(u)) == (producer, clock, flags)
    # The framings' string parser and Envelope's split agree with the uuid.UUID path.
    assert split_uuid_text(text) == (producer, clock, flags)
    assert split_uuid_text(text.upper()) == (producer, clock, flags)
    env = Envelope("j", 0, 1, {}, u)
    assert (env.producer, env.clock, env.flags, env.uuid) == (producer, clock, flags, u)
    assert Envelope("j", 0, 1, {}, None, producer, clock, flags).uuid == u


@pytest.mark.parametrize(("vector", "fields"), list(zip(VECTORS, FIELDS, strict=True)))
def test_standard_library_reads_the_same_fields(vector: tuple, fields: tuple[int, int]) -> None:
    producer, clock, flags, text = vector
    timestamp, clock_seq = fields
    u = build_uuid(producer, clock, flags)
    assert u.version == 1
    assert u.variant == std_uuid.RFC_4122
    assert u.time == timestamp == clock >> 4
    assert u.clock_seq == clock_seq
    assert u.node == int.from_bytes(producer, "big")
    by_fields = std_uuid.UUID(
        fields=(
            timestamp & 0xFFFFFFFF,
            (timestamp >> 32) & 0xFFFF,
            (timestamp >> 48) | 0x1000,
            0x80 | clock_seq >> 8,
            clock_seq & 0xFF,
            int.from_bytes(producer, "big"),
        )
    )
    assert by_fields == u


def reference_extraction(raw: bytes) -> tuple[int, int, bytes]:
    """Reference 6.1's extraction, literally: the version nibble falls off the top of 64 bits."""
    clock = (
        (int.from_bytes(raw[0:4], "big") << 4)
        | (int.from_bytes(raw[4:6], "big") << 36)
        | (int.from_bytes(raw[6:8], "big") << 52)
    ) & ((1 << 64) - 1)
    clock |= (raw[8] >> 2) & 0xF
    return clock, int.from_bytes(raw[8:10], "big") & 0x3FF, raw[10:16]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    producer=st.binary(min_size=6, max_size=6),
    clock=st.integers(0, (1 << 64) - 1),
    flags=st.integers(0, 0x3FF),
)
def test_reference_formula_agrees(producer: bytes, clock: int, flags: int) -> None:
    u = build_uuid(producer, clock, flags)
    assert reference_extraction(u.bytes) == (clock, flags, producer)
    assert split_uuid_text(str(u)) == (producer, clock, flags)
    assert u.version == 1 and u.variant == std_uuid.RFC_4122


def test_epoch_offset_and_wall_times() -> None:
    # 0x01B21DD213814000 hundred-ns units = 12,219,292,800 s between 1582-10-15 and 1970-01-01.
    assert GREGORIAN_OFFSET_100NS == 0x01B21DD213814000 == 122_192_928_000_000_000
    assert clock_from_unix_ns(0) == 0x01B21DD213814000 << 4
    # 2000-01-01T00:00:00Z = 946,684,800 s = 9,466,848,000,000,000 hundred-ns after 1970;
    # plus the offset: 131,659,776,000,000,000.
    assert clock_from_unix_ns(946_684_800 * 10**9) == 131_659_776_000_000_000 << 4
    # The reference UUID's timestamp 0x1E9F9B70D2B9119 - 0x01B21DD213814000 = 0x37DBE4F9AA5119
    # = 15,722,900,206,801,177 hundred-ns = 2019-10-28T19:13:40.6801177Z.
    unix_ns = 1_572_290_020_680_117_700
    assert clock_from_unix_ns(unix_ns) == 0x1E9F9B70D2B9119 << 4
    assert clock_to_unix_ns(0x1E9F9B70D2B91194) == unix_ns  # the sequence counter is below 100 ns
    # Sub-100ns parts are dropped, not rounded.
    assert clock_from_unix_ns(unix_ns + 99) == 0x1E9F9B70D2B9119 << 4


def test_clock_tick_is_one_microsecond_and_update_never_goes_back() -> None:
    assert CLOCK_TICK == 160  # 10 x 100 ns = 1 us, shifted past the 4-bit sequence counter
    c = Clock(1000)
    assert c.tick() == 1160
    assert c.tick() == 1320
    c.update(500)
    assert c.value == 1320
    c.update(1320)
    assert c.value == 1320
    c.update(5000)
    assert c.value == 5000
    assert c.tick() == 5160
    # One tick moves the UUID's timestamp by 10 (100 ns units) and leaves the sequence alone.
    u1, u2 = build_uuid(b"\x01" * 6, 5000, 0), build_uuid(b"\x01" * 6, 5160, 0)
    assert u2.time - u1.time == 10 and u1.clock_seq == u2.clock_seq


def test_now_clock_is_near_wall_time() -> None:
    import time

    before = time.time_ns()
    c = Clock.now()
    after = time.time_ns()
    assert before // 100 * 100 <= clock_to_unix_ns(c.value) <= after


def test_producer_ids_have_the_multicast_bit() -> None:
    ids = {new_producer_id() for _ in range(200)}
    assert len(ids) == 200
    for pid in ids:
        assert len(pid) == 6
        assert pid[0] & 0x01 == 0x01
        # ... which uuid.UUID sees as the multicast bit of the node (bit 40).
        assert build_uuid(pid, 1 << 4, 0).node >> 40 & 1 == 1


@pytest.mark.parametrize(
    "text",
    [
        "0d2b9119-f9b7-41e9-9002-6fb7f64cdd31",  # version 4
        "0d2b9119-f9b7-11e9-c002-6fb7f64cdd31",  # variant 110 (Microsoft)
        "0d2b9119-f9b7-11e9-1002-6fb7f64cdd31",  # variant 0 (NCS)
        "{0d2b9119-f9b7-11e9-9002-6fb7f64cdd31}",
        "urn:uuid:0d2b9119-f9b7-11e9-9002-6fb7f64cdd31",
        "0d2b9119f9b711e990026fb7f64cdd31",
        "0d2b9119-f9b7-11e9-9002-6fb7f64cdd3",
        "0d2b9119-f9b7-11e9-9002-6fb7f64cdd311",
        "0d2b9119-f9b7-11e9-9002-6fb7f64cdd3g",
        "0d2b9119-f9b7-11e9-9002-6fb7f64c d31",
        "0d2b9119-f9b7-11e9-9002-6fb7f64c_d31",
        "0x2b9119-f9b7-11e9-9002-6fb7f64cdd31",
        "0d2b9119-f9b7-11e9-9002-6fb7f64cdd\u0663\u0661",  # Arabic-Indic digits
        "0d2b9119_f9b7-11e9-9002-6fb7f64cdd31",
        "",
    ],
)
def test_non_canonical_or_non_v1_strings_are_refused(text: str) -> None:
    assert split_uuid_text(text) is None


def test_get_functions_refuse_other_versions() -> None:
    with pytest.raises(ValueError, match="not an RFC 4122 version-1 UUID"):
        get_clock(std_uuid.UUID("0d2b9119-f9b7-41e9-9002-6fb7f64cdd31"))
    with pytest.raises(ValueError, match="producer id"):
        build_uuid(b"\x01" * 5, 0, 0)
    with pytest.raises(ValueError, match="10 bits"):
        build_uuid(b"\x01" * 6, 0, 0x400)
    with pytest.raises(ValueError, match="64-bit"):
        build_uuid(b"\x01" * 6, 1 << 64, 0)
