"""Protocol status codes (reference 3.2) as a Python enum mirroring broker.proto's `Status`, plus
the shard statuses of consumer.proto (reference 7.8), numbered from 100 so that one enum holds both."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class Status(IntEnum):
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
    # consumer.proto's Status (which shares OK and ETCD_TRANSACTION_FAILED).
    SHARD_NOT_FOUND = 100
    NO_SHARD_PRIMARY = 101
    NOT_SHARD_PRIMARY = 102
    SHARD_STOPPED = 103


def to_pb(status: Status | int) -> Any:
    """A status as the generated messages' enum field takes it (typed loosely for the .pyi stubs)."""
    return int(status)
