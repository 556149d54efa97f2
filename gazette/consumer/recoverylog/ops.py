"""RecordedOp: one file operation of a recovery log, its record format and checksum chain
(docs/semantics.md#recovery-logs).

Records are exactly Gazette's (consumer/recoverylog recorder.go, playback.go): a fixed frame
(`gazette.message.framing.fixed`: magic `66 33 93 36`, uint32 LE length) whose payload is a marshaled
`recoverylog.RecordedOp` protobuf (gazette/protocol/recoverylog.proto), fields in field-number order
as Gazette's gogo marshaler writes them: seq_no (1, varint), checksum (2, fixed32), author (3,
fixed32), then at most one of create {path} (4), link {fnode, path} (5), unlink {fnode, path} (6),
write {fnode, offset, length} (7) or property {path, content} (8); none is a no-op (a hand-off).
Zero values are left out. The meta fields first_offset, last_offset and log (9-11) are never written:
playback knows them from where it read the record. A write's `length` raw bytes follow its frame,
outside it. Recorded paths are Gazette's: "/"-separated, with a leading "/" (the path under the
recorded directory). A property is a small file kept whole in the FSM and its hints (Gazette's
recorder makes a rename onto "/IDENTITY", RocksDB's, a property).

Checksums chain: an op carries the FSM's expected checksum, and the next one is
CRC32-Castagnoli(checksum, payload) over the frame payload only (not the 8-byte header, never write
contents), as Gazette's FSM.Apply does with the payload bytes as read.

Logs written by gazette-py before it adopted Gazette's encoding framed the same way a JSON payload
`{"seq_no", "checksum", "author"}` plus at most one of `"create": {"path"}`, `"link"`/`"unlink":
{"fnode", "path"}`, `"write": {"fnode", "offset", "length"}`, with paths lacking the leading "/".
Playback still reads such records (a payload beginning with "{", which no RecordedOp protobuf can:
0x7b would be a group of field 15), giving their paths the leading "/" (so the files they created
are the ones the new recorder rewrites) and chaining checksums over their JSON bytes as before, so a
log may hold both. The recorder only writes protobuf. Gazette cannot play the JSON records; once a
shard's hints no longer reach back to them (every live file rewritten since), `gazctl shards
recover` plays its log.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

import orjson

from gazette.message.framing.fixed import HEADER_BYTES, MAGIC, frame
from gazette.protocol.errors import StoreError

AUTHOR_REGISTER = "author"  # the register name of the recorder fence (docs/semantics.md#recovery-logs)
MAX_AUTHOR = (1 << 32) - 1
MAX_OP_PAYLOAD_BYTES = 1 << 20  # a longer op payload is corruption (paths and properties are short)
_BASE32_DIGITS = "0123456789abcdefghijklmnopqrstuv"
_KINDS = ("create", "link", "unlink", "write", "property")
_LEGACY_KINDS = ("create", "link", "unlink", "write")


class RecoveryLogError(StoreError):
    """A recovery log, its hints or a recorded operation is malformed or inconsistent."""


# ---- authors and their fence


def new_author() -> int:
    """A random author id in [1, 2**32 - 1] (0 means "no author")."""
    return secrets.randbelow(MAX_AUTHOR) + 1


def author_fence(author: int) -> str:
    """The `author` register value of `author`: its id in base 32, digits 0-9a-v (Go's
    strconv.FormatUint(author, 32))."""
    if not 0 < author <= MAX_AUTHOR:
        raise RecoveryLogError(f"author {author!r} is not in [1, {MAX_AUTHOR}]")
    digits = []
    while author:
        author, d = divmod(author, 32)
        digits.append(_BASE32_DIGITS[d])
    return "".join(reversed(digits))


# ---- CRC32-Castagnoli


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32-Castagnoli of `data`, continuing from `crc` (as zlib.crc32 and Go's crc32.Update)."""
    table = _CRC32C_TABLE
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---- operations


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedOp:
    """One recorded operation. `kind` is "create", "link", "unlink", "write", "property" or "" (a
    no-op); `path` is a create's, link's, unlink's or property's, `content` a property's.

    `first_offset`/`last_offset` (where the record lies in `log`, including a write's payload) are
    meta fields: known exactly on playback, a lower bound (last_offset 0) when recording.
    """

    seq_no: int
    checksum: int
    author: int
    kind: str = ""
    path: str = ""
    fnode: int = 0
    offset: int = 0
    length: int = 0
    first_offset: int = 0
    last_offset: int = 0
    log: str = ""
    content: str = ""

    def payload(self) -> bytes:
        """The op's record payload, its marshaled recoverylog.RecordedOp (the bytes its successor's
        checksum covers): byte for byte what Gazette's recorder writes for it."""
        out = bytearray()
        if self.seq_no:
            out += _varint_field(1, self.seq_no)
        if self.checksum:
            out += _fixed32_field(2, self.checksum)
        if self.author:
            out += _fixed32_field(3, self.author)
        if self.kind == "create":
            out += _bytes_field(4, _string_field(1, self.path))
        elif self.kind in ("link", "unlink"):
            body = _varint_field(1, self.fnode) + _string_field(2, self.path)
            out += _bytes_field(5 if self.kind == "link" else 6, body)
        elif self.kind == "write":
            body = (
                _varint_field(1, self.fnode) + _varint_field(2, self.offset) + _varint_field(3, self.length)
            )
            out += _bytes_field(7, body)
        elif self.kind == "property":
            out += _bytes_field(8, _string_field(1, self.path) + _string_field(2, self.content))
        elif self.kind:
            raise RecoveryLogError(f"recorded op kind {self.kind!r} is not one of {_KINDS} or a no-op")
        return bytes(out)

    def __str__(self) -> str:
        what = self.kind or "no-op"
        args = {"create": self.path, "link": f"{self.fnode} {self.path}", "unlink": f"{self.fnode} {self.path}",
                "write": f"{self.fnode} [{self.offset}, +{self.length})",
                "property": f"{self.path} ({len(self.content)} chars)"}.get(self.kind, "")  # fmt: skip
        return f"#{self.seq_no} {what} {args} (author {self.author})".replace("  ", " ")


def encode_op(op: RecordedOp) -> tuple[bytes, bytes]:
    """(the op's framed record, its payload); a write's contents are appended after the record."""
    payload = op.payload()
    return frame(payload), payload


# ---- protobuf wire format (the few pieces RecordedOp needs; strings are UTF-8, and bytes that are
# not round-trip through surrogate escapes, as Go strings carry any bytes)

_UINT64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    value &= _UINT64  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def _fixed32_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | 5) + value.to_bytes(4, "little")


def _bytes_field(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def _string_field(number: int, value: str) -> bytes:
    return _bytes_field(number, value.encode("utf-8", "surrogateescape")) if value else b""


class _WireError(Exception):
    pass


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise _WireError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value & _UINT64, pos
        shift += 7
        if shift >= 70:
            raise _WireError("varint longer than 10 bytes")


def _wire_fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field: an int for varint and fixed, bytes for
    length-delimited. Groups (wire types 3, 4) and field number 0 are malformed here."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0 or number > 0x1FFFFFFF:
            raise _WireError(f"field number {number}")
        value: int | bytes
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise _WireError(f"truncated fixed{width * 8} field {number}")
            value, pos = int.from_bytes(buf[pos : pos + width], "little"), pos + width
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise _WireError(f"field {number} claims {length} bytes, {len(buf) - pos} remain")
            value, pos = bytes(buf[pos : pos + length]), pos + length
        else:
            raise _WireError(f"field {number} has wire type {wire}")
        out.append((number, wire, value))
    return out


def _int64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def _message(
    fields: list[tuple[int, int, int | bytes]], schema: dict[int, tuple[str, int]]
) -> dict[str, Any]:
    """Known fields by name (last one wins, as proto3 scalars); unknown fields are skipped, as
    Gazette's unmarshaler does. A known field of the wrong wire type is malformed."""
    out: dict[str, Any] = {}
    for number, wire, value in fields:
        if number not in schema:
            continue
        name, want = schema[number]
        if wire != want:
            raise _WireError(f"field {name} ({number}) has wire type {wire}, expected {want}")
        if want == 2:
            assert isinstance(value, bytes)
            out[name] = value.decode("utf-8", "surrogateescape")
        else:
            assert isinstance(value, int)
            out[name] = value if want == 5 else _int64(value)
    return out


_OP_SCALARS = {1: ("seq_no", 0), 2: ("checksum", 5), 3: ("author", 5)}
_KIND_FIELDS = {4: "create", 5: "link", 6: "unlink", 7: "write", 8: "property"}
_KIND_SCHEMAS: dict[str, dict[int, tuple[str, int]]] = {
    "create": {1: ("path", 2)},
    "link": {1: ("fnode", 0), 2: ("path", 2)},
    "unlink": {1: ("fnode", 0), 2: ("path", 2)},
    "write": {1: ("fnode", 0), 2: ("offset", 0), 3: ("length", 0)},
    "property": {1: ("path", 2), 2: ("content", 2)},
}


def _decode_proto(payload: bytes, where: str) -> RecordedOp:
    try:
        fields = _wire_fields(payload)
        scalars = _message(fields, _OP_SCALARS)
        bodies: dict[str, list[tuple[int, int, int | bytes]]] = {}
        for number, wire, value in fields:
            kind = _KIND_FIELDS.get(number)
            if kind is None:
                continue  # scalars, meta fields (never written) and unknown fields
            if wire != 2:
                raise _WireError(f"field {kind} ({number}) has wire type {wire}, expected 2")
            assert isinstance(value, bytes)
            bodies.setdefault(kind, []).extend(_wire_fields(value))  # repeated: merged, as protobuf does
        body = {kind: _message(f, _KIND_SCHEMAS[kind]) for kind, f in bodies.items()}
    except _WireError as exc:
        raise RecoveryLogError(
            f"{where} is not a marshaled recoverylog.RecordedOp ({exc}; payload begins {payload[:16].hex()})"
        ) from None
    if len(body) > 1:
        raise RecoveryLogError(f"{where} sets {sorted(body)}: a RecordedOp is at most one of {_KINDS}")
    kind, fields_of = next(iter(body.items())) if body else ("", {})
    if kind:
        where = f"{where} ({kind})"
    for name in ("offset", "length"):
        if fields_of.get(name, 0) < 0:
            raise RecoveryLogError(f"{where}: {name} is {fields_of[name]}, expected >= 0")
    return RecordedOp(scalars.get("seq_no", 0), scalars.get("checksum", 0), scalars.get("author", 0), kind,
                      **fields_of)  # fmt: skip


def _int(doc: dict[str, Any], key: str, where: str, minimum: int = 0) -> int:
    value = doc.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecoveryLogError(f"{where}: field {key!r} is {value!r}, expected an integer >= {minimum}")
    return value


def _decode_legacy_json(payload: bytes, where: str) -> RecordedOp:
    """A record payload of gazette-py's earlier JSON encoding (see the module docstring)."""
    where = f"{where} (gazette-py's earlier JSON encoding)"
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise RecoveryLogError(f"{where} is not a JSON object: {exc}") from None
    if not isinstance(doc, dict):
        raise RecoveryLogError(f"{where} is a JSON {type(doc).__name__}, expected an object")
    kinds = [k for k in _LEGACY_KINDS if k in doc]
    unknown = sorted(set(doc) - {"seq_no", "checksum", "author", *_LEGACY_KINDS})
    if len(kinds) > 1 or unknown:
        raise RecoveryLogError(
            f"{where} has fields {sorted(doc)}: expected at most one of {_LEGACY_KINDS}, nothing else"
        )
    seq_no, checksum = _int(doc, "seq_no", where, 1), _int(doc, "checksum", where)
    author = _int(doc, "author", where)
    if checksum > MAX_AUTHOR or author > MAX_AUTHOR:
        raise RecoveryLogError(f"{where}: checksum and author must fit 32 bits")
    fields: dict[str, Any] = {}
    kind = kinds[0] if kinds else ""
    if kind:
        body = doc[kind]
        if not isinstance(body, dict):
            raise RecoveryLogError(f"{where}: {kind!r} is {body!r}, expected an object")
        where = f"{where} ({kind})"
        if kind in ("create", "link", "unlink"):
            path = body.get("path")
            if not isinstance(path, str) or not path:
                raise RecoveryLogError(f"{where}: path {path!r} is not a non-empty string")
            fields["path"] = path if path.startswith("/") else "/" + path  # Gazette's form of the path
        if kind in ("link", "unlink", "write"):
            fields["fnode"] = _int(body, "fnode", where, 1)
        if kind == "write":
            fields["offset"] = _int(body, "offset", where)
            fields["length"] = _int(body, "length", where)
    return RecordedOp(seq_no, checksum, author, kind, **fields)


def is_legacy_payload(payload: bytes) -> bool:
    """Whether a record payload is of gazette-py's earlier JSON encoding (it begins with "{")."""
    return payload[:1] == b"{"


def decode_payload(
    payload: bytes, *, log: str = "", first_offset: int = 0, end_offset: int = 0
) -> RecordedOp:
    """Parses a record payload (a RecordedOp protobuf, or gazette-py's earlier JSON); `first_offset`
    and `end_offset` (the frame's end) place it in `log`."""
    where = f"recorded op at offset {first_offset} of recovery log {log!r}"
    if is_legacy_payload(payload):
        op = _decode_legacy_json(payload, where)
    else:
        op = _decode_proto(payload, where)
    return dataclasses.replace(op, first_offset=first_offset, last_offset=end_offset + op.length, log=log)


@dataclasses.dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A record read from a log: the op, its payload (for the checksum), a write's contents, and
    whether the payload was gazette-py's earlier JSON encoding."""

    op: RecordedOp
    payload: bytes
    data: bytes = b""
    legacy: bool = False


class OpDecoder:
    """Incremental decoder of a recovery log's bytes from a record boundary `offset`.

    `feed(chunk)` returns the records completed by `chunk`; `offset` is then the end of the last one.
    A record that does not begin with the fixed-frame magic word is corruption (RecoveryLogError):
    write contents may hold anything, so there is no scanning for the next frame (Gazette's player
    warns of a de-synchronization and scans to the next magic word; this one stops instead).
    """

    def __init__(self, log: str, offset: int) -> None:
        self.log = log
        self.offset = offset
        self._buf = bytearray()
        self._error: RecoveryLogError | None = None

    def reset(self, offset: int) -> None:
        """Drops buffered bytes and continues at `offset` (after an offset jump or a seek)."""
        self.offset = offset
        self._buf.clear()
        self._error = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def check(self) -> None:
        """Raises the corruption found after the records the last `feed` returned, if any."""
        if self._error is not None:
            raise self._error

    def feed(self, chunk: bytes) -> list[DecodedRecord]:
        """Records completed by `chunk`. Records before a corrupt one are returned first; the
        corruption is raised by `check()` or the next call."""
        self.check()
        self._buf += chunk
        buf, out, pos = self._buf, [], 0
        try:
            while len(buf) - pos >= HEADER_BYTES:
                record = self._record(buf, pos)
                if record is None:
                    break
                out.append(record)
                pos = record.op.last_offset - self.offset
        except RecoveryLogError as exc:
            if not out:
                raise
            self._error = exc
        finally:
            del buf[:pos]
            self.offset += pos
        return out

    def _record(self, buf: bytearray, pos: int) -> DecodedRecord | None:
        if buf[pos : pos + 4] != MAGIC:
            raise RecoveryLogError(
                f"recovery log {self.log!r} has no record at offset {self.offset + pos} "
                f"(bytes {bytes(buf[pos : pos + 8])!r} are not a fixed-frame header)"
            )
        length = int.from_bytes(buf[pos + 4 : pos + 8], "little")
        if length > MAX_OP_PAYLOAD_BYTES:
            raise RecoveryLogError(
                f"recovery log {self.log!r}: the record at offset {self.offset + pos} claims a "
                f"{length}-byte payload (more than {MAX_OP_PAYLOAD_BYTES})"
            )
        frame_end = pos + HEADER_BYTES + length
        if frame_end > len(buf):
            return None
        payload = bytes(buf[pos + HEADER_BYTES : frame_end])
        op = decode_payload(
            payload, log=self.log, first_offset=self.offset + pos, end_offset=self.offset + frame_end
        )
        if frame_end + op.length > len(buf):
            return None  # the write's contents are not all here yet
        data = bytes(buf[frame_end : frame_end + op.length])
        return DecodedRecord(op, payload, data, is_legacy_payload(payload))
