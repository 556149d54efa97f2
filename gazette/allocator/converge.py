"""Converge: the guarded etcd operations that move current assignments one step toward desired (5.3).

Pure: from a State and the desired members of each item it returns checkpoints (compares + ops that
must commit together); `txn.py` batches and commits them. Rules kept exactly: adds go under the target
member's lease at slot max+1 and never past its effective limit; removals go busiest member first and
never leave fewer consistent assignments than desired replication; a primary is promoted when slot 0
is gone; slots are packed one step at a time; assignments of deleted items are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gazette.allocator.state import Assignment, Item, MemberID, State
from gazette.keyspace import layout


@dataclass(frozen=True, slots=True)
class Compare:
    """`target` of `key` must equal `value`: "mod" (ModRevision) or "create" (CreateRevision)."""

    key: str
    target: str
    value: int


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


@dataclass(frozen=True, slots=True)
class Move:
    """Atomically delete `src` and put its current value at `dst` under `lease` (promotion, packing)."""

    src: str
    dst: str
    lease: int


Op = Put | Delete | Move


@dataclass
class Checkpoint:
    """Compares and ops that must be applied in one transaction."""

    compares: list[Compare] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    @property
    def op_count(self) -> int:
        """etcd request ops: a Move is a delete and a put."""
        return sum(2 if isinstance(op, Move) else 1 for op in self.ops)


# (item value, assignment, every assignment of the item) -> whether the assignment is consistent.
IsConsistent = Callable[[Any, Assignment, Sequence[Assignment]], bool]


def converge(
    state: State, desired: Mapping[str, Sequence[MemberID]], is_consistent: IsConsistent
) -> list[Checkpoint]:
    """One round of changes toward `desired`; an empty list means nothing is left to do now."""
    counts = _Counts(state)
    out: list[Checkpoint] = []
    live = set()
    for item in state.items:
        live.add(item.id)
        cp = _converge_item(
            state, counts, item, state.assignments.get(item.id, []), desired.get(item.id, ()), is_consistent
        )
        if cp.ops:
            out.append(cp)
    for item_id, assignments in state.assignments.items():
        if item_id not in live:
            out.append(_remove_dead(state.root, item_id, assignments))
    return out


class _Counts:
    """Per-member total and primary counts, updated as ops are planned so later items see them."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.total = dict(state.total_count)
        self.primary = dict(state.primary_count)

    def ratio(self, member: MemberID, counts: dict[MemberID, int]) -> float:
        return self.state.load_ratio(member, counts)

    def bump(self, member: MemberID, slot: int, delta: int) -> None:
        if member not in self.state.member_by_id:
            return  # an assignment outliving its member key (e.g. written without a lease)
        self.total[member] = self.total.get(member, 0) + delta
        if slot == 0:
            self.primary[member] = self.primary.get(member, 0) + delta

    def promote(self, member: MemberID) -> None:
        if member in self.state.member_by_id:
            self.primary[member] = self.primary.get(member, 0) + 1


def _converge_item(
    state: State,
    counts: _Counts,
    item: Item,
    current: list[Assignment],
    desired: Sequence[MemberID],
    is_consistent: IsConsistent,
) -> Checkpoint:
    wanted = set(desired)
    # Most items of a large cluster are where they should be, in slots 0..n-1: nothing to do (the
    # rules below would add, remove, promote and pack nothing).
    if (
        len(current) == len(wanted)
        and {a.member for a in current} == wanted
        and sorted(a.slot for a in current) == list(range(len(current)))
    ):
        return Checkpoint()
    keep: list[Assignment] = []
    remove: list[Assignment] = []
    seen: set[MemberID] = set()
    # A member holding the item twice (never written by us) keeps its lowest slot.
    for a in sorted(current, key=lambda a: (a.member, a.slot)):
        if a.member in wanted and a.member not in seen:
            keep.append(a)
            seen.add(a.member)
        else:
            remove.append(a)
    consistent = {a.key: bool(is_consistent(item.value, a, current)) for a in current}

    # Removals, busiest member first, stopping before consistent assignments would drop below R.
    remove.sort(key=lambda a: (-counts.ratio(a.member, counts.total), a.key))
    n = sum(consistent.values())
    allowed = 0
    r = item.replication
    while n >= r and allowed < len(remove):
        if consistent[remove[allowed].key]:
            if n == r:
                break
            n -= 1
        allowed += 1
    keep.extend(remove[allowed:])
    remove = remove[:allowed]

    # The kept assignments in slot order; without a slot 0, the best one is promoted to the front:
    # consistent first, then the member with the lowest primary load.
    keep.sort(key=lambda a: (a.slot, a.key))
    if keep and keep[0].slot != 0:
        best = min(
            keep,
            key=lambda a: (not consistent[a.key], counts.ratio(a.member, counts.primary), a.key),
        )
        keep.remove(best)
        keep.insert(0, best)

    # Adds never take a member past its effective limit; those left take slots after the highest.
    by_id = state.member_by_id
    permitted: list[tuple[MemberID, int]] = []
    next_slot = max((a.slot + 1 for a in current), default=0)
    for member_id in sorted(wanted - seen):
        target = by_id.get(member_id)
        if target is None or counts.total.get(member_id, 0) >= state.effective_limit(target):
            continue
        permitted.append((member_id, next_slot))
        counts.bump(member_id, next_slot, +1)
        next_slot += 1

    cp = Checkpoint()
    for member_id, slot in permitted:
        target = by_id[member_id]
        cp.compares.append(Compare(target.key, "mod", target.mod_revision))
        cp.ops.append(Put(layout.assignment_key(state.root, item.id, *member_id, slot), b"", target.lease))
    if remove:
        # The item unchanged: its replication may have grown, which this removal could violate.
        cp.compares.append(Compare(item.key, "mod", item.mod_revision))
    for a in remove:
        cp.compares.append(Compare(a.key, "mod", a.mod_revision))
        cp.ops.append(Delete(a.key))
        counts.bump(a.member, a.slot, -1)
    if keep and keep[0].slot != 0:
        promoted = keep[0]
        _move(state.root, cp, promoted, 0)
        counts.promote(promoted.member)
    if not permitted and not remove:
        for i, a in enumerate(keep[1:], start=1):
            if a.slot != i:
                _move(state.root, cp, a, i)
                break
    return cp


def _move(root: str, cp: Checkpoint, a: Assignment, slot: int) -> None:
    cp.compares.append(Compare(a.key, "mod", a.mod_revision))
    cp.ops.append(Move(a.key, layout.assignment_key(root, a.item, a.zone, a.suffix, slot), a.lease))


def _remove_dead(root: str, item_id: str, assignments: list[Assignment]) -> Checkpoint:
    """Deletes the assignments of an item that is gone, guarded by the item still not existing."""
    cp = Checkpoint(compares=[Compare(layout.item_key(root, item_id), "create", 0)])
    for a in assignments:
        cp.compares.append(Compare(a.key, "mod", a.mod_revision))
        cp.ops.append(Delete(a.key))
    return cp
