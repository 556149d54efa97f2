"""The Framing and Decoder interfaces shared by every framing, FramingError, and UUID text parsing.

A Framing turns one message plus its UUID into one whole frame and builds Decoders; a Decoder turns
journal bytes into Envelopes with exact [begin, end) offsets and never consumes past the last whole
frame (docs/semantics.md#framings: offsets are derived from the buffered position). Imports only
gazette.message, and the error family of gazette.protocol.
"""

from __future__ import annotations

import abc
import logging
import struct
from typing import Any

from gazette.message.envelope import Envelope
from gazette.message.uuid import UUID, Flags
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

log = logging.getLogger(__name__)

UUID_TEXT_CHARS = 36  # canonical form 8-4-4-4-12
MAX_KNOWN_FLAG = max(Flags)  # flags above are unknown (docs/semantics.md#message-uuids)
_fromhex = bytes.fromhex
_unpack_uuid = struct.Struct(">IHHBB6s").unpack  # time_low, time_mid, time_hi_version, seq+flags, producer


class FramingError(GazetteError, ValueError):
    """A frame that cannot be encoded or decoded (a GazetteError whose status is Status.OK; also a
    ValueError). Decode errors name the journal and the frame's [begin, end) offsets; `envelopes`
    holds the whole frames decoded before it in the same feed()."""

    def __init__(
        self,
        message: str,
        *,
        journal: str | None = None,
        begin: int | None = None,
        end: int | None = None,
    ) -> None:
        super().__init__(Status.OK, message)
        self.journal = journal
        self.begin = begin
        self.end = end
        self.envelopes: list[Envelope] = []


def split_uuid_text(text: str) -> tuple[bytes, int, int] | None:
    """(producer, clock, flags) of a canonical RFC 4122 version-1 UUID string, or None when `text`
    is not one. Equal to get_producer_id/get_clock/get_flags of uuid.UUID(text), without building it."""
    if len(text) != UUID_TEXT_CHARS or text[8:24:5] != "----":  # dashes at 8, 13, 18 and 23
        return None
    try:
        # fromhex skips whitespace, so 32 characters may hold fewer than 16 bytes: unpack refuses.
        time_low, time_mid, time_hi_version, b8, b9, producer = _unpack_uuid(_fromhex(text.replace("-", "")))
    except (ValueError, struct.error):
        return None
    if time_hi_version >> 12 != 1 or b8 & 0xC0 != 0x80:
        return None
    clock = ((((time_hi_version & 0xFFF) << 48) | (time_mid << 32) | time_low) << 4) | ((b8 >> 2) & 0xF)
    return producer, clock, ((b8 << 8) | b9) & 0x3FF


class Decoder(abc.ABC):
    """Decodes one journal's bytes from a starting offset. Not thread-safe.

    feed(data) returns the whole frames completed by `data` and keeps an incomplete tail buffered.
    On a bad frame it raises FramingError after moving past that frame: the error's `envelopes` are
    the frames decoded before it, the rest of `data` stays buffered, and feed(b"") continues.
    """

    def __init__(self, journal: str, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"decoder offset {offset} of journal {journal!r} is negative")
        self.journal = journal
        self._buf = bytearray()
        self._offset = offset  # journal offset of _buf[0]
        self._warned_producers: set[bytes] = set()
        self.skipped: list[tuple[int, int]] = []  # [begin, end) ranges of garbage skipped

    @property
    def offset(self) -> int:
        """Journal offset of the next undecoded byte (the first buffered byte, if any)."""
        return self._offset

    @property
    def buffered(self) -> int:
        """Bytes held: the start of a frame whose end hasn't been fed yet."""
        return len(self._buf)

    @abc.abstractmethod
    def feed(self, data: bytes) -> list[Envelope]:
        """Every whole frame completed by `data` (after what was buffered), in journal order."""

    def close(self) -> None:
        """Checks that the journal ended on a frame boundary; FramingError if a frame was cut off."""
        if self._buf:
            raise self._truncated()

    finish = close

    def _truncated(self) -> FramingError:
        end = self._offset + len(self._buf)
        return FramingError(
            f"journal {self.journal!r} ends inside a frame: bytes [{self._offset}, {end}) "
            f"are a truncated frame ({bytes(self._buf[:32])!r}...)",
            journal=self.journal,
            begin=self._offset,
            end=end,
        )

    def _uuid_fields(self, value: Any, begin: int, end: int) -> tuple[bytes, int, int]:
        """(producer, clock, flags) of a UUID value found in a message; ("", 0, 0) when absent."""
        if value is None or value == "":
            return b"", 0, Flags.OUTSIDE_TXN
        fields = split_uuid_text(value) if isinstance(value, str) else None
        if fields is None:
            raise FramingError(
                f"message at [{begin}, {end}) of journal {self.journal!r} has UUID {value!r}, "
                "which is not a canonical RFC 4122 version-1 UUID string",
                journal=self.journal,
                begin=begin,
                end=end,
            )
        if fields[2] > MAX_KNOWN_FLAG:
            self._warn_flags(fields[0], fields[2], begin)
        return fields

    def _warn_flags(self, producer: bytes, flags: int, begin: int) -> None:
        if producer in self._warned_producers:
            return
        self._warned_producers.add(producer)
        log.warning(
            "journal %r offset %d: producer %s uses unknown UUID flags %#x; "
            "delivered as they are (the Sequencer treats them as OUTSIDE_TXN)",
            self.journal,
            begin,
            producer.hex(),
            flags,
        )


class Framing(abc.ABC):
    """How messages of one content type are laid out in a journal."""

    content_type: str

    @abc.abstractmethod
    def encode(self, message: Any, uuid: UUID) -> bytes:
        """One whole frame of `message` with `uuid` written at this framing's place. Does not
        mutate `message`."""

    @abc.abstractmethod
    def encode_ack(self, uuid: UUID, like: Any = None) -> bytes:
        """The frame of an ACK message: an empty message holding only `uuid` (shaped like `like`
        where the framing needs a shape)."""

    @abc.abstractmethod
    def decoder(self, journal: str, offset: int) -> Decoder:
        """A Decoder of `journal`'s bytes starting at `offset` (which must be a frame boundary)."""
