"""Protocol status codes as Python enums: `Status`, the broker's (broker.proto's `protocol.Status`,
docs/semantics.md#status-codes), and `ShardStatus`, the consumer's (shard.proto's `consumer.Status`,
docs/semantics.md#shard-resolution-and-stat).

They are two enums because they are two on the wire: each numbers its codes from 0, so 1 is
JOURNAL_NOT_FOUND in one and SHARD_NOT_FOUND in the other, and ETCD_TRANSACTION_FAILED is 9 in one
and 4 in the other. A status of one enum never compares equal to a status of the other (however
equal their numbers), so `err.status == Status.JOURNAL_NOT_FOUND` is False for a SHARD_NOT_FOUND
error; each still compares equal to its own number, as the generated messages' enum fields hold them.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class _TypedStatus(IntEnum):
    """An IntEnum whose members equal their own numbers but never a member of another such enum."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _TypedStatus) and type(other) is not type(self):
            return False
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = int.__hash__


class Status(_TypedStatus):
    """The broker's statuses (protocol.Status)."""

    OK = 0
    JOURNAL_NOT_FOUND = 1
    NO_JOURNAL_PRIMARY_BROKER = 2
    NOT_JOURNAL_PRIMARY_BROKER = 3
    INSUFFICIENT_JOURNAL_BROKERS = 4
    NOT_JOURNAL_BROKER = 5
    OFFSET_NOT_YET_AVAILABLE = 6
    WRONG_ROUTE = 7
    PROPOSAL_MISMATCH = 8
    ETCD_TRANSACTION_FAILED = 9
    NOT_ALLOWED = 10
    WRONG_APPEND_OFFSET = 11
    INDEX_HAS_GREATER_OFFSET = 12
    REGISTER_MISMATCH = 13
    SUSPENDED = 14
    FRAGMENT_STORE_UNHEALTHY = 15


class ShardStatus(_TypedStatus):
    """The consumer Shard service's statuses (consumer.Status)."""

    OK = 0
    # The shard has no ShardSpec.
    SHARD_NOT_FOUND = 1
    # The shard has no primary assignment.
    NO_SHARD_PRIMARY = 2
    # The member is not the shard's primary, and the request (proxied already) may not be proxied.
    NOT_SHARD_PRIMARY = 3
    # An Apply's or Unassign's compare-and-swap failed: a revision moved on meanwhile.
    ETCD_TRANSACTION_FAILED = 4
    # The shard's primary stopped (failed, or lost its assignment) while the request waited.
    SHARD_STOPPED = 5


def to_pb(status: Status | ShardStatus | int) -> Any:
    """A status as the generated messages' enum field takes it (typed loosely for the .pyi stubs)."""
    return int(status)
