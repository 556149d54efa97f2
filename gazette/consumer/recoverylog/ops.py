"""RecordedOp: one file operation of a recovery log, its record format and checksum chain (reference 7.7).

A record is a fixed frame (`gazette.message.framing.fixed`: magic, uint32 LE length, payload) whose
payload is a JSON object `{"seq_no", "checksum", "author"}` plus at most one of
`"create": {"path"}`, `"link": {"fnode", "path"}`, `"unlink": {"fnode", "path"}`,
`"write": {"fnode", "offset", "length"}` (none: a no-op). A write's `length` raw bytes follow its frame,
outside it. Checksums chain: an op carries the FSM's expected checksum, and the next one is
CRC32-Castagnoli(checksum, payload bytes) — over the frame payload only, never write contents.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

import orjson

from gazette.message.framing.fixed import HEADER_BYTES, MAGIC, frame
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

AUTHOR_REGISTER = "author"  # the register name of the recorder fence (reference 7.7)
MAX_AUTHOR = (1 << 32) - 1
MAX_OP_PAYLOAD_BYTES = 1 << 20  # a longer op payload is corruption (paths are short)
_BASE32_DIGITS = "0123456789abcdefghijklmnopqrstuv"
_KINDS = ("create", "link", "unlink", "write")


class RecoveryLogError(GazetteError):
    """A recovery log, its hints or a recorded operation is malformed or inconsistent."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)


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
    """One recorded operation. `kind` is "create", "link", "unlink", "write" or "" (a no-op).

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

    def payload(self) -> bytes:
        """The op's record payload (the bytes its successor's checksum covers)."""
        doc: dict[str, Any] = {"seq_no": self.seq_no, "checksum": self.checksum, "author": self.author}
        if self.kind == "create":
            doc["create"] = {"path": self.path}
        elif self.kind in ("link", "unlink"):
            doc[self.kind] = {"fnode": self.fnode, "path": self.path}
        elif self.kind == "write":
            doc["write"] = {"fnode": self.fnode, "offset": self.offset, "length": self.length}
        elif self.kind:
            raise RecoveryLogError(f"recorded op kind {self.kind!r} is not one of {_KINDS} or a no-op")
        return orjson.dumps(doc)

    def __str__(self) -> str:
        what = self.kind or "no-op"
        args = {"create": self.path, "link": f"{self.fnode} {self.path}", "unlink": f"{self.fnode} {self.path}",
                "write": f"{self.fnode} [{self.offset}, +{self.length})"}.get(self.kind, "")  # fmt: skip
        return f"#{self.seq_no} {what} {args} (author {self.author})".replace("  ", " ")


def encode_op(op: RecordedOp) -> tuple[bytes, bytes]:
    """(the op's framed record, its payload); a write's contents are appended after the record."""
    payload = op.payload()
    return frame(payload), payload


def _int(doc: dict[str, Any], key: str, where: str, minimum: int = 0) -> int:
    value = doc.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecoveryLogError(f"{where}: field {key!r} is {value!r}, expected an integer >= {minimum}")
    return value


def decode_payload(
    payload: bytes, *, log: str = "", first_offset: int = 0, end_offset: int = 0
) -> RecordedOp:
    """Parses a record payload; `first_offset` and `end_offset` (the frame's end) place it in `log`."""
    where = f"recorded op at offset {first_offset} of recovery log {log!r}"
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise RecoveryLogError(f"{where} is not a JSON object: {exc}") from None
    if not isinstance(doc, dict):
        raise RecoveryLogError(f"{where} is a JSON {type(doc).__name__}, expected an object")
    kinds = [k for k in _KINDS if k in doc]
    unknown = sorted(set(doc) - {"seq_no", "checksum", "author", *_KINDS})
    if len(kinds) > 1 or unknown:
        raise RecoveryLogError(
            f"{where} has fields {sorted(doc)}: expected at most one of {_KINDS}, nothing else"
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
            fields["path"] = path
        if kind in ("link", "unlink", "write"):
            fields["fnode"] = _int(body, "fnode", where, 1)
        if kind == "write":
            fields["offset"] = _int(body, "offset", where)
            fields["length"] = _int(body, "length", where)
    op = RecordedOp(seq_no, checksum, author, kind, **fields)
    return dataclasses.replace(op, first_offset=first_offset, last_offset=end_offset + op.length, log=log)


@dataclasses.dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A record read from a log: the op, its payload (for the checksum) and a write's contents."""

    op: RecordedOp
    payload: bytes
    data: bytes = b""


class OpDecoder:
    """Incremental decoder of a recovery log's bytes from a record boundary `offset`.

    `feed(chunk)` returns the records completed by `chunk`; `offset` is then the end of the last one.
    A record that does not begin with the fixed-frame magic word is corruption (RecoveryLogError):
    write contents may hold anything, so there is no scanning for the next frame.
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
        return DecodedRecord(op, payload, bytes(buf[frame_end : frame_end + op.length]))
