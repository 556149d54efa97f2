"""Rows to messages for the `gazette` sink: the shape of a message per framing, and the journal of
each row (docs/sink.md).

A row becomes a message in one of two modes, chosen once per write from the DataFrame's schema:
- *value mode*, when a string or binary column is named `value`: that column is the whole message
  (a JSON object's text for JSON journals, one CSV record for CSV journals); other columns only route;
- *row mode* otherwise: the row is the message (a JSON object of its columns; for CSV, its columns
  after the leading UUID column).
The Publisher then places each message's UUID as the journal's framing does (the uuidPointer of
JSON, column 0 of CSV).

Routing to several journals hashes the key columns with 32-bit FNV-1a over the same bytes as
`gazette.message.mapping.key_bytes` (str as UTF-8, bytes as they are, integers as decimal text),
vectorized with numpy, and picks the journal as ModuloMapping or RendezvousMapping does over the
listing sorted by name: a Python Publisher with that mapping and a key function returning the same
value sends each row to the same journal.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from fragments_io.errors import OptionError, SinkRowError
from gazette.message.mapping import FNV32_OFFSET_BASIS, FNV32_PRIME, fnv1a32

JSON_CT = "application/x-ndjson"
CSV_CT = "text/csv"
SINK_FRAMINGS = {JSON_CT: "json", CSV_CT: "csv"}  # content types the sink can frame with a UUID
VALUE_COLUMN = "value"
_SHOWN_VALUE_CHARS = 120
_KEY_SEPARATOR = b"\x00"  # between the values of several key columns


def shown(value: Any) -> str:
    """A value as an error message shows it (cut to a readable length)."""
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[:_SHOWN_VALUE_CHARS] + "..."


@dataclasses.dataclass(frozen=True)
class Shape:
    """How one write turns its rows into messages: value mode or row mode, the columns, the key."""

    columns: tuple[str, ...]
    value_mode: bool
    key: tuple[str, ...]


def _json_unfit(t: pa.DataType) -> str | None:
    """Why a column of Arrow type `t` cannot be a JSON member as it is (None: it can)."""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return (
            "binary (JSON holds no bytes: cast it to a base64 or hex string, or write it as the value column)"
        )
    if pa.types.is_decimal(t):
        return "decimal (cast it to double or string)"
    if pa.types.is_map(t):
        return "a map (JSON objects are written from structs: use map_entries/struct, or to_json into value)"
    if pa.types.is_struct(t):
        for f in t:
            why = _json_unfit(f.type)
            if why:
                return why
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _json_unfit(t.value_type)
    return None


def shape_of(schema: pa.Schema, key: Sequence[str], framings: set[str]) -> Shape:
    """The Shape of a write of `schema` to journals of `framings` ("json", "csv"); OptionError naming
    a key column that is missing or unusable, or a column JSON cannot hold, before any task runs."""
    names = tuple(schema.names)
    for k in key:
        if k not in names:
            raise OptionError(
                f"option key names column {k!r}, which the DataFrame lacks (columns: {list(names)})"
            )
        t = schema.field(k).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or (pa.types.is_integer(t))):  # fmt: skip
            raise OptionError(
                f"key column {k!r} is {t}: keys are strings, bytes or integers (as the Python mappings' "
                "key_bytes); cast it"
            )
    value_mode = False
    if VALUE_COLUMN in names:
        t = schema.field(VALUE_COLUMN).type
        value_mode = (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or (pa.types.is_large_binary(t))
        )
    if not value_mode and "json" in framings:
        for f in schema:
            why = _json_unfit(f.type)
            if why:
                raise OptionError(f"column {f.name!r} cannot be a JSON member: it is {why}")
    return Shape(names, value_mode, tuple(key))


# --- messages ------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else value


def messages_of(batch: pa.RecordBatch, shape: Shape, framing: str, row0: int) -> list[Any]:
    """The messages of `batch`'s rows for a journal of `framing`; SinkRowError naming the row (its
    number in the task's input, from `row0`), the column and the value that cannot be framed."""
    if shape.value_mode:
        values = batch.column(VALUE_COLUMN).to_pylist()
        out: list[Any] = []
        for i, v in enumerate(values):
            if v is None:
                raise SinkRowError(f"row {row0 + i}: column 'value' is null; a message cannot be empty")
            try:
                out.append(_from_value(v, framing))
            except (ValueError, UnicodeDecodeError) as exc:
                raise SinkRowError(
                    f"row {row0 + i}: column 'value' holds {shown(v)}, which is not {_WHAT[framing]} ({exc})"
                ) from None
        return out
    if framing == "json":
        names = batch.schema.names
        columns = [_json_ready(col).to_pylist() for col in batch.columns]
        return [dict(zip(names, row)) for row in zip(*columns)]  # noqa: B905 (equal lengths; strict costs ~1 us a row)
    columns = [batch.column(c).to_pylist() for c in shape.columns]
    return [["", *(("" if v is None else v) for v in row)] for row in zip(*columns, strict=True)]


def _json_ready(col: pa.Array) -> pa.Array:
    """A top-level column as JSON will hold it, converted in Arrow where Python objects are costly:
    timestamps as RFC 3339 text in UTC (microseconds, `Z`; without a zone when the column has none),
    dates as ISO dates. Building datetimes per row costs several times the rest of a row."""
    t = col.type
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return pc.strftime(col, format="%Y-%m-%dT%H:%M:%S")
        return pc.strftime(col.cast(pa.timestamp(t.unit, tz="UTC")), format="%Y-%m-%dT%H:%M:%SZ")
    if pa.types.is_date(t):
        return pc.cast(col, pa.string())
    return col


_WHAT = {"json": "the text of a JSON object", "csv": "one CSV record"}


def _from_value(v: Any, framing: str) -> Any:
    if framing == "json":
        doc = orjson.loads(v)
        if type(doc) is not dict:
            raise ValueError(f"it is a JSON {type(doc).__name__}")
        return doc
    records = list(csv.reader(io.StringIO(_text(v))))
    if len(records) != 1:
        raise ValueError(f"it holds {len(records)} records")
    return ["", *records[0]]


def explain_unframable(batch: pa.RecordBatch, messages: list[Any], row0: int, exc: Exception) -> SinkRowError:
    """The SinkRowError of a batch whose messages the framing refused: finds the first row and
    column JSON cannot hold (rare: shape_of refused the column types that always fail)."""
    for i, m in enumerate(messages):
        try:
            orjson.dumps(m)
        except orjson.JSONEncodeError:
            if isinstance(m, dict):
                for name, v in m.items():
                    try:
                        orjson.dumps(v)
                    except orjson.JSONEncodeError as why:
                        return SinkRowError(
                            f"row {row0 + i}: column {name!r} holds {shown(v)}, not JSON ({why})"
                        )
            return SinkRowError(f"row {row0 + i}: {shown(m)} cannot be framed ({exc})")
    return SinkRowError(f"rows {row0}..{row0 + batch.num_rows - 1} cannot be framed: {exc}")


# --- routing -------------------------------------------------------------------------------------


def _key_binary(batch: pa.RecordBatch, key: Sequence[str], row0: int) -> pa.Array:
    """The bytes each row's key hashes, as one binary array (values of several columns joined by NUL)."""
    parts = []
    for k in key:
        col = batch.column(k)
        if col.null_count:
            i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise SinkRowError(f"row {row0 + i}: key column {k!r} is null; a null key maps to no journal")
        if pa.types.is_integer(col.type):
            col = pc.cast(col, pa.string())
        parts.append(pc.cast(col, pa.binary()))
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, _KEY_SEPARATOR)


def fnv1a32_array(arr: pa.Array) -> np.ndarray:
    """32-bit FNV-1a of each value of a binary array (no nulls), as uint32: equal to `fnv1a32` of each."""
    arr = pc.cast(arr, pa.large_binary())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    h = np.full(n, FNV32_OFFSET_BASIS, dtype=np.uint32)
    prime = np.uint32(FNV32_PRIME)
    longest = int(lengths.max()) if n else 0
    with np.errstate(over="ignore"):
        for p in range(longest):
            active = np.nonzero(lengths > p)[0]
            if len(active) == n:
                h = (h ^ data[starts + p]) * prime
            else:
                h[active] = (h[active] ^ data[starts[active] + p]) * prime
    return h


@dataclasses.dataclass(frozen=True)
class Router:
    """Which journal each row goes to: all to one, or by key over `journals` (sorted by name)."""

    journals: tuple[str, ...]
    key: tuple[str, ...] = ()
    mapping: str = "modulo"

    def route(self, batch: pa.RecordBatch, row0: int) -> np.ndarray | None:
        """The index into `journals` of each row (None: every row to the only journal)."""
        if not self.key:
            return None
        h = fnv1a32_array(_key_binary(batch, self.key, row0))
        if self.mapping == "modulo":
            return (h % np.uint32(len(self.journals))).astype(np.int64)
        names = np.array([fnv1a32(j.encode()) for j in self.journals], dtype=np.uint32)
        # The first journal of the highest score wins ties, as RendezvousMapping's strict '>' does.
        return np.argmax(h[:, None] ^ names[None, :], axis=1)


def split(messages: list[Any], index: np.ndarray | None, count: int) -> list[tuple[int, list[Any]]]:
    """(journal index, its messages in row order) of each journal with rows."""
    if index is None:
        return [(0, messages)] if messages else []
    out = []
    for j in range(count):
        rows = np.nonzero(index == j)[0]
        if len(rows):
            out.append((j, [messages[i] for i in rows.tolist()]))
    return out
