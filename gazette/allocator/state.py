"""State: one KeySpace snapshot decoded into members, items and assignments
(docs/semantics.md#allocation-goals, #member-sessions).

Generic over what items and members are: an `AllocatorAdapter` maps decoded values to a desired
replication, an item limit, an exiting flag and assignment consistency. Imports keyspace only. The
invariant: a State is built in one step from one KeySpace revision, so every count in it agrees.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gazette.keyspace import layout
from gazette.keyspace.keyspace import KeySpace

log = logging.getLogger(__name__)

MemberID = tuple[str, str]  # (zone, suffix)


@dataclass(frozen=True, slots=True)
class Member:
    """A member key: who it is, its item limit and whether it is exiting, and etcd's revisions."""

    key: str
    zone: str
    suffix: str
    value: Any
    item_limit: int
    exiting: bool
    create_revision: int
    mod_revision: int
    lease: int

    @property
    def id(self) -> MemberID:
        return (self.zone, self.suffix)


@dataclass(frozen=True, slots=True)
class Item:
    """An item key (a journal, a shard) and its desired replication."""

    key: str
    id: str
    value: Any
    replication: int
    create_revision: int
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """An assignment key `<item>#<zone>#<suffix>#<slot>` and its decoded value."""

    key: str
    item: str
    zone: str
    suffix: str
    slot: int
    value: Any
    mod_revision: int
    lease: int

    @property
    def member(self) -> MemberID:
        return (self.zone, self.suffix)


@dataclass(frozen=True)
class AllocatorAdapter:
    """What the allocator needs to know of decoded values; journals and shards each provide one.

    `is_consistent(item_value, assignment, assignments_of_item)`: may `assignment` count as a replica
    in sync with its peers (the allocator never removes an assignment that would leave fewer
    consistent ones than the item's desired replication).
    """

    item_replication: Callable[[Any], int]
    member_limit: Callable[[Any], int]
    member_exiting: Callable[[Any], bool]
    is_consistent: Callable[[Any, Assignment, Sequence[Assignment]], bool]


class AdapterError(ValueError):
    """An adapter returned a value the allocator cannot use (e.g. a negative replication)."""


@dataclass
class State:
    """The allocator's view of one KeySpace revision, pivoted on the local member key."""

    root: str
    revision: int
    local_key: str
    members: list[Member]  # in key order, i.e. (zone, suffix) order
    items: list[Item]  # in key order
    assignments: dict[str, list[Assignment]]  # by item id, each in key order; dead items included
    shed: dict[MemberID, int] = field(default_factory=dict)  # ShedCapacity of exiting members
    total_count: dict[MemberID, int] = field(default_factory=dict)  # assignments of live items
    primary_count: dict[MemberID, int] = field(default_factory=dict)
    item_slots: int = 0  # summed desired replication
    member_slots: int = 0  # summed effective limits
    network_hash: str = ""
    member_by_key: dict[str, Member] = field(default_factory=dict)
    member_by_id: dict[MemberID, Member] = field(default_factory=dict)

    # ---- derived views

    @property
    def local(self) -> Member | None:
        return self.member_by_key.get(self.local_key)

    @property
    def leader(self) -> Member | None:
        """The member with the lowest CreateRevision (first in key order on ties)."""
        return min(self.members, key=lambda m: m.create_revision, default=None)

    @property
    def is_leader(self) -> bool:
        leader = self.leader
        return leader is not None and leader.key == self.local_key

    def effective_limit(self, member: Member) -> int:
        return member.item_limit - self.shed.get(member.id, 0)

    def local_assignments(self) -> list[Assignment]:
        """Assignments of live items held by the local member."""
        local = self.local
        if local is None:
            return []
        live = {item.id for item in self.items}
        return [
            a
            for item_id, assignments in self.assignments.items()
            if item_id in live
            for a in assignments
            if a.member == local.id
        ]

    def should_exit(self) -> bool:
        """The local member is exiting and holds no assignment of a live item."""
        local = self.local
        return local is not None and local.exiting and not self.local_assignments()

    def load_ratio(self, member_id: MemberID, counts: dict[MemberID, int]) -> float:
        """`counts[member] / effective limit`; infinite for a member without a key or capacity."""
        member = self.member_by_id.get(member_id)
        if member is None:
            return math.inf
        limit = self.effective_limit(member)
        return counts.get(member_id, 0) / limit if limit > 0 else math.inf

    # ---- construction

    @classmethod
    def from_keyspace(
        cls,
        ks: KeySpace,
        local_key: str,
        adapter: AllocatorAdapter,
        parsed: dict[str, layout.AssignmentKey] | None = None,
    ) -> State:
        """The State of `ks` now. `parsed` (the caller's, kept from round to round) holds the
        assignment keys already parsed, and is left holding those of this round only: a leader's
        rounds see mostly the same keys, and parsing each again took a third of a round."""
        root = ks.root
        members = [m for kv in ks.prefixed(layout.members_prefix(root)) if (m := _member(root, kv, adapter))]
        items_prefix = layout.items_prefix(root)
        items = [_item(kv, kv.key[len(items_prefix) :], adapter) for kv in ks.prefixed(items_prefix)]
        assignments: dict[str, list[Assignment]] = {}
        known = parsed if parsed is not None else {}
        now: dict[str, layout.AssignmentKey] = {}
        for kv in ks.prefixed(layout.assign_prefix(root)):
            ak = known.get(kv.key)
            if ak is None:
                try:
                    ak = layout.parse_assignment_key(root, kv.key)
                except ValueError as exc:
                    log.warning("allocator %s: ignoring assignment key: %s", root, exc)
                    continue
            now[kv.key] = ak
            assignments.setdefault(ak.item, []).append(
                Assignment(
                    kv.key, ak.item, ak.zone, ak.suffix, ak.slot, kv.decoded, kv.mod_revision, kv.lease
                )
            )
        if parsed is not None:
            parsed.clear()
            parsed.update(now)
        return cls.build(root, ks.revision, local_key, members, items, assignments)

    @classmethod
    def build(
        cls,
        root: str,
        revision: int,
        local_key: str,
        members: Sequence[Member],
        items: Sequence[Item],
        assignments: dict[str, list[Assignment]],
    ) -> State:
        """Computes counts, ShedCapacity and the network hash from decoded entities."""
        state = cls(
            root=root,
            revision=revision,
            local_key=local_key,
            members=sorted(members, key=lambda m: m.key),
            items=sorted(items, key=lambda i: i.key),
            assignments={k: sorted(v, key=lambda a: a.key) for k, v in assignments.items()},
        )
        state._count()
        return state

    def _count(self) -> None:
        self.member_by_key = {m.key: m for m in self.members}
        self.member_by_id = by_id = {m.id: m for m in self.members}
        digest = hashlib.blake2b(digest_size=16)
        self.member_slots = 0
        for m in self.members:
            self.member_slots += m.item_limit
            _fold(digest, m.key, m.item_limit)
        max_replication = 0
        self.item_slots = 0
        for item in self.items:
            self.item_slots += item.replication
            max_replication = max(max_replication, item.replication)
            _fold(digest, item.key, item.replication)
            for a in self.assignments.get(item.id, ()):
                if a.member in by_id:
                    self.total_count[a.member] = self.total_count.get(a.member, 0) + 1
                    if a.slot == 0:
                        self.primary_count[a.member] = self.primary_count.get(a.member, 0) + 1

        # ShedCapacity (5.2): exiting members, oldest first, are granted the cluster's excess slots,
        # but at least `max_replication` members keep their full capacity.
        excess = max(0, self.member_slots - self.item_slots)
        exiting = sorted((m for m in self.members if m.exiting), key=lambda m: (m.create_revision, m.key))
        max_shedding = max(0, len(self.members) - max_replication)
        for m in exiting[:max_shedding]:
            if excess == 0:
                break
            shed = min(m.item_limit, excess)
            self.shed[m.id] = shed
            self.member_slots -= shed
            excess -= shed
            _fold(digest, m.key, shed)
        self.network_hash = digest.hexdigest()


def _fold(digest: Any, key: str, n: int) -> None:
    digest.update(key.encode())
    digest.update(b"\x00%d\x00" % n)


def _member(root: str, kv: Any, adapter: AllocatorAdapter) -> Member | None:
    try:
        mk = layout.parse_member_key(root, kv.key)
    except ValueError as exc:
        log.warning("allocator %s: ignoring member key: %s", root, exc)
        return None
    limit = adapter.member_limit(kv.decoded)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise AdapterError(f'member "{kv.key}" has item limit {limit!r} (expected an integer >= 0)')
    return Member(
        key=kv.key,
        zone=mk.zone,
        suffix=mk.suffix,
        value=kv.decoded,
        item_limit=limit,
        exiting=bool(adapter.member_exiting(kv.decoded)),
        create_revision=kv.create_revision,
        mod_revision=kv.mod_revision,
        lease=kv.lease,
    )


def _item(kv: Any, item_id: str, adapter: AllocatorAdapter) -> Item:
    replication = adapter.item_replication(kv.decoded)
    if isinstance(replication, bool) or not isinstance(replication, int) or replication < 0:
        raise AdapterError(
            f'item "{kv.key}" has desired replication {replication!r} (expected an integer >= 0)'
        )
    return Item(kv.key, item_id, kv.decoded, replication, kv.create_revision, kv.mod_revision)
