"""Deadlines of client calls: `CallTimeout`, the clients' default timeout, and `CallTrace`.

Every call of the journal and shard clients runs under a timeout in seconds (`timeout=`, else the
client's default), so a lost broker surfaces as an error instead of a caller hung for ever. A call
records what it saw in a CallTrace (broker tried, last status, the journal's route) so that its
CallTimeout names the operation, the journal or shard, the broker and the last status.
Imports only the protocol layer.
"""

from __future__ import annotations

import dataclasses
import math
from enum import IntEnum
from typing import Any, Final

from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

DEFAULT_TIMEOUT_S = 60.0  # the clients' default: long enough to ride through a broker restart


class UseClientDefault:
    """The type of `USE_CLIENT_DEFAULT`: a call given it uses its client's default timeout."""

    _instance: UseClientDefault | None = None

    def __new__(cls) -> UseClientDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "USE_CLIENT_DEFAULT"


USE_CLIENT_DEFAULT: Final = UseClientDefault()
# What a `timeout=` argument takes: seconds, None (no bound), or the client's default.
Timeout = float | None | UseClientDefault


def resolve_timeout(timeout: Timeout, default: float | None) -> float | None:
    """`timeout` in seconds (None: no bound), `default` standing in for USE_CLIENT_DEFAULT."""
    if isinstance(timeout, UseClientDefault):
        return default
    return check_timeout(timeout)


def check_timeout(timeout: float | None, what: str = "timeout") -> float | None:
    """A timeout argument, validated: a positive number of seconds, or None for no bound."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or math.isnan(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"{what} {timeout!r} is not a positive number of seconds (or None: no bound)")
    return float(timeout)


class CallTimeout(GazetteError, TimeoutError):
    """A client call did not complete within its timeout.

    Catch it as `gazette.CallTimeout`, `GazetteError` or the builtin `TimeoutError`. Its message names
    the operation, the journal (or shard), the broker tried and the last status seen; the same ride in
    the attributes `operation`, `subject`, `endpoint`, `last_status` (the protocol status, or None when
    no status came) and `timeout` (seconds). `status` is OK: the call did not fail, it ran out of time.
    """

    def __init__(self, message: str, **context: Any) -> None:
        context.setdefault("operation", "")
        context.setdefault("subject", "")
        context.setdefault("endpoint", "")
        context.setdefault("last_status", None)
        context.setdefault("timeout", None)
        super().__init__(Status.OK, message, **context)


@dataclasses.dataclass(eq=False)
class CallTrace:
    """What one call saw so far, for its CallTimeout: updated by the call at each attempt.

    `operation` reads before `subject` ("append to" + a journal, "stat of shard" + a shard);
    `endpoint` is the `peer` ("broker", or "consumer" for shard calls) tried last; `detail` is the
    last status or error in words; `route_members` and `replication` explain an
    INSUFFICIENT_JOURNAL_BROKERS (how many brokers serve the journal, how many it needs).
    """

    operation: str
    subject: str = ""
    endpoint: str = ""
    peer: str = "broker"
    status: IntEnum | None = None  # a broker Status, or a consumer's shard status
    detail: str = ""
    route_members: tuple[str, ...] | None = None
    replication: int | None = None

    def saw(self, status: IntEnum | int, detail: str = "") -> None:
        """An answer: its status (a plain int is a broker Status) and what else it said."""
        self.status = status if isinstance(status, IntEnum) else Status(status)
        self.detail = detail

    def saw_error(self, exc: BaseException) -> None:
        """A failed attempt: a GazetteError's status (its message as the detail), else the error."""
        status = getattr(exc, "status", None)
        self.status = status if isinstance(status, IntEnum) and int(status) != 0 else None
        self.detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__

    def saw_rpc_error(self, exc: Any) -> None:
        """A gRPC error (grpc.aio.AioRpcError): its code and details."""
        self.status = None
        self.detail = f"{exc.code().name}: {exc.details()}"

    def last_seen(self) -> str:
        """The last status in words, with what INSUFFICIENT_JOURNAL_BROKERS lacks."""
        if self.status is None and not self.detail:
            return "no answer yet"
        if self.status == Status.INSUFFICIENT_JOURNAL_BROKERS:
            return f"INSUFFICIENT_JOURNAL_BROKERS: {self.insufficient_brokers()}"
        if self.status is not None and int(self.status) != 0:  # 0 is OK, for broker and shard statuses
            return f"{self.status.name}: {self.detail}" if self.detail else self.status.name
        return self.detail or "OK"

    def insufficient_brokers(self) -> str:
        """What INSUFFICIENT_JOURNAL_BROKERS lacks: the brokers the journal's replication needs, and
        those in its route (which the allocator fills up to R from the live brokers that are below
        their journal limit)."""
        members = self.route_members
        if self.replication:
            need = f"R={self.replication} needs {self.replication} brokers"
        else:
            need = "its replication needs more brokers than serve it"
        if members is None:
            have = "too few are in its route"
        else:
            names = f" ({', '.join(members)})" if members else ""
            have = f"{len(members)} {'is' if len(members) == 1 else 'are'} in its route{names}"
        return (
            f"{need}, {have}: the others are down or at their journal limit; restart or add a broker, "
            "or lower the journal's replication"
        )

    def timeout_error(self, timeout: float | None, cls: type[CallTimeout] = CallTimeout) -> CallTimeout:
        """The CallTimeout of this call, after `timeout` seconds."""
        what = f"{self.operation} {self.subject}".strip()
        after = f" after {timeout:g} s" if timeout is not None else ""
        broker = f"{self.peer} {self.endpoint}, " if self.endpoint else ""
        return cls(
            f"{what} timed out{after} ({broker}last status {self.last_seen()})",
            operation=self.operation,
            subject=self.subject,
            endpoint=self.endpoint,
            last_status=self.status,
            timeout=timeout,
        )
