"""Replica statuses of shard assignments: IDLE < BACKFILL < STANDBY < PRIMARY < FAILED
(docs/semantics.md#shard-lifecycle).

A status lives in its assignment's etcd value as Gazette's `consumer.ReplicaStatus` protobuf (an
empty value is IDLE: a fresh assignment), so Gazette's tools read the statuses gazette-py consumers
write. Values gazette-py wrote before, JSON `{"code": 300, "errors": [...]}`, are still read (they
begin with "{", which a marshaled ReplicaStatus never does); the next status update of that
assignment replaces them with protobuf. Updates are reduced with the stored value: the larger code
wins and errors accumulate, so a status never goes backwards within one assignment.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import orjson
from google.protobuf.message import DecodeError

from gazette.protocol import shard_pb2

MAX_ERROR_CHARS = 2048  # stored error text is cut to this length (docs/semantics.md#shard-lifecycle)


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

    # ---- Gazette's consumer.ReplicaStatus

    def to_proto(self) -> shard_pb2.ReplicaStatus:
        return shard_pb2.ReplicaStatus(
            code=int(self.code),  # type: ignore[arg-type]
            errors=[e[:MAX_ERROR_CHARS] for e in self.errors],
        )

    @classmethod
    def from_proto(cls, msg: shard_pb2.ReplicaStatus) -> ReplicaStatus:
        """Raises ValueError for a code Gazette does not define."""
        try:
            code = ReplicaCode(int(msg.code))
        except ValueError:
            raise ValueError(
                f"replica status has code {int(msg.code)}, which is not a ReplicaStatus code"
            ) from None
        return cls(code, tuple(msg.errors))

    def to_bytes(self) -> bytes:
        """The assignment value: a marshaled consumer.ReplicaStatus (b"" for IDLE without errors)."""
        return self.to_proto().SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ReplicaStatus:
        """Reads an assignment value: b"" is IDLE, "{..." gazette-py's former JSON, anything else a
        marshaled consumer.ReplicaStatus. Raises ValueError when it is none of these."""
        raw = bytes(raw)
        if not raw:
            return cls()
        if raw[:1] == b"{":
            return cls.from_json(raw)
        try:
            msg = shard_pb2.ReplicaStatus.FromString(raw)
        except DecodeError as exc:
            raise ValueError(
                f"replica status {raw[:32].hex()} is neither a marshaled consumer.ReplicaStatus nor JSON: {exc}"
            ) from None
        return cls.from_proto(msg)

    # ---- JSON: output, and gazette-py's former stored form

    def to_json(self) -> bytes:
        return orjson.dumps({"code": int(self.code), "errors": [e[:MAX_ERROR_CHARS] for e in self.errors]})

    @classmethod
    def from_json(cls, raw: bytes) -> ReplicaStatus:
        """Parses a JSON status; b"" is IDLE. Raises ValueError when malformed."""
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
