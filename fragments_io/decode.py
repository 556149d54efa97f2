"""Decoding: a journal's fragment content into Arrow tables of metadata columns and message fields.

JSON lines take a vectorised path: newline offsets with numpy, fields and the UUID string with
pyarrow.json given a schema, UUID fields split with numpy. Anything unusual (a blank or non-object
line, an invalid UUID) falls back to gazette's own Decoder, which skips bad frames exactly as
ReadUncommitted does (or fails, when the framing was only guessed). CSV and fixed frames always take
the Decoder path. Internal tables hold begin, end, uuid, producer, clock, flags, value, then fields
(uuid, producer and value only when the reader asks for them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from fragments_io.errors import CorruptObjectError, FramingMismatchError, SchemaMismatchError
from gazette.fragment.content import CorruptFragmentError, open_fragment
from gazette.fragment.fragment import Fragment
from gazette.fragment.stores import StoreError, get_store
from gazette.message.envelope import Envelope
from gazette.message.framing import (
    CSV_CONTENT_TYPE,
    FIXED_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    Decoder,
    FramingError,
    framing_for,
)
from gazette.message.framing.json_lines import parse_json_pointer
from gazette.message.uuid import GREGORIAN_OFFSET_100NS
from gazette.protocol.codec import Codec

log = logging.getLogger(__name__)

UUID_CHARS = 36
PRODUCER_CHARS = slice(24, 36)  # the node field of the UUID text: the producer ID in hex
JSON_BLOCK_BYTES_MAX = 1 << 26  # pyarrow.json block size cap; a line must fit in one block
CLOCK_LIMIT = 1 << 63  # clocks are BIGINT in Spark
META_COLUMNS = ("begin", "end", "uuid", "producer", "clock", "flags", "value")
_CONTENT_TYPE_OF = {"json": JSON_CONTENT_TYPE, "csv": CSV_CONTENT_TYPE, "fixed": FIXED_CONTENT_TYPE}
_DASHES = (8, 13, 18, 23)
_HEX_COLS = np.array([i for i in range(UUID_CHARS) if i not in _DASHES])
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
_COLUMN_RE = re.compile(r"Column\(([^)]*)\)")


def object_name(f: Fragment) -> str:
    return f"{f.backing_store}{f.content_path}"


def read_content(f: Fragment, ignore_corrupt: bool) -> bytes | None:
    """The verified, decompressed content of `f`; None (logged) if corrupt and `ignore_corrupt`."""
    try:
        if f.codec == Codec.NONE and f.backing_store and f.begin < f.end:
            return _read_plain(f)
        return b"".join(open_fragment(f))
    except (CorruptFragmentError, StoreError) as e:
        if ignore_corrupt:
            log.warning("ignoreCorruptFragments: skipping %s: %s", object_name(f), e)
            return None
        raise CorruptObjectError(
            f"fragment object {object_name(f)} of journal {f.journal} is corrupt: {e} "
            "(set option ignoreCorruptFragments=true to skip it)"
        ) from None


def _read_plain(f: Fragment) -> bytes:
    """open_fragment's content of an uncompressed fragment in one read (no chunks to join), with
    its checks: the length, then the SHA1."""
    where = f"object {f.content_path} in store {f.backing_store}"
    stream = get_store(f.backing_store).open(f.content_path)
    try:
        data = stream.read(f.length + 1)
    finally:
        stream.close()
    if len(data) > f.length:
        raise CorruptFragmentError(
            f"{where} decodes to more than end - begin = {f.length} bytes (at least {len(data)})"
        )
    if len(data) != f.length:
        raise CorruptFragmentError(
            f"{where} decodes to {len(data)} bytes (expected end - begin = {f.length})"
        )
    got = hashlib.sha1(data).digest()
    if got != f.sum:
        raise CorruptFragmentError(f"{where} has SHA1 {got.hex()} (expected {f.sum.hex()})")
    return data


def with_pointer(schema: pa.Schema | None, tokens: tuple[str, ...]) -> pa.Schema:
    """`schema` (message fields) plus a string field at the UUID pointer, merged into structs."""

    def merge(fields: list[pa.Field], toks: tuple[str, ...]) -> list[pa.Field]:
        name = toks[0]
        out = list(fields)
        for i, f in enumerate(out):
            if f.name != name:
                continue
            if len(toks) == 1:
                if not pa.types.is_string(f.type):
                    raise SchemaMismatchError(
                        f"schema field {name!r} holds the message UUID (uuidPointer) and must be a string, "
                        f"not {f.type}"
                    )
                return out
            if not pa.types.is_struct(f.type):
                raise SchemaMismatchError(
                    f"schema field {name!r} is on the uuidPointer path and must be a struct, not {f.type}"
                )
            children = merge(list(f.type), toks[1:])
            out[i] = pa.field(name, pa.struct(children), nullable=True)
            return out
        if len(toks) == 1:
            out.append(pa.field(name, pa.string()))
        else:
            out.append(pa.field(name, pa.struct(merge([], toks[1:]))))
        return out

    return pa.schema(merge(list(schema or pa.schema([])), tokens))


def _pointer_column(table: pa.Table, tokens: tuple[str, ...]) -> pa.Array:
    col: pa.Array = table.column(tokens[0]).combine_chunks()
    for tok in tokens[1:]:
        col = pc.struct_field(col, tok)
    return col


def _hex_pair_table() -> np.ndarray:
    """Byte value of every pair of hex digits, indexed by the pair read as a little-endian uint16
    (first digit in the low byte); 0xFFFF where either character is not a hex digit."""
    pair = np.arange(1 << 16)
    high, low = _HEX[pair & 0xFF].astype(np.uint16), _HEX[pair >> 8].astype(np.uint16)
    return np.where((high == 255) | (low == 255), 0xFFFF, (high << 4) | low).astype(np.uint16)


_HEX_PAIR = _hex_pair_table()


@dataclasses.dataclass(frozen=True)
class SplitUUIDs:
    """A UUID column split in bulk: which rows have one, their clock and flags, and the lower-case
    text of the present ones as a (present rows, 36) byte matrix (to build uuid and producer)."""

    present: np.ndarray
    clock: np.ndarray  # uint64, 0 where absent
    flags: np.ndarray  # int32, 0 where absent
    text: np.ndarray  # uint8 (present.sum(), 36)


def split_uuids(arr: pa.Array) -> SplitUUIDs | None:
    """The canonical v1 UUIDs of a string column (null or "" when absent) split into their fields;
    None if any present value isn't one. Every step is a whole-column numpy operation."""
    n = len(arr)
    arr = arr.cast(pa.string())
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[arr.offset : arr.offset + n + 1]
    lengths = np.diff(offsets)
    present = lengths > 0
    if arr.null_count:
        present &= valid_mask(arr)
    clock = np.zeros(n, dtype=np.uint64)
    flags = np.zeros(n, dtype=np.int32)
    count = int(np.count_nonzero(present))
    if not count:
        return SplitUUIDs(present, clock, flags, np.zeros((0, UUID_CHARS), np.uint8))
    if np.any(lengths[present] != UUID_CHARS):
        return None
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    if count == n:  # the usual case: the values lie back to back, a reshape and no gather
        m = data[offsets[0] : offsets[0] + n * UUID_CHARS].reshape(n, UUID_CHARS)
    else:
        m = data[offsets[:-1][present][:, None] + np.arange(UUID_CHARS)]
    if np.any(m[:, _DASHES] != ord("-")):
        return None
    # 32 hex digits -> 16 bytes, two digits per table lookup.
    pairs = np.ascontiguousarray(m[:, _HEX_COLS]).view("<u2")
    decoded = _HEX_PAIR[pairs]
    if decoded.max() > 0xFF:
        return None
    b = decoded.astype(np.uint8)
    time_low = np.ascontiguousarray(b[:, 0:4]).view(">u4")[:, 0].astype(np.uint64)
    time_mid = np.ascontiguousarray(b[:, 4:6]).view(">u2")[:, 0].astype(np.uint64)
    time_hi_version = np.ascontiguousarray(b[:, 6:8]).view(">u2")[:, 0].astype(np.uint64)
    clock_seq = np.ascontiguousarray(b[:, 8:10]).view(">u2")[:, 0].astype(np.uint64)
    if np.any((time_hi_version >> np.uint64(12)) != 1) or np.any((clock_seq >> np.uint64(14)) != 2):
        return None  # not version 1, or not the RFC 4122 variant
    ts = ((time_hi_version & np.uint64(0xFFF)) << np.uint64(48)) | (time_mid << np.uint64(32)) | time_low
    # Gazette's clock: the 60-bit timestamp, then the 4 clock-sequence bits above the 10 flag bits.
    clock[present] = (ts << np.uint64(4)) | ((clock_seq >> np.uint64(10)) & np.uint64(0xF))
    flags[present] = (clock_seq & np.uint64(0x3FF)).astype(np.int32)
    # Lower case: every character is a hex digit or '-', and setting bit 0x20 lowers 'A'-'F' while
    # leaving '0'-'9', 'a'-'f' and '-' (which all have it set) unchanged.
    return SplitUUIDs(present, clock, flags, m | np.uint8(0x20))


def _fixed_width_strings(text: np.ndarray, present: np.ndarray) -> pa.Array:
    """A string column of `present`'s length: row i is the next row of `text` (a (k, width) byte
    matrix, k = present.sum()) where present[i], else null."""
    n = len(present)
    width = text.shape[1]
    lengths = present.astype(np.int32) * np.int32(width)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = pa.py_buffer(np.ascontiguousarray(text).tobytes())
    null_count = n - len(text)
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if null_count else None
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), data, validity, null_count)


_NUMPY_OF = {pa.int64(): np.int64, pa.int32(): np.int32}


def from_numpy(values: np.ndarray, type: pa.DataType) -> pa.Array:  # noqa: A002 (pyarrow's name)
    """An Arrow array (int64, int32 or bool, no nulls) on `values`' memory: pa.array() imports pandas
    on its first call, which costs a fresh Spark worker about 150 ms."""
    if type == pa.bool_():
        bits = np.packbits(np.asarray(values, bool), bitorder="little")
        return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(bits)])
    data = np.ascontiguousarray(values, dtype=_NUMPY_OF[type])
    return pa.Array.from_buffers(type, len(data), [None, pa.py_buffer(data)])


def valid_mask(arr: pa.Array) -> np.ndarray:
    """Which values of `arr` are not null, from its validity bitmap (no pyarrow to_numpy: pandas)."""
    n, offset = len(arr), arr.offset
    validity = arr.buffers()[0]
    if not arr.null_count or validity is None:
        return np.ones(n, bool)
    return np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[offset : offset + n].astype(
        bool
    )


def to_numpy(column: pa.Array | pa.ChunkedArray, null: int = 0) -> np.ndarray:
    """The values of an int64 or int32 column as numpy (`null` where null; a view when there are
    none and one chunk), taken without pyarrow's to_numpy(), which imports pandas on first use."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            parts = [to_numpy(c, null) for c in column.chunks]
            return np.concatenate(parts) if parts else np.zeros(0, _NUMPY_OF.get(column.type, np.int64))
        column = column.chunk(0)
    dtype = _NUMPY_OF.get(column.type)
    if dtype is None:
        return column.to_numpy(zero_copy_only=False)
    n, offset = len(column), column.offset
    data = column.buffers()[1]
    values = (
        np.frombuffer(data, dtype, count=n, offset=offset * np.dtype(dtype).itemsize)
        if n
        else np.zeros(0, dtype)
    )
    if not column.null_count:
        return values
    return np.where(valid_mask(column), values, np.asarray(null, dtype))


def published_us(clock: np.ndarray) -> np.ndarray:
    """Microseconds since the epoch of each clock's timestamp (meaningless where clock is 0)."""
    ticks = (clock.astype(np.uint64) >> np.uint64(4)).astype(np.int64) - np.int64(GREGORIAN_OFFSET_100NS)
    return ticks // 10


def published_at_us(clock: np.ndarray) -> pa.Array:
    """Microseconds since the epoch of each clock's timestamp; null where clock is 0."""
    absent = clock == 0
    micros = from_numpy(published_us(clock), pa.int64())
    if not absent.any():
        return micros
    validity = pa.py_buffer(np.packbits(~absent, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(clock), [validity, micros.buffers()[1]], int(absent.sum()))


def _lines(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (past the newline) of every `\\n`-terminated line of `data`."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10).astype(np.int64) + 1
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1]
    return starts, ends


def _text_values(data: bytes, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The lines as strings without their newline, sliced straight out of `data`."""
    if len(data) >= 1 << 31:
        return pa.array(
            [data[s : e - 1].decode("utf-8", "replace") for s, e in zip(starts, ends, strict=True)]
        )
    offsets = np.concatenate(([0], ends)).astype(np.int32)
    arr = pa.StringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(data))
    return pc.utf8_slice_codeunits(arr, 0, -1)


class JournalDecoder:
    """Decodes one journal's fragments, fed in offset order, into internal Arrow tables.

    A frame cut by a fragment's end is completed from the next fragment when it is contiguous; at a
    gap (or at finish) the cut-off bytes are skipped with a warning, as ReadUncommitted does.
    """

    def __init__(
        self,
        journal: str,
        framing: str,
        isolation: str,
        uuid_pointer: str,
        fields: pa.Schema | None,
        strict: bool,
        columns: frozenset[str] | None = None,
    ) -> None:
        self.journal = journal
        # Metadata columns to build (None: all); begin, end, clock and flags always are. uuid,
        # producer and value are the costly ones.
        self.columns = None if columns is None else frozenset(columns) | {"begin", "end", "clock", "flags"}
        self.framing = framing
        self.isolation = isolation
        self.fields = fields if fields is not None and len(fields) else None
        self.strict = strict  # framing guessed: a bad frame is an error, not skipped
        self._tokens = parse_json_pointer(uuid_pointer)
        self._parse_schema = with_pointer(self.fields, self._tokens)
        self._carry = b""
        self._offset = -1  # journal offset just past the fed content
        self._decoder: Decoder | None = None
        self._buffer = b""
        self._buffer_base = 0
        self._where = journal

    # -- feeding ------------------------------------------------------------------------------

    def feed(self, f: Fragment, content: bytes) -> pa.Table:
        """The frames that begin before the end of `content` and end within it (or a carry)."""
        self._where = f"fragment {object_name(f)}"
        if f.begin != self._offset:
            self._drop_carry(f.begin)
        self._offset = f.end
        if self._stateful():
            return self._feed_stateful(f.begin, content)
        data = self._carry + content if self._carry else content
        base = f.begin - len(self._carry)
        cut = data.rfind(b"\n") + 1
        self._carry = data[cut:]
        return self.decode_chunk(data[:cut] if cut < len(data) else data, base)

    def finish(self) -> pa.Table:
        self._drop_carry(self._offset)
        if self._decoder is not None:
            try:
                self._decoder.close()
            except FramingError as e:
                self._bad_frame(e)
            self._decoder = None
        return self.empty()

    def _stateful(self) -> bool:
        return self.framing in ("csv", "fixed") and self.isolation != "raw" or self.framing == "fixed"

    def _drop_carry(self, next_offset: int) -> None:
        if self._carry:
            begin = self._offset - len(self._carry)
            msg = (
                f"journal {self.journal}: bytes [{begin}, {self._offset}) are a frame cut off at the end of "
                f"the content read (next offset {next_offset}); skipped"
            )
            if self.strict:
                raise FramingMismatchError(msg + _FRAMING_HINT)
            log.warning(msg)
        self._carry = b""
        if self._decoder is not None and next_offset != self._offset:
            try:
                self._decoder.close()
            except FramingError as e:
                self._bad_frame(e)
            self._decoder = None

    def _bad_frame(self, e: FramingError) -> None:
        if self.strict:
            raise FramingMismatchError(
                f"journal {self.journal} ({self._where}) does not decode as {self.framing}: {e}{_FRAMING_HINT}"
            ) from None
        log.warning("journal %s: skipping a frame that does not decode: %s", self.journal, e)

    # -- decoding ----------------------------------------------------------------------------

    def empty(self) -> pa.Table:
        return self._assemble(np.zeros(0, np.int64), np.zeros(0, np.int64), None, None, None, None, b"", None)

    def decode_chunk(self, data: bytes, base: int) -> pa.Table:
        """Frames of `data`, which begins at journal offset `base` and ends on a line boundary."""
        if not data:
            return self.empty()
        starts, ends = _lines(data)
        if self.isolation == "raw" or self.framing == "lines":
            return self._assemble(starts + base, ends + base, None, None, None, None, data, (starts, ends))
        if self.framing == "json":
            fast = self._json_fast(data, base, starts, ends)
            if fast is not None:
                return fast
        return self._decode_slow(data, base)

    def _read_json(self, data: bytes, schema: pa.Schema) -> pa.Table:
        block = max(1 << 20, min(len(data) + 1, JSON_BLOCK_BYTES_MAX))
        return pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=block, use_threads=False),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )

    def _json_fast(self, data: bytes, base: int, starts: np.ndarray, ends: np.ndarray) -> pa.Table | None:
        try:
            table = self._read_json(data, self._parse_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # the Decoder path says precisely what is wrong
        if table.num_rows != len(ends):
            return None  # blank lines: pyarrow skips them, the Decoder reports them
        uuids = _pointer_column(table, self._tokens)
        split = split_uuids(uuids)
        if split is None:
            return None
        fields = table.select([f.name for f in self.fields]) if self.fields is not None else None
        return self._assemble(
            starts + base,
            ends + base,
            None,
            split.present,
            split.clock,
            split.flags,
            data,
            (starts, ends),
            fields,
            uuid_text=split.text,
        )

    def _decode_slow(self, data: bytes, base: int) -> pa.Table:
        framing = framing_for(_CONTENT_TYPE_OF[self.framing], **self._framing_options())
        decoder = framing.decoder(self.journal, base)
        envs = self._feed_decoder(decoder, data)
        try:
            decoder.close()
        except FramingError as e:
            self._bad_frame(e)
        return self._from_envelopes(envs, data, base)

    def _framing_options(self) -> dict[str, str]:
        return {"uuid_pointer": "/" + "/".join(self._pointer_raw())} if self.framing == "json" else {}

    def _pointer_raw(self) -> list[str]:
        return [t.replace("~", "~0").replace("/", "~1") for t in self._tokens]

    def _feed_decoder(self, decoder: object, data: bytes) -> list[Envelope]:
        envs: list[Envelope] = []
        pending = data
        while True:
            try:
                envs.extend(decoder.feed(pending))  # type: ignore[attr-defined]
                return envs
            except FramingError as e:
                envs.extend(e.envelopes)
                self._bad_frame(e)
                pending = b""

    def _feed_stateful(self, begin: int, content: bytes) -> pa.Table:
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = framing_for(_CONTENT_TYPE_OF[self.framing]).decoder(self.journal, begin)
            self._buffer_base = begin
            self._buffer = b""
        # Keep the bytes of frames not yet complete, so values can be sliced by offset.
        data = self._buffer + content
        base = self._buffer_base
        envs = self._feed_decoder(decoder, content)
        consumed = decoder.offset - base
        self._buffer, self._buffer_base = data[consumed:], decoder.offset
        return self._from_envelopes(envs, data, base)

    def _from_envelopes(self, envs: list[Envelope], data: bytes, base: int) -> pa.Table:
        n = len(envs)
        begins = np.fromiter((e.begin for e in envs), np.int64, n)
        ends = np.fromiter((e.end for e in envs), np.int64, n)
        clock = np.fromiter((e.clock for e in envs), np.uint64, n)
        flags = np.fromiter((e.flags for e in envs), np.int32, n)
        present = np.fromiter((bool(e.producer) for e in envs), bool, n)
        uuids = pa.array([str(e.uuid) if e.producer else None for e in envs], pa.string())
        if self.framing == "fixed":
            values = pa.array([data[e.begin - base + 8 : e.end - base] for e in envs], pa.binary())
            return self._assemble(begins, ends, uuids, present, clock, flags, b"", None, None, values)
        starts = begins - base
        fields = None
        if self.fields is not None and self.framing == "json":
            frames = b"".join(data[s : s + (e - b)] for s, b, e in zip(starts, begins, ends, strict=True))
            try:
                fields = self._read_json(frames, self.fields) if frames else None
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise self._schema_error(e) from None
        values = pa.array(
            [
                data[s : s + (e - b)].rstrip(b"\n").decode("utf-8", "replace")
                for s, b, e in zip(starts, begins, ends, strict=True)
            ],
            pa.string(),
        )
        return self._assemble(begins, ends, uuids, present, clock, flags, b"", None, fields, values)

    def _schema_error(self, e: Exception) -> SchemaMismatchError:
        text = str(e)
        m = _COLUMN_RE.search(text)
        field = m.group(1) if m else "?"
        return SchemaMismatchError(
            f"journal {self.journal} ({self._where}): message field {field} does not fit the schema "
            f"{self.fields}: {text}"
        )

    def _assemble(
        self,
        begins: np.ndarray,
        ends: np.ndarray,
        uuids: pa.Array | None,
        present: np.ndarray | None,
        clock: np.ndarray | None,
        flags: np.ndarray | None,
        data: bytes,
        lines: tuple[np.ndarray, np.ndarray] | None,
        fields: pa.Table | None = None,
        values: pa.Array | None = None,
        uuid_text: np.ndarray | None = None,
    ) -> pa.Table:
        """The internal table. UUIDs come either as `uuids` (strings, the Decoder path) or as
        `uuid_text`, split_uuids' lower-case byte matrix of the present ones (the fast path)."""
        n = len(begins)
        wanted = self.columns
        want_value = wanted is None or "value" in wanted
        if values is None and want_value:
            if lines is not None and n:
                values = _text_values(data, *lines)
            else:
                values = pa.nulls(0, pa.binary() if self.framing == "fixed" else pa.string())
        cols: dict[str, pa.Array] = {
            "begin": from_numpy(begins, pa.int64()),
            "end": from_numpy(ends, pa.int64()),
        }
        if self.isolation != "raw":
            if clock is None:
                clock = np.zeros(n, np.uint64)
                flags = np.zeros(n, np.int32)
                present = np.zeros(n, bool)
            assert present is not None and flags is not None
            if np.any(clock >= np.uint64(CLOCK_LIMIT)):
                raise SchemaMismatchError(f"journal {self.journal} ({self._where}) has a UUID clock >= 2^63")
            if wanted is not None and "uuid" not in wanted and "producer" not in wanted:
                pass
            elif uuid_text is not None and len(uuid_text):
                cols["uuid"] = _fixed_width_strings(uuid_text, present)
                cols["producer"] = _fixed_width_strings(uuid_text[:, PRODUCER_CHARS], present)
            elif uuids is None or not present.any():
                cols["uuid"] = pa.nulls(n, pa.string())
                cols["producer"] = pa.nulls(n, pa.string())
            else:
                absent = ~present
                lowered = pc.utf8_lower(uuids.cast(pa.string()))
                cols["uuid"] = pc.if_else(pa.array(absent), pa.scalar(None, pa.string()), lowered)
                cols["producer"] = pc.utf8_slice_codeunits(cols["uuid"], 24, 36)
            cols["clock"] = from_numpy(clock.astype(np.int64), pa.int64())
            cols["flags"] = from_numpy(flags, pa.int32())
        if want_value:
            cols["value"] = values
        table = pa.Table.from_arrays(list(cols.values()), names=list(cols))  # pa.table() imports pandas
        if self.fields is not None and self.isolation != "raw":
            if fields is None or fields.num_rows != n:
                fields = pa.Table.from_arrays([pa.nulls(n, f.type) for f in self.fields], schema=self.fields)
            for f in self.fields:
                table = table.append_column(f.name, fields.column(f.name))
        return table


_FRAMING_HINT = (
    " (the framing was guessed as JSON lines because option framing is not set; "
    "set it to one of json, csv, fixed, lines)"
)


def iter_contents(fragments: tuple[Fragment, ...], ignore_corrupt: bool) -> Iterator[tuple[Fragment, bytes]]:
    for f in fragments:
        content = read_content(f, ignore_corrupt)
        if content is not None:
            yield f, content


def infer_fields(contents: Iterator[bytes], sampling_bytes: int) -> pa.Schema | None:
    """The Arrow schema pyarrow infers from up to `sampling_bytes` of whole JSON lines."""
    sample = bytearray()
    for content in contents:
        sample += content[: max(0, sampling_bytes - len(sample))]
        if len(sample) >= sampling_bytes:
            break
    cut = bytes(sample[: sample.rfind(b"\n") + 1])
    if not cut.strip():
        return None
    try:
        return pj.read_json(
            io.BytesIO(cut), read_options=pj.ReadOptions(block_size=max(1 << 20, len(cut) + 1))
        ).schema
    except pa.ArrowInvalid as e:
        raise FramingMismatchError(
            f"cannot infer a schema: the sampled content is not JSON lines ({e}); give option schema or "
            "inferSchema=false, or set option framing"
        ) from None
