"""ShardRecovery: a shard assignment's side of its recovery log (docs/semantics.md#shard-lifecycle,
#recovery-logs).

A standby plays the log `<recovery_log_prefix>/<shard id>` from the stored hints into a local
directory (status BACKFILL), reports STANDBY once it tails the live log, and keeps tailing. On
becoming primary it hands the log off to a fresh author, builds the Recorder the application's store
records through, rotates the verified hints into the `.backup.N` keys, and writes the primary hints
every PRIMARY_HINTS_INTERVAL_S. Everything it starts is stopped by `stop()`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from typing import TYPE_CHECKING

from gazette.consumer.recoverylog.hints import Guard, fetch_hints, rotate_backup_hints, store_primary_hints
from gazette.consumer.recoverylog.ops import new_author
from gazette.consumer.recoverylog.player import Player
from gazette.consumer.recoverylog.recorder import Recorder
from gazette.consumer.status import ReplicaCode, ReplicaStatus

if TYPE_CHECKING:
    from gazette.consumer.shard import Shard

log = logging.getLogger(__name__)

PRIMARY_HINTS_INTERVAL_S = 300.0  # how often the primary stores hints (docs/semantics.md#shard-lifecycle)


def recovery_log_of(recovery_log_prefix: str, shard_id: str) -> str:
    return f"{recovery_log_prefix}/{shard_id}"


class ShardRecovery:
    """The recovery log of one shard assignment: playback, hand-off, recorder and hints."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        spec = shard.spec
        self.log = recovery_log_of(spec.recovery_log_prefix, spec.id)
        self.directory = tempfile.mkdtemp(prefix=f"gazette-{spec.id.replace('/', '_')}-")
        self.player: Player | None = None
        self.recorder: Recorder | None = None
        self._play: asyncio.Task[None] | None = None
        self._hints_task: asyncio.Task[None] | None = None

    async def _start_playback(self) -> Player:
        if self.player is None:
            spec, etcd = self.shard.spec, self.shard.consumer.etcd
            hints = (await fetch_hints(etcd, spec.hint_prefix, spec.id, spec.hint_backups)).pick()
            self.player = Player(self.shard.client, self.log, self.directory, hints)
            self._play = asyncio.create_task(self.player.play(), name=f"shard {spec.id} playback")
        return self.player

    async def standby(self, promoted: asyncio.Event) -> None:
        """BACKFILL while playing the log, STANDBY once tailing it; returns when `promoted` is set
        (raising if playback fails first)."""
        consumer = self.shard.consumer
        await consumer.set_status(self.shard, ReplicaStatus(ReplicaCode.BACKFILL))
        player = await self._start_playback()
        assert self._play is not None
        tailing = asyncio.ensure_future(player.tailing.wait())
        try:
            await asyncio.wait({tailing, self._play}, return_when=asyncio.FIRST_COMPLETED)
            if not tailing.done():
                self._play.result()  # playback failed (or ended, which it only does on request)
            await consumer.set_status(self.shard, ReplicaStatus(ReplicaCode.STANDBY))
            waiter = asyncio.ensure_future(promoted.wait())
            try:
                await asyncio.wait({waiter, self._play}, return_when=asyncio.FIRST_COMPLETED)
                if not waiter.done():
                    self._play.result()
            finally:
                waiter.cancel()
        finally:
            tailing.cancel()

    async def recover(self) -> Recorder:
        """Completes playback with a hand-off to a new author; returns the Recorder of that author."""
        shard = self.shard
        player = await self._start_playback()
        assert self._play is not None
        author = new_author()
        player.inject_handoff(author)
        await self._play
        self.recorder = Recorder(shard.service, player.fsm, author, self.directory, player.write_head)
        shard.recovery_log = self.log  # the recorder's appends are not commit dependencies
        spec = shard.spec
        if spec.hint_backups:
            hints = player.fsm.build_hints()
            if not await rotate_backup_hints(
                shard.consumer.etcd, spec.hint_prefix, spec.id, spec.hint_backups, hints, guard=self._guard()
            ):
                log.warning(
                    "shard %s: backup hints not stored (the assignment or the hints changed)", spec.id
                )
        self._hints_task = asyncio.create_task(self._store_hints(), name=f"shard {spec.id} hints")
        return self.recorder

    def _guard(self) -> Guard | None:
        kv = self.shard.consumer.ks.get(self.shard.assignment.key)
        return None if kv is None else (kv.key, kv.create_revision)

    async def _store_hints(self) -> None:
        spec, recorder = self.shard.spec, self.recorder
        assert recorder is not None
        while recorder.error is None:
            await asyncio.sleep(PRIMARY_HINTS_INTERVAL_S)
            try:
                hints = await asyncio.wrap_future(recorder.build_hints())
                await store_primary_hints(
                    self.shard.consumer.etcd, spec.hint_prefix, spec.id, hints, guard=self._guard()
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("shard %s: storing primary hints failed: %s", spec.id, exc)

    async def stop(self) -> None:
        """Stops playback and the hints writer and removes the local directory."""
        for task in (self._play, self._hints_task):
            if task is not None:
                task.cancel()  # an error it ended with was reported by whoever awaited it
                await asyncio.gather(task, return_exceptions=True)
        await asyncio.to_thread(shutil.rmtree, self.directory, True)
