"""Message UUIDs: RFC 4122 version-1 UUIDs that carry a producer id, a clock and txn flags.

Byte layout (docs/semantics.md#message-uuids; Gazette's `message/uuid.go`): bytes 0..7 hold the 60-bit
timestamp of the clock with the version nibble, bytes 8..9 the variant bits, the clock's 4-bit sequence
counter and 10 flag bits, bytes 10..15 the producer id. `UUID` is the standard `uuid.UUID`.
"""

from __future__ import annotations

import enum
import os
import threading
import time
import uuid as _uuid

from gazette.protocol.errors import ValidationError

UUID = _uuid.UUID

# 100 ns intervals between the Gregorian epoch (1582-10-15) and the Unix epoch.
GREGORIAN_OFFSET_100NS = 0x01B21DD213814000
CLOCK_TICK = 160  # one microsecond: 10 x 100 ns, shifted past the 4-bit sequence counter
FLAGS_MASK = 0x3FF
PRODUCER_ID_BYTES = 6
UUID_TEXT_MEMO_ENTRIES = 1024  # UUIDText forgets its memo when it holds this many
_TIME_LOW_CLOCK_BITS = 0xFFFFFFFF << 4  # the clock bits that are the UUID's time_low (text 0..7)


class Flags(enum.IntEnum):
    """Transaction flags of a message (the low 10 bits of UUID bytes 8..9)."""

    OUTSIDE_TXN = 0x0  # commits itself
    CONTINUE_TXN = 0x1  # pending until an ACK_TXN of the same producer commits or rolls it back
    ACK_TXN = 0x2  # commits this producer's pending messages with clock <= its own


def new_producer_id() -> bytes:
    """Six random bytes with the multicast bit set, so they can never be a real MAC address."""
    pid = bytearray(os.urandom(PRODUCER_ID_BYTES))
    pid[0] |= 0x01
    return bytes(pid)


def _check_producer(producer_id: bytes) -> bytes:
    if not isinstance(producer_id, (bytes, bytearray)) or len(producer_id) != PRODUCER_ID_BYTES:
        raise ValidationError(f"producer id {producer_id!r} is not {PRODUCER_ID_BYTES} bytes")
    return bytes(producer_id)


def build_uuid(producer_id: bytes, clock: int, flags: int) -> UUID:
    """Builds the v1 UUID of (producer, clock, flags); raises ValueError naming a bad field."""
    pid = _check_producer(producer_id)
    if not 0 <= clock < 1 << 64:
        raise ValidationError(f"clock {clock} is not an unsigned 64-bit value")
    if not 0 <= flags <= FLAGS_MASK:
        raise ValidationError(f"flags {flags:#x} do not fit in 10 bits (max {FLAGS_MASK:#x})")
    ts = clock >> 4
    time_low = ts & 0xFFFFFFFF
    time_mid = (ts >> 32) & 0xFFFF
    time_hi_version = ((ts >> 48) & 0x0FFF) | 0x1000
    seq_flags = 0x8000 | ((clock & 0xF) << 10) | flags
    raw = (
        time_low.to_bytes(4, "big")
        + time_mid.to_bytes(2, "big")
        + time_hi_version.to_bytes(2, "big")
        + seq_flags.to_bytes(2, "big")
        + pid
    )
    return UUID(bytes=raw)


class UUIDText:
    """The canonical text of one producer's UUIDs, `str(build_uuid(producer_id, clock, flags))`,
    built without a UUID object (the publisher's per-message path, for text framings).

    Successive ticks of a clock change only the first 8 hex digits (time_low: one wraps every
    ~7 minutes), so the other 28 characters (time_mid, time_hi, sequence and flags, producer) are
    memoized per (clock without time_low, flags); a miss builds them with `build_uuid`.
    """

    __slots__ = ("producer_id", "_rest")

    def __init__(self, producer_id: bytes) -> None:
        self.producer_id = _check_producer(producer_id)
        self._rest: dict[int, str] = {}

    def text(self, clock: int, flags: int) -> str:
        """The text of (clock, flags); ValueError naming a clock or flags out of range."""
        key = clock & ~_TIME_LOW_CLOCK_BITS | flags << 64
        rest = self._rest.get(key)
        # A clock outside 64 bits could share a key with another (clock, flags): build_uuid refuses it.
        if rest is None or clock >> 64:
            rest = str(build_uuid(self.producer_id, clock, flags))[8:]  # validates clock and flags
            if len(self._rest) >= UUID_TEXT_MEMO_ENTRIES:
                self._rest.clear()
            self._rest[key] = rest
        return "%08x" % ((clock >> 4) & 0xFFFFFFFF) + rest

    def runs(self, clock: int, count: int, flags: int) -> list[tuple[range, str]]:
        """The texts of `count` ticks from `clock` (CLOCK_TICK apart, as `Clock.tick_many` hands them
        out) as runs: each a range of time_low values (the first 8 hex digits) and the 28 characters
        they share, in tick order. One run unless time_low wraps within the ticks. The text of each
        tick is `"%08x" % time_low + rest`, equal to `text(tick, flags)`; ValueError as `text`."""
        if count < 1:
            return []
        self.text(clock + (count - 1) * CLOCK_TICK, flags)  # validates the last tick (and flags)
        step = CLOCK_TICK >> 4  # time_low units per tick
        out: list[tuple[range, str]] = []
        while count:
            time_low = (clock >> 4) & 0xFFFFFFFF
            n = min(count, -(-(0x100000000 - time_low) // step))  # ticks before time_low wraps
            out.append((range(time_low, time_low + n * step, step), self.text(clock, flags)[8:]))
            clock += n * CLOCK_TICK
            count -= n
        return out


def _check_v1(u: UUID) -> bytes:
    raw = u.bytes
    if raw[6] >> 4 != 1 or raw[8] & 0xC0 != 0x80:
        raise ValidationError(f"UUID {u} is not an RFC 4122 version-1 UUID (version {raw[6] >> 4})")
    return raw


def get_clock(u: UUID) -> int:
    """The message clock: 60-bit timestamp << 4 | the 4-bit sequence counter."""
    raw = _check_v1(u)
    ts = (
        int.from_bytes(raw[0:4], "big")
        | int.from_bytes(raw[4:6], "big") << 32
        | (int.from_bytes(raw[6:8], "big") & 0x0FFF) << 48
    )
    return ts << 4 | (raw[8] >> 2) & 0xF


def get_flags(u: UUID) -> int:
    """The 10 flag bits; values other than Flags' are possible (readers treat them as OUTSIDE)."""
    return int.from_bytes(_check_v1(u)[8:10], "big") & FLAGS_MASK


def get_producer_id(u: UUID) -> bytes:
    return _check_v1(u)[10:16]


def clock_from_unix_ns(ns: int) -> int:
    """The clock of a wall time (sequence counter 0)."""
    return (ns // 100 + GREGORIAN_OFFSET_100NS) << 4


def clock_to_unix_ns(clock: int) -> int:
    return ((clock >> 4) - GREGORIAN_OFFSET_100NS) * 100


class Clock:
    """A producer's monotonic clock. `tick()` adds one microsecond (+160, so at most one million
    messages a second per producer); `update(t)` only ever moves it forward
    (docs/semantics.md#message-uuids)."""

    def __init__(self, value: int = 0) -> None:
        self._value = value
        self._lock = threading.Lock()

    @classmethod
    def now(cls) -> Clock:
        return cls(clock_from_unix_ns(time.time_ns()))

    @property
    def value(self) -> int:
        return self._value

    def tick(self) -> int:
        with self._lock:
            self._value += CLOCK_TICK
            return self._value

    def tick_many(self, n: int) -> int:
        """`n` ticks at once (n >= 1): returns the first of them; the others follow it one
        CLOCK_TICK apart, the last being the clock's new value."""
        with self._lock:
            first = self._value + CLOCK_TICK
            self._value += n * CLOCK_TICK
            return first

    def update(self, clock: int) -> None:
        with self._lock:
            if clock > self._value:
                self._value = clock

    def update_to_now(self) -> None:
        self.update(clock_from_unix_ns(time.time_ns()))

    def __repr__(self) -> str:
        return f"Clock({self._value})"
