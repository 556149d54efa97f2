"""JSON-lines framing (`application/x-ndjson`): one JSON object per `\\n`-terminated line.

The UUID lives at an RFC 6901 JSON pointer (default `/_meta/uuid`, Estuary Flow's convention;
Gazette's Go examples use `/UUID`) as the canonical UUID string. Messages are dicts. Decoding is the
hot path of ReadCommitted: one bytes.find and one orjson.loads per line, no UUID object per message.
Encoding a message that lacks the pointer's top member splices the UUID into orjson's output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from gazette.message.envelope import Envelope
from gazette.message.framing.base import MAX_KNOWN_FLAG, Decoder, Framing, FramingError, split_uuid_text
from gazette.message.uuid import UUID

CONTENT_TYPE = "application/x-ndjson"
DEFAULT_UUID_POINTER = "/_meta/uuid"
UUID_TAIL_MEMO_ENTRIES = 4096  # a decoder forgets its memo of UUID text tails when it holds this many
_BAD_ESCAPE = re.compile(r"~(?![01])")
_TIME_LOW_CHARS = 8  # the UUID text's first group: time_low, the part that changes with every tick
_fromhex = bytes.fromhex
_from_bytes = int.from_bytes


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


class _UUIDTextSplitter:
    """`split_uuid_text`, memoized: a producer's successive UUIDs differ only in their first 8 hex
    digits (time_low), so the fields of the other 28 characters (producer, the rest of the clock,
    flags) are looked up by that tail, and only time_low is parsed per message. Equal to
    split_uuid_text for every string (valid tails only are memoized: garbage cannot fill the memo)."""

    __slots__ = ("_tails",)

    def __init__(self) -> None:
        self._tails: dict[str, tuple[bytes, int, int]] = {}

    def split(self, text: str) -> tuple[bytes, int, int] | None:
        if len(text) != 36:
            return None
        tail = text[_TIME_LOW_CHARS:]
        fields = self._tails.get(tail)
        if fields is None:
            # The clock of time_low 0 (time_low is clock bits 4..35, ORed in below).
            parsed = split_uuid_text("0" * _TIME_LOW_CHARS + tail)
            if parsed is None:
                return None
            if len(self._tails) >= UUID_TAIL_MEMO_ENTRIES:
                self._tails.clear()
            fields = self._tails[tail] = parsed
        try:
            # fromhex skips whitespace, so 8 characters may hold fewer than 4 bytes: refused below.
            time_low = _fromhex(text[:_TIME_LOW_CHARS])
        except ValueError:
            return None
        if len(time_low) != 4:
            return None
        producer, clock, flags = fields
        return producer, clock | _from_bytes(time_low) << 4, flags


class JSONDecoder(Decoder):
    """Splits on b"\\n" and parses each line with orjson. Lines that aren't JSON objects, or whose
    UUID member isn't a version-1 UUID string, raise FramingError after the decoder moved past them."""

    def __init__(self, journal: str, offset: int, tokens: tuple[str, ...]) -> None:
        super().__init__(journal, offset)
        self._tokens = tokens
        self._scanned = 0  # bytes of _buf known to hold no newline
        self._split = _UUIDTextSplitter().split

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
            split = self._split
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


def _dumps(doc: Any, option: int | None) -> bytes:
    """orjson.dumps, its refusals as FramingError."""
    try:
        return orjson.dumps(doc, option=option)
    except orjson.JSONEncodeError as exc:
        raise FramingError(f"cannot encode message as JSON: {exc}") from None


class JSONFraming(Framing):
    """`application/x-ndjson`: dict messages, the UUID string at `uuid_pointer`.

    A dict message without the pointer's top member (the common case: no `_meta`) is encoded by
    splicing: orjson's output of the message with its closing brace replaced by the member, e.g.
    `,"_meta":{"uuid":"<uuid>"}}` plus the newline. That is byte for byte what encoding a copy with the
    member added last gives, without copying the message. Other messages take that general path.
    """

    content_type = CONTENT_TYPE

    def __init__(self, *, uuid_pointer: str = DEFAULT_UUID_POINTER) -> None:
        self.uuid_pointer = uuid_pointer
        self._tokens = parse_json_pointer(uuid_pointer)
        self._top = self._tokens[0]
        # The member at the pointer as JSON text around the quoted UUID: '"_meta":{"uuid":' ... '}'.
        keys = b"".join(orjson.dumps(tok) + b":{" for tok in self._tokens[:-1])
        member = keys + orjson.dumps(self._tokens[-1]) + b":"
        closing = b"}" * (len(self._tokens) - 1) + b"}\n"  # the member's objects, the message's, \n
        self._after_members = b"," + member  # spliced after a message's last member
        self._alone = b"{" + member  # the whole opening of an empty message
        self._closing = closing
        self._after_members_quote = self._after_members + b'"'  # the same, for unquoted UUID text
        self._alone_quote = self._alone + b'"'
        self._quote_closing = b'"' + closing

    def encode(self, message: Any, uuid: UUID) -> bytes:
        if type(message) is dict and self._top not in message:
            body = _dumps(message, None)
            # orjson writes a UUID as its canonical string, as it does in the general path.
            quoted = orjson.dumps(uuid)
            if len(body) == 2:  # b"{}"
                return self._alone + quoted + self._closing
            return body[:-1] + self._after_members + quoted + self._closing
        return _dumps(_with_member(message, self._tokens, uuid, self.uuid_pointer), orjson.OPT_APPEND_NEWLINE)

    def encode_uuid_text(self, message: Any, uuid_text: str) -> bytes:
        """`encode(message, UUID(uuid_text))` without a UUID object, for the publisher's hot path.
        `uuid_text` must be canonical (lowercase 8-4-4-4-12 hex, as `str(uuid)` writes it): the
        splicing path copies it into the frame unchecked."""
        if type(message) is dict and self._top not in message:
            try:  # _dumps inlined: one call less per message
                body = orjson.dumps(message)
            except orjson.JSONEncodeError as exc:
                raise FramingError(f"cannot encode message as JSON: {exc}") from None
            if len(body) == 2:  # b"{}"
                return self._alone_quote + uuid_text.encode() + self._quote_closing
            return body[:-1] + self._after_members_quote + uuid_text.encode() + self._quote_closing
        return self.encode(message, UUID(uuid_text))

    def encode_uuid_runs(self, messages: Sequence[Any], runs: Sequence[tuple[range, str]]) -> bytes:
        """The frames of `messages`, in order, each stamped with the next UUID text of `runs`
        (`UUIDText.runs`: time_low values and the 28 characters they share), joined: equal to joining
        `encode_uuid_text` of each, with less Python per message (the publisher's batch path)."""
        total = sum(len(lows) for lows, _ in runs)
        if total != len(messages):
            raise ValueError(f"encode_uuid_runs: {total} UUID texts for {len(messages)} messages")
        top = self._top
        if not all(type(m) is dict and m and top not in m for m in messages):  # the general path
            texts = [f"{tl:08x}{rest}" for lows, rest in runs for tl in lows]
            return b"".join([self.encode_uuid_text(m, t) for m, t in zip(messages, texts, strict=True)])
        dumps, member = orjson.dumps, self._after_members_quote
        parts: list[bytes] = []
        first = 0
        try:
            for lows, rest in runs:
                tail = rest.encode() + self._quote_closing
                run = messages[first : first + len(lows)]
                frames = [
                    b"%b%b%08x%b" % (dumps(m)[:-1], member, tl, tail) for m, tl in zip(run, lows, strict=True)
                ]
                parts.append(b"".join(frames))
                first += len(lows)
        except orjson.JSONEncodeError as exc:
            raise FramingError(f"cannot encode message as JSON: {exc}") from None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def encode_ack(self, uuid: UUID, like: Any = None) -> bytes:
        return orjson.dumps(
            _with_member({}, self._tokens, uuid, self.uuid_pointer), option=orjson.OPT_APPEND_NEWLINE
        )

    def decoder(self, journal: str, offset: int) -> JSONDecoder:
        return JSONDecoder(journal, offset, self._tokens)

    def __repr__(self) -> str:
        return f"JSONFraming(uuid_pointer={self.uuid_pointer!r})"
