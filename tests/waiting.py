"""Waiting on conditions with a deadline, the one way tests wait (never on bare sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from gazette.protocol.errors import GazetteError


def wait_for(what: str, check: Callable[[], object], deadline_s: float = 30.0, poll_s: float = 0.05):
    """Polls `check` until it returns something truthy (returned), or fails naming `what`; transient
    client errors raised by `check` count as "not yet"."""
    deadline = time.monotonic() + deadline_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except (GazetteError, OSError, grpc.RpcError) as exc:
            last_error, result = exc, None
        if result:
            return result
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {deadline_s:.0f} s waiting for {what} (last error: {last_error!r})")
