"""The allocator adapter for brokers: journals (JournalSpec) are items, brokers (BrokerSpec) members.

Plain functions of decoded values (what the broker's KeySpace decoder yields: JournalSpec, pb.BrokerSpec,
pb.Route with an empty value read as Route(primary=-1)); imports protocol only. Journal consistency
(5.1): an assignment is consistent when its stored Route equals the route its item's assignment keys
give (members in (zone, suffix) order, primary = the slot-0 member), compared on members and primary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gazette import tunables
from gazette.allocator.state import AllocatorAdapter, Assignment
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.spec import JournalSpec, SuspendLevel


def journal_desired_replication(
    spec: JournalSpec, max_replication: int = tunables.BROKER_MAX_REPLICATION
) -> int:
    """`replication` capped at `max_replication`; 0 when suspended FULL, 1 when PARTIAL (1.2)."""
    if spec.suspend_level == SuspendLevel.FULL:
        return 0
    if spec.suspend_level == SuspendLevel.PARTIAL:
        return 1
    return min(spec.replication, max_replication)


def broker_item_limit(spec: pb.BrokerSpec) -> int:
    return int(spec.journal_limit)


def broker_is_exiting(spec: pb.BrokerSpec) -> bool:
    return bool(spec.exiting)


def broker_spec_exiting(raw: bytes) -> bytes:
    """The serialized BrokerSpec `raw` with `exiting` set (for Announcement.set_exiting)."""
    spec = pb.BrokerSpec.FromString(raw)
    spec.exiting = True
    return spec.SerializeToString()


def assignments_route(assignments: Sequence[Assignment]) -> pb.Route:
    """The route the assignment keys give: members in (zone, suffix) order, primary = slot 0's index."""
    members: list[pb.ProcessSpec.ID] = []
    primary = -1
    for a in sorted(assignments, key=lambda a: (a.zone, a.suffix, a.slot)):
        if a.slot == 0:
            primary = len(members)
        members.append(pb.ProcessSpec.ID(zone=a.zone, suffix=a.suffix))
    return pb.Route(members=members, primary=primary)


def route_equivalent(a: Any, b: Any) -> bool:
    """Routes are equivalent when members and primary match; endpoints never count (1.3)."""
    return a.primary == b.primary and [(m.zone, m.suffix) for m in a.members] == [
        (m.zone, m.suffix) for m in b.members
    ]


def journal_assignment_is_consistent(
    spec: Any, assignment: Assignment, assignments: Sequence[Assignment]
) -> bool:
    """Whether `assignment`'s stored Route equals the route of all of its journal's `assignments`."""
    value = assignment.value
    return value is not None and route_equivalent(value, assignments_route(assignments))


def journal_is_consistent(assignments: Sequence[Assignment]) -> bool:
    """Whether every assignment of one journal stores the route its assignment keys give (true when
    there are none): what a primary establishes after syncing its pipeline
    (docs/semantics.md#route-consistency)."""
    route = assignments_route(assignments)
    return all(a.value is not None and route_equivalent(a.value, route) for a in assignments)


def journal_adapter(max_replication: int = tunables.BROKER_MAX_REPLICATION) -> AllocatorAdapter:
    """The AllocatorAdapter of a broker cluster."""
    return AllocatorAdapter(
        item_replication=lambda spec: journal_desired_replication(spec, max_replication),
        member_limit=broker_item_limit,
        member_exiting=broker_is_exiting,
        is_consistent=journal_assignment_is_consistent,
    )
