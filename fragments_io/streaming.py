"""The `gazette` streaming source: each micro-batch returns the messages committed (or, uncommitted,
persisted) since the last one, exactly once. An offset is a consumer Checkpoint's dict form.

latestOffset runs the commit decision (fragments_io.decide: the Sequencer's, a table at a time) over
the new bytes' metadata on the driver (within the read limit) to compute the next checkpoint; read()
reruns it from the start checkpoint over exactly those bytes,
replaying transactions begun earlier from the bytes before the start. Gaps wait to be persisted,
except in live reads (fragments_io.live), where "available" reaches each journal's write head and
the bytes no fragment holds are read through brokers (by offsets, so a replanned batch reads the
same bytes whoever persisted them since); a next offset that retention pruned (before the journal's first fragment) fails the query, or with
failOnDataLoss=false is skipped with a warning. Spark's Kafka options startingOffsets and
maxOffsetsPerTrigger choose where journals start and how many bytes a micro-batch admits.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from fragments_io.decide import Decider
from fragments_io.decode import JournalDecoder, read_content
from fragments_io.discovery import JournalSource, discover
from fragments_io.errors import DataLossError, FragmentsIOError, OptionError, data_loss
from fragments_io.live import LiveRange, read_range
from fragments_io.options import BATCH_ONLY_OPTIONS, EARLIEST, KNOWN_OPTIONS, LATEST, ReadOptions
from fragments_io.planning import cover, pack_by_size, spans
from fragments_io.source import GazetteReader, commit_filter
from gazette.fragment.fragment import Fragment
from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.message.envelope import Envelope
from gazette.protocol.errors import ValidationError

log = logging.getLogger(__name__)

HISTORY_ID_BASE = 1 << 48  # row ids of rows before a batch's start (replays), apart from the batch's own


# -- offsets ---------------------------------------------------------------------------------------


def offset_of(offsets: dict[str, int], producers: Iterable[ProducerState]) -> dict[str, Any]:
    """A Spark offset: the checkpoint's dict form with journals and producers in a canonical order,
    so equal checkpoints serialise to equal JSON."""
    states = sorted(producers, key=lambda s: (s.journal, s.producer))
    return Checkpoint({j: offsets[j] for j in sorted(offsets)}, states).to_dict()


def checkpoint_of(offset: Any, what: str) -> Checkpoint:
    """The Checkpoint of a Spark offset (`what` names it in the error)."""
    try:
        return Checkpoint.from_dict(offset)
    except ValidationError as e:
        raise FragmentsIOError(
            f"the {what} offset of the gazette stream is not a consumer checkpoint: {e}"
        ) from None


# -- which bytes to read ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [begin, end) of a journal, read from `fragment`, which holds them. JournalDecoder is
    fed pieces in place of fragments: it reads begin, end and the object's name."""

    fragment: Fragment | LiveRange
    begin: int
    end: int

    @property
    def journal(self) -> str:
        return self.fragment.journal

    @property
    def backing_store(self) -> str:
        return self.fragment.backing_store

    @property
    def content_path(self) -> str:
        return self.fragment.content_path

    @property
    def length(self) -> int:
        return self.end - self.begin


def walk(
    fragments: Sequence[Fragment], lo: int, hi: int | None = None, live: Sequence[LiveRange] = ()
) -> tuple[list[Piece], int]:
    """Pieces reading [lo, reach) once, each offset from the covering fragment with the most content
    after it (as a broker's index would), or from a LiveRange of `live` (the offsets the fragments
    leave out, read through brokers); `reach` stops at `hi` or at the first offset neither holds (a
    gap: not persisted yet, or lost)."""
    covered: list[Any] = cover(fragments)  # sorted on begin and on end
    if live:
        covered = sorted([*covered, *live], key=lambda f: f.begin)
    begins = [f.begin for f in covered]
    pieces: list[Piece] = []
    pos = lo
    while hi is None or pos < hi:
        i = bisect.bisect_right(begins, pos) - 1
        if i < 0 or covered[i].end <= pos:
            break
        f = covered[i]
        end = f.end if hi is None else min(f.end, hi)
        pieces.append(Piece(f, pos, end))
        pos = end
    return pieces, pos


def closed(states: Iterable[ProducerState]) -> list[ProducerState]:
    """`states` with their open spans dropped (begin -1): the bytes of those spans were skipped."""
    return [dataclasses.replace(s, begin=-1) for s in states]


def piece_contents(pieces: Iterable[Piece], opts: ReadOptions) -> Iterator[tuple[Piece, bytes]]:
    """Each piece's decompressed bytes (a corrupt fragment skipped with ignoreCorruptFragments); a
    LiveRange's piece read through brokers, in pieces of its own."""
    for p in pieces:
        if isinstance(p.fragment, LiveRange):
            for r, data in read_range(dataclasses.replace(p.fragment, begin=p.begin, end=p.end), opts):
                yield Piece(r, r.begin, r.end), data
            continue
        content = read_content(p.fragment, opts.ignore_corrupt_fragments)
        if content is not None:
            yield p, content[p.begin - p.fragment.begin : p.end - p.fragment.begin]


def fair_shares(pending: dict[str, int], budget: int) -> dict[str, int]:
    """Splits `budget` over journals wanting `pending` bytes: equal shares, what a journal leaves
    unused going to the others (max-min fairness)."""
    shares: dict[str, int] = {}
    left = budget
    wants = sorted(pending.items(), key=lambda kv: (kv[1], kv[0]))
    for k, (journal, want) in enumerate(wants):
        give = min(want, left // (len(wants) - k))
        shares[journal] = give
        left -= give
    return shares


# -- partitions ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StreamTask:
    """One journal's part of a micro-batch: the bytes [begin, end), and for committed reads the
    producer states at `begin` (and those expected at `end`) and the bytes from the oldest open
    transaction's first message to `begin` (`history`), read only if a replay needs them."""

    journal: str
    framing: str
    begin: int
    end: int
    pieces: tuple[Piece, ...]
    states: tuple[ProducerState, ...] = ()
    end_states: tuple[ProducerState, ...] = ()
    history: tuple[Piece, ...] = ()
    skipped: bool = False  # failOnDataLoss=false skipped pruned bytes: end_states may not be reached

    @property
    def size(self) -> int:
        return self.end - self.begin


@dataclasses.dataclass(frozen=True)
class StreamPartition(InputPartition):
    tasks: tuple[StreamTask, ...]

    def __init__(self, tasks: Sequence[StreamTask]) -> None:
        object.__setattr__(self, "tasks", tuple(tasks))
        object.__setattr__(self, "value", None)


def pack(tasks: Sequence[StreamTask], max_partition_bytes: int) -> list[list[StreamTask]]:
    """Tasks into bins of at most `max_partition_bytes` (a bigger task is alone), largest first, each
    into the least-filled bin with room; deterministic for the same tasks."""
    return pack_by_size(tasks, max_partition_bytes)


# -- the reader ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Advance:
    """What latestOffset found for one journal: its new read-through offset and producer states."""

    offset: int
    states: list[ProducerState]
    rows: int


class GazetteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("gazette")`: offsets are consumer checkpoints (see the module).

    A stream starts at option checkpoint, or where startingOffsets says: `earliest` (the default:
    each journal's first persisted fragment), `latest` (the end of what is persisted), or a JSON
    object of journal -> offset (-2 earliest, -1 latest; unnamed journals start at `earliest`). An
    offset inside persisted content moves to the first message that begins at or after it; one not
    persisted yet is taken as given (a message boundary, such as a row's `end`). A stream started
    past a journal's beginning has no producer states from before it: a transaction open across the
    start delivers its messages from there on, and a message re-sent after the start of one
    acknowledged before it is delivered again. Journals appearing later start at their first
    persisted fragment. Spark keeps the start in its checkpoint with the first micro-batch; a query
    restarted before it had one asks again (so `latest` is then the end of what is persisted then).
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        batch_only = sorted(KNOWN_OPTIONS[k] for k in opts.given if k in BATCH_ONLY_OPTIONS)
        if batch_only:
            raise OptionError(
                f"option(s) {batch_only} apply to batch reads only; a stream starts where option "
                "startingOffsets or checkpoint says (default: each journal's first persisted fragment)"
            )
        self.opts = opts
        self.shaper = GazetteReader(opts, schema)  # columns, casts and the decoder of read()
        self.committed = opts.isolation == "committed"
        self._target: dict[str, int] | None = None  # availableNow: journals and offsets to stop at
        self._initial: dict[str, Any] | None = None

    # -- driver ------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        """Where the query starts, computed once per run: Spark asks at every trigger until a
        micro-batch is planned, and `latest` must not move meanwhile."""
        if self._initial is None:
            self._initial = self._start()
        return self._initial

    def _start(self) -> dict[str, Any]:
        given = Checkpoint({}, [])
        if self.opts.checkpoint is not None:
            given = Checkpoint.from_dict(json.loads(self.opts.checkpoint))
        offsets = dict(given.offsets)
        named = dict(self.opts.starting_offsets)
        default = EARLIEST if self.opts.starting_position == "earliest" else LATEST
        found = discover(self.opts).journals
        for j in found:
            if j.name not in offsets:
                start = self._start_offset(j, named.get(j.name, default))
                if start is not None:
                    offsets[j.name] = start
        seen = {j.name for j in found}
        for name, offset in named.items():
            if name not in seen and offset >= 0:
                offsets[name] = offset  # nothing persisted yet: read from there once it is
        producers = given.producers if self.committed else []
        return offset_of(offsets, producers)

    def _start_offset(self, j: JournalSource, want: int) -> int | None:
        """Where `j` starts for startingOffsets `want` (None: nothing persisted, join later)."""
        covered = spans(j)
        if not covered:
            return want if want >= 0 else None
        if want == EARLIEST:
            return covered[0].begin
        if want == LATEST:
            return covered[-1].end
        return self._align(j, covered, want)

    def _align(self, j: JournalSource, covered: list[Fragment], offset: int) -> int:
        """The begin of the first message at or after `offset` when persisted content holds it (a
        fragment begins at a message, so decoding starts at the one holding `offset`); `offset`
        itself otherwise (not persisted yet, or pruned: latestOffset decides)."""
        i = bisect.bisect_right([f.begin for f in covered], offset) - 1
        if i < 0 or covered[i].end <= offset or covered[i].begin == offset:
            return offset
        pieces, reach = walk(j.fragments, covered[i].begin, live=j.live)
        dec = self._metadata_decoder(j)
        for piece, content in piece_contents(pieces, self.opts):
            begins = dec.feed(cast(Fragment, piece), content).column("begin").to_numpy()
            k = int(np.searchsorted(begins, offset, side="left"))
            if k < len(begins):
                return int(begins[k])
        return reach

    def _metadata_decoder(self, j: JournalSource) -> JournalDecoder:
        return JournalDecoder(
            j.name,
            j.framing,
            "uncommitted" if self.committed else self.opts.isolation,
            self.opts.uuid_pointer,
            None,
            strict=self.opts.store is not None and self.opts.framing is None,
            columns=frozenset({"producer"}),
        )

    @staticmethod
    def _first_offset(j: JournalSource) -> int | None:
        covered = spans(j)
        return covered[0].begin if covered else None

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's name)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        """Fixes the journals and offsets this availableNow run ends at: what is persisted now."""
        target: dict[str, int] = {}
        for j in discover(self.opts).journals:
            covered = spans(j)
            if covered:
                target[j.name] = covered[-1].end
        self._target = target

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """The checkpoint after the messages persisted since `start`, within `limit` (ReadMaxBytes:
        content bytes, shared fairly among journals; ReadMaxRows: messages). At least one message is
        admitted when any is available. Returns `start` itself when nothing is new."""
        cp = checkpoint_of(start, "start")
        offsets = dict(cp.offsets)
        states: dict[str, list[ProducerState]] = {}
        for s in cp.producers:
            states.setdefault(s.journal, []).append(s)
        target = self._target
        pending: dict[str, tuple[JournalSource, list[Piece]]] = {}
        changed = False
        for j in discover(self.opts).journals:
            if target is not None and j.name not in target:
                continue  # availableNow: a journal that appeared after the run began
            lo = offsets.get(j.name)
            first = self._first_offset(j)
            if lo is None:
                if first is not None:  # a new journal joins at its first persisted offset
                    offsets[j.name] = first
                    changed = True
                continue
            if first is not None and lo < first:  # pruned by retention before it was read
                data_loss(self.opts.fail_on_data_loss, j.name, lo, first, "the stream reads next")
                offsets[j.name] = lo = first
                states[j.name] = closed(states.get(j.name, []))
                changed = True
            pieces, reach = walk(j.fragments, lo, None if target is None else target[j.name], j.live)
            if reach > lo:
                pending[j.name] = (j, pieces)

        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        rows_left = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if not isinstance(limit, ReadAllAvailable | ReadMaxBytes | ReadMaxRows):
            log.warning("gazette stream: read limit %r is not supported; reading all available", limit)
        shares: dict[str, int] = {}
        if max_bytes is not None:
            shares = fair_shares({n: sum(p.length for p in ps) for n, (_, ps) in pending.items()}, max_bytes)
        admitted = 0
        for name in sorted(pending):
            if rows_left is not None and rows_left <= 0:
                break
            j, pieces = pending[name]
            budget = shares.get(name) if max_bytes is not None else None
            adv = self._advance(j, offsets[name], states.get(name, []), pieces, budget, rows_left)
            if adv.rows:
                admitted += adv.rows
                offsets[name] = adv.offset
                states[name] = adv.states
                changed = True
                if rows_left is not None:
                    rows_left -= adv.rows
        if not admitted and pending:
            # Nothing fit the limit: admit the first message available, so the stream moves on.
            for name in sorted(pending):
                j, pieces = pending[name]
                adv = self._advance(j, offsets[name], states.get(name, []), pieces, None, 1)
                if adv.rows:
                    offsets[name] = adv.offset
                    states[name] = adv.states
                    changed = True
                    break
        if not changed:
            return start
        return offset_of(offsets, [s for js in states.values() for s in js] if self.committed else [])

    def _advance(
        self,
        j: JournalSource,
        lo: int,
        states: list[ProducerState],
        pieces: list[Piece],
        max_bytes: int | None,
        max_rows: int | None,
    ) -> _Advance:
        """Decodes `j` from `lo` (metadata only) through whole messages within the limits, feeding
        the committed reads' commit decision; its new read-through offset and producer states."""
        dec = self._metadata_decoder(j)
        decider = (
            Decider(j.name, checkpoint=Checkpoint({j.name: lo}, states), collect=False)
            if self.committed
            else None
        )
        offset, rows = lo, 0
        stop_at = None if max_bytes is None else lo + max_bytes
        for piece, content in piece_contents(pieces, self.opts):
            table = dec.feed(cast(Fragment, piece), content)
            n = table.num_rows
            if not n:
                continue
            ends = table.column("end").to_numpy()
            take = n
            if stop_at is not None:
                take = int(np.searchsorted(ends, stop_at, side="right"))
            if max_rows is not None:
                take = min(take, max_rows - rows)
            if decider is not None and take:
                decider.add(
                    rows,
                    table.column("begin").to_numpy()[:take],
                    None,
                    table.column("producer").slice(0, take),
                    table.column("clock").to_numpy()[:take],
                    table.column("flags").to_numpy()[:take],
                )
            if take:
                offset = int(ends[take - 1])
                rows += take
            if take < n:
                break
        if decider is None:
            return _Advance(offset, [], rows)
        return _Advance(offset, decider.states(), rows)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[StreamPartition]:
        """The tasks of the batch (start, end]: deterministic for the same offsets, since offsets
        pin the bytes and a journal's bytes never change (whichever fragments hold them)."""
        s, e = checkpoint_of(start, "start"), checkpoint_of(end, "end")
        found = {j.name: j for j in discover(self.opts).journals}
        tasks: list[StreamTask] = []
        for name, hi in sorted(e.offsets.items()):
            lo = s.offsets.get(name)
            if lo is None or hi <= lo:
                continue
            j = found.get(name)
            if j is None:
                raise FragmentsIOError(
                    f"journal {name} has offsets [{lo}, {hi}) in this micro-batch but is no longer in the store"
                )
            states = tuple(p for p in s.producers if p.journal == name)
            first = self._first_offset(j)
            skipped = False
            if first is not None and lo < first:  # as latestOffset did, or pruned since it ran
                data_loss(self.opts.fail_on_data_loss, name, lo, first, "of this micro-batch")
                lo, states, skipped = first, tuple(closed(states)), True
                if lo >= hi:
                    continue
            pieces, reach = walk(j.fragments, lo, hi, j.live)
            if reach < hi:
                raise FragmentsIOError(
                    f"journal {name}: offsets [{reach}, {hi}) of this micro-batch are no longer in the store "
                    "(fragments deleted since the batch was planned?)"
                )
            history: tuple[Piece, ...] = ()
            opens = [p.begin for p in states if 0 <= p.begin < lo]
            if self.committed and opens:
                since = min(opens)
                if not self.opts.fail_on_data_loss and first is not None:
                    since = max(since, first)  # _History skips what was pruned, with a warning
                history = tuple(walk(j.fragments, since, lo, j.live)[0])
            tasks.append(
                StreamTask(
                    name,
                    j.framing,
                    lo,
                    hi,
                    tuple(pieces),
                    states,
                    tuple(p for p in e.producers if p.journal == name),
                    history,
                    skipped,
                )
            )
        return [StreamPartition(p) for p in pack(tasks, self.opts.max_partition_bytes)]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # nothing to release: offsets live in Spark's checkpoint

    # -- executors ---------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, StreamPartition)
        produced = False
        for task in partition.tasks:
            tables = self._committed(task) if self.committed else self._uncommitted(task)
            for table in tables:
                out = self.shaper._shape(table, task.journal, 0)
                if out.num_rows:
                    produced = True
                    yield from out.to_batches()
        if not produced:
            yield pa.RecordBatch.from_pylist([], schema=self.shaper.target)

    def _tables(self, dec: JournalDecoder, pieces: Iterable[Piece]) -> Iterator[pa.Table]:
        for piece, content in piece_contents(pieces, self.opts):
            yield dec.feed(cast(Fragment, piece), content)
        yield dec.finish()

    def _uncommitted(self, task: StreamTask) -> Iterator[pa.Table]:
        return self._tables(self.shaper.decoder_for(task.journal, task.framing), task.pieces)

    def _committed(self, task: StreamTask) -> Iterator[pa.Table]:
        history = _History(self, task)
        tracker = Decider(
            task.journal,
            checkpoint=Checkpoint({task.journal: task.begin}, list(task.states)),
            history=history,
        )
        dec = self.shaper.decoder_for(task.journal, task.framing)
        tables = ((t, 0) for t in self._tables(dec, task.pieces))
        for table, _ in commit_filter(tracker, tables):
            yield table
        # Messages before the start that a transaction committed in this batch (replays).
        for table, first in history.tables:
            yield table.filter(pa.array(tracker.take_committed(first, table.num_rows)))
        final = tuple(tracker.states())
        if final != task.end_states and not task.skipped:
            raise FragmentsIOError(
                f"journal {task.journal}: the commit decision over offsets [{task.begin}, {task.end}) ended in "
                "other producer states than the micro-batch was planned with (did the store's content change?)"
            )


class _History:
    """The rows of a task's journal before its start, decoded on the first replay that needs them."""

    def __init__(self, reader: GazetteStreamReader, task: StreamTask) -> None:
        self.reader = reader
        self.task = task
        self.tables: list[tuple[pa.Table, int]] = []  # (table, first row id)
        self._envelopes: list[Envelope] | None = None
        self._begins: list[int] = []

    def __call__(self, lo: int, hi: int) -> list[Envelope]:
        task = self.task
        covered_lo = task.history[0].begin if task.history else task.begin
        covered_hi = task.history[-1].end if task.history else task.begin
        if lo < covered_lo or hi > covered_hi:
            gone = f"offsets [{min(lo, covered_hi)}, {max(hi, covered_lo)}) it needs are not in the store"
            if self.reader.opts.fail_on_data_loss:
                raise DataLossError(
                    f"journal {task.journal}: a transaction begun at offset {lo} commits in this micro-batch, "
                    f"but {gone} (pruned by retention? option failOnDataLoss=false skips them)"
                )
            log.warning(
                "journal %s: a transaction begun at offset %d commits in this micro-batch, but %s; delivering "
                "the rest of it (failOnDataLoss=false)",
                task.journal,
                lo,
                gone,
            )
            lo, hi = max(lo, covered_lo), min(hi, covered_hi)
        if self._envelopes is None:
            self._load()
        assert self._envelopes is not None
        i = bisect.bisect_left(self._begins, lo)
        k = bisect.bisect_left(self._begins, hi)
        return self._envelopes[i:k]

    def _load(self) -> None:
        task = self.task
        dec = self.reader.shaper.decoder_for(task.journal, task.framing)
        envelopes: list[Envelope] = []
        next_id = HISTORY_ID_BASE
        for table in self.reader._tables(dec, task.history):
            n = table.num_rows
            if not n:
                continue
            self.tables.append((table, next_id))
            cols = [table.column(c).to_pylist() for c in ("begin", "end", "producer", "clock", "flags")]
            for k, (begin, end, producer, clock, flags) in enumerate(zip(*cols, strict=True)):
                pid = bytes.fromhex(producer) if producer else b""
                envelopes.append(Envelope(task.journal, begin, end, next_id + k, None, pid, clock, flags))
            next_id += n
        self._envelopes = envelopes
        self._begins = [e.begin for e in envelopes]
