"""The `gazette` PySpark data source: DataSource, its batch reader and input partitions.

`schema()` and `partitions()` run in driver-side Python workers (discovery, sampling, planning);
`read()` runs in executors on a pickled reader and yields Arrow batches cast to the exact Spark
schema. Filters on journal, begin and published_at are claimed and applied row-exactly after the
commit decision; fragments are pruned by them only where that cannot change a decision. Kafka's
startingOffsets / endingOffsets bound a batch read per journal like beginOffset / endOffset (rows
whose begin is in [start, end)); commits are still decided from each journal's start.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from fragments_io.decide import Decider
from fragments_io.decode import (
    JournalDecoder,
    from_numpy,
    infer_fields,
    published_at_us,
    published_us,
    to_numpy,
)
from fragments_io.discovery import discover
from fragments_io.errors import OptionError, SchemaMismatchError, data_loss
from fragments_io.live import iter_contents as live_contents
from fragments_io.options import ReadOptions, check_batch, parse_options
from fragments_io.planning import RowBounds, Task, plan_partitions, spans

SOURCE_NAME = "gazette"
METADATA_NAMES = ("journal", "begin", "end", "uuid", "producer", "clock", "published_at", "flags", "value")


def metadata_fields(opts: ReadOptions) -> list[StructField]:
    value = StructField("value", BinaryType() if opts.framing == "fixed" else StringType(), True)
    if opts.isolation == "raw":
        return [
            StructField("journal", StringType(), True),
            StructField("begin", LongType(), True),
            StructField("end", LongType(), True),
            value,
        ]
    return [
        StructField("journal", StringType(), True),
        StructField("begin", LongType(), True),
        StructField("end", LongType(), True),
        StructField("uuid", StringType(), True),
        StructField("producer", StringType(), True),
        StructField("clock", LongType(), True),
        StructField("published_at", TimestampType(), True),
        StructField("flags", IntegerType(), True),
        value,
    ]


def _nulls_as_strings(t: pa.DataType) -> pa.DataType:
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nulls_as_strings(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_nulls_as_strings(t.value_type))
    return t


def inferred_schema(opts: ReadOptions) -> StructType:
    """Metadata columns plus the message fields inferred from a sample of the selected journals."""
    base = metadata_fields(opts)
    if opts.isolation == "raw" or not opts.infer_schema or (opts.framing or "json") != "json":
        return StructType(base)
    journals = discover(opts).journals

    def contents() -> Iterator[bytes]:
        for j in journals:
            if j.framing != "json":
                continue
            for _, content in live_contents(spans(j), opts):
                yield content

    arrow = infer_fields(contents(), opts.sampling_bytes)
    if arrow is None:
        return StructType(base)
    arrow = pa.schema([pa.field(f.name, _nulls_as_strings(f.type)) for f in arrow])
    fields = from_arrow_schema(arrow, prefer_timestamp_ntz=False).fields
    for f in fields:
        if f.name in METADATA_NAMES:
            raise SchemaMismatchError(
                f"message field {f.name!r} (inferred) has the name of a metadata column; give option schema "
                "without it, or read it from the value column"
            )
    return StructType(base + list(fields))


class GazetteDataSource(DataSource):
    """`spark.read.format("gazette")`: journals' messages from persisted fragments (and, for live
    reads, the committed rest up to each journal's write head through brokers: fragments_io.live)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._raw_options = dict(options)

    @functools.cached_property
    def opts(self) -> ReadOptions:
        """The read options, parsed on first use by a read (a write takes other options: sink_options)."""
        return parse_options(self._raw_options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType | str:
        if self.opts.schema is not None and self.opts.isolation != "raw":
            ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in metadata_fields(self.opts))
            return f"{ddl}, {self.opts.schema}"
        return inferred_schema(self.opts)

    def reader(self, schema: StructType) -> GazetteReader:
        check_batch(self.opts)
        return GazetteReader(self.opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        from fragments_io.streaming import GazetteStreamReader

        return GazetteStreamReader(self.opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """`df.write.format("gazette")`: the exactly-once sink (fragments_io.sink, docs/sink.md)."""
        from fragments_io.sink import GazetteBatchWriter, plan_write
        from fragments_io.sink_options import parse_write_options

        opts = parse_write_options(self._raw_options, streaming=False)
        _append_only(overwrite)
        return GazetteBatchWriter(plan_write(opts, schema, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 (Spark's name)
        """`df.writeStream.format("gazette")`: each micro-batch exactly once (fragments_io.sink)."""
        from fragments_io.sink import GazetteStreamWriter, plan_write
        from fragments_io.sink_options import parse_write_options

        opts = parse_write_options(self._raw_options, streaming=True)
        _append_only(overwrite)
        return GazetteStreamWriter(plan_write(opts, schema, streaming=True))


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError("journals are append-only: write to gazette with mode append, not overwrite")


@dataclasses.dataclass(frozen=True)
class GazettePartition(InputPartition):
    tasks: tuple[Task, ...]

    def __init__(self, tasks: Sequence[Task]) -> None:
        object.__setattr__(self, "tasks", tuple(tasks))
        object.__setattr__(self, "value", None)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _micros(value: Any) -> int | None:
    """Microseconds since the epoch of a pushed timestamp (naive ones are local, as Spark gives them)."""
    if not isinstance(value, dt.datetime):
        return None
    aware = value if value.tzinfo else value.astimezone()
    return (aware - _EPOCH) // dt.timedelta(microseconds=1)


class GazetteReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.bounds = RowBounds().and_(
            begin_lo=opts.begin_offset,
            begin_hi=opts.end_offset,
            mod_time_lo=opts.begin_mod_time,
            mod_time_hi=opts.end_mod_time,
            begin_lo_of=tuple((j, o) for j, o in opts.starting_offsets if o >= 0) or None,
            begin_hi_of=tuple((j, o) for j, o in opts.ending_offsets if o >= 0) or None,
        )
        names = [f.name for f in schema.fields]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaMismatchError(f"schema has duplicate column(s) {dupes}")
        meta = {f.name: f for f in metadata_fields(opts)}
        self.field_names = [f.name for f in schema.fields if f.name not in meta]
        if opts.isolation == "raw" and self.field_names:
            raise SchemaMismatchError(
                f"isolation=raw yields only {list(meta)}; the schema also has {self.field_names}"
            )
        field_struct = StructType([f for f in schema.fields if f.name not in meta])
        self.fields_arrow = to_arrow_schema(field_struct, timezone="UTC") if field_struct.fields else None
        self.target = to_arrow_schema(schema, timezone="UTC")
        # The costly metadata columns are built only when the schema or the commit decision needs them.
        wanted = {name for name in ("uuid", "producer", "value") if name in self.target.names}
        if opts.isolation == "committed":
            wanted.add("producer")
        self.columns = frozenset(wanted)

    # -- planning (driver) -----------------------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        for f in filters:
            narrowed = self._bound(f)
            if narrowed is None:
                yield f
            else:
                self.bounds = narrowed

    def _bound(self, f: Filter) -> RowBounds | None:
        """The bounds narrowed by `f` if it is one applied row-exactly, else None (Spark keeps it)."""
        attr = getattr(f, "attribute", None)
        if not attr or len(attr) != 1:
            return None
        column, value = attr[0], getattr(f, "value", None)
        b = self.bounds
        if column == "journal":
            if isinstance(f, EqualTo) and isinstance(value, str):
                return b.and_(journal_in=frozenset([value]))
            if (
                isinstance(f, In)
                and isinstance(value, tuple | list)
                and all(isinstance(v, str) for v in value)
            ):
                return b.and_(journal_in=frozenset(value))
            if isinstance(f, StringStartsWith) and isinstance(value, str):
                return b.and_(journal_prefixes=(value,))
            return None
        if column == "begin" and isinstance(value, int) and not isinstance(value, bool):
            return self._range(f, value, "begin_lo", "begin_hi")
        if column == "published_at":
            us = _micros(value)
            return None if us is None else self._range(f, us, "published_lo_us", "published_hi_us")
        return None

    def _range(self, f: Filter, v: int, lo: str, hi: str) -> RowBounds | None:
        b = self.bounds
        if isinstance(f, EqualTo):
            return b.and_(**{lo: v, hi: v + 1})
        if isinstance(f, GreaterThan):
            return b.and_(**{lo: v + 1})
        if isinstance(f, GreaterThanOrEqual):
            return b.and_(**{lo: v})
        if isinstance(f, LessThan):
            return b.and_(**{hi: v})
        if isinstance(f, LessThanOrEqual):
            return b.and_(**{hi: v + 1})
        return None

    def partitions(self) -> list[GazettePartition]:
        found = discover(self.opts)
        starts = dict(self.opts.starting_offsets)
        for j in found.journals:
            lo = starts.get(j.name, -1)
            covered = spans(j) if lo >= 0 and self.bounds.journal_ok(j.name) else []
            if covered and lo < covered[0].begin:
                first = covered[0].begin
                data_loss(self.opts.fail_on_data_loss, j.name, lo, first, "that startingOffsets asks for")
        # Spark's file sources spread a read over defaultParallelism; a Python planner cannot see
        # it, so the cores of the machine planning the read stand in (exact for local[*] masters).
        min_partitions = self.opts.min_partitions or os.cpu_count() or 1
        parts = plan_partitions(
            found.journals, self.opts.isolation, self.bounds, self.opts.max_partition_bytes, min_partitions
        )
        return [GazettePartition(p) for p in parts]

    # -- reading (executors) ---------------------------------------------------------------------

    def read(self, partition: GazettePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        produced = False
        for task in partition.tasks:
            tables = self._committed(task) if self.opts.isolation == "committed" else self._uncommitted(task)
            for table, mod_time, keep in tables:
                out = self._shape(table, task.journal, mod_time, keep)
                if out.num_rows:
                    produced = True
                    yield from out.to_batches()
        if not produced:
            yield pa.RecordBatch.from_pylist([], schema=self.target)

    def _decoder(self, task: Task) -> JournalDecoder:
        return self.decoder_for(task.journal, task.framing)

    def decoder_for(self, journal: str, framing: str) -> JournalDecoder:
        """A decoder of `journal`'s content into this reader's columns (message fields included)."""
        return JournalDecoder(
            journal,
            framing,
            self.opts.isolation,
            self.opts.uuid_pointer,
            self.fields_arrow,
            strict=self.opts.store is not None and self.opts.framing is None,
            columns=self.columns,
        )

    def _tables(self, task: Task) -> Iterator[tuple[pa.Table, int]]:
        dec = self._decoder(task)
        for f, content in live_contents(task.fragments, self.opts):
            yield dec.feed(f, content), f.mod_time
        yield dec.finish(), 0

    def _uncommitted(self, task: Task) -> Iterator[tuple[pa.Table, int, np.ndarray | None]]:
        for table, mod_time in self._tables(task):
            yield table, mod_time, None

    def _committed(self, task: Task) -> Iterator[tuple[pa.Table, int, np.ndarray | None]]:
        return commit_masks(Decider(task.journal), self._tables(task))

    def _shape(
        self, table: pa.Table, journal: str, mod_time: int, keep: np.ndarray | None = None
    ) -> pa.Table:
        """The rows of `keep` (a mask, None: all) within the row bounds, as the columns of the Spark
        schema, in order, cast exactly; only the schema's columns are filtered, in one pass."""
        b = self.bounds
        n = table.num_rows
        mask = keep
        if n and (b.mod_time_lo is not None or b.mod_time_hi is not None):
            if (b.mod_time_lo is not None and mod_time < b.mod_time_lo) or (
                b.mod_time_hi is not None and mod_time >= b.mod_time_hi
            ):
                mask = np.zeros(n, bool)
        lo, hi = b.begin_range(journal)
        if (lo is not None or hi is not None) and n:
            begins = to_numpy(table.column("begin"))
            m = np.ones(n, bool)
            if lo is not None:
                m &= begins >= lo
            if hi is not None:
                m &= begins < hi
            mask = m if mask is None else mask & m
        published = None
        if self.opts.isolation != "raw" and (b.published_lo_us is not None or b.published_hi_us is not None):
            clock = to_numpy(table.column("clock"))
            micros = published_us(clock)
            m = clock != 0  # no UUID, no publish time: outside every bound
            if b.published_lo_us is not None:
                m &= micros >= b.published_lo_us
            if b.published_hi_us is not None:
                m &= micros < b.published_hi_us
            mask = m if mask is None else mask & m
        if mask is not None and mask.all():
            mask = None
        if self.opts.isolation != "raw" and "published_at" in self.target.names:
            published = published_at_us(to_numpy(table.column("clock")))
        cols = []
        for field in self.target:
            name = field.name
            if name == "journal":
                col: Any = _repeated(journal, n)
            elif name == "published_at":
                assert published is not None
                col = published.cast(pa.timestamp("us", tz="UTC"))
            elif name in table.column_names:
                col = table.column(name)
            else:
                col = pa.nulls(n, field.type)
            if col.type != field.type:
                try:
                    col = col.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SchemaMismatchError(
                        f"journal {journal}: column {name!r} of type {col.type} does not cast to {field.type}: {e}"
                    ) from None
            cols.append(col)
        out = pa.Table.from_arrays(cols, schema=self.target)
        return out if mask is None else out.filter(from_numpy(mask, pa.bool_()))


class Tracker(Protocol):
    """What commit_masks needs of a commit decision: Decider, or CommitTracker (the Sequencer)."""

    def add(self, first_id: int, begins: Any, ends: Any, producers: Any, clocks: Any, flags: Any) -> None: ...
    def open_horizon(self) -> int | None: ...
    def take_committed(self, first_id: int, count: int) -> np.ndarray: ...


def _repeated(value: str, n: int) -> pa.Array:
    """A string column of `value` n times (pa.repeat's scalar imports pandas on first use)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] >= 1 << 31:
        return pa.repeat(pa.scalar(value, pa.string()), n)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw * n))


def commit_filter(tracker: Tracker, tables: Iterable[tuple[pa.Table, int]]) -> Iterator[tuple[pa.Table, int]]:
    """The committed rows of `tables` (one journal's, in offset order, each with its mod_time),
    decided by `tracker`. A table is held until no transaction open before its end remains."""
    for table, mod_time, mask in commit_masks(tracker, tables):
        yield table.filter(from_numpy(mask, pa.bool_())), mod_time


def commit_masks(
    tracker: Tracker, tables: Iterable[tuple[pa.Table, int]]
) -> Iterator[tuple[pa.Table, int, np.ndarray]]:
    """As commit_filter, each table whole with the mask of its committed rows."""
    held: list[tuple[pa.Table, int, int, int]] = []  # (table, first row id, last end, mod_time)
    next_id = 0

    def release(horizon: int | None) -> Iterator[tuple[pa.Table, int, np.ndarray]]:
        while held and (horizon is None or held[0][2] <= horizon):
            table, first, _, mod_time = held.pop(0)
            yield table, mod_time, tracker.take_committed(first, table.num_rows)

    for table, mod_time in tables:
        n = table.num_rows
        if n:
            ends = to_numpy(table.column("end"))
            tracker.add(
                next_id,
                to_numpy(table.column("begin")),
                ends,
                table.column("producer"),
                to_numpy(table.column("clock")),
                to_numpy(table.column("flags")),
            )
            held.append((table, next_id, int(ends[-1]), mod_time))
            next_id += n
        yield from release(tracker.open_horizon())
    yield from release(None)
