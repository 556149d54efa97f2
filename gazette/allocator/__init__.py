"""Assignment of items (journals, later shards) to members (brokers, consumers) through etcd
(docs/semantics.md#allocation).

Members announce themselves under a lease (`announce`); every member runs an `Allocator`, whose
leader solves a min-cost max-flow (`flow`) and converges assignment keys toward it in guarded
transactions (`converge`, `txn`). Generic over item and member values through an `AllocatorAdapter`
(`journals` holds the brokers' one). Imports keyspace and protocol only.
"""

from gazette.allocator.allocator import Allocator, MemberKeyLost, solve_state
from gazette.allocator.announce import (
    Announcement,
    AnnouncementConflict,
    LeaseLost,
    Session,
    announce,
)
from gazette.allocator.journals import (
    assignments_route,
    broker_is_exiting,
    broker_item_limit,
    broker_spec_exiting,
    journal_adapter,
    journal_assignment_is_consistent,
    journal_desired_replication,
    journal_is_consistent,
)
from gazette.allocator.state import AdapterError, AllocatorAdapter, Assignment, Item, Member, State

__all__ = [
    "AdapterError",
    "Allocator",
    "AllocatorAdapter",
    "Announcement",
    "AnnouncementConflict",
    "Assignment",
    "Item",
    "LeaseLost",
    "Member",
    "MemberKeyLost",
    "Session",
    "State",
    "announce",
    "assignments_route",
    "broker_is_exiting",
    "broker_item_limit",
    "broker_spec_exiting",
    "journal_adapter",
    "journal_assignment_is_consistent",
    "journal_desired_replication",
    "journal_is_consistent",
    "solve_state",
]
