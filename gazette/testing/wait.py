"""Bounded waits on conditions: the one way a test waits for a cluster to get somewhere.

A wait polls a check until it returns something truthy, and fails after its bound with an error
naming what it waited for and what the check said last, so a failing test says why instead of
hanging or sleeping a guessed time. Standard library, grpc and gazette.protocol only.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from gazette.protocol.errors import GazetteError, ValidationError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_POLL_S = 0.05
# Errors a check may raise while a cluster is still getting there (no primary yet, a broker
# restarting, a refused connection): they count as "not yet", and the last one is reported.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (GazetteError, OSError, grpc.RpcError)
_REPR_CHARS = 500  # of the last value and error in a WaitTimeout's message
_NO_VALUE: Any = object()  # no check has returned yet (each raised)


class WaitTimeout(AssertionError):
    """A wait's bound passed before its check returned something truthy. An AssertionError, so
    pytest reports it as a failed expectation; `what`, `timeout`, `checks`, `last` (the last value
    returned, None when every check raised) and `error` (the last transient error raised, or None)
    say how it went."""

    def __init__(
        self, what: str, timeout: float, checks: int, last: object, error: BaseException | None
    ) -> None:
        self.what, self.timeout, self.checks, self.error = what, timeout, checks, error
        self.last = None if last is _NO_VALUE else last
        said = [] if last is _NO_VALUE else [f"last value {_short(last)}"]
        if error is not None:
            said.append(f"last error {_short(error)}")
        super().__init__(
            f"timed out after {timeout:g} s waiting for {what} ({checks} checks; {'; '.join(said) or 'no result'})"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_CHARS else text[:_REPR_CHARS] + "..."


def _check_bounds(timeout: float, poll: float) -> None:
    if timeout < 0 or poll <= 0:
        raise ValidationError(f"a wait needs timeout >= 0 and poll > 0 (got timeout={timeout}, poll={poll})")


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT_S,
    poll: float = DEFAULT_POLL_S,
    *,
    retry: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
) -> T:
    """Calls `check()` every `poll` seconds until it returns something truthy, and returns that.

    `what` completes "waiting for ..." in the error. An exception of a type in `retry` (default
    TRANSIENT_ERRORS; `retry=()` lets every exception through) counts as "not yet"; any other
    propagates at once. Once `timeout` seconds have passed (checked once more at the bound; exactly
    once with timeout=0) it raises WaitTimeout naming `what`, the last value and the last error.
    `check` must not block for long itself: give the calls it makes their own timeouts."""
    _check_bounds(timeout, poll)
    deadline = time.monotonic() + timeout
    checks, last, error = 0, _NO_VALUE, None
    while True:
        checks += 1
        try:
            result = check()
        except retry as exc:
            error = exc
        else:
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()  # never awaited: no "coroutine was never awaited" warning
                raise TypeError(f"the check for {what} returned an awaitable: use async_wait_for")
            if result:
                return result
            last = result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(what, timeout, checks, last, error)
        time.sleep(min(poll, remaining))


async def async_wait_for(
    what: str,
    check: Callable[[], T | Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT_S,
    poll: float = DEFAULT_POLL_S,
    *,
    retry: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
) -> T:
    """`wait_for` for async tests: sleeps with asyncio between checks, so the loop keeps running
    what the test waits on. `check` may be a plain function or return an awaitable (an `async def`
    check), which is awaited for at most the time left (at least `poll`); a check that overruns it
    counts as a TimeoutError, which is transient unless `retry` says otherwise."""
    _check_bounds(timeout, poll)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    checks, last, error = 0, _NO_VALUE, None
    while True:
        checks += 1
        try:
            result: Any = check()
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, max(deadline - loop.time(), poll))
        except retry as exc:
            error = exc
        else:
            if result:
                return result  # type: ignore[no-any-return]
            last = result
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise WaitTimeout(what, timeout, checks, last, error)
        await asyncio.sleep(min(poll, remaining))
