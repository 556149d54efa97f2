"""The transaction loop's columnar path: raw reads of the sources, one table per chunk for a
BatchApplication (docs/semantics.md#consumer-applications).

Where the per-message path decodes each read chunk into envelopes and steps a Sequencer per
message, this one keeps a chunk's whole lines as bytes (`RawSource`), and on the shard's worker
thread decodes them into an Arrow table against the application's schema, decides what they commit
with a ColumnarSequencer (gazette.message.columnar) and hands that to `consume_batch` (`Columnar`).
A restored checkpoint's spans that began before it are replayed from the journal by `history`, read
on the event loop. Imported only for a BatchApplication: it needs pyarrow.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gazette.client.aio import AsyncClient
from gazette.message.columnar import ColumnarSequencer, decode_json_lines, empty_table
from gazette.message.framing.json_lines import DEFAULT_UUID_POINTER
from gazette.message.uuid import clock_from_unix_ns
from gazette.protocol.errors import StateError

if TYPE_CHECKING:
    from gazette.consumer.application import BatchApplication
    from gazette.consumer.transaction import TransactionLoop

log = logging.getLogger(__name__)

HISTORY_TIMEOUT_S = 120.0  # bound of one history read (a replay of rows before a restored checkpoint)


@dataclasses.dataclass
class RawChunk:
    """Whole JSON lines of `journal` from offset `base`; `table` once decoded (kept across a
    deferral, so a deferred chunk is not decoded twice)."""

    journal: str
    data: bytes
    base: int
    table: pa.Table | None = None

    @property
    def lines(self) -> int:
        return self.data.count(b"\n")


class RawSource:
    """A blocking read of one source journal from `offset`, in chunks of whole lines. Has the
    `journal`, `offset` and `write_head` the shard's lag metric reads."""

    def __init__(self, client: AsyncClient, journal: str, offset: int) -> None:
        self.client = client
        self.journal = journal
        self.offset = offset
        self.write_head = 0

    async def chunks(self) -> AsyncIterator[RawChunk]:
        """The journal's content as chunks of whole lines. At an offset jump (content gone) an
        incomplete line before it is dropped, with a warning, as ReadUncommitted does."""
        rest = b""
        base = expect = self.offset
        async for chunk in self.client.read(self.journal, self.offset, block=True):
            if chunk.offset != expect:
                log.warning(
                    "journal %s: read jumped from offset %d to %d (that content is gone)%s",
                    self.journal, expect, chunk.offset,
                    f"; {len(rest)} bytes of an incomplete line at {base} are dropped" if rest else "",
                )  # fmt: skip
                rest, base = b"", chunk.offset
            expect = chunk.offset + len(chunk.content)
            self.write_head = max(self.write_head, chunk.write_head)
            data = rest + chunk.content if rest else chunk.content
            cut = data.rfind(b"\n") + 1
            if cut:
                yield RawChunk(self.journal, data[:cut], base)
                base += cut
            rest = data[cut:]


class Columnar:
    """The columnar part of one primary's transaction loop: its ColumnarSequencer and how a chunk is
    decoded, decided and consumed (on the worker thread)."""

    def __init__(self, loop: TransactionLoop, app: BatchApplication) -> None:
        self.loop = loop
        self.app = app
        self.event_loop = asyncio.get_running_loop()
        shard = loop.shard
        self.schemas = {s.journal: app.source_schema(s.journal) for s in shard.spec.sources}
        self.pointers = {
            s.journal: str(
                (app.source_framing_options(s.journal) or {}).get("uuid_pointer", DEFAULT_UUID_POINTER)
            )
            for s in shard.spec.sources
        }
        self.sequencer = ColumnarSequencer(
            shard.spec.effective_ring_buffer_size, loop.restored.sequencer, self.history
        )

    def decode(self, journal: str, data: bytes, base: int) -> pa.Table:
        return decode_json_lines(journal, data, base, self.schemas[journal], self.pointers[journal])

    # -- history: rows before the restored checkpoint, for a replay --------------------------------

    def history(self, journal: str, lo: int, hi: int) -> pa.Table:
        """Rows of `journal`'s [lo, hi) (called on the worker thread, read on the event loop)."""
        future = asyncio.run_coroutine_threadsafe(self._read(journal, lo, hi), self.event_loop)
        return future.result(HISTORY_TIMEOUT_S)

    async def _read(self, journal: str, lo: int, hi: int) -> pa.Table:
        parts = [c.content async for c in self.loop.shard.client.read(journal, lo, block=True, end_offset=hi)]
        data = b"".join(parts)
        return self.decode(journal, data, lo) if data else empty_table(self.schemas[journal])

    # -- one chunk ------------------------------------------------------------------------------------

    def consume(self, chunk: RawChunk) -> tuple[int, bool]:  # on the worker thread
        """Decodes `chunk` (a FramingError naming the journal and offsets fails the shard), decides
        it, and hands the rows it commits to consume_batch (opening the transaction if none is).
        Returns (rows consumed, whether the application deferred the chunk)."""
        loop, app, seq = self.loop, self.app, self.sequencer
        if chunk.table is None:
            chunk.table = self.decode(chunk.journal, chunk.data, chunk.base)
        opening = loop._txn_messages == 0
        snap = seq.snapshot() if app.defers and not opening else None
        done = seq.add(chunk.journal, chunk.table)
        rows = done.num_rows
        if not rows:
            return 0, False
        shard = loop.shard
        if opening:
            loop.clock.update(
                clock_from_unix_ns(time.time_ns() + int(loop.hooks.publish_clock_delta_s * 1e9))
            )
            app.begin_txn(shard, loop.store)
        n = app.consume_batch(shard, loop.store, chunk.journal, done, loop.publisher)
        if n is None or (n == rows and not isinstance(n, bool)):
            loop._txn_messages += rows
            return rows, False
        if n == 0 and not isinstance(n, bool) and snap is not None:
            seq.restore(snap)
            return 0, True
        what = (
            "the first table of a transaction cannot be deferred"
            if opening
            else ("returning 0 defers the whole table, and only with `defers = True`")
        )
        raise StateError(
            f"shard {shard.id}: consume_batch returned {n!r} for a table of {rows} rows of {chunk.journal} "
            f"at [{chunk.base}, {chunk.base + len(chunk.data)}): None consumes them all; {what}"
        )

    def describe(self) -> dict[str, Any]:
        return self.sequencer.describe()
