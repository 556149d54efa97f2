"""The primary's transaction loop (reference 7.4): read committed, consume, checkpoint, commit, ACK.

Source readers decode each journal into a queue; one Sequencer turns those into committed envelopes.
A transaction consumes until nothing is ready once `min_txn_duration` has passed (or until
`max_txn_duration`), never while the previous transaction's commit or ACK appends are unfinished.
Its checkpoint (read-through offsets, producer states, ACK intents) commits with the store after every
pending append; the ACK intents are appended only after that commit (they depend on its future).
On start, the restored checkpoint's ACK intents are appended again before anything is read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gazette.client.append_service import AppendFuture
from gazette.consumer.store import ConsumerCheckpoint, Store
from gazette.message.envelope import Envelope
from gazette.message.publisher import Publisher
from gazette.message.reader import ReadUncommitted
from gazette.message.sequencer import PRUNE_HORIZON_24H_S, QueueOutcome, Sequencer, prune_horizon_clock
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

if TYPE_CHECKING:
    from gazette.consumer.application import Application
    from gazette.consumer.shard import Shard

log = logging.getLogger(__name__)

T = TypeVar("T")

READ_QUEUE_CHUNKS = 64  # decoded read chunks buffered between the source readers and the loop
_COMMITS = frozenset(
    {
        QueueOutcome.OUTSIDE_COMMIT,
        QueueOutcome.ACK_EMPTY,
        QueueOutcome.ACK_COMMIT_RING,
        QueueOutcome.ACK_COMMIT_REPLAY,
    }
)


@dataclasses.dataclass
class Hooks:
    """Fault-injection points for tests. `ack_gate(shard, checkpoint)` runs once a transaction's store
    commit succeeded; returning False holds its ACK appends forever (a crash between commit and ACK)."""

    ack_gate: Callable[[Shard, ConsumerCheckpoint], bool] | None = None


@dataclasses.dataclass
class _Txn:
    """A transaction that started committing: its commit future and the ACK appends depending on it."""

    checkpoint: ConsumerCheckpoint
    commit: concurrent.futures.Future
    acks: list[AppendFuture]

    async def wait(self) -> None:
        await asyncio.wrap_future(self.commit)
        for ack in self.acks:
            await ack


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
        self.sequencer = Sequencer.from_checkpoint(
            checkpoint.sequencer, ring_size=shard.spec.ring_buffer_size
        )
        self.publisher = Publisher(shard.client, service=shard.service)
        self.transactions = 0  # committed and acknowledged
        self._queue: asyncio.Queue[tuple[ReadUncommitted, list[Envelope]] | BaseException] = asyncio.Queue(
            READ_QUEUE_CHUNKS
        )
        self._get: asyncio.Task[Any] | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.shard.worker, fn, *args)

    # ---- startup

    async def run(self) -> None:
        try:
            await self._append_restored_intents()
            self._start_readers()
            prev: _Txn | None = None
            while True:
                prev = await self._transaction(prev)
        finally:
            for task in (*self._readers, self._get):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*self._readers, return_exceptions=True)

    async def _append_restored_intents(self) -> None:
        """Reference 7.4 startup: the restored transaction committed, so its ACKs must land."""
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
            reader = ReadUncommitted(self.shard.client, source.journal, offset, block=True)
            self._readers.append(asyncio.create_task(self._read(reader), name=f"shard {self.shard.id} read"))

    async def _read(self, reader: ReadUncommitted) -> None:
        try:
            async for envs in reader.batches():
                await self._queue.put((reader, envs))
            raise GazetteError(Status.OK, f"blocking read of source journal {reader.journal} ended")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._queue.put(exc)

    # ---- one transaction

    def _ready(self) -> tuple[ReadUncommitted, list[Envelope]] | BaseException | None:
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
        min_at = max_at = 0.0
        try:
            while True:
                if prev_done is not None and prev_done.done():
                    prev_done.result()  # a failed commit or ACK append is fatal
                    assert prev is not None
                    self._finished(prev)
                    prev_done = None
                now = loop.time()
                reading = began is None or now < max_at
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
                item = self._ready()
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
                envs = await self._sequence(*item)
                if not envs:
                    continue
                if began is None:
                    began = loop.time()
                    min_at, max_at = began + spec.min_txn_duration, began + spec.max_txn_duration
                    await self.in_worker(self.app.begin_txn, self.shard, self.store)
                await self.in_worker(self._consume, envs)
        finally:
            if prev_done is not None and not prev_done.done():
                prev_done.cancel()
        return await self._start_commit()

    async def _sequence(self, reader: ReadUncommitted, envs: list[Envelope]) -> list[Envelope]:
        """The committed envelopes that queueing `envs` releases, replaying spans the ring lost."""
        seq = self.sequencer
        out: list[Envelope] = []
        for env in envs:
            outcome = seq.queue(env)
            if outcome not in _COMMITS:
                continue
            if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
                journal, begin, end = seq.replay_range()
                replay = ReadUncommitted(
                    self.shard.client, journal, begin, end_offset=end, framing=reader.framing
                )
                seq.start_replay([e async for e in replay])
            while (committed := seq.step()) is not None:
                out.append(committed)
        return out

    def _consume(self, envs: list[Envelope]) -> None:  # on the worker thread
        consume, shard, store, pub = self.app.consume_message, self.shard, self.store, self.publisher
        for env in envs:
            consume(shard, store, env, pub)

    async def _start_commit(self) -> _Txn:
        shard, store = self.shard, self.store
        await self.in_worker(self.app.finalize_txn, shard, store, self.publisher)
        checkpoint = ConsumerCheckpoint(
            self.sequencer.checkpoint(prune_horizon_clock(PRUNE_HORIZON_24H_S)),
            dict(self.publisher.build_ack_intents()),
        )
        wait_for = shard.service.pending_except(shard.recovery_log)
        commit = await self.in_worker(store.start_commit, shard, checkpoint, wait_for)
        if commit.done() and commit.exception() is not None:
            raise commit.exception()  # type: ignore[misc]
        gate: concurrent.futures.Future = commit
        if self.hooks.ack_gate is not None:
            gate = concurrent.futures.Future()
            commit.add_done_callback(lambda f: self._gate(f, gate, checkpoint))
        acks = [
            shard.service.append(j, ack, dependencies=[gate]) for j, ack in checkpoint.ack_intents.items()
        ]
        await self.in_worker(self.app.finished_txn, shard, store, commit)
        return _Txn(checkpoint, commit, acks)

    def _gate(
        self, commit: concurrent.futures.Future, gate: concurrent.futures.Future, cp: ConsumerCheckpoint
    ) -> None:
        if commit.cancelled() or commit.exception() is not None:
            gate.set_exception(GazetteError(Status.OK, "the transaction's commit failed"))
        elif self.hooks.ack_gate is not None and self.hooks.ack_gate(self.shard, cp):
            gate.set_result(None)

    def _finished(self, txn: _Txn) -> None:
        self.transactions += 1
        self.shard.read_through = txn.checkpoint.read_through
