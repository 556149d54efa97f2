"""The allocator adapter and key space of a consumer application: shards are items, consumers members.

Keys under a consumer root follow the allocator layout: `items/<shard id>` holds a ShardSpec (JSON),
`members/<zone>#<suffix>` a ConsumerSpec (JSON, under the member's lease), `assign/...` a
ReplicaStatus. Shard consistency (reference 5.1): STANDBY and PRIMARY are consistent, IDLE and BACKFILL
are not, FAILED only while the shard's primary is FAILED too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from gazette.allocator.state import AllocatorAdapter, Assignment
from gazette.consumer.spec import MAX_HOT_STANDBYS_DEFAULT, ShardSpec
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.keyspace import layout

DEFAULT_SHARD_LIMIT = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A consumer process as announced: its shard limit, whether it is exiting, where it serves."""

    shard_limit: int = DEFAULT_SHARD_LIMIT
    exiting: bool = False
    endpoint: str = ""

    def to_json(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> ConsumerSpec:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("shard_limit"), int):
            raise ValueError(f"consumer spec {raw[:100]!r} is not an object with an integer shard_limit")
        return cls(int(data["shard_limit"]), bool(data.get("exiting", False)), str(data.get("endpoint", "")))


def consumer_spec_exiting(raw: bytes) -> bytes:
    """The stored ConsumerSpec `raw` with `exiting` set (for Announcement.set_exiting)."""
    return dataclasses.replace(ConsumerSpec.from_json(raw), exiting=True).to_json()


def decode_value(root: str) -> Callable[[str, bytes], Any]:
    """The KeySpace decoder of a consumer root: ShardSpec, ConsumerSpec or ReplicaStatus by key."""
    items, members, assign = (
        layout.items_prefix(root),
        layout.members_prefix(root),
        layout.assign_prefix(root),
    )

    def decode(key: str, raw: bytes) -> Any:
        if key.startswith(items):
            spec = ShardSpec.from_json(raw)
            if spec.id != key[len(items) :]:
                raise ValueError(f'item key "{key}" holds the spec of shard "{spec.id}"')
            return spec
        if key.startswith(members):
            return ConsumerSpec.from_json(raw)
        if key.startswith(assign):
            return ReplicaStatus.from_json(raw)
        raise ValueError(f'key "{key}" is outside the consumer key space of "{root}"')

    return decode


def _status(a: Assignment) -> ReplicaStatus:
    return a.value if isinstance(a.value, ReplicaStatus) else ReplicaStatus()


def shard_assignment_is_consistent(
    spec: Any, assignment: Assignment, assignments: Sequence[Assignment]
) -> bool:
    """Gazette's ShardIsConsistent (reference 5.1)."""
    code = _status(assignment).code
    if code in (ReplicaCode.STANDBY, ReplicaCode.PRIMARY):
        return True
    if code == ReplicaCode.FAILED:
        primary = next((a for a in assignments if a.slot == 0), None)
        return primary is not None and _status(primary).code == ReplicaCode.FAILED
    return False


def shard_adapter(max_hot_standbys: int = MAX_HOT_STANDBYS_DEFAULT) -> AllocatorAdapter:
    """The AllocatorAdapter of a consumer application."""
    return AllocatorAdapter(
        item_replication=lambda spec: spec.desired_replication(max_hot_standbys),
        member_limit=lambda spec: spec.shard_limit,
        member_exiting=lambda spec: spec.exiting,
        is_consistent=shard_assignment_is_consistent,
    )
