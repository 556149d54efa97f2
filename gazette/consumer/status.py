"""Replica statuses of shard assignments (reference 7.3): IDLE < BACKFILL < STANDBY < PRIMARY < FAILED.

A status lives in its assignment's etcd value as JSON `{"code": 300, "errors": [...]}` (an empty value
is IDLE). Updates are reduced with the stored value: the larger code wins and errors accumulate, so a
status never goes backwards within one assignment.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import orjson

MAX_ERROR_CHARS = 2048  # stored error text is truncated to this many characters (reference 7.3)


class ReplicaCode(enum.IntEnum):
    IDLE = 0
    BACKFILL = 100
    STANDBY = 200
    PRIMARY = 300
    FAILED = 400


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """The status of one shard replica: a code and, once FAILED, what went wrong."""

    code: ReplicaCode = ReplicaCode.IDLE
    errors: tuple[str, ...] = ()

    def reduce(self, other: ReplicaStatus) -> ReplicaStatus:
        """The larger code; errors of both, without repeats (the stored value's first)."""
        errors = self.errors + tuple(e for e in other.errors if e not in self.errors)
        return ReplicaStatus(max(self.code, other.code), errors)

    @property
    def error(self) -> str:
        return "; ".join(self.errors)

    def to_json(self) -> bytes:
        return orjson.dumps({"code": int(self.code), "errors": [e[:MAX_ERROR_CHARS] for e in self.errors]})

    @classmethod
    def from_json(cls, raw: bytes) -> ReplicaStatus:
        """Parses a stored value; b"" is IDLE (a fresh assignment). Raises ValueError when malformed."""
        if not raw:
            return cls()
        data: Any = orjson.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("code"), int):
            raise ValueError(f"replica status {raw[:100]!r} is not an object with an integer code")
        errors = data.get("errors", [])
        if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
            raise ValueError(f"replica status {raw[:100]!r} has errors that are not a list of strings")
        return cls(ReplicaCode(data["code"]), tuple(errors))

    def __str__(self) -> str:
        return self.code.name + (f" ({self.error})" if self.errors else "")
