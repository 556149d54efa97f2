"""Persister: uploads completed spools to the journal's first store (docs/semantics.md#persister, simplified).

Primary submissions are attempted at once, replica ones after `replica_delay_s` (one delay instead of
Go's three rotating 1-minute buckets); at most `max_concurrency` uploads run, on the Persister's own
threads. A failed attempt is retried every `retry_s` until it succeeds. Only the first store is tried
(Go's fall-through to later stores on auth errors while exiting is not done). Nothing is dropped
silently: journal deletions are logged, and a fragment abandoned by `stop` is logged at ERROR.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from gazette.fragment.content import persist_blocking
from gazette.fragment.fragment import Fragment
from gazette.protocol.errors import GazetteError, StateError, StoreError
from gazette.protocol.status import Status

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 300.0  # Go's 5-minute persist timeout, applied to the whole drain on stop
RECENT_RESULTS = 4096  # persisted fragments remembered for a late `flush`


class SpoolFile(Protocol):
    def reader(self, begin: int, end: int) -> Iterator[bytes]:
        """The uncompressed bytes of journal offsets [begin, end)."""
        ...


class CompletedSpool(Protocol):
    """What a completed Spool hands over: its final fragment and the local file holding its bytes."""

    @property
    def fragment(self) -> Fragment: ...

    @property
    def file(self) -> SpoolFile: ...


class SpecLike(Protocol):
    """The current JournalSpec, as far as persistence needs it."""

    @property
    def stores(self) -> Sequence[str]: ...

    def render_postfix(self, completed: Any) -> str: ...


SpecLookup = Callable[[str], SpecLike | None]
_Key = tuple[str, int, int, bytes]


def _key(fragment: Fragment) -> _Key:
    return (fragment.journal, fragment.begin, fragment.end, fragment.sum)


@dataclasses.dataclass(eq=False)
class _Pending:
    completed: CompletedSpool
    spec_lookup: SpecLookup
    callbacks: list[Callable[[Fragment], None]]
    due: float  # time.monotonic() of the next attempt
    waiters: list[asyncio.Future[Fragment]] = dataclasses.field(default_factory=list)
    running: bool = False
    attempts: int = 0
    last_error: str = ""

    @property
    def name(self) -> str:
        f = self.completed.fragment
        return f"{f.journal}:{f.content_name}"


class Persister:
    """Owns the persist queue, its scheduler task and its upload threads; start once, stop once."""

    def __init__(
        self,
        *,
        max_concurrency: int = 32,
        replica_delay_s: float = 120.0,
        retry_s: float = 5.0,
        drain_timeout_s: float = DRAIN_TIMEOUT_S,
    ) -> None:
        self.replica_delay_s = replica_delay_s
        self.retry_s = retry_s
        self.drain_timeout_s = drain_timeout_s
        self._items: dict[_Key, _Pending] = {}
        self._recent: collections.OrderedDict[_Key, Fragment] = collections.OrderedDict()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_concurrency, thread_name_prefix="gazette-persist"
        )  # its `max_concurrency` threads bound the uploads running at once
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._scheduler: asyncio.Task[None] | None = None
        self._attempts: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._stopped = False

    @property
    def pending(self) -> int:
        """Fragments submitted and not yet persisted (queued or uploading)."""
        return len(self._items)

    def last_error(self, journal: str) -> str:
        """The latest failure among `journal`'s fragments still waiting to be persisted ("" if none)."""
        failed = [i for i in self._items.values() if i.completed.fragment.journal == journal and i.last_error]
        if not failed:
            return ""
        item = max(failed, key=lambda i: i.completed.fragment.begin)
        return f"persisting {item.name} failed {item.attempts} times (retrying every {self.retry_s:.3g}s): {item.last_error}"

    async def start(self) -> None:
        if self._scheduler is not None or self._stopped:
            raise StateError("Persister.start called twice")
        self._scheduler = asyncio.create_task(self._schedule(), name="gazette-persister")

    def submit(
        self,
        completed: CompletedSpool,
        *,
        spec_lookup: SpecLookup,
        primary: bool,
        on_persisted: Callable[[Fragment], None],
    ) -> None:
        """Queues a completed spool: attempted now if `primary`, else after `replica_delay_s`."""
        fragment = completed.fragment
        if self._stopped:
            log.error(
                "persister is stopped: fragment %s:%s will NOT be persisted",
                fragment.journal,
                fragment.content_name,
            )
            raise StateError(f"persister is stopped; fragment {fragment.content_path} not persisted")
        now = time.monotonic()
        due = now if primary or self._stopping else now + self.replica_delay_s
        item = self._items.get(_key(fragment))
        if item is None:
            self._items[_key(fragment)] = _Pending(completed, spec_lookup, [on_persisted], due)
            self._idle.clear()
        else:
            item.callbacks.append(on_persisted)
            item.spec_lookup = spec_lookup
            item.due = min(item.due, due)
        self._wake.set()

    async def flush(self, fragment: Fragment) -> Fragment:
        """Persists a submitted fragment now (skipping any replica delay) and returns it as persisted.

        A journal without stores returns `fragment` unchanged; a deleted journal raises JOURNAL_NOT_FOUND.
        """
        key = _key(fragment)
        item = self._items.get(key)
        if item is None:
            if key in self._recent:
                return self._recent[key]
            raise StateError(f"fragment {fragment.journal}:{fragment.content_name} is not pending here")
        waiter: asyncio.Future[Fragment] = asyncio.get_running_loop().create_future()
        item.waiters.append(waiter)
        item.due = min(item.due, time.monotonic())
        self._wake.set()
        return await waiter

    async def stop(self, drain: bool = True) -> None:
        """With `drain`, attempts everything queued at once and retries for up to `drain_timeout_s`.

        Whatever is still not persisted then (or at once without `drain`) is logged at ERROR and its
        `flush` waiters fail; the scheduler, attempts and threads are cancelled.
        """
        if self._stopped:
            return
        self._stopping = True
        try:
            if drain and self._items:
                now = time.monotonic()
                for item in self._items.values():
                    item.due = min(item.due, now)
                self._wake.set()
                log.info("persister draining %d fragments", len(self._items))
                if self._scheduler is None:
                    await self.start()
                try:
                    async with asyncio.timeout(self.drain_timeout_s):
                        await self._idle.wait()
                except TimeoutError:
                    pass
        finally:  # also when the stop itself is cancelled mid-drain: nothing may go on retrying
            await self._halt()

    async def _halt(self) -> None:
        """Cancels the scheduler and attempts, fails what is still queued, and frees the threads."""
        self._stopped = True
        tasks = [t for t in (self._scheduler, *self._attempts) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for item in list(self._items.values()):
            msg = (
                f"fragment {item.name} was NOT persisted: persister stopped "
                f"after {item.attempts} failed attempts (last error: {item.last_error or 'none'})"
            )
            log.error(msg)
            for waiter in item.waiters:
                if not waiter.done():
                    waiter.set_exception(StoreError(msg))
        self._items.clear()
        self._idle.set()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _schedule(self) -> None:
        while True:
            now = time.monotonic()
            next_due = self._start_due(now)
            self._wake.clear()
            try:
                timeout = None if next_due is None else max(0.0, next_due - now)
                async with asyncio.timeout(timeout):  # not wait_for: 3.11's can swallow a cancel
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _start_due(self, now: float) -> float | None:
        """Starts an attempt for every item due by `now`; returns when the next one falls due. A function
        of its own so no loop variable keeps an item (and its spool file's disk space) alive in the
        scheduler's frame while it sleeps."""
        next_due: float | None = None
        for item in self._items.values():
            if item.running:
                continue
            if item.due <= now:
                item.running = True
                task = asyncio.create_task(self._attempt(item), name=f"gazette-persist {item.name}")
                self._attempts.add(task)
                task.add_done_callback(self._attempts.discard)
            elif next_due is None or item.due < next_due:
                next_due = item.due
        return next_due

    async def _attempt(self, item: _Pending) -> None:
        fragment = item.completed.fragment
        try:
            spec = item.spec_lookup(fragment.journal)
            if spec is None:
                log.info(
                    "journal %s was deleted: dropping fragment %s",
                    fragment.journal,
                    fragment.content_name,
                )
                self._finish(
                    item,
                    None,
                    GazetteError(Status.JOURNAL_NOT_FOUND, f"journal {fragment.journal} was deleted"),
                )
                return
            stores = list(spec.stores)
            if not stores:
                log.debug(
                    "journal %s has no stores: fragment %s is not persisted",
                    fragment.journal,
                    fragment.content_name,
                )
                self._finish(item, fragment, None)
                return
            postfix = spec.render_postfix(item.completed)
            reader = functools.partial(item.completed.file.reader, fragment.begin, fragment.end)
            persisted = await asyncio.get_running_loop().run_in_executor(
                self._executor, persist_blocking, fragment, reader, stores[0], postfix
            )
        except asyncio.CancelledError:
            item.running = False
            raise
        except Exception as e:
            item.attempts += 1
            item.last_error = f"{type(e).__name__}: {e}"
            item.due = time.monotonic() + self.retry_s
            item.running = False
            log.warning(
                "persisting fragment %s failed (attempt %d, retrying in %.3gs): %s",
                item.name,
                item.attempts,
                self.retry_s,
                item.last_error,
            )
            self._wake.set()
            return
        log.debug("persisted %s to %s", persisted.content_path, persisted.backing_store)
        self._finish(item, persisted, None)
        for callback in item.callbacks:
            try:
                callback(persisted)
            except Exception:
                log.exception("on_persisted callback for fragment %s failed", item.name)

    def _finish(self, item: _Pending, result: Fragment | None, error: BaseException | None) -> None:
        key = _key(item.completed.fragment)
        self._items.pop(key, None)
        if result is not None:
            self._recent[key] = result
            while len(self._recent) > RECENT_RESULTS:
                self._recent.popitem(last=False)
        for waiter in item.waiters:
            if waiter.done():
                continue
            if error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(result)  # type: ignore[arg-type]
        if not self._items:
            self._idle.set()
