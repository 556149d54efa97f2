"""Protocol status codes (reference 3.2) as a Python enum mirroring broker.proto's `Status`."""

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


def to_pb(status: Status | int) -> Any:
    """A status as the generated messages' enum field takes it (typed loosely for the .pyi stubs)."""
    return int(status)
