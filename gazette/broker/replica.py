"""Replica: a broker's local state for one assigned journal (docs/semantics.md#replica-lifecycle).

Owns the journal's Index, its Spool and two 1-slot queues, Go's channels: `spool_slot` holds the
Spool while nobody owns it (a pipeline at the primary, or a Replicate stream at a replica, takes it),
`pipeline_slot` the primary's Pipeline (or None). Also owns the refresh task (lists the stores every
`refresh_interval`) and the pulse task (a zero-byte append every minute and on route changes), and
hands completed spools to the Persister: at once on the primary, after a delay on other replicas.
Started and stopped in one place by the Broker; stopping rolls the spool so its content is persisted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gazette.allocator.journals import route_equivalent
from gazette.broker.flow import AppendFlowControl
from gazette.broker.metrics import BrokerMetrics
from gazette.fragment.content import list_fragments
from gazette.fragment.fragment import Fragment
from gazette.fragment.index import Index
from gazette.fragment.persister import Persister
from gazette.fragment.spool import CompletedSpool, Spool
from gazette.fragment.spool_file import SpoolFile
from gazette.protocol.postfix import render_postfix
from gazette.protocol.spec import JournalSpec

log = logging.getLogger(__name__)

REFRESH_RETRY_S = 1.0
GAP_REFRESH_LIMIT_S = 300.0  # refresh_until_covered: listing every REFRESH_RETRY_S for at most this
PULSE_INTERVAL_S = 60.0  # Gazette's healthCheckInterval (docs/semantics.md#pulse)
PULSE_RETRY_S = 2.0  # after a failed pulse (a peer not ready yet, or gone)


class Replica:
    """This broker's state for one journal assigned to it: its index, spool and pipeline slots,
    and the refresh and pulse tasks (see the module docstring for who owns what). Created and
    stopped by the Broker's reconcile; `stop()` rolls the spool so its content gets persisted."""

    def __init__(
        self,
        spec: JournalSpec,
        create_revision: int,
        persister: Persister,
        *,
        spool_dir: str | None = None,
        metrics: BrokerMetrics | None = None,
        pulse: Callable[[str], Awaitable[None]] | None = None,
        route_changed: Callable[[str], asyncio.Event] | None = None,
    ) -> None:
        self.journal = spec.name
        self.spec = spec
        self.create_revision = create_revision
        self.index = Index(spec.name)
        self.spool = Spool(spec.name, self, directory=spool_dir)
        self.spool_slot: asyncio.Queue[Spool] = asyncio.Queue(maxsize=1)
        self.spool_slot.put_nowait(self.spool)
        self.pipeline_slot: asyncio.Queue = asyncio.Queue(maxsize=1)
        self.pipeline_slot.put_nowait(None)
        # Used only by the append holding the pipeline slot (in StreamContent): see broker/flow.py.
        self.append_flow = AppendFlowControl()
        self.is_primary = False
        # The route under which this broker, as primary, last synced its pipeline (every member
        # agreed on the spool, so the index acknowledges what they hold); None since it last became
        # primary or stopped being it. Set by the append FSM; see `sync_for_reads`.
        self.synced_route: Any = None
        # (route, its pulse, when readers stop waiting for it: `sync_for_reads`)
        self._sync_attempt: tuple[Any, asyncio.Task, float] | None = None
        # Persist completed spools at once even as a non-primary: set on spools kept across a lease
        # renewal, whose journal's new primary may not hold their content.
        self.persist_promptly = False
        self._pulse = pulse
        self._route_changed = route_changed
        self._persister = persister
        self._metrics = metrics
        self._tasks: list[asyncio.Task] = []
        self._refresh_now = asyncio.Event()
        # Fragments persisted by this replica since the last listing began: a listing racing a
        # persist must not hide it from the index.
        self._recently_persisted: list[tuple[float, Fragment]] = []
        self._known_remote: list[Fragment] = []  # the last listing of the stores
        self._stopped = False
        # Completed spools handed to the persister and not yet persisted (Flush waits for them too).
        self._unpersisted: dict[Fragment, None] = {}

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._refresh_loop(), name=f"refresh {self.journal}"))
        if self._pulse is not None:
            self._tasks.append(asyncio.create_task(self._pulse_loop(), name=f"pulse {self.journal}"))

    async def stop(self, *, discard: bool = False) -> None:
        """Rolls the spool (so its content goes to the persister) and cancels owned tasks. With
        `discard`, the spool's current fragment is dropped instead: it may hold commits that no
        peer acknowledged (a primary that lost its lease), unsafe to persist."""
        if self._stopped:
            return
        self._stopped = True
        for t in self._tasks:
            t.cancel()
        pipeline = await self.pipeline_slot.get()
        if pipeline is not None:
            await pipeline.shutdown(expect_err=discard)
        spool = await self.spool_slot.get()  # a Replicate stream releases it when its route changes
        if discard:
            if spool.fragment.length:
                log.warning(
                    "%s: dropping this former primary's spool [%d, %d) (not persisted from here; "
                    "peers keep what they acknowledged)",
                    self.journal,
                    spool.fragment.begin,
                    spool.fragment.end,
                )
            spool.discard()
        else:
            spool.close()
        self.spool_slot.put_nowait(spool)
        self.pipeline_slot.put_nowait(None)
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()

    def set_primary(self, primary: bool) -> None:
        """Notes whether this broker is the journal's primary. Becoming primary refreshes the index
        at once: as a replica it indexed its spools as unpersisted, and the old primary may have
        persisted them since its last listing, so the new primary's ListFragments (and a Flush that
        finds nothing of its own to persist) would show them unpersisted for up to
        `refresh_interval` otherwise."""
        if primary and not self.is_primary:
            self._refresh_now.set()
        if primary != self.is_primary:
            self.synced_route = self._sync_attempt = None
        self.is_primary = primary

    def head_behind(self) -> bool:
        """At a non-primary replica: whether it knows the journal reaches further than its index
        tells readers (commits held back, or its spool rolled forward past them by the primary's
        pipeline sync, as a member that just joined is), so that a read from the head must ask the
        primary how far every member holds it (docs/semantics.md#no-dirty-reads)."""
        known = max(self.index.pending_end(), self.spool.fragment.end)
        return not self.is_primary and known > self.index.write_head()

    async def sync_for_reads(self, route: Any, timeout: float) -> None:
        """At the primary: returns once its pipeline has synced under `route`, pulsing now if it has
        not (docs/semantics.md#no-dirty-reads). Until then a new primary's index shows only what it
        acknowledged before (a former replica holds its commits back; a new member holds nothing),
        so its head would be behind what every member holds. Bounded by `timeout`; one pulse per
        route, shared by concurrent readers, waited for `timeout` in all from the first of them: after
        it failed or ran out (a store down holds a pulse), readers go on with the index as it is (what
        it shows is still held by every member) instead of waiting each time."""
        if self._pulse is None or self._stopped:
            return
        if self.synced_route is not None and route_equivalent(self.synced_route, route):
            return
        attempt = self._sync_attempt
        loop = asyncio.get_running_loop()
        if attempt is None or not route_equivalent(attempt[0], route):
            task = asyncio.ensure_future(self._pulse(self.journal))
            task.set_name(f"read sync {self.journal}")
            task.add_done_callback(_log_sync_failure)
            self._tasks = [t for t in self._tasks if not t.done()] + [task]
            self._sync_attempt = attempt = (route, task, loop.time() + timeout)
        left = attempt[2] - loop.time()
        if not attempt[1].done() and left > 0:  # readers wait `timeout` in all, from the first one
            await asyncio.wait({attempt[1]}, timeout=left)

    def update_spec(self, spec: JournalSpec) -> None:
        stores_changed = spec.stores != self.spec.stores
        self.spec = spec
        if stores_changed:
            self._refresh_now.set()

    # --- SpoolObserver ---------------------------------------------------------------------------
    def on_commit(self, fragment: Fragment, file: SpoolFile) -> None:
        # Readers see it once every member holds it: at the primary when its peers acknowledged it
        # (the append FSM), elsewhere when the primary says so (docs/semantics.md#no-dirty-reads).
        self.index.spool_commit(fragment, file, acknowledged=False)
        if self._metrics is not None:
            self._metrics.held_back.inc()

    def on_complete(self, completed: CompletedSpool) -> None:
        if self._metrics is not None:
            self._metrics.completed_spools.inc()
        if not self.spec.stores:
            return  # streaming-only journal: nothing is persisted
        self._unpersisted[completed.fragment] = None
        self._persister.submit(
            completed,
            spec_lookup=lambda _journal: _PersistSpec(self.spec),
            primary=self.is_primary or self.persist_promptly or completed.ahead_of_primary,
            on_persisted=self._on_persisted,
        )

    def _on_persisted(self, fragment: Fragment) -> None:
        if self._metrics is not None:
            self._metrics.persisted.inc()
        self._unpersisted.pop(
            dataclasses.replace(fragment, backing_store="", mod_time=0, path_postfix=""), None
        )
        self._recently_persisted.append((time.time(), fragment))
        self.index.replace_remote(self._known_remote + [f for _, f in self._recently_persisted])

    # --- refresh ---------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Lists every store of the spec once and replaces the index's remote set."""
        started = time.time()
        listed: list[Fragment] = []
        for url in self.spec.stores:
            listed.extend(await list_fragments(url, self.journal))
        self._recently_persisted = [(t, f) for t, f in self._recently_persisted if t >= started]
        self._known_remote = listed
        self.index.replace_remote(listed + [f for _, f in self._recently_persisted])

    def refresh_until_covered(self, begin: int, end: int) -> asyncio.Task | None:
        """Lists the stores every REFRESH_RETRY_S until the index covers [begin, end) (a range only
        peers' spools held), for at most GAP_REFRESH_LIMIT_S; then warns that it is still a gap.
        Only the part past what the index knows once it has listed the stores counts: a new primary
        (an empty spool at 0) waits for its peers' spools, not for ranges retention removed long ago.
        Returns the watching task (owned and cancelled by the replica), None when there is nothing to
        list (no stores, or the replica stopped)."""
        self._tasks = [t for t in self._tasks if not t.done()]
        if self._stopped or not self.spec.stores:
            return None
        task = asyncio.create_task(
            self._refresh_until_covered(begin, end), name=f"gap refresh {self.journal}"
        )
        self._tasks.append(task)
        return task

    async def _refresh_until_covered(self, begin: int, end: int) -> None:
        deadline = time.monotonic() + GAP_REFRESH_LIMIT_S
        await self.index.wait_first_refresh()
        begin = max(begin, min(self.index.end_offset(), end))
        while not self.index.covers(begin, end):
            if time.monotonic() >= deadline:
                log.warning(
                    "%s: [%d, %d) is still not in the stores after %.0f s; readers there wait for it",
                    self.journal,
                    begin,
                    end,
                    GAP_REFRESH_LIMIT_S,
                )
                return
            await asyncio.sleep(REFRESH_RETRY_S)
            self._refresh_now.set()

    async def _refresh_loop(self) -> None:
        while True:
            self._refresh_now.clear()  # before listing: a request made while it runs lists again
            try:
                await self.refresh()
                wait = self.spec.refresh_interval
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # store down: retry; the index keeps what it had
                log.warning("refresh of %s failed: %s", self.journal, exc)
                wait = min(self.spec.refresh_interval, REFRESH_RETRY_S)
            try:
                async with asyncio.timeout(wait):
                    await self._refresh_now.wait()
            except TimeoutError:
                pass

    # --- pulse -----------------------------------------------------------------------------------
    async def _pulse_loop(self) -> None:
        """The pulse (docs/semantics.md#pulse): re-syncs the pipeline after route changes (so assignment
        values get rewritten and the allocator can finish migrations) and rolls on flush boundaries."""
        assert self._pulse is not None
        while True:
            changed = self._route_changed(self.journal) if self._route_changed else None
            wait = PULSE_INTERVAL_S
            if self.is_primary:
                try:
                    await self._pulse(self.journal)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.info("pulse of %s failed: %s", self.journal, exc)
                    wait = PULSE_RETRY_S
            if changed is None:
                await asyncio.sleep(wait)
                continue
            try:
                async with asyncio.timeout(wait):
                    await changed.wait()
            except TimeoutError:
                pass

    # --- flush -----------------------------------------------------------------------------------
    async def wait_persisted(self, rolled: Fragment | None) -> Fragment | None:
        """Waits until `rolled` (a spool this broker just completed) and every spool completed before
        it are persisted; returns the last one. When the spool was empty (another roll, a pulse or
        the flush interval, completed it first) and everything is persisted already, returns the
        newest persisted fragment; None only when nothing was ever written to the stores."""
        if not self.spec.stores:
            return None
        last: Fragment | None = None
        for pending in sorted(self._unpersisted, key=lambda f: f.begin):
            if rolled is None or pending.begin <= rolled.begin:
                last = await self._persister.flush(pending)
        if rolled is not None and (last is None or last.end < rolled.end):
            last = await self._persister.flush(rolled)  # remembered even if it finished already
        if last is None and rolled is None:
            last = max(
                (f for f in self.index.fragments() if f.backing_store), key=lambda f: f.end, default=None
            )
        return last


def _log_sync_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("%s failed: %s", task.get_name(), task.exception())


class _PersistSpec:
    """What the Persister needs of a JournalSpec: its stores and the postfix of a completed spool."""

    def __init__(self, spec: JournalSpec) -> None:
        self.stores = spec.stores
        self._template = spec.path_postfix_template
        self._labels = spec.labels

    def render_postfix(self, completed: CompletedSpool) -> str:
        if not self._template:
            return ""
        return render_postfix(
            self._template,
            journal=completed.fragment.journal,
            begin=completed.fragment.begin,
            end=completed.fragment.end,
            first_append_time=completed.first_append_time,
            registers=completed.registers,
            labels=self._labels,
            compression_codec=completed.fragment.codec,
        )
