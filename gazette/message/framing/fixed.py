"""Fixed protobuf framing (`application/x-protobuf-fixed`, docs/semantics.md#framings): magic `66 33 93 36`, a
uint32 little-endian payload length, then the payload.

With `message_type` (a protobuf message class) payloads are parsed and the UUID is the canonical
string in its `uuid_field`; without it payloads are delivered as bytes carrying no UUID. After bytes
that don't start with the magic word the decoder scans to the next one and records what it skipped.
"""

from __future__ import annotations

import logging
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from gazette.message.envelope import Envelope
from gazette.message.framing.base import Decoder, Framing, FramingError
from gazette.message.uuid import UUID

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/x-protobuf-fixed"
MAGIC = b"\x66\x33\x93\x36"
HEADER_BYTES = 8  # magic + uint32 LE length
MAX_FRAME_BYTES = 64 << 20  # default payload limit: a larger length is corruption, not a message
_LENGTH_LIMIT = (1 << 32) - 1


def frame(payload: bytes) -> bytes:
    """The fixed frame of a raw payload: header + payload."""
    if len(payload) > _LENGTH_LIMIT:
        raise FramingError(f"payload of {len(payload)} bytes does not fit a uint32 frame length")
    return MAGIC + len(payload).to_bytes(4, "little") + payload


def _magic_prefix_tail(buf: bytes | bytearray) -> int:
    """Length of the longest tail of `buf` that could be the start of a magic word."""
    for k in (3, 2, 1):
        if buf.endswith(MAGIC[:k]):
            return k
    return 0


class FixedDecoder(Decoder):
    """Decodes fixed frames; see the module docstring. `skipped` lists the [begin, end) ranges of
    garbage skipped while looking for a magic word (contiguous pieces merged)."""

    def __init__(
        self,
        journal: str,
        offset: int,
        message_type: type[Message] | None,
        uuid_field: str,
        max_frame_bytes: int,
    ) -> None:
        super().__init__(journal, offset)
        self._message_type = message_type
        self._uuid_field = uuid_field
        self._max_frame_bytes = max_frame_bytes
        self._desync = False  # skipped[-1] is still growing (no magic word found after it yet)

    def feed(self, data: bytes) -> list[Envelope]:
        self._buf += data
        buf = self._buf
        n = len(buf)
        base = self._offset
        out: list[Envelope] = []
        pos = 0
        try:
            while n - pos >= len(MAGIC):
                if buf[pos : pos + 4] != MAGIC:
                    nxt = buf.find(MAGIC, pos + 1)
                    if nxt < 0:
                        nxt = n - _magic_prefix_tail(buf)
                    self._skip(base + pos, base + nxt)
                    pos = nxt
                    continue
                if self._desync:
                    self._end_desync()
                if n - pos < HEADER_BYTES:
                    break
                length = int.from_bytes(buf[pos + 4 : pos + 8], "little")
                end = pos + HEADER_BYTES + length
                if length > self._max_frame_bytes:
                    begin = pos
                    pos += HEADER_BYTES  # what follows is scanned as garbage
                    raise FramingError(
                        f"fixed frame at offset {base + begin} of journal {self.journal!r} claims "
                        f"{length} payload bytes, more than max_frame_bytes={self._max_frame_bytes}",
                        journal=self.journal,
                        begin=base + begin,
                        end=base + end,
                    )
                if end > n:
                    break
                begin = pos
                pos = end
                out.append(self._envelope(bytes(buf[begin + HEADER_BYTES : end]), base + begin, base + end))
        except FramingError as err:
            err.envelopes = out
            raise
        finally:
            del buf[:pos]
            self._offset = base + pos
        return out

    def close(self) -> None:
        """Tolerates a lone trailing b"\\n" (as Gazette does); trailing bytes that can't start a
        frame are skipped garbage; a cut-off frame raises FramingError."""
        buf = self._buf  # feed() leaves either < 4 bytes or a magic word here
        if buf and buf != b"\n" and not MAGIC.startswith(bytes(buf[:4])):
            self._skip(self._offset, self._offset + len(buf))
            self._offset += len(buf)
            buf.clear()
        if self._desync:
            self._end_desync()
        if buf and buf != b"\n":
            raise self._truncated()

    finish = close

    def _envelope(self, payload: bytes, begin: int, end: int) -> Envelope:
        if self._message_type is None:
            return Envelope(self.journal, begin, end, payload)
        try:
            msg = self._message_type.FromString(payload)
        except DecodeError as exc:
            raise FramingError(
                f"fixed frame at [{begin}, {end}) of journal {self.journal!r} is not a valid "
                f"{self._message_type.DESCRIPTOR.full_name}: {exc}",
                journal=self.journal,
                begin=begin,
                end=end,
            ) from None
        producer, clock, flags = self._uuid_fields(getattr(msg, self._uuid_field), begin, end)
        return Envelope(self.journal, begin, end, msg, None, producer, clock, flags)

    def _skip(self, begin: int, end: int) -> None:
        if self._desync and self.skipped[-1][1] == begin:
            self.skipped[-1] = (self.skipped[-1][0], end)
        else:
            self.skipped.append((begin, end))
        self._desync = True

    def _end_desync(self) -> None:
        self._desync = False
        begin, end = self.skipped[-1]
        log.warning(
            "journal %r: skipped %d bytes of garbage at [%d, %d) looking for a fixed-frame magic word",
            self.journal,
            end - begin,
            begin,
            end,
        )


class FixedFraming(Framing):
    """`application/x-protobuf-fixed`: protobuf messages of `message_type` (UUID string in
    `uuid_field`), or raw payload bytes without a UUID when `message_type` is None."""

    content_type = CONTENT_TYPE

    def __init__(
        self,
        *,
        message_type: type[Message] | None = None,
        uuid_field: str = "uuid",
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        if not 0 < max_frame_bytes <= _LENGTH_LIMIT:
            raise FramingError(f"max_frame_bytes={max_frame_bytes} is not in [1, {_LENGTH_LIMIT}]")
        if message_type is not None:
            if not (isinstance(message_type, type) and issubclass(message_type, Message)):
                raise FramingError(f"message_type {message_type!r} is not a protobuf message class")
            descriptor = message_type.DESCRIPTOR
            field = descriptor.fields_by_name.get(uuid_field)
            if field is None:
                raise FramingError(
                    f"message_type {descriptor.full_name} has no field {uuid_field!r} for the UUID"
                )
            if field.type != FieldDescriptor.TYPE_STRING or field.is_repeated:
                raise FramingError(
                    f"UUID field {descriptor.full_name}.{uuid_field} must be a singular string field"
                )
        self.message_type = message_type
        self.uuid_field = uuid_field
        self.max_frame_bytes = max_frame_bytes

    def encode(self, message: Any, uuid: UUID) -> bytes:
        """With message_type, a copy of `message` with the UUID set; without, `message` (bytes)
        framed as it is: raw payloads carry no UUID, so readers never deduplicate them."""
        if self.message_type is None:
            if not isinstance(message, (bytes, bytearray, memoryview)):
                raise FramingError(
                    f"fixed framing without message_type frames bytes, not a {type(message).__name__}"
                )
            return self._frame(bytes(message))
        if not isinstance(message, self.message_type):
            raise FramingError(
                f"message is a {type(message).__name__}, not this framing's {self.message_type.__name__}"
            )
        copy = self.message_type()
        copy.CopyFrom(message)
        setattr(copy, self.uuid_field, str(uuid))
        return self._frame(copy.SerializeToString())

    def encode_ack(self, uuid: UUID, like: Any = None) -> bytes:
        if self.message_type is None:
            raise FramingError(
                "fixed framing without message_type has no ACK message (payloads carry no UUID)"
            )
        return self._frame(self.message_type(**{self.uuid_field: str(uuid)}).SerializeToString())

    def decoder(self, journal: str, offset: int) -> FixedDecoder:
        return FixedDecoder(journal, offset, self.message_type, self.uuid_field, self.max_frame_bytes)

    def _frame(self, payload: bytes) -> bytes:
        if len(payload) > self.max_frame_bytes:
            raise FramingError(
                f"payload of {len(payload)} bytes exceeds max_frame_bytes={self.max_frame_bytes}"
            )
        return frame(payload)

    def __repr__(self) -> str:
        name = None if self.message_type is None else self.message_type.DESCRIPTOR.full_name
        return f"FixedFraming(message_type={name}, uuid_field={self.uuid_field!r})"
