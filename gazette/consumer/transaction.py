"""The primary's transaction loop (docs/semantics.md#transaction-loop): read committed, consume, checkpoint,
commit, ACK.

Source readers decode each journal into the read channel (at most `read_channel_size` envelopes,
consumer/read_channel.py); one Sequencer turns those into committed envelopes.
A transaction consumes until nothing is ready once `min_txn_duration` has passed (or until
`max_txn_duration`), never while the previous transaction's commit or ACK appends are unfinished.
Its checkpoint (read-through offsets, producer states, ACK intents) commits with the store after every
pending append; the ACK intents are appended only after that commit (they depend on its future).
On start, the restored checkpoint's ACK intents are appended again before anything is read.
With a store's SideEffects, each commit also waits for the transaction's side effects to be prepared
and stores their registrations; they are published after the commit and before its ACK appends (a
new primary publishes the restored ones before re-appending the intents), and a background task owned
by the loop cleans up what fenced-out attempts staged, at start and every `cleanup_interval_s`.
Progress (read-through, publish-at, recent timings) is what the Shard service's Stat and Inspect read.
Sequencing and consuming run together on the shard's worker thread, one envelope at a time, so an
application's DeferToNextTransaction leaves its envelope (and everything after it) undelivered: the
checkpoint resumes at it. The shard's publisher clock moves to the wall time once per transaction.
A BatchApplication takes the columnar path instead (gazette.consumer.columnar): raw reads, and per
chunk one table decoded, decided and consumed on the worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from gazette.client.append_service import AppendFuture
from gazette.consumer.read_channel import ReadChannel
from gazette.consumer.side_effects import SideEffects
from gazette.consumer.store import ConsumerCheckpoint, Store
from gazette.message.envelope import Envelope
from gazette.message.publisher import Publisher
from gazette.message.reader import ReadUncommitted, replay_reader
from gazette.message.sequencer import PRUNE_HORIZON_24H_S, Sequencer, prune_horizon_clock
from gazette.message.sequencing import Replay, drive_spans
from gazette.message.uuid import Clock, clock_from_unix_ns
from gazette.protocol.errors import GazetteError, PeerError, StateError, StoreError
from gazette.protocol.status import Status

if TYPE_CHECKING:
    from gazette.consumer.application import Application
    from gazette.consumer.columnar import Columnar, RawChunk, RawSource
    from gazette.consumer.shard import Shard

log = logging.getLogger(__name__)

T = TypeVar("T")

RECENT_TXN_TIMINGS = 64  # completed transactions whose timings Inspect reports


@dataclasses.dataclass
class Hooks:
    """Fault-injection points for tests. `ack_gate(shard, checkpoint)` runs once a transaction's store
    commit succeeded; returning False holds its ACK appends forever (a crash between commit and ACK).
    `publish_clock_delta_s` shifts the shard clock (Gazette's PublishClockDelta,
    docs/semantics.md#transaction-loop)."""

    ack_gate: Callable[[Shard, ConsumerCheckpoint], bool] | None = None
    publish_clock_delta_s: float = 0.0  # added to the shard clock's time at each transaction's start


@dataclasses.dataclass(frozen=True, slots=True)
class TxnTiming:
    """One completed transaction: when it began (unix s), how many envelopes it consumed, and the
    seconds spent consuming (first message to commit start), committing (the store) and
    acknowledging (store commit to the last ACK append)."""

    began_at: float
    messages: int
    consume_s: float
    commit_s: float
    ack_s: float


@dataclasses.dataclass
class _Chunk:
    """A decoded read chunk being sequenced: `steps` is the sequencing driver over its envelopes
    (gazette.message.sequencing.drive_spans), suspended where a replay read or a deferral left it."""

    reader: ReadUncommitted
    envs: list[Envelope]
    steps: Iterator[list[Envelope] | Replay] | None = None


@dataclasses.dataclass
class _Txn:
    """A transaction that started committing: its commit future, the publication of its side effects
    (None: it has none) and the ACK appends depending on them."""

    checkpoint: ConsumerCheckpoint
    commit: concurrent.futures.Future
    acks: list[AppendFuture]
    published: concurrent.futures.Future | None = None
    began_at: float = 0.0  # unix seconds of its first message
    messages: int = 0
    consume_s: float = 0.0
    commit_started: float = 0.0  # time.monotonic() values
    committed: float = 0.0
    acked: float = 0.0
    publish_at: dict[str, int] = dataclasses.field(default_factory=dict)

    async def wait(self) -> None:
        # Shielded: cancelling this wait (the loop ending) must not cancel the store's commit future.
        await asyncio.shield(asyncio.wrap_future(self.commit))
        self.committed = time.monotonic()
        if self.published is not None:
            # Awaited even without ACKs: the next transaction commits only once this one's side effects
            # are published, so a new primary has only the last committed transaction's to publish.
            await asyncio.shield(asyncio.wrap_future(self.published))
        for ack in self.acks:
            res = await ack
            self.publish_at[res.journal] = max(self.publish_at.get(res.journal, 0), res.end)
        self.acked = time.monotonic()

    def timing(self) -> TxnTiming:
        return TxnTiming(
            self.began_at,
            self.messages,
            self.consume_s,
            max(0.0, self.committed - self.commit_started),
            max(0.0, self.acked - self.committed),
        )


class TransactionLoop:
    """Runs transactions of one primary shard until cancelled or until an error (which it raises)."""

    def __init__(
        self, shard: Shard, app: Application, store: Store, checkpoint: ConsumerCheckpoint, hooks: Hooks
    ) -> None:
        self.shard = shard
        self.app = app
        self.store = store
        self.hooks = hooks
        self.restored = checkpoint
        self.columnar: Columnar | None = None
        self.sequencer: Sequencer
        from gazette.consumer.application import BatchApplication

        if isinstance(app, BatchApplication):  # the columnar path (it needs pyarrow: imported here)
            from gazette.consumer.columnar import Columnar

            self.columnar = Columnar(self, app)
            # The ColumnarSequencer has what is used outside the per-message path: offsets,
            # dequeuing, has_pending, checkpoint and describe.
            self.sequencer = self.columnar.sequencer  # type: ignore[assignment]
        else:
            self.sequencer = Sequencer.from_checkpoint(
                checkpoint.sequencer, ring_size=shard.spec.effective_ring_buffer_size
            )
        # The shard's clock (docs/semantics.md#transaction-loop): its publisher never moves it; each
        # transaction moves it to the wall time at its beginning (plus `hooks.publish_clock_delta_s`).
        self.clock = Clock.now()
        self.publisher = Publisher(shard.client, service=shard.service, clock=self.clock)
        self.transactions = 0  # committed and acknowledged
        self.last_committed = checkpoint  # the checkpoint of the last completed transaction
        self.publish_at: dict[str, int] = {}  # per journal, the end of this primary's last ACK append
        self.timings: collections.deque[TxnTiming] = collections.deque(maxlen=RECENT_TXN_TIMINGS)
        self.stopped = False  # the loop exited (an error, or the shard was cancelled)
        self._progressed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Decoded batches between the source readers and this loop, bounded in envelopes (Gazette's
        # read channel of ShardSpec.read_channel_size).
        self._queue: ReadChannel[tuple[ReadUncommitted, list[Envelope]] | RawChunk | BaseException] = (
            ReadChannel(shard.spec.effective_read_channel_size)
        )
        self._get: asyncio.Task[Any] | None = None
        self._readers: list[asyncio.Task[None]] = []
        self.sources: list[ReadUncommitted | RawSource] = []  # one read of each source journal (metrics' lag)
        self._carry: _Chunk | RawChunk | None = (
            None  # a chunk a deferral interrupted: finished first next time
        )
        self._txn_messages = 0  # envelopes consumed by the open transaction (0: none open)
        self._sequencing = False  # the worker thread is using the sequencer
        self.side_effects = store.side_effects
        self._cleanup: asyncio.Task[None] | None = None  # the side effects' cleanup task
        self._described: dict[str, Any] = self.sequencer.describe()  # its last description

    async def in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.shard.worker, fn, *args)

    # ---- progress

    def describe_sequencer(self) -> dict[str, Any]:
        """The sequencer's `describe()` (for Inspect), from the loop thread: fresh unless the worker
        thread is sequencing right now (an application may block it), then the last one taken."""
        if not self._sequencing:
            self._described = self.sequencer.describe()
        return self._described

    async def wait_progress(self) -> None:
        """Returns once the shard's progress (`shard.read_through`, `publish_at`) changed or the loop
        stopped (then `stopped` is True)."""
        if not self.stopped:
            await asyncio.shield(self._progressed)

    def _progress(self, read_through: dict[str, int]) -> None:
        self.shard.read_through = read_through
        done, self._progressed = self._progressed, asyncio.get_running_loop().create_future()
        done.set_result(None)

    def _publish_idle_progress(self) -> None:
        """With no transaction open (docs/semantics.md#transaction-loop), outcomes that commit nothing
        (duplicates, rollbacks, open spans) still move the read-through, so a Stat does not hang on them."""
        if not self.sequencer.dequeuing:
            offsets = self.sequencer.offsets
            if offsets != self.shard.read_through:
                self._progress(offsets)

    # ---- startup

    async def run(self) -> None:
        try:
            if self.side_effects is not None:
                # The restored transaction committed: its side effects are published before its ACKs.
                await asyncio.to_thread(self.side_effects.recover)
            await self._append_restored_intents()
            if self.side_effects is not None:
                self._cleanup = asyncio.create_task(
                    self._clean_side_effects(self.side_effects),
                    name=f"shard {self.shard.id} side-effect cleanup",
                )
            self._start_readers()
            prev: _Txn | None = None
            while True:
                prev = await self._transaction(prev)
        finally:
            self.stopped = True
            if not self._progressed.done():
                self._progressed.set_result(None)
            for task in (*self._readers, self._get, self._cleanup):
                if task is not None:
                    task.cancel()
            owned = [*self._readers, *([self._cleanup] if self._cleanup is not None else [])]
            await asyncio.gather(*owned, return_exceptions=True)

    async def _clean_side_effects(self, effects: SideEffects) -> None:
        """Removes what fenced-out attempts staged: now (after the restored side effects were
        published), then every `cleanup_interval_s`. A failing store is logged and tried again."""
        while True:
            try:
                await asyncio.to_thread(effects.cleanup)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("shard %s: side-effect cleanup failed (tried again in %.0f s): %s",
                            self.shard.id, effects.cleanup_interval_s, exc)  # fmt: skip
            await asyncio.sleep(effects.cleanup_interval_s)

    async def _append_restored_intents(self) -> None:
        """At startup (docs/semantics.md#transaction-loop) the restored transaction committed, so its ACKs
        must land."""
        service = self.shard.service
        pending = [(j, service.append(j, ack)) for j, ack in self.restored.ack_intents.items()]
        for journal, future in pending:
            try:
                await future
            except GazetteError as exc:
                if exc.status != Status.JOURNAL_NOT_FOUND:
                    raise
                log.warning("shard %s: ACK intent of missing journal %s is dropped", self.shard.id, journal)
                service.clear_error(journal)

    def _start_readers(self) -> None:
        offsets = self.sequencer.offsets
        for source in self.shard.spec.sources:
            offset = max(offsets.get(source.journal, 0), source.min_offset)
            if self.columnar is not None:
                from gazette.consumer.columnar import RawSource

                raw = RawSource(self.shard.client, source.journal, offset)
                self.sources.append(raw)
                self._readers.append(
                    asyncio.create_task(self._read_raw(raw), name=f"shard {self.shard.id} read")
                )
                continue
            reader = ReadUncommitted(
                self.shard.client, source.journal, offset, block=True,
                framing_options=self.app.source_framing_options(source.journal),
            )  # fmt: skip
            self.sources.append(reader)
            self._readers.append(asyncio.create_task(self._read(reader), name=f"shard {self.shard.id} read"))

    async def _read(self, reader: ReadUncommitted) -> None:
        try:
            size = self._queue.capacity
            async for envs in reader.batches():
                for i in range(0, len(envs), size):  # a batch bigger than the channel goes in pieces
                    piece = envs[i : i + size]
                    await self._queue.put((reader, piece), len(piece))
            raise PeerError(f"blocking read of source journal {reader.journal} ended")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._queue.put(exc)

    async def _read_raw(self, source: RawSource) -> None:
        """The columnar path's reader: chunks of whole lines, each taking as many places in the
        read channel as it has lines (at most the channel's capacity: a chunk is never split)."""
        try:
            size = self._queue.capacity
            async for chunk in source.chunks():
                await self._queue.put(chunk, min(chunk.lines, size))
            raise PeerError(f"blocking read of source journal {source.journal} ended")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._queue.put(exc)

    # ---- one transaction

    def _ready(self) -> tuple[ReadUncommitted, list[Envelope]] | RawChunk | BaseException | None:
        get = self._get
        if get is not None:
            if not get.done():
                return None
            self._get = None
            return get.result()  # type: ignore[no-any-return]
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def _get_task(self) -> asyncio.Task[Any]:
        if self._get is None:
            self._get = asyncio.ensure_future(self._queue.get())
        return self._get

    async def _transaction(self, prev: _Txn | None) -> _Txn:
        loop = asyncio.get_running_loop()
        spec = self.shard.spec
        prev_done: asyncio.Future[None] | None = asyncio.ensure_future(prev.wait()) if prev else None
        began: float | None = None
        carry, self._carry = self._carry, None  # what the last transaction's deferral left: first
        began_at = began_mono = 0.0
        messages = 0
        min_at = max_at = 0.0
        try:
            while True:
                if prev_done is not None and prev_done.done():
                    prev_done.result()  # a failed commit or ACK append is fatal
                    assert prev is not None
                    self._finished(prev)
                    prev_done = None
                    if began is None:
                        self._publish_idle_progress()
                now = loop.time()
                reading = (began is None or now < max_at) and self._carry is None  # a deferral ends reading
                if not reading:
                    if prev_done is not None:  # stalled: the previous commit must finish first
                        await asyncio.wait({prev_done})
                        continue
                    break
                blocking = (
                    prev_done is not None
                    or began is None
                    or now < min_at
                    or (not spec.disable_wait_for_ack and self.sequencer.has_pending())
                )
                item = carry or self._ready()
                carry = None
                if item is None:
                    if not blocking:
                        break
                    timeout = None if began is None else (min_at if now < min_at else max_at) - now
                    waiters: set[asyncio.Future[Any]] = {self._get_task()}
                    if prev_done is not None:
                        waiters.add(prev_done)
                    await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                    continue
                if isinstance(item, BaseException):
                    raise item
                chunk: _Chunk | RawChunk
                if isinstance(item, tuple):
                    chunk = _Chunk(*item)
                else:
                    chunk = item  # a carried _Chunk, or a RawChunk of the columnar path
                started = (loop.time(), time.time(), time.monotonic())  # the txn began here if it had not
                consumed, deferred = await self._consume_chunk(chunk)
                if consumed and began is None:
                    began, began_at, began_mono = started
                    min_at, max_at = began + spec.min_txn_duration, began + spec.max_txn_duration
                messages += consumed
                if deferred:
                    self._carry = chunk  # the next transaction starts with it
                    continue
                if not consumed and began is None and prev_done is None:
                    self._publish_idle_progress()
        finally:
            if prev_done is not None and not prev_done.done():
                prev_done.cancel()
        txn = await self._start_commit()
        txn.began_at, txn.messages = began_at, messages
        txn.consume_s = max(0.0, txn.commit_started - began_mono) if began is not None else 0.0
        return txn

    async def _consume_chunk(self, chunk: _Chunk | RawChunk) -> tuple[int, bool]:
        """Sequences `chunk` and consumes what it commits, on the worker thread; reads a replay
        range when the ring lost a span. Returns (envelopes consumed, whether one was deferred)."""
        if self.columnar is not None:
            self._sequencing = True
            try:
                return await self.in_worker(self.columnar.consume, chunk)
            finally:
                self._sequencing = False
        assert isinstance(chunk, _Chunk)
        consumed = 0
        while True:
            self._sequencing = True
            try:
                n, stop = await self.in_worker(self._sequence_and_consume, chunk)
            finally:
                self._sequencing = False
            consumed += n
            if stop != "replay":
                return consumed, stop == "defer"
            journal, begin, end = self.sequencer.replay_range()
            replay = replay_reader(self.shard.client, journal, begin, end, chunk.reader.framing)
            self.sequencer.start_replay([e async for e in replay])

    def _sequence_and_consume(self, chunk: _Chunk) -> tuple[int, str]:  # on the worker thread
        """Resumes the chunk's sequencing driver and delivers each committed span, stopping for a
        replay read ("replay"), a deferral ("defer"), or at the chunk's end ("done"). A deferral
        rewinds the Sequencer to the first envelope not consumed and leaves the driver unresumed
        this transaction: the checkpoint resumes there, and the next transaction, resuming the
        driver, delivers that envelope and the rest of its span first."""
        consumed = 0
        if chunk.steps is None:
            chunk.steps = drive_spans(self.sequencer, chunk.envs)
        for span in chunk.steps:
            if isinstance(span, Replay):
                return consumed, "replay"  # _consume_chunk reads it and calls start_replay()
            n = self._deliver(span)
            consumed += n
            if n < len(span):
                self.sequencer.rewind(n)
                return consumed, "defer"
        return consumed, "done"

    def _deliver(self, span: list[Envelope]) -> int:  # on the worker thread
        """consume_messages of one committed span (opening the transaction before it if none is
        open); how many of its envelopes the application consumed."""
        opening = self._txn_messages == 0
        if opening:
            self.clock.update(
                clock_from_unix_ns(time.time_ns() + int(self.hooks.publish_clock_delta_s * 1e9))
            )
            self.app.begin_txn(self.shard, self.store)
        n = self.app.consume_messages(self.shard, self.store, span, self.publisher)
        if n is None:
            n = len(span)
        elif isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(span):
            raise StateError(
                f"shard {self.shard.id}: consume_messages returned {n!r} for a span of {len(span)} envelopes "
                "(None when it consumed them all, else how many it consumed)"
            )
        if n == 0 and opening:
            env = span[0]
            raise StateError(
                f"shard {self.shard.id}: consume_message deferred the first envelope of a transaction "
                f"({env.journal} offset {env.begin}); a transaction cannot begin with a deferral",
            )
        self._txn_messages += n
        return n

    async def _start_commit(self) -> _Txn:
        shard, store = self.shard, self.store
        commit_started = time.monotonic()
        self._txn_messages = 0
        await self.in_worker(self.app.finalize_txn, shard, store, self.publisher)
        effects = self.side_effects
        # Blocks until the transaction's side effects are prepared; the store commits their registrations.
        registered = await self.in_worker(effects.seal) if effects is not None else ()
        checkpoint = ConsumerCheckpoint(
            self.sequencer.checkpoint(prune_horizon_clock(PRUNE_HORIZON_24H_S)),
            # Appended below through the shard's service (each journal's order) once the commit,
            # which waits for every pending append, is done: after the messages they acknowledge.
            dict(self.publisher.build_ack_intents(after_messages=True)),
        )
        wait_for = shard.service.pending_except(shard.recovery_log)
        commit = await self.in_worker(store.start_commit, shard, checkpoint, wait_for)
        if commit.done() and commit.exception() is not None:
            raise commit.exception()  # type: ignore[misc]
        # The ACKs wait for the commit and, after it, for the publication of its side effects.
        published = effects.publish_after(commit, registered) if effects is not None and registered else None
        committed = published or commit
        gate: concurrent.futures.Future = committed
        if self.hooks.ack_gate is not None:
            gate = concurrent.futures.Future()
            committed.add_done_callback(lambda f: self._gate(f, gate, checkpoint))
        acks = [
            shard.service.append(j, ack, dependencies=[gate]) for j, ack in checkpoint.ack_intents.items()
        ]
        await self.in_worker(self.app.finished_txn, shard, store, commit)
        return _Txn(checkpoint, commit, acks, published, commit_started=commit_started)

    def _gate(
        self, commit: concurrent.futures.Future, gate: concurrent.futures.Future, cp: ConsumerCheckpoint
    ) -> None:
        if commit.cancelled() or commit.exception() is not None:
            why = "was cancelled" if commit.cancelled() else f"failed: {commit.exception()}"
            what = "the transaction's commit (or its side effects' publication)"
            gate.set_exception(StoreError(f"{what} {why}"))
        elif self.hooks.ack_gate is not None and self.hooks.ack_gate(self.shard, cp):
            gate.set_result(None)

    def _finished(self, txn: _Txn) -> None:
        self._record_metrics(txn)
        self.transactions += 1
        self.last_committed = txn.checkpoint
        self.publish_at.update(txn.publish_at)
        self.timings.append(txn.timing())
        self._progress(txn.checkpoint.read_through)

    def _record_metrics(self, txn: _Txn) -> None:
        """Counts the completed `txn` in the member's metrics (gazette.consumer.metrics); its bytes are
        how far its read-through offsets moved."""
        before = {r.journal: r.offset for r in self.sources} | self.last_committed.read_through
        after = txn.checkpoint.read_through
        timing = txn.timing()
        self.shard.consumer.metrics.transaction_completed(
            self.shard.fqn, messages=txn.messages, read_through=after,
            read_bytes=sum(max(end - before.get(j, end), 0) for j, end in after.items()),
            consume_s=timing.consume_s, commit_s=timing.commit_s, ack_s=timing.ack_s,
        )  # fmt: skip
