"""The client call policy: which failures a client call tries again, on which endpoint, after what
pause, until when, and what its last error says (docs/semantics.md#client-retries-and-backoff).

Every client loop runs its attempts through it: `AsyncClient`'s unary calls and appends, its reads,
the append service, journal watches, and the shard client of the consumer layer. So they all retry
the same gRPC failures (UNAVAILABLE, and grpc.aio's racing INTERNAL that stands for it), move to the
next endpoint on them, back off alike and give up at their deadline with the same CallTimeout.
Imports the protocol layer and `timeouts` only; no loop decides any of this for itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from enum import IntEnum
from typing import TypeVar

import grpc

from gazette import tunables
from gazette.client.timeouts import CallTimeout, CallTrace
from gazette.protocol.errors import GazetteError, PeerError
from gazette.protocol.status import ShardStatus, Status

T = TypeVar("T")

# Pauses between attempts: tunables.CLIENT_RETRY_BACKOFF_S (the last one repeats); a bounded call
# gives up after tunables.CLIENT_MAX_RETRY_ATTEMPTS retries or at its deadline, whichever comes first.
# grpc.aio's stand-in for the status of a call whose peer went away while a request was being written
# (grpc/grpc#36066): the write's failure replaces the UNAVAILABLE a killed peer's end carried.
RACING_INTERNAL_DETAILS = "Internal error from Core"
# gRPC codes no retry can fix (bad requests, auth, a method the peer lacks): every loop stops on them.
FATAL_GRPC_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)
_FATAL_GRPC_NAMES = frozenset(c.name for c in FATAL_GRPC_CODES)


def backoff_s(attempt: int) -> float:
    """The pause before retry number `attempt` (0: the first retry)."""
    return tunables.CLIENT_RETRY_BACKOFF_S[min(attempt, len(tunables.CLIENT_RETRY_BACKOFF_S) - 1)]


def is_retried(exc: grpc.aio.AioRpcError) -> bool:
    """Whether every client loop tries the call again, on the next endpoint: UNAVAILABLE (a peer down,
    restarting or cut off), or the racing INTERNAL "Internal error from Core" standing for it. A
    peer's own INTERNAL (any other details) is not: the peer answered, and would answer so again."""
    return exc.code() == grpc.StatusCode.UNAVAILABLE or is_racing_internal(exc)


def is_racing_internal(exc: grpc.aio.AioRpcError) -> bool:
    """Whether `exc` is grpc.aio's racing INTERNAL, which stands for a status it lost."""
    return exc.code() == grpc.StatusCode.INTERNAL and exc.details() == RACING_INTERNAL_DETAILS


def rpc_failure(exc: grpc.aio.AioRpcError, trace: CallTrace | None = None) -> PeerError:
    """The final error of a call that ended on a gRPC error: the code and details first, then (given
    the call's trace) the operation, its subject and the peer it failed at; `grpc_code` carries the
    code's name."""
    message = f"{exc.code().name}: {exc.details()}"
    if trace is not None:
        what = f"{trace.operation} {trace.subject}".strip()
        at = f" at {trace.peer} {trace.endpoint}" if trace.endpoint else ""
        message += f" ({what}{at})"
    return PeerError(message, grpc_code=exc.code().name)


class Rotation:
    """Endpoint rotation: the endpoint calls use now, and the move to the next one when it fails.

    A failure moves on once, however many concurrent calls saw it: `failed(i)` moves only while `i`
    is still the endpoint in use.
    """

    def __init__(self, endpoints: Sequence[str] = ()) -> None:
        self.endpoints: tuple[str, ...] = tuple(endpoints)
        self.index = 0

    @property
    def endpoint(self) -> str:
        """The endpoint in use ("" when there is none)."""
        return self.endpoints[self.index] if self.endpoints else ""

    def failed(self, index: int) -> None:
        """Endpoint `index` failed a call: use the next one."""
        if len(self.endpoints) > 1 and index == self.index:
            self.index = (self.index + 1) % len(self.endpoints)

    def replace(self, endpoints: Sequence[str]) -> None:
        """Endpoints found anew (a shard client's members in etcd): keep the place in the rotation."""
        self.endpoints = tuple(endpoints)
        self.index = self.index % len(self.endpoints) if self.endpoints else 0


class Deadline:
    """When a call gives up: `seconds` after it started (None: never), then its trace's CallTimeout
    (`error`, a subclass for shard calls), once `on_expiry` (if given) noted in the trace what the
    call was waiting for. `renew()` starts the time again, for a read whose every chunk waits anew."""

    def __init__(
        self,
        seconds: float | None,
        trace: CallTrace,
        error: type[CallTimeout] = CallTimeout,
        on_expiry: Callable[[], None] | None = None,
    ) -> None:
        self.seconds = seconds
        self.trace = trace
        self._error = error
        self._on_expiry = on_expiry
        self._loop = asyncio.get_running_loop()
        self.at: float | None = None
        self.renew()

    def renew(self) -> None:
        self.at = None if self.seconds is None else self._loop.time() + self.seconds

    def left(self) -> float | None:
        """Seconds left (None: no bound); at least a moment, so a step started with nothing left
        runs out at once instead of waiting unbounded."""
        return None if self.at is None else max(self.at - self._loop.time(), 0.001)

    def error(self) -> CallTimeout:
        """The CallTimeout naming what the trace saw last."""
        if self._on_expiry is not None:
            self._on_expiry()
        return self.trace.timeout_error(self.seconds, self._error)

    @contextlib.asynccontextmanager
    async def bound(self) -> AsyncIterator[None]:
        """Runs the block until the deadline, then raises `error()`. A nested call's own CallTimeout
        (or another TimeoutError of the block) passes through as it is."""
        if self.at is None:
            yield
            return
        try:
            async with asyncio.timeout_at(self.at) as bound:
                yield
        except TimeoutError:
            if not bound.expired():
                raise
            raise self.error() from None

    async def within(self, aw: Awaitable[T]) -> T:
        """`await aw`, until the deadline."""
        async with self.bound():
            return await aw


@dataclasses.dataclass(frozen=True)
class CallPolicy:
    """What one kind of call retries besides the gRPC failures every call retries (`is_retried`).

    `statuses`: protocol statuses in an answer that call for another attempt (a route or a shard
    primary in flux). `max_attempts`: retries before a bounded call gives up with the last failure
    (None: only the deadline ends it). `once_per_endpoint`: try each endpoint once and stop (a
    listing: a mistyped or dead address fails at once). `persistent`: a loop that keeps running
    (a watch, the append service) and retries every failure but the fatal ones (FATAL_GRPC_CODES and
    `terminal`), for as long as it runs.
    """

    statuses: frozenset[IntEnum] = frozenset()
    max_attempts: int | None = tunables.CLIENT_MAX_RETRY_ATTEMPTS
    once_per_endpoint: bool = False
    persistent: bool = False
    terminal: frozenset[IntEnum] = frozenset()

    def retries_error(self, exc: BaseException) -> bool:
        """Whether a persistent loop tries again after a call raised `exc`: a CallTimeout (that
        attempt ran out of time), or a GazetteError whose status or gRPC code is not fatal."""
        if isinstance(exc, CallTimeout):
            return self.persistent
        if not isinstance(exc, GazetteError):
            return False
        if exc.status != Status.OK:
            return exc.status in self.statuses or (self.persistent and exc.status not in self.terminal)
        code = getattr(exc, "grpc_code", None)
        if code is None:
            return False
        return code == grpc.StatusCode.UNAVAILABLE.name or (self.persistent and code not in _FATAL_GRPC_NAMES)


# A call that must ride through broker restarts: gRPC failures only (its answers are final).
UNARY = CallPolicy()
# A listing or a head: each endpoint once, so a dead address fails at once.
IMPATIENT = CallPolicy(once_per_endpoint=True)
# An append while its journal's route is in flux (no primary, too few brokers).
APPEND = CallPolicy(
    statuses=frozenset(
        {
            Status.NOT_JOURNAL_PRIMARY_BROKER,
            Status.NO_JOURNAL_PRIMARY_BROKER,
            Status.INSUFFICIENT_JOURNAL_BROKERS,
        }
    )
)
# A read meeting a route in flux.
READ = CallPolicy(
    statuses=frozenset(
        {Status.NOT_JOURNAL_BROKER, Status.INSUFFICIENT_JOURNAL_BROKERS, Status.NO_JOURNAL_PRIMARY_BROKER}
    )
)
# A shard call at the primary (Stat, Inspect) while the shard changes hands.
SHARD_PRIMARY = CallPolicy(
    statuses=frozenset(
        {ShardStatus.NO_SHARD_PRIMARY, ShardStatus.NOT_SHARD_PRIMARY, ShardStatus.SHARD_STOPPED}
    )
)
# Statuses after which the append service fails a batch and latches its journal
# (docs/semantics.md#append-service); it retries anything else for as long as it runs.
APPEND_SERVICE = CallPolicy(
    max_attempts=None,
    persistent=True,
    terminal=frozenset(
        {
            Status.FRAGMENT_STORE_UNHEALTHY,
            Status.INDEX_HAS_GREATER_OFFSET,
            Status.JOURNAL_NOT_FOUND,
            Status.NOT_ALLOWED,
            Status.REGISTER_MISMATCH,
            Status.WRONG_APPEND_OFFSET,
        }
    ),
)
# A journal watch: re-opens its stream after any failure but a fatal one, for as long as it runs.
WATCH = CallPolicy(max_attempts=None, persistent=True)


class Attempts:
    """The attempts of one call under `policy`: whether a failure is tried again (noting it in the
    deadline's trace and moving `rotation` on), the pause before the next attempt, and the end at
    the deadline.

    A loop asks `retries_rpc(exc, index)` or `retries_status(status)`; on True it awaits `pause()`
    (which raises the deadline's CallTimeout instead of sleeping past it) and tries again; on False
    it raises its final error (`rpc_failure` for gRPC errors). `progress()` starts over after an
    attempt that got somewhere (a read's chunk, a watch's snapshot).
    """

    def __init__(self, policy: CallPolicy, deadline: Deadline, rotation: Rotation | None = None) -> None:
        self.policy = policy
        self.deadline = deadline
        self.rotation = rotation
        self.attempt = 0  # retries so far

    @property
    def trace(self) -> CallTrace:
        return self.deadline.trace

    def _more(self) -> bool:
        if self.policy.once_per_endpoint:
            endpoints = len(self.rotation.endpoints) if self.rotation is not None else 1
            return self.attempt < endpoints - 1
        return self.policy.max_attempts is None or self.attempt < self.policy.max_attempts

    def retries_rpc(self, exc: grpc.aio.AioRpcError, index: int | None = None) -> bool:
        """Notes `exc` in the trace; whether the call is tried again. A retried failure at endpoint
        `index` (of the rotation) moves the rotation to the next endpoint. A racing INTERNAL says
        nothing of the peer (it stands for the status gRPC lost, UNAVAILABLE as a rule): the trace
        keeps what an earlier attempt saw, so a CallTimeout names the peer's own last status."""
        if not (is_racing_internal(exc) and self.trace.detail):
            self.trace.saw_rpc_error(exc)
        if exc.code() in FATAL_GRPC_CODES:
            return False
        if is_retried(exc):
            if self.rotation is not None and index is not None:
                self.rotation.failed(index)
            return self._more()
        return self.policy.persistent and self._more()

    def retries_status(self, status: IntEnum) -> bool:
        """Whether an answer with `status` (already noted in the trace) is asked again."""
        return status in self.policy.statuses and self._more()

    def retries_unreachable(self, exc: BaseException) -> bool:
        """Notes `exc`, a failure to find or reach any peer (no member announced in etcd, etcd
        down), in the trace; whether the call tries again (as after UNAVAILABLE)."""
        self.trace.saw_error(exc)
        return self._more()

    def retries_error(self, exc: BaseException) -> bool:
        """Whether a persistent loop tries again after `exc` (see `CallPolicy.retries_error`); notes
        it in the trace (a CallTimeout's news is there already)."""
        if not isinstance(exc, CallTimeout):
            self.trace.saw_error(exc)
        return self.policy.retries_error(exc) and self._more()

    async def pause(self) -> None:
        """Sleeps the backoff before the next attempt; at the deadline raises its CallTimeout."""
        pause = backoff_s(self.attempt)
        self.attempt += 1
        left = self.deadline.left()
        if left is not None and pause >= left:
            await asyncio.sleep(left)
            raise self.deadline.error()
        await asyncio.sleep(pause)

    def progress(self) -> None:
        """The last attempt got somewhere: retries count from zero, the deadline starts anew."""
        self.attempt = 0
        self.deadline.renew()
