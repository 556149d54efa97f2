"""The one exception family of gazette-py: `GazetteError`, carrying a protocol `Status` (brokers)
or `ShardStatus` (consumers' Shard service)."""

from __future__ import annotations

from typing import Any

from gazette.protocol.status import ShardStatus, Status


class GazetteError(Exception):
    """An operation failed with a protocol status (or a local validation error).

    `status` is a `Status` (a broker's), or a `ShardStatus` for errors of a consumer's Shard service
    (SHARD_NOT_FOUND, NO_SHARD_PRIMARY, ...), so `err.status.name` reads right; plain ints are taken
    as broker statuses. It is Status.OK for errors that are not protocol statuses, such as bad input
    caught before any RPC. Extra context, for example the current `registers` on REGISTER_MISMATCH,
    rides in attributes.
    """

    def __init__(self, status: Status | ShardStatus | int, message: str = "", **context: Any) -> None:
        self.status: Status | ShardStatus = status if isinstance(status, ShardStatus) else Status(status)
        self.message = message or self.status.name
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)
        text = self.message if self.status in (Status.OK, ShardStatus.OK) else f"{self.status.name}: {self.message}"
        super().__init__(text)


class ValidationError(GazetteError, ValueError):
    """Bad input: a name, spec or argument that breaks a rule. The message names the thing and the rule."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)
