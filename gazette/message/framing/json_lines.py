"""JSON-lines framing (`application/x-ndjson`): one JSON object per `\\n`-terminated line.

The UUID lives at an RFC 6901 JSON pointer (default `/_meta/uuid`, Estuary Flow's convention;
Gazette's Go examples use `/UUID`) as the canonical UUID string. Messages are dicts. Decoding is the
hot path of ReadCommitted: one bytes.find and one orjson.loads per line, no UUID object per message.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gazette.message.envelope import Envelope
from gazette.message.framing.base import MAX_KNOWN_FLAG, Decoder, Framing, FramingError, split_uuid_text
from gazette.message.uuid import UUID

CONTENT_TYPE = "application/x-ndjson"
DEFAULT_UUID_POINTER = "/_meta/uuid"
_BAD_ESCAPE = re.compile(r"~(?![01])")


def parse_json_pointer(pointer: str) -> tuple[str, ...]:
    """The reference tokens of an RFC 6901 pointer ("~1" is "/", "~0" is "~"). The pointer must
    name a member inside the message object, so "" (the whole document) is refused."""
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        raise FramingError(
            f"uuid_pointer {pointer!r} is not a JSON pointer to a member (must start with '/')"
        )
    if _BAD_ESCAPE.search(pointer):
        raise FramingError(f"uuid_pointer {pointer!r} has a '~' not followed by 0 or 1 (RFC 6901)")
    return tuple(tok.replace("~1", "/").replace("~0", "~") for tok in pointer[1:].split("/"))


def _with_member(message: Any, tokens: tuple[str, ...], value: Any, pointer: str) -> dict[str, Any]:
    """A copy of `message` with `value` at `tokens`: the objects along the path are copied (missing
    ones created), everything else is shared, so the caller's message is never mutated."""
    if not isinstance(message, dict):
        raise FramingError(f"JSON message is a {type(message).__name__}, not a dict (JSON object)")
    top = dict(message)
    node = top
    for i, tok in enumerate(tokens[:-1]):
        child = node.get(tok)
        if child is None:
            child = {}
        elif isinstance(child, dict):
            child = dict(child)
        else:
            at = "/" + "/".join(tokens[: i + 1])
            raise FramingError(
                f"cannot write the UUID at {pointer!r}: {at!r} holds a {type(child).__name__}, not an object"
            )
        node[tok] = child
        node = child
    node[tokens[-1]] = value
    return top


class JSONDecoder(Decoder):
    """Splits on b"\\n" and parses each line with orjson. Lines that aren't JSON objects, or whose
    UUID member isn't a version-1 UUID string, raise FramingError after the decoder moved past them."""

    def __init__(self, journal: str, offset: int, tokens: tuple[str, ...]) -> None:
        super().__init__(journal, offset)
        self._tokens = tokens
        self._scanned = 0  # bytes of _buf known to hold no newline

    def feed(self, data: bytes) -> list[Envelope]:
        if type(data) is not bytes:
            data = bytes(data)
        buf: bytes | bytearray
        if self._buf:
            self._buf += data
            buf = self._buf
            nl = buf.find(b"\n", self._scanned)
        else:
            buf = data
            nl = buf.find(b"\n")
        out: list[Envelope] = []
        pos = 0
        if nl >= 0:
            journal = self.journal
            base = self._offset
            tokens = self._tokens
            loads = orjson.loads
            uuid_fields = self._uuid_fields
            split = split_uuid_text
            try:
                while nl >= 0:
                    end = nl + 1
                    line = buf[pos:nl]
                    try:
                        msg = loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise FramingError(
                            f"invalid JSON at [{base + pos}, {base + end}) of journal {journal!r}: {exc}",
                            journal=journal,
                            begin=base + pos,
                            end=base + end,
                        ) from None
                    if type(msg) is not dict:
                        raise FramingError(
                            f"JSON line at [{base + pos}, {base + end}) of journal {journal!r} is a "
                            f"{type(msg).__name__}, not an object: {bytes(line[:64])!r}",
                            journal=journal,
                            begin=base + pos,
                            end=base + end,
                        )
                    value: Any = msg
                    for tok in tokens:
                        value = value.get(tok) if type(value) is dict else None
                    # The common case inline; uuid_fields handles absent, invalid and unknown-flag UUIDs.
                    fields = split(value) if type(value) is str else None
                    if fields is None or fields[2] > MAX_KNOWN_FLAG:
                        fields = uuid_fields(value, base + pos, base + end)
                    producer, clock, flags = fields
                    out.append(Envelope(journal, base + pos, base + end, msg, None, producer, clock, flags))
                    pos = end
                    nl = buf.find(b"\n", pos)
            except FramingError as err:
                self._consume(buf, end)
                self._scanned = 0  # the rest of `data` is unscanned
                err.envelopes = out
                raise
        self._consume(buf, pos)
        return out

    def _consume(self, buf: bytes | bytearray, pos: int) -> None:
        """Drops buf[:pos] (decoded) and keeps the rest buffered (on the normal path it holds no newline)."""
        self._offset += pos
        if buf is self._buf:
            del self._buf[:pos]
        elif pos < len(buf):
            self._buf += memoryview(buf)[pos:]
        self._scanned = len(self._buf)


class JSONFraming(Framing):
    """`application/x-ndjson`: dict messages, the UUID string at `uuid_pointer`."""

    content_type = CONTENT_TYPE

    def __init__(self, *, uuid_pointer: str = DEFAULT_UUID_POINTER) -> None:
        self.uuid_pointer = uuid_pointer
        self._tokens = parse_json_pointer(uuid_pointer)

    def encode(self, message: Any, uuid: UUID) -> bytes:
        doc = _with_member(message, self._tokens, uuid, self.uuid_pointer)
        try:
            return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError as exc:
            raise FramingError(f"cannot encode message as JSON: {exc}") from None

    def encode_ack(self, uuid: UUID, like: Any = None) -> bytes:
        return orjson.dumps(
            _with_member({}, self._tokens, uuid, self.uuid_pointer), option=orjson.OPT_APPEND_NEWLINE
        )

    def decoder(self, journal: str, offset: int) -> JSONDecoder:
        return JSONDecoder(journal, offset, self._tokens)

    def __repr__(self) -> str:
        return f"JSONFraming(uuid_pointer={self.uuid_pointer!r})"
