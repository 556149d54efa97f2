"""The one exception family of gazette-py: `GazetteError`, carrying a protocol `Status` (brokers)
or `ShardStatus` (consumers' Shard service), and the named classes under it for failures that are
not protocol statuses (their `status` is Status.OK).

`CallTimeout` (a call ran out of time) is one of them too; it lives in gazette.client.timeouts.
The hierarchy, and which class is raised when: docs/architecture.md#errors.
"""

from __future__ import annotations

from typing import Any

from gazette.protocol.status import ShardStatus, Status


class GazetteError(Exception):
    """An operation failed: with a protocol status, or (a named subclass below) for another reason.

    `status` is a `Status` (a broker's), or a `ShardStatus` for errors of a consumer's Shard service
    (SHARD_NOT_FOUND, NO_SHARD_PRIMARY, ...), so `err.status.name` reads right; plain ints are taken
    as broker statuses. It is Status.OK for errors that are not protocol statuses, which are raised as
    the named subclasses (ValidationError, ConfigurationError, ...). Extra context, for example the current `registers` on REGISTER_MISMATCH,
    rides in attributes.
    """

    def __init__(self, status: Status | ShardStatus | int, message: str = "", **context: Any) -> None:
        self.status: Status | ShardStatus = status if isinstance(status, ShardStatus) else Status(status)
        self.message = message or self.status.name
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)
        text = (
            self.message
            if self.status in (Status.OK, ShardStatus.OK)
            else f"{self.status.name}: {self.message}"
        )
        super().__init__(text)


class ValidationError(GazetteError, ValueError):
    """Bad input: a name, spec or argument that breaks a rule. The message names the thing and the rule."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)


class ConfigurationError(GazetteError):
    """The setup a call relies on is wrong or missing: options that do not go together, an optional
    package not installed, a process that could not start, no member serving what is needed."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)


class StateError(GazetteError):
    """An object was called in a state that does not allow it: started twice, used after it was
    closed or stopped, before it is ready, or a transaction opened inside another."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)


class FencedError(GazetteError):
    """A writer was fenced out: a newer primary took over its store, or its lease was lost (a zombie)."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)


class StoreError(GazetteError):
    """A store failed: a fragment store (the message names its URL and the object) or a shard's store
    (its database, its recovery log, the commit of a transaction)."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)


class PeerError(GazetteError):
    """A peer (broker, consumer, etcd) failed without a protocol status: a gRPC error (its code rides
    in `grpc_code`), an answer that breaks the protocol, or a stream that ended early."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)


class AppendError(GazetteError):
    """An append did not commit for a local reason: it was cancelled, an append it depends on failed,
    its append service was aborted, or an unexpected error (not a broker status) stopped it."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(Status.OK, message, **context)
