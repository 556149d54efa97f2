"""Shard: one assignment of a shard to this consumer, and its lifecycle (docs/semantics.md#shard-lifecycle).

A standby (slot > 0) reports STANDBY and waits to be promoted; with a recovery log it first plays
the log back (BACKFILL) and keeps tailing it (recoverylog.recovery). A primary (slot 0) takes the
recovery log over (if any), builds its store, restores the checkpoint (installing the store's fence),
reports PRIMARY and runs the transaction loop. An error fails the shard: FAILED, with the error in its
assignment value, until the assignment is removed. Application calls and store work run on the
shard's worker thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import TYPE_CHECKING, Any

from gazette.allocator.state import Assignment
from gazette.client.aio import AsyncClient
from gazette.client.append_service import AsyncAppendService
from gazette.consumer.recoverylog.recorder import Recorder
from gazette.consumer.recoverylog.recovery import ShardRecovery
from gazette.consumer.spec import ShardSpec
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.consumer.store import Store
from gazette.consumer.transaction import Hooks, TransactionLoop
from gazette.tasks import cancel_and_wait

if TYPE_CHECKING:
    from gazette.consumer.application import Application
    from gazette.consumer.consumer import Consumer

log = logging.getLogger(__name__)


class Shard:
    """What Application methods receive: the shard's spec, identity, clients and progress.

    `fqn` is the etcd key of its ShardSpec. `client` is the consumer's AsyncClient and `service` the
    shard's own AppendService (raw appends made there are waited for by the next commit).
    `read_through` holds the offsets of the last fully completed transaction.
    """

    def __init__(
        self, consumer: Consumer, spec: ShardSpec, fqn: str, assignment: Assignment, create_revision: int
    ):
        self.consumer = consumer
        self.spec = spec
        self.id = spec.id
        self.fqn = fqn
        self.assignment = assignment
        self.create_revision = create_revision  # of the ShardSpec key: a recreated shard is a new one
        self.client: AsyncClient = consumer.client
        self.service = AsyncAppendService(consumer.client)
        self.worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"shard-{spec.id}")
        self.recovery_log = ""  # none yet: every pending append is a commit dependency
        self.read_through: dict[str, int] = {}
        self.store: Store | None = None
        self.recovery: ShardRecovery | None = None  # with a recovery log: playback, hand-off, hints
        self.recorder: Recorder | None = None  # what new_store records through, once primary
        self.txn_loop: TransactionLoop | None = None
        self.error: str | None = None
        self.is_primary = False
        self._promoted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Shard({self.id!r}, slot={self.assignment.slot}, primary={self.is_primary})"

    @property
    def app(self) -> Application:
        return self.consumer.app

    def update(self, spec: ShardSpec, assignment: Assignment) -> None:
        """A newer KeySpace view of this shard (spec edits, a promotion to slot 0)."""
        self.spec = spec
        self.assignment = assignment
        if assignment.slot == 0:
            self._promoted.set()

    def start(self, hooks: Hooks) -> None:
        if self.assignment.slot == 0:
            self._promoted.set()
        self._task = asyncio.create_task(self._run(hooks), name=f"shard {self.id}")

    async def stop(self) -> None:
        """Cancels the shard (reassignment or consumer exit), drops unsent appends, frees the store."""
        await cancel_and_wait(self._task)
        if self.recovery is not None:
            await self.recovery.stop()
        await self.service.abort()
        store, self.store = self.store, None
        if store is not None:
            if store.side_effects is not None:
                store.side_effects.close()  # now: the worker may be waiting on its retries (a store down)
            self.worker.submit(store.destroy)
        self.worker.shutdown(wait=False)

    async def _run(self, hooks: Hooks) -> None:
        try:
            if self.spec.recovery_log_prefix:
                self.recovery = ShardRecovery(self)
            if self.assignment.slot != 0:
                if self.recovery is not None:
                    await self.recovery.standby(self._promoted)  # BACKFILL, then STANDBY once tailing
                else:
                    await self.consumer.set_status(self, ReplicaStatus(ReplicaCode.STANDBY))
                    await self._promoted.wait()
            if self.recovery is not None:
                self.recorder = await self.recovery.recover()
            await self._run_primary(hooks)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("shard %s failed: %s", self.id, self.error, exc_info=exc)
            await self.consumer.set_status(self, ReplicaStatus(ReplicaCode.FAILED, (self.error,)))

    async def _run_primary(self, hooks: Hooks) -> None:
        loop = asyncio.get_running_loop()
        self.store = store = await loop.run_in_executor(self.worker, self.app.new_store, self, self.recorder)
        if not isinstance(store, Store):
            raise TypeError(f"{type(self.app).__name__}.new_store returned {store!r}, not a gazette Store")
        checkpoint = await loop.run_in_executor(self.worker, store.restore_checkpoint, self)
        self.read_through = checkpoint.read_through
        self.txn_loop = TransactionLoop(self, self.app, store, checkpoint, hooks)
        self.is_primary = True
        await self.consumer.set_status(self, ReplicaStatus(ReplicaCode.PRIMARY))
        await self.txn_loop.run()

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "slot": self.assignment.slot, "primary": self.is_primary, "error": self.error}
