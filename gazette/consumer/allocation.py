"""The allocator adapter and key space of a consumer application: shards are items, consumers members.

Keys under a consumer root are Gazette's (consumer/key_space.go over the allocator layout):
`items/<shard id>` holds a ShardSpec, `members/<zone>#<suffix>` a ConsumerSpec (under the member's
lease), `assign/<shard id>#<zone>#<suffix>#<slot>` a ReplicaStatus (under the member's lease), each as
Gazette's protobuf message, so Gazette's gazctl and consumers share the key space with gazette-py.
Decoding enforces, as Gazette's decoder does, that a ShardSpec's id and a ConsumerSpec's zone and
suffix equal those of their key. JSON values of an older gazette-py are still decoded (see
ShardSpec.from_bytes); everything is written as protobuf. Shard consistency
(docs/semantics.md#allocation-goals): STANDBY and PRIMARY are consistent, IDLE and BACKFILL are not, FAILED
only while the primary is FAILED too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from google.protobuf.message import DecodeError

from gazette.allocator.state import AllocatorAdapter, Assignment
from gazette.consumer.spec import MAX_HOT_STANDBYS_DEFAULT, ShardSpec
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.keyspace import layout
from gazette.protocol import broker_pb2, shard_pb2

DEFAULT_SHARD_LIMIT = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A consumer process as announced: its shard limit, whether it is exiting, where it serves its
    Shard service, and its id (zone, suffix; "" when read from a JSON value, which lacked them)."""

    shard_limit: int = DEFAULT_SHARD_LIMIT
    exiting: bool = False
    endpoint: str = ""
    zone: str = ""
    suffix: str = ""

    def to_proto(self) -> shard_pb2.ConsumerSpec:
        return shard_pb2.ConsumerSpec(
            process_spec=broker_pb2.ProcessSpec(
                id=broker_pb2.ProcessSpec.ID(zone=self.zone, suffix=self.suffix), endpoint=self.endpoint
            ),
            shard_limit=self.shard_limit,
            exiting=self.exiting,
        )

    @classmethod
    def from_proto(cls, msg: shard_pb2.ConsumerSpec) -> ConsumerSpec:
        ps = msg.process_spec
        return cls(int(msg.shard_limit), bool(msg.exiting), ps.endpoint, ps.id.zone, ps.id.suffix)

    def to_bytes(self) -> bytes:
        """The member key's value: a marshaled consumer.ConsumerSpec."""
        return self.to_proto().SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ConsumerSpec:
        """Reads a member value: a marshaled consumer.ConsumerSpec, or gazette-py's former JSON
        (beginning "{"). Raises ValueError when it is neither."""
        raw = bytes(raw)
        if raw[:1] == b"{":
            return cls.from_json(raw)
        try:
            return cls.from_proto(shard_pb2.ConsumerSpec.FromString(raw))
        except DecodeError as exc:
            raise ValueError(
                f"consumer spec {raw[:32].hex()} is neither a marshaled ConsumerSpec nor JSON: {exc}"
            ) from None

    @classmethod
    def from_json(cls, raw: bytes) -> ConsumerSpec:
        """gazette-py's former stored form: {"shard_limit", "exiting", "endpoint"}."""
        data = orjson.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("shard_limit"), int):
            raise ValueError(f"consumer spec {raw[:100]!r} is not an object with an integer shard_limit")
        return cls(int(data["shard_limit"]), bool(data.get("exiting", False)), str(data.get("endpoint", "")))


def consumer_spec_exiting(raw: bytes) -> bytes:
    """The stored ConsumerSpec `raw` with `exiting` set (for Announcement.set_exiting)."""
    return dataclasses.replace(ConsumerSpec.from_bytes(raw), exiting=True).to_bytes()


def decode_value(root: str) -> Callable[[str, bytes], Any]:
    """The KeySpace decoder of a consumer root: ShardSpec, ConsumerSpec or ReplicaStatus by key."""
    items, members, assign = (
        layout.items_prefix(root),
        layout.members_prefix(root),
        layout.assign_prefix(root),
    )

    def decode(key: str, raw: bytes) -> Any:
        if key.startswith(items):
            spec = ShardSpec.from_bytes(raw, f'shard spec at "{key}"')
            if spec.id != key[len(items) :]:
                raise ValueError(f'item key "{key}" holds the spec of shard "{spec.id}"')
            return spec
        if key.startswith(members):
            member = layout.parse_member_key(root, key)
            consumer = ConsumerSpec.from_bytes(raw)
            if not consumer.zone and not consumer.suffix:  # a JSON value: the key names the member
                return dataclasses.replace(consumer, zone=member.zone, suffix=member.suffix)
            if (consumer.zone, consumer.suffix) != (member.zone, member.suffix):
                raise ValueError(
                    f'member key "{key}" holds the ConsumerSpec of {consumer.zone}#{consumer.suffix}'
                )
            return consumer
        if key.startswith(assign):
            layout.parse_assignment_key(root, key)  # a malformed key is refused here, once for every reader
            return ReplicaStatus.from_bytes(raw)
        raise ValueError(f'key "{key}" is outside the consumer key space of "{root}"')

    return decode


def _status(a: Assignment) -> ReplicaStatus:
    return a.value if isinstance(a.value, ReplicaStatus) else ReplicaStatus()


def shard_assignment_is_consistent(
    spec: Any, assignment: Assignment, assignments: Sequence[Assignment]
) -> bool:
    """Gazette's ShardIsConsistent (docs/semantics.md#allocation-goals)."""
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
