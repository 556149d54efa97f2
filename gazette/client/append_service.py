"""AppendService: asynchronous, ordered, batched appends per journal (docs/semantics.md#append-service).

Writes to a journal go into its open batch (a bytearray); each batch becomes one Append RPC, and a
journal's next batch starts only after the previous one's result, so bytes land in write order while
later writes keep buffering. Writers on any thread share a batch's future instead of paying a future
(or a loop wake-up) per write. Transient failures retry forever (the call policy's APPEND_SERVICE);
terminal statuses fail the batch and latch an error on the journal. Each attempt is bounded by the client's timeout, and waiting for
batches (`flush`, `wait`, `close`) by the caller's: a CallTimeout names each stuck journal's broker and
last status. Imports only the client layer and the protocol.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging
import threading
from collections.abc import Callable, Coroutine, Generator, Iterable
from types import TracebackType
from typing import Any, NamedTuple, TypeVar, cast

from gazette.client.aio import AppendResult, AsyncClient
from gazette.client.policy import APPEND_SERVICE, Attempts, Deadline
from gazette.client.sync import Client
from gazette.client.timeouts import USE_CLIENT_DEFAULT, CallTimeout, CallTrace, Timeout, resolve_timeout
from gazette.protocol.errors import AppendError, GazetteError, StateError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.validate import validate_journal_name

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BATCH_BYTES = 64 << 20  # a batch takes no more writes at this size (docs/semantics.md#append-service)
RETRY_LOG_EVERY_ATTEMPTS = 10  # a journal whose appends keep failing logs on the first and every 10th


def is_terminal(exc: BaseException) -> bool:
    """Whether an append failure is final (fail and latch) rather than worth retrying: a terminal
    status or a fatal gRPC code of the call policy's APPEND_SERVICE. Unlike Go's AppendService,
    REGISTER_MISMATCH stays terminal when check_registers is set, so a fenced-out writer (a zombie
    shard) stops at its next append (docs/semantics.md#append-service). An attempt that ran out of
    time (CallTimeout) is not: the batch is tried again."""
    return not APPEND_SERVICE.retries_error(exc)


class ClientBinding(NamedTuple):
    """An AsyncClient and the event loop it lives on, from a sync `Client` or an `AsyncClient`.

    grpc.aio objects belong to the loop that made them: coroutines of `aio` run on `loop`, reached
    by `run()` from other threads, or awaited directly on the loop itself.
    """

    aio: AsyncClient
    loop: asyncio.AbstractEventLoop

    @classmethod
    def of(cls, client: Client | AsyncClient, loop: asyncio.AbstractEventLoop | None = None) -> ClientBinding:
        if isinstance(client, Client):
            return cls(client.aio, loop or client._loop.loop)
        if not isinstance(client, AsyncClient):
            raise TypeError(f"{client!r} is neither a gazette Client nor an AsyncClient")
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise RuntimeError(
                    "an AsyncClient is bound to the event loop that made it: create this object inside "
                    "a coroutine on that loop, or pass loop=..."
                ) from None
        return cls(client, loop)

    def on_loop(self) -> bool:
        """Whether the caller runs on this binding's loop (where blocking on it would deadlock)."""
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def run(
        self, coro: Coroutine[Any, Any, T], timeout: float | None = None, *, what: str = "this call"
    ) -> T:
        """Runs `coro` on the loop from another thread and waits for its result."""
        if self.on_loop():
            coro.close()
            raise RuntimeError(
                f"{what} blocks, and cannot run on the client's own event loop: await it instead"
            )
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise


class AppendFuture(concurrent.futures.Future):
    """The result of one batch: an `AppendResult` spanning every write of the batch.

    Thread-safe; `result()` blocks the calling thread, `await future` works on any event loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._service_loop = loop

    def result(self, timeout: float | None = None) -> AppendResult:
        if not self.done():
            try:
                on_loop = asyncio.get_running_loop() is self._service_loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                raise RuntimeError(
                    "AppendFuture.result() would block the event loop that sends it: await it instead"
                )
        return super().result(timeout)

    def __await__(self) -> Generator[Any, None, AppendResult]:
        return asyncio.wrap_future(self).__await__()


class _Options(NamedTuple):
    check: LabelSelector | None
    union: LabelSet | None
    subtract: LabelSet | None


_NO_OPTIONS = _Options(None, None, None)
_NO_DEPENDENCIES: frozenset[concurrent.futures.Future] = frozenset()


def _options(
    check: str | LabelSelector | None,
    union: LabelSet | dict[str, str] | None,
    subtract: LabelSet | dict[str, str] | None,
) -> _Options:
    if check is None and not union and not subtract:
        return _NO_OPTIONS
    return _Options(
        None if check is None else LabelSelector.coerce(check),
        LabelSet(union) if union else None,
        LabelSet(subtract) if subtract else None,
    )


@dataclasses.dataclass(eq=False, slots=True)
class _Batch:
    """Writes that become one Append RPC. Mutated only under the service lock until the sender
    pops it from its journal's queue; from then on only the sender reads it."""

    options: _Options
    dependencies: frozenset[concurrent.futures.Future]
    future: AppendFuture
    data: bytearray = dataclasses.field(default_factory=bytearray)


@dataclasses.dataclass(eq=False, slots=True)
class _Journal:
    name: str
    queue: collections.deque[_Batch] = dataclasses.field(default_factory=collections.deque)  # last = open
    sending: _Batch | None = None
    active: bool = False  # a sender task runs (or is scheduled) for this journal
    error: GazetteError | None = None
    trace: CallTrace | None = None  # what the attempts of the batch being sent saw (for timeouts)


class AppendWriter:
    """A reserved place in a journal's order (see `AsyncAppendService.start_append`)."""

    __slots__ = ("_batch", "_mark", "future")

    def __init__(self, batch: _Batch) -> None:
        self._batch = batch
        self._mark = len(batch.data)
        self.future: AppendFuture = batch.future

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._batch.data += data


class _AppendSection:
    """Context manager of `start_append`: holds the service lock from enter to exit."""

    __slots__ = ("_service", "_journal", "_options", "_dependencies", "_writer", "_created")

    def __init__(self, service: AsyncAppendService, journal: str, options: _Options, deps: frozenset) -> None:
        self._service = service
        self._journal = journal
        self._options = options
        self._dependencies = deps
        self._writer: AppendWriter | None = None
        self._created = False

    def __enter__(self) -> AppendWriter:
        s = self._service
        s._lock.acquire()
        try:
            j = s._journal_for_write(self._journal)
            before = j.queue[-1] if j.queue else None
            batch = s._open_batch(j, self._options, self._dependencies)
            self._created = batch is not before
            self._writer = AppendWriter(batch)
        except BaseException:
            s._lock.release()
            raise
        return self._writer

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        s = self._service
        w = self._writer
        assert w is not None
        try:
            if exc_type is not None:
                del w._batch.data[w._mark :]  # nothing of a failed section lands
                if self._created and not w._batch.data:
                    s._journals[self._journal].queue.pop()  # nobody else saw this batch
        finally:
            s._lock.release()


class AsyncAppendService:
    """Per-journal FIFO chains of batched Append RPCs, driven on the client's event loop.

    Writes (`append`, `append_with`, `start_append`) are thread-safe and never block on I/O; they
    return the batch's `AppendFuture`, shared by every write of that batch. A sender task per busy
    journal pops batches in order; it is scheduled only when an idle journal gets its first write.
    Do not await inside a `start_append` section: it holds a lock the sender also takes.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        if max_batch_bytes < 1:
            raise ValueError(f"max_batch_bytes {max_batch_bytes} must be at least 1")
        self._binding = ClientBinding.of(client, loop)
        self.client = self._binding.aio
        self.loop = self._binding.loop
        self.max_batch_bytes = max_batch_bytes
        self._lock = threading.Lock()
        self._journals: dict[str, _Journal] = {}
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    # --- writes ----------------------------------------------------------------------------------
    def append(
        self,
        journal: str,
        data: bytes | bytearray | memoryview,
        *,
        check_registers: str | LabelSelector | None = None,
        union_registers: LabelSet | dict[str, str] | None = None,
        subtract_registers: LabelSet | dict[str, str] | None = None,
        dependencies: Iterable[concurrent.futures.Future] = (),
    ) -> AppendFuture:
        """Queues `data` after every earlier write to `journal`; returns its batch's future.

        Writes with different register options start a new batch. The batch's RPC waits for
        `dependencies` (futures) and fails if one of them failed.
        """
        opts = _options(check_registers, union_registers, subtract_registers)
        deps = _pending_dependencies(dependencies)
        with self._lock:
            batch = self._open_batch(self._journal_for_write(journal), opts, deps)
            batch.data += data
            return batch.future

    def append_with(self, journal: str, make: Callable[..., bytes], *args: Any) -> AppendFuture:
        """Fixes the write's place in `journal`'s order, then appends `make(*args)` there.

        The cheap path of a publisher: whatever `make` stamps (a clock tick) follows journal order.
        `make` runs under the service lock, so it must be quick and must not call this service.
        """
        with self._lock:
            # Fast path (most writes): the journal's open batch takes plain writes and has room.
            j = self._journals.get(journal)
            if j is not None and j.queue and j.error is None and not self._closed:
                batch = j.queue[-1]
                if (
                    batch.options is _NO_OPTIONS
                    and not batch.dependencies
                    and len(batch.data) < self.max_batch_bytes
                ):
                    batch.data += make(*args)
                    return batch.future
            batch = self._open_batch(self._journal_for_write(journal), _NO_OPTIONS, _NO_DEPENDENCIES)
            batch.data += make(*args)
            return batch.future

    def start_append(
        self,
        journal: str,
        *,
        check_registers: str | LabelSelector | None = None,
        union_registers: LabelSet | dict[str, str] | None = None,
        subtract_registers: LabelSet | dict[str, str] | None = None,
        dependencies: Iterable[concurrent.futures.Future] = (),
    ) -> _AppendSection:
        """`with service.start_append(journal) as w: w.write(...)`: writes inside the block land
        together, in the order fixed on entry; an exception in the block discards them."""
        validate_journal_name(journal, allow_meta=True)
        opts = _options(check_registers, union_registers, subtract_registers)
        return _AppendSection(self, journal, opts, _pending_dependencies(dependencies))

    # --- errors ----------------------------------------------------------------------------------
    def error(self, journal: str) -> GazetteError | None:
        """The error latched on `journal` by a terminal failure, if any."""
        with self._lock:
            j = self._journals.get(journal)
            return j.error if j else None

    def clear_error(self, journal: str) -> None:
        """Accepts writes to `journal` again after a latched error."""
        with self._lock:
            j = self._journals.get(journal)
            if j is not None:
                j.error = None

    # --- barriers --------------------------------------------------------------------------------
    def pending(self) -> list[AppendFuture]:
        """Futures of every batch buffered or in flight, in no particular order across journals."""
        return self._pending(None)

    def pending_except(self, journal: str) -> list[AppendFuture]:
        """Futures of every buffered or in-flight batch of journals other than `journal` (the
        commit barrier of docs/semantics.md#transaction-loop)."""
        return self._pending(journal)

    def pending_of(self, journal: str) -> list[AppendFuture]:
        """Futures of `journal`'s buffered or in-flight batches, in order (empty: all appended)."""
        return [f for _, f in self._pending_batches(None, only=journal)]

    async def flush(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """Waits until every batch pending now has its result; raises the first failure among them.

        `timeout` (the client's default unless given) bounds each wait for the next batch to finish,
        so a flush of many batches that keeps appending is never cut short, and one that is stuck
        raises CallTimeout naming the journals still pending, with the broker and last status of the
        first. The batches stay queued and keep being retried (a later flush may see them through;
        `abort()` drops them).
        """
        seconds = resolve_timeout(timeout, self.client.timeout)
        pending = self._pending_batches(None)
        waiting = set(wrap_futures(f for _, f in pending))
        while waiting:
            done, waiting = await asyncio.wait(waiting, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise self.timeout_error("flush of appends to", pending, seconds)
        _raise_first(f for _, f in pending)

    def wait(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """`flush()` for threads other than the loop's: blocks until pending batches are done, each
        wait for the next one bounded by `timeout` seconds (the client's default unless given)."""
        if self._binding.on_loop():
            raise RuntimeError(
                "AsyncAppendService.wait() would block its own event loop: await flush() instead"
            )
        seconds = resolve_timeout(timeout, self.client.timeout)
        pending = self._pending_batches(None)
        waiting: set[concurrent.futures.Future] = {f for _, f in pending}
        while waiting:
            done, waiting = concurrent.futures.wait(waiting, seconds, concurrent.futures.FIRST_COMPLETED)
            if not done:
                raise self.timeout_error("flush of appends to", pending, seconds)
        _raise_first(f for _, f in pending)

    async def close(self, timeout: float | None = None) -> None:
        """Refuses new writes, waits until everything buffered is appended (retrying as long as it
        takes, or as long as some batch finishes every `timeout` seconds), and stops the sender
        tasks. Failures were reported through the futures. A wait that runs out aborts what is left
        (see `abort`) and raises CallTimeout naming the journals whose batches were dropped."""
        with self._lock:
            self._closed = True
        while pending := self._pending_batches(None):
            waiting = set(wrap_futures(f for _, f in pending))
            while waiting:
                done, waiting = await asyncio.wait(
                    waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    error = self.timeout_error("close of appends to", pending, timeout)
                    await self.abort()
                    raise error
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def abort(self) -> None:
        """Stops at once: cancels sender tasks and fails every unfinished batch."""
        with self._lock:
            self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        with self._lock:
            batches = [b for j in self._journals.values() for b in j.queue]
            for j in self._journals.values():
                j.queue.clear()
        for b in batches:
            _resolve(b.future, exc=AppendError("append service aborted before this batch was sent"))

    # --- internals (called under self._lock) -----------------------------------------------------
    def _journal_for_write(self, name: str) -> _Journal:
        j = self._journals.get(name)
        if j is None:
            if self._closed:
                raise StateError(f"append service is closed: cannot append to {name}")
            validate_journal_name(name, allow_meta=True)
            j = self._journals[name] = _Journal(name)
        if j.error is not None:
            raise GazetteError(
                j.error.status,
                f"{j.error.message} (an earlier append to {name} failed; later appends fail until "
                f"clear_error({name!r}))",
                **j.error.context,
            )
        if self._closed:
            raise StateError(f"append service is closed: cannot append to {name}")
        return j

    def _open_batch(self, j: _Journal, options: _Options, deps: frozenset) -> _Batch:
        """The batch a write joins: the journal's open batch if compatible, else a new one."""
        if j.queue:
            batch = j.queue[-1]
            if (
                len(batch.data) < self.max_batch_bytes
                and (batch.options is options or batch.options == options)
                and (not deps or deps <= batch.dependencies)
            ):
                return batch
        batch = _Batch(options, deps, AppendFuture(self.loop))
        j.queue.append(batch)
        if not j.active:
            j.active = True
            self.loop.call_soon_threadsafe(self._start_sender, j)
        return batch

    def _pending(self, skip: str | None) -> list[AppendFuture]:
        return [f for _, f in self._pending_batches(skip)]

    def _pending_batches(self, skip: str | None, only: str | None = None) -> list[tuple[str, AppendFuture]]:
        """(journal, future) of every batch buffered or in flight, but those of `skip` (or only
        those of `only`), in each journal's order."""
        out: list[tuple[str, AppendFuture]] = []
        with self._lock:
            for name, j in self._journals.items():
                if name == skip or (only is not None and name != only):
                    continue
                if j.sending is not None:
                    out.append((name, j.sending.future))
                out.extend((name, b.future) for b in j.queue)
        return out

    def timeout_error(
        self, operation: str, pending: list[tuple[str, AppendFuture]], seconds: float | None
    ) -> CallTimeout:
        """The CallTimeout of a wait for `pending` batches: the journals still pending, and the
        broker and last status of the first of them."""
        journals = list(dict.fromkeys(name for name, f in pending if not f.done()))
        with self._lock:
            j = self._journals.get(journals[0]) if journals else None
            seen = j.trace if j is not None else None
        more = f" and {len(journals) - 3} more" if len(journals) > 3 else ""
        trace = CallTrace(operation, ", ".join(journals[:3]) + more, endpoint=self.client.endpoint)
        if seen is not None:
            trace.endpoint, trace.status, trace.detail = seen.endpoint, seen.status, seen.detail
            trace.route_members, trace.replication = seen.route_members, seen.replication
        else:
            trace.detail = "not sent yet (waiting for earlier appends or dependencies)"
        return trace.timeout_error(seconds)

    # --- the sender (on the loop) ----------------------------------------------------------------
    def _start_sender(self, j: _Journal) -> None:
        task = self.loop.create_task(self._serve(j), name=f"append-service {j.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, j: _Journal) -> None:
        """Sends `j`'s batches one RPC at a time, in order, until its queue is empty."""
        batch: _Batch | None = None
        try:
            while True:
                with self._lock:
                    j.sending = None
                    if not j.queue:
                        j.active = False
                        return
                    batch = j.queue.popleft()  # sealed: no writer touches it from here on
                    j.sending = batch
                try:
                    if batch.dependencies:
                        await _await_dependencies(j.name, batch.dependencies)
                    result = await self._send(j.name, batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._fail(j, batch, exc)
                    continue
                _resolve(batch.future, result=result)
        except asyncio.CancelledError:
            with self._lock:
                j.sending = None
                j.active = False
            if batch is not None:
                _resolve(batch.future, exc=AppendError(f"append to {j.name} was cancelled"))
            raise

    async def _send(self, journal: str, batch: _Batch) -> AppendResult:
        """Appends `batch`, retrying transient failures for as long as it takes (each attempt
        bounded by the client's timeout); what the attempts see goes to the journal's trace."""
        opts = batch.options
        trace = CallTrace("append to", journal)
        self._journals[journal].trace = trace
        attempts = Attempts(APPEND_SERVICE, Deadline(None, trace))  # each attempt has its own timeout
        while True:
            try:
                return await self.client.append(
                    journal,
                    cast(bytes, batch.data),  # append() takes any bytes-like; no 64 MiB copy
                    check_registers=opts.check,
                    union_registers=opts.union,
                    subtract_registers=opts.subtract,
                    _trace=trace,
                )
            except GazetteError as exc:
                if not attempts.retries_error(exc):
                    raise
                if attempts.attempt % RETRY_LOG_EVERY_ATTEMPTS == 0:
                    log.warning("append of %d bytes to %s failed (attempt %d), retrying: %s",
                                len(batch.data), journal, attempts.attempt + 1, exc)  # fmt: skip
            await attempts.pause()

    def _fail(self, j: _Journal, batch: _Batch, exc: Exception) -> None:
        """A dependency failure fails only its batch; a terminal append failure also fails every
        batch queued behind it and latches the journal."""
        if isinstance(exc, _DependencyFailed):
            _resolve(batch.future, exc=exc.error)
            return
        err = exc if isinstance(exc, GazetteError) else AppendError(f"append to {j.name} failed: {exc!r}")
        with self._lock:
            j.error = err
            later = list(j.queue)
            j.queue.clear()
        log.warning(
            "append to %s failed terminally; the journal's appends stop until cleared: %s", j.name, err
        )
        for b in (batch, *later):
            _resolve(b.future, exc=err)


class _DependencyFailed(Exception):
    def __init__(self, error: GazetteError) -> None:
        super().__init__(str(error))
        self.error = error


async def _await_dependencies(journal: str, deps: frozenset[concurrent.futures.Future]) -> None:
    await asyncio.wait([asyncio.wrap_future(d) for d in deps])
    for d in deps:
        if d.cancelled() or d.exception() is not None:
            cause = "was cancelled" if d.cancelled() else f"failed: {d.exception()}"
            raise _DependencyFailed(AppendError(f"append to {journal}: a dependency {cause}"))


def _pending_dependencies(deps: Iterable[concurrent.futures.Future]) -> frozenset[concurrent.futures.Future]:
    if not deps:
        return _NO_DEPENDENCIES
    return frozenset(d for d in deps if not d.done() or d.cancelled() or d.exception() is not None)


def _resolve(fut: concurrent.futures.Future, *, result: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def wrap_futures(futures: Iterable[concurrent.futures.Future]) -> list[asyncio.Future]:
    """asyncio futures following `futures`, for `asyncio.wait` with a timeout: their failures count
    as seen (the callers get them from `futures`), so a wait that gave up leaves no "exception was
    never retrieved" behind."""
    out: list[asyncio.Future] = []
    for f in futures:
        wrapper = asyncio.wrap_future(f)
        wrapper.add_done_callback(_retrieve)
        out.append(wrapper)
    return out


def _retrieve(wrapper: asyncio.Future) -> None:
    if not wrapper.cancelled():
        wrapper.exception()


def _raise_first(futures: Iterable[concurrent.futures.Future]) -> None:
    for f in futures:
        if f.cancelled():
            raise AppendError("an append batch was cancelled")
        exc = f.exception()
        if exc is not None:
            raise exc


class AppendService:
    """The sync facade of `AsyncAppendService` over a sync `Client`'s background loop."""

    def __init__(self, client: Client, *, max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        if not isinstance(client, Client):
            raise TypeError(
                f"AppendService takes a sync gazette Client (got {client!r}); use AsyncAppendService"
            )
        self._client = client
        self.aio = AsyncAppendService(client, max_batch_bytes=max_batch_bytes)
        self.append = self.aio.append
        self.append_with = self.aio.append_with
        self.start_append = self.aio.start_append
        self.pending = self.aio.pending
        self.pending_except = self.aio.pending_except
        self.error = self.aio.error
        self.clear_error = self.aio.clear_error

    def flush(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """Blocks until every batch pending now is appended; raises the first failure, or CallTimeout
        once no batch finished for `timeout` seconds (the client's default unless given)."""
        self.aio.wait(timeout)

    def close(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """Drains and stops the service: waits for every buffered batch, and once none finished for
        `timeout` seconds (the client's default unless given) drops what is left with CallTimeout."""
        self._client._loop.run(self.aio.close(resolve_timeout(timeout, self._client.timeout)))

    def __enter__(self) -> AppendService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
