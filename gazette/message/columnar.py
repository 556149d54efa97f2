"""The columnar path of read-committed: JSON lines into Arrow tables, decided a table at a time.

Per-message reading builds one Python `Envelope` per message and steps a Sequencer for each; here a
read chunk of a journal becomes one `pyarrow.Table` (`decode_json_lines`: the lines parsed by
pyarrow.json against the application's schema, the UUID split into producer, clock and flags with
numpy), and `ColumnarSequencer` decides which of its rows commit with the vectorised Decider
(gazette.message.decide, the one implementation fragments_io's data source uses too). What a table
commits comes back as a table of the same columns, rows in journal order, ACKs left out.

Every table carries the metadata columns of `META` before the message fields: `_begin`, `_end`
(the frame's offsets), `_producer` (the UUID's producer id as 12 hex digits, null without a UUID),
`_clock` (int64; 0 without a UUID) and `_flags` (int32).

`ColumnarSequencer` keeps the Sequencer's checkpoint: after every `add` its `checkpoint()` equals
the one a Sequencer fed the same envelopes (and drained) would take, so either path restores from
either's checkpoint. It differs from the Sequencer in one respect: the rows a table commits come
out in journal order, not commit order (a span's members together at its ACK), so a caller can
defer a whole table (`snapshot`/`restore`), not a prefix of what it commits.
"""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.message.decide import Decider
from gazette.message.envelope import Envelope
from gazette.message.framing.base import FramingError
from gazette.message.framing.json_lines import DEFAULT_UUID_POINTER, parse_json_pointer
from gazette.message.sequencer import RING_SIZE_DEFAULT
from gazette.protocol.errors import ValidationError

__all__ = [
    "META",
    "ColumnarSequencer",
    "History",
    "ReadCommittedTables",
    "decode_json_lines",
    "empty_table",
    "encode_json_lines",
    "int_array",
    "int_values",
    "meta_schema",
]

META = ("_begin", "_end", "_producer", "_clock", "_flags")
_META_FIELDS = [
    pa.field("_begin", pa.int64(), nullable=False),
    pa.field("_end", pa.int64(), nullable=False),
    pa.field("_producer", pa.string()),
    pa.field("_clock", pa.int64(), nullable=False),
    pa.field("_flags", pa.int32(), nullable=False),
]
_UUID_CHARS = 36
_DASHES = [8, 13, 18, 23]
_HEX_COLS = np.array([i for i in range(_UUID_CHARS) if i not in _DASHES])
_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
_BLOCK_MAX = 1 << 26  # pyarrow.json block size cap: a line must fit in one block
_HISTORY_IDS = -(1 << 50)  # row ids of history tables (rows before a checkpoint): below every other

History = Callable[[str, int, int], pa.Table]  # (journal, begin, end) -> decoded rows of [begin, end)


_NUMPY_OF = {pa.int64(): np.int64, pa.int32(): np.int32}


def int_array(values: np.ndarray, type: pa.DataType = pa.int64()) -> pa.Array:  # noqa: A002 (pyarrow's name)
    """An int64 or int32 Arrow array (no nulls) on `values`' memory: pa.array() imports pandas on
    its first call, which costs a process about half a second (a consumer's first transaction)."""
    data = np.ascontiguousarray(values, dtype=_NUMPY_OF[type])
    return pa.Array.from_buffers(type, len(data), [None, pa.py_buffer(data)])


def meta_schema(fields: pa.Schema) -> pa.Schema:
    """The schema of decoded tables: META's columns, then `fields`."""
    return pa.schema([*_META_FIELDS, *fields])


def empty_table(fields: pa.Schema) -> pa.Table:
    return meta_schema(fields).empty_table()


def _parse_schema(fields: pa.Schema, tokens: tuple[str, ...]) -> pa.Schema:
    """`fields` plus the UUID's string member at `tokens` (nested structs for a deeper pointer)."""
    uuid_type: pa.DataType = pa.string()
    for tok in reversed(tokens[1:]):
        uuid_type = pa.struct([pa.field(tok, uuid_type)])
    top = tokens[0]
    if top in fields.names:
        if len(tokens) == 1:
            return fields
        raise ValidationError(f"message field {top!r} is also where the UUID pointer {tokens!r} begins")
    return pa.schema([*fields, pa.field(top, uuid_type)])


def _uuid_column(table: pa.Table, tokens: tuple[str, ...]) -> pa.Array:
    col = table.column(tokens[0]).combine_chunks()
    for tok in tokens[1:]:
        col = pc.struct_field(col, tok)
    return col


def _split_uuids(uuids: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array] | None:
    """(present, clock, flags, producer hex column) of a column of canonical v1 UUID strings (null or
    "" where absent), each step over the whole column, read from the column's buffers; None if a
    present value is not one."""
    n = len(uuids)
    uuids = uuids.cast(pa.string())
    validity, offsets_buf, data_buf = uuids.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, count=n + 1, offset=uuids.offset * 4)
    lengths = np.diff(offsets)
    present = lengths > 0
    if uuids.null_count and validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        present &= bits[uuids.offset : uuids.offset + n].astype(bool)
    clock = np.zeros(n, np.int64)
    flags = np.zeros(n, np.int32)
    count = int(present.sum())
    if not count:
        return present, clock, flags, pa.nulls(n, pa.string())
    if np.any(lengths[present] != _UUID_CHARS):
        return None
    data = np.frombuffer(data_buf, np.uint8)
    if count == n:  # the usual case: the values lie back to back, a reshape and no gather
        m = data[offsets[0] : offsets[0] + n * _UUID_CHARS].reshape(n, _UUID_CHARS)
    else:
        m = data[offsets[:-1][present][:, None] + np.arange(_UUID_CHARS)]
    if np.any(m[:, _DASHES] != ord("-")):
        return None
    digits = _HEX[m[:, _HEX_COLS]]
    if digits.max() > 15:
        return None
    b = (digits[:, 0::2].astype(np.uint64) << np.uint64(4)) | digits[:, 1::2].astype(np.uint64)  # 16 bytes

    def be(lo: int, hi: int) -> np.ndarray:
        out = np.zeros(count, np.uint64)
        for k in range(lo, hi):
            out = (out << np.uint64(8)) | b[:, k]
        return out

    time_low, time_mid, time_hi, seq = be(0, 4), be(4, 6), be(6, 8), be(8, 10)
    if np.any((time_hi >> np.uint64(12)) != 1) or np.any((seq >> np.uint64(14)) != 2):
        return None  # not version 1, or not the RFC 4122 variant
    ts = ((time_hi & np.uint64(0xFFF)) << np.uint64(48)) | (time_mid << np.uint64(32)) | time_low
    clock[present] = ((ts << np.uint64(4)) | ((seq >> np.uint64(10)) & np.uint64(0xF))).astype(np.int64)
    flags[present] = (seq & np.uint64(0x3FF)).astype(np.int32)
    # The producer: the node field's 12 digits, lower-cased (bit 0x20 lowers 'A'-'F' and leaves
    # '0'-'9' and 'a'-'f' alone), as fixed-width strings with nulls where absent.
    text = np.ascontiguousarray(m[:, 24:36] | np.uint8(0x20))
    lens = present.astype(np.int32) * np.int32(12)
    offs = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offs[1:])
    valid = pa.py_buffer(np.packbits(present, bitorder="little")) if count != n else None
    producer = pa.StringArray.from_buffers(
        n, pa.py_buffer(offs), pa.py_buffer(text.tobytes()), valid, n - count
    )
    return present, clock, flags, producer


def decode_json_lines(
    journal: str, data: bytes, base: int, fields: pa.Schema, uuid_pointer: str = DEFAULT_UUID_POINTER
) -> pa.Table:
    """The JSON-lines frames of `data` (journal offset `base`, ending on a line boundary) as a table of
    META's columns and `fields` (absent fields null; other members ignored). A line that is not a
    JSON object of those types, a blank line, or a UUID that is not a canonical v1 UUID string
    raises FramingError naming the journal and the offsets of the undecodable bytes."""
    if not data:
        return empty_table(fields)
    if data[-1:] != b"\n":
        raise ValueError(f"journal {journal!r}: data at offset {base} does not end on a line boundary")
    tokens = parse_json_pointer(uuid_pointer)
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10).astype(np.int64) + 1
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1]

    def bad(why: str) -> FramingError:
        return FramingError(
            f"journal {journal!r}: the JSON lines at [{base}, {base + len(data)}) cannot be decoded "
            f"as {fields}: {why}",
            journal=journal,
            begin=base,
            end=base + len(data),
        )

    try:
        table = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(
                block_size=max(1 << 20, min(len(data) + 1, _BLOCK_MAX)), use_threads=False
            ),
            parse_options=pj.ParseOptions(
                explicit_schema=_parse_schema(fields, tokens), unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise bad(str(e).splitlines()[0]) from None
    if table.num_rows != len(ends):
        raise bad(f"{len(ends)} lines hold {table.num_rows} JSON objects (a blank line?)")
    split = _split_uuids(_uuid_column(table, tokens))
    if split is None:
        raise bad("a UUID is not a canonical RFC 4122 version-1 UUID string")
    _, clock, flags, producer = split
    meta = [
        int_array(starts + base),
        int_array(ends + base),
        producer,
        int_array(clock),
        int_array(flags, pa.int32()),
    ]
    cols = [table.column(f.name) for f in fields]
    return pa.Table.from_arrays([*meta, *cols], schema=meta_schema(fields))


def int_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An int64 or int32 column without nulls as int64 numpy, read from its buffers (pyarrow's
    to_numpy() imports pandas on first use)."""
    if isinstance(column, pa.ChunkedArray):
        parts = [int_values(c) for c in column.chunks]
        return np.concatenate(parts) if len(parts) != 1 else parts[0]
    n = len(column)
    if not n:
        return np.zeros(0, np.int64)
    dtype = np.dtype(_NUMPY_OF[column.type])
    values = np.frombuffer(column.buffers()[1], dtype, count=n, offset=column.offset * dtype.itemsize)
    return values.astype(np.int64, copy=False)


@dataclasses.dataclass
class _Journal:
    """One journal's decision: its Decider, the next row id, and the tables whose rows may still
    commit (at or after the oldest open span), each with its first row id."""

    decider: Decider
    next_id: int = 0
    kept: list[tuple[int, pa.Table]] = dataclasses.field(default_factory=list)


class ColumnarSequencer:
    """A Sequencer over tables: `add(journal, table)` returns the rows that commit (see the module).

    With `checkpoint` it resumes where a Sequencer restored from it would (tables then start at
    each journal's read-through offset). A span begun before the checkpoint whose ACK needs a replay
    reads the rows before the checkpoint through `history(journal, begin, end)` (decoded tables);
    without `history` such a replay raises. Not thread-safe.
    """

    def __init__(
        self,
        ring_size: int = RING_SIZE_DEFAULT,
        checkpoint: Checkpoint | None = None,
        history: History | None = None,
    ) -> None:
        if isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size < 1:
            raise ValidationError(f"sequencer ring_size {ring_size!r} is not a positive integer")
        self.ring_size = ring_size
        self._restored = checkpoint or Checkpoint({}, [])
        self._history = history
        self._offsets: dict[str, int] = dict(self._restored.offsets)
        self._journals: dict[str, _Journal] = {}
        self._pending_base: list[object] = []  # open spans at the last checkpoint (has_pending)
        self._history_tables: list[tuple[int, pa.Table]] = []
        self._history_next = _HISTORY_IDS
        for s in self._restored.producers:
            self._journal(s.journal)
        self._pending_base = self._open_spans()

    # -- journals ----------------------------------------------------------------------------------

    def _journal(self, journal: str) -> _Journal:
        j = self._journals.get(journal)
        if j is None:
            restored = self._restored if any(s.journal == journal for s in self._restored.producers) else None
            history = (lambda lo, hi: self._read_history(journal, lo, hi)) if restored is not None else None
            j = self._journals[journal] = _Journal(Decider(journal, self.ring_size, restored, history))
        return j

    def _read_history(self, journal: str, lo: int, hi: int) -> list[Envelope]:
        """The Decider's history: rows of [lo, hi) as envelopes whose message is a row id; the rows
        are kept, under ids below every table's, for `add` to return those that commit."""
        if self._history is None:
            raise ValidationError(
                f"journal {journal!r}: a span begun before the checkpoint commits and needs a replay of "
                f"[{lo}, {hi}), and this ColumnarSequencer has no history reader"
            )
        table = self._history(journal, lo, hi)
        first = self._history_next
        self._history_next += table.num_rows
        self._history_tables.append((first, table))
        producers = table.column("_producer").to_pylist()
        begins, ends = int_values(table.column("_begin")), int_values(table.column("_end"))
        clocks, flags = int_values(table.column("_clock")), int_values(table.column("_flags"))
        return [
            Envelope(journal, int(begins[i]), int(ends[i]), first + i, None,
                     bytes.fromhex(producers[i] or ""), int(clocks[i]), int(flags[i]))
            for i in range(table.num_rows)
        ]  # fmt: skip

    # -- deciding ----------------------------------------------------------------------------------

    def add(self, journal: str, table: pa.Table) -> pa.Table:
        """Decides `table`'s rows (META columns first; they follow every row added before for
        `journal`, in journal order) and returns every row that commits now, ACKs excluded:
        its own and earlier tables' rows of spans it commits, in journal order."""
        j = self._journal(journal)
        n = table.num_rows
        if not n:
            return table
        first = j.next_id
        j.next_id += n
        j.kept.append((first, table))
        d = j.decider
        d.add(
            first,
            int_values(table.column("_begin")),
            None,
            table.column("_producer"),
            int_values(table.column("_clock")),
            int_values(table.column("_flags")),
        )
        self._offsets[journal] = int(table.column("_end")[n - 1].as_py())  # as the Sequencer, once drained
        ids = np.concatenate(d.committed) if len(d.committed) > 1 else d.committed[0] if d.committed else None
        d.committed = []
        out: list[pa.Table] = []
        replayed = False  # rows of history reads: each read's ids follow the last, not its offsets
        if ids is not None and len(ids):
            ids = np.unique(ids)
            for t_first, t in [*self._history_tables, *j.kept]:
                lo = np.searchsorted(ids, t_first)
                hi = np.searchsorted(ids, t_first + t.num_rows)
                if hi > lo:
                    out.append(t.take(int_array(ids[lo:hi] - t_first)))
                    replayed = replayed or t_first < 0
        self._history_tables = []
        horizon = d.open_horizon()
        if horizon is None:
            j.kept = []
        else:  # tables wholly before the oldest open span are decided for good
            j.kept = [(f, t) for f, t in j.kept if t.column("_end")[t.num_rows - 1].as_py() > horizon]
        if not out:
            return table.slice(0, 0)
        done = out[0] if len(out) == 1 else pa.concat_tables(out)
        return done.sort_by("_begin") if replayed else done

    def feed(self, tables: Iterable[tuple[str, pa.Table]]) -> Iterator[pa.Table]:
        """`add` of each (journal, table), yielding the non-empty tables of committed rows."""
        for journal, table in tables:
            done = self.add(journal, table)
            if done.num_rows:
                yield done

    # -- checkpoints --------------------------------------------------------------------------------

    @property
    def offsets(self) -> dict[str, int]:
        """Read-through offsets per journal (a copy): where to resume reading after a restore."""
        return dict(self._offsets)

    @property
    def dequeuing(self) -> bool:
        """Always False: an `add` returns everything it commits (the Sequencer's property, for callers
        that serve both)."""
        return False

    def _open_spans(self) -> list[object]:
        return [s for j in self._journals.values() for s in j.decider._spans.values()]

    def has_pending(self) -> bool:
        """True if a CONTINUE span was begun since the last checkpoint and is still open."""
        base = self._pending_base
        return any(all(s is not b for b in base) for s in self._open_spans())

    def checkpoint(self, prune_horizon: int | None = None) -> Checkpoint:
        """Offsets and producer states to restore from (a Sequencer's, see the module); clears
        `has_pending()`. With a positive `prune_horizon` (clock units), producers whose max clock is
        older than the newest last-ACK of their journal minus the horizon are forgotten."""
        if prune_horizon is not None and (
            isinstance(prune_horizon, bool) or not isinstance(prune_horizon, int) or prune_horizon < 0
        ):
            raise ValidationError(f"prune_horizon {prune_horizon!r} is not None or a clock interval >= 0")
        states: list[ProducerState] = []
        for name in sorted(self._journals):
            d = self._journals[name].decider
            if prune_horizon:
                d.forget_older_than(prune_horizon)
            states.extend(d.states())
        self._pending_base = self._open_spans()
        return Checkpoint(dict(self._offsets), states)

    def snapshot(self) -> ColumnarSequencer:
        """A copy to `restore` from: what deferring the tables added after it takes back."""
        snap = copy.copy(self)
        snap._offsets = dict(self._offsets)
        names = list(self._journals)
        # One deepcopy, so the open spans of _pending_base stay the very spans of the copied deciders.
        deciders, snap._pending_base = copy.deepcopy(
            ([self._journals[n].decider for n in names], self._pending_base)
        )
        snap._journals = {
            n: _Journal(d, self._journals[n].next_id, list(self._journals[n].kept))
            for n, d in zip(names, deciders, strict=True)
        }
        return snap

    def restore(self, snap: ColumnarSequencer) -> None:
        """Makes this sequencer what it was when `snap` was taken (see `snapshot`)."""
        self.__dict__.update(snap.snapshot().__dict__)

    def describe(self) -> dict[str, Any]:
        """A plain-data snapshot for Inspect, with the Sequencer's `describe()` keys (no ring, no
        outcome counts: the Decider keeps neither); `columnar` says which it is."""
        producers = []
        for name in sorted(self._journals):
            d = self._journals[name].decider
            for s in d.states():
                code = d._codes[s.producer.hex()]
                producers.append({
                    "journal": s.journal, "producer": s.producer.hex(), "min_clock": s.last_ack,
                    "max_clock": int(d._mx[code]), "begin": s.begin, "ring_entries": 0,
                    "pending": self.has_pending() and s.begin >= 0,
                })  # fmt: skip
        return {
            "offsets": dict(self._offsets),
            "producers": producers,
            "ring": {"size": self.ring_size, "occupied": 0, "head": 0},
            "dequeuing": None,
            "replaying": False,
            "pending": int(self.has_pending()),
            "queued": {},
            "replayed": {},
            "columnar": True,
        }


# -- the columnar read-committed reader ----------------------------------------------------------------


class ReadCommittedTables:
    """The committed messages of one JSON-lines journal as Arrow tables (`decode_json_lines`'
    columns, ACKs left out), one per read chunk that commits something: ReadCommitted's result
    without an envelope per message. From `offset` (with `checkpoint`, its read-through offset of
    the journal); `block=False` stops at the write head. A replay of rows before the offset (a
    span open at the checkpoint) reads them again. `checkpoint()` resumes after the last table
    yielded. Iterate over a sync `gazette.Client`; not thread-safe.
    """

    def __init__(
        self,
        client: Any,
        journal: str,
        fields: pa.Schema,
        offset: int = 0,
        *,
        block: bool = False,
        uuid_pointer: str = DEFAULT_UUID_POINTER,
        ring_size: int = RING_SIZE_DEFAULT,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.client = client
        self.journal = journal
        self.fields = fields
        self.uuid_pointer = uuid_pointer
        self.block = block
        self.offset = checkpoint.offsets.get(journal, offset) if checkpoint is not None else offset
        self.sequencer = ColumnarSequencer(ring_size, checkpoint, self._history)

    def _decode(self, data: bytes, base: int) -> pa.Table:
        return decode_json_lines(self.journal, data, base, self.fields, self.uuid_pointer)

    def _history(self, journal: str, lo: int, hi: int) -> pa.Table:
        data = b"".join(c.content for c in self.client.read(journal, lo, block=True, end_offset=hi))
        return self._decode(data, lo) if data else empty_table(self.fields)

    def checkpoint(self) -> Checkpoint:
        return self.sequencer.checkpoint()

    def __iter__(self) -> Iterator[pa.Table]:
        rest, base = b"", self.offset
        expect = self.offset
        for chunk in self.client.read(self.journal, self.offset, block=self.block):
            if chunk.offset != expect:  # content before it is gone: an incomplete line with it
                rest, base = b"", chunk.offset
            expect = chunk.offset + len(chunk.content)
            data = rest + chunk.content if rest else chunk.content
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                done = self.sequencer.add(self.journal, self._decode(data[:cut], base))
                base += cut
                if done.num_rows:
                    yield done


# -- framing tables as JSON lines (the publisher's table path) ----------------------------------------

_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'


def _json_values(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value of `column` as JSON text: integers and plain strings with Arrow kernels, anything
    else (strings needing escapes, floats, nested values) through orjson, value by value."""
    import orjson

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    if pa.types.is_integer(t):
        out = pc.cast(arr, pa.string())
    elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and not pc.any(
        pc.match_substring_regex(arr, _NEEDS_ESCAPE)
    ).as_py():
        out = pc.binary_join_element_wise('"', pc.cast(arr, pa.string()), '"', "")
    else:
        out = pa.array([orjson.dumps(v).decode() for v in arr.to_pylist()], pa.string())
    return pc.fill_null(out, "null") if out.null_count else out


def _uuid_texts(runs: list[tuple[range, str]], count: int) -> pa.Array:
    """The UUID texts of `runs` (UUIDText.runs: time_low values, the 28 characters they share) as a
    string column: the 8 hex digits of each time_low put together with numpy."""
    lows = (
        np.concatenate([np.arange(r.start, r.stop, r.step, dtype=np.int64) for r, _ in runs])
        if runs
        else np.zeros(0, np.int64)
    )
    if len(lows) != count:
        raise ValueError(f"{len(lows)} UUID texts for {count} messages")
    m = np.empty((count, _UUID_CHARS), np.uint8)
    shifts = np.arange(28, -1, -4, dtype=np.int64)
    m[:, :8] = _HEX_DIGITS[(lows[:, None] >> shifts) & 0xF]
    at = 0
    for r, rest in runs:
        m[at : at + len(r), 8:] = np.frombuffer(rest.encode(), np.uint8)
        at += len(r)
    offsets = np.arange(0, (count + 1) * _UUID_CHARS, _UUID_CHARS, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(m.tobytes()))


def encode_json_lines(table: pa.Table, uuid_pointer: str, runs: list[tuple[range, str]]) -> bytes:
    """The rows of `table` as JSON-lines frames, one object per row (its columns, in order, then the
    UUID at `uuid_pointer`, the next text of `runs` for each row), built column-wise with Arrow
    kernels. The top member of the pointer must not be a column (ValueError)."""
    tokens = parse_json_pointer(uuid_pointer)
    if tokens[0] in table.column_names:
        raise ValueError(f"column {tokens[0]!r} is where the UUID pointer {uuid_pointer!r} writes")
    import orjson

    n = table.num_rows
    if not n:
        return b""
    parts: list[Any] = []
    sep = "{"
    for name in table.column_names:
        parts += [sep + orjson.dumps(name).decode() + ":", _json_values(table.column(name))]
        sep = ","
    opening = sep + ":{".join(orjson.dumps(tok).decode() for tok in tokens) + ':"'
    parts += [opening, _uuid_texts(runs, n), '"' + "}" * len(tokens) + "\n"]  # nested objects, then the row's
    lines = pc.binary_join_element_wise(*parts, "")
    offsets = np.frombuffer(lines.buffers()[1], np.int32, count=n + 1, offset=lines.offset * 4)
    return lines.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]]
