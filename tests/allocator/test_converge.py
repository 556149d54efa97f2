"""State extraction and the converge step, without etcd: exact ops for each rule of reference 5.3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gazette.allocator.converge import Checkpoint, Compare, Delete, Move, Put, converge
from gazette.allocator.state import AdapterError, AllocatorAdapter, Assignment, Item, Member, State
from gazette.keyspace import layout

ROOT = "/t"


def ok(item: Any, a: Assignment, all_: Sequence[Assignment]) -> bool:
    return a.value == "ok"


def mk(
    members: Sequence[tuple[str, int] | tuple[str, int, bool]],
    items: dict[str, int],
    assignments: Sequence[tuple[str, str, int, Any]] = (),
    local: str | None = None,
) -> State:
    """members: ("zone/suffix", limit[, exiting]), oldest first; assignments: (item, "zone/suffix", slot, value)."""
    ms = []
    for n, spec in enumerate(members):
        who, limit = spec[0], spec[1]
        zone, suffix = who.split("/")
        ms.append(
            Member(
                key=layout.member_key(ROOT, zone, suffix),
                zone=zone,
                suffix=suffix,
                value=None,
                item_limit=limit,
                exiting=bool(spec[2]) if len(spec) > 2 else False,
                create_revision=10 + n,
                mod_revision=100 + n,
                lease=1000 + n,
            )
        )
    its = [
        Item(layout.item_key(ROOT, i), i, None, r, 20 + n, 200 + n) for n, (i, r) in enumerate(items.items())
    ]
    by_item: dict[str, list[Assignment]] = {}
    for n, (item, who, slot, value) in enumerate(assignments):
        zone, suffix = who.split("/")
        lease = next((m.lease for m in ms if m.id == (zone, suffix)), 0)
        key = layout.assignment_key(ROOT, item, zone, suffix, slot)
        by_item.setdefault(item, []).append(Assignment(key, item, zone, suffix, slot, value, 300 + n, lease))
    local_key = ms[0].key if local is None else mkey(local)
    return State.build(ROOT, 999, local_key, ms, its, by_item)


def akey(item: str, who: str, slot: int) -> str:
    zone, suffix = who.split("/")
    return layout.assignment_key(ROOT, item, zone, suffix, slot)


def mkey(who: str) -> str:
    zone, suffix = who.split("/")
    return layout.member_key(ROOT, zone, suffix)


def member_of(state: State, who: str) -> Member:
    return state.member_by_key[mkey(who)]


def only(checkpoints: list[Checkpoint]) -> Checkpoint:
    assert len(checkpoints) == 1, checkpoints
    return checkpoints[0]


# ---- State


def test_leader_is_the_oldest_member_and_counts_only_live_items() -> None:
    s = mk(
        [("b/b1", 5), ("a/a1", 5)],
        {"i1": 2},
        [("i1", "a/a1", 0, ""), ("i1", "b/b1", 1, ""), ("gone", "a/a1", 0, "")],
        local="b/b1",
    )
    assert [m.key for m in s.members] == [mkey("a/a1"), mkey("b/b1")]  # key order
    assert s.leader is not None and s.leader.key == mkey("b/b1")  # lowest CreateRevision
    assert s.is_leader
    assert s.total_count == {("a", "a1"): 1, ("b", "b1"): 1}
    assert s.primary_count == {("a", "a1"): 1}
    assert s.item_slots == 2 and s.member_slots == 10


def test_shed_capacity_goes_to_the_oldest_exiting_members_from_excess() -> None:
    # 12 member slots, 4 item slots: an excess of 8 sheds both exiting members fully.
    s = mk([("a/x1", 4, True), ("a/x2", 4, True), ("b/b1", 4)], {"i1": 1, "i2": 1, "i3": 1, "i4": 1})
    assert s.shed == {("a", "x1"): 4, ("a", "x2"): 4}
    assert s.member_slots == 4
    assert s.effective_limit(member_of(s, "a/x1")) == 0

    # 20 member slots, 17 item slots: an excess of 3 goes to the oldest exiting member.
    five: list[tuple[str, int, bool]] = [
        ("a/x1", 4, True),
        ("a/x2", 4, True),
        ("b/b1", 4, False),
        ("b/b2", 4, False),
        ("b/b3", 4, False),
    ]
    s = mk(five, {"i1": 3, "i2": 3, "i3": 3, "i4": 3, "i5": 3, "i6": 2})
    assert s.shed == {("a", "x1"): 3}

    # Never fewer full-capacity members than the largest replication: 3 members, R=2 -> shed 1.
    s = mk([("a/x1", 9, True), ("a/x2", 9, True), ("b/b1", 9)], {"i1": 2})
    assert s.shed == {("a", "x1"): 9}


def test_shed_capacity_is_none_without_excess() -> None:
    s = mk([("a/x1", 2, True), ("b/b1", 2), ("b/b2", 2)], {"i1": 2, "i2": 2, "i3": 2})
    assert s.shed == {}


def test_network_hash_covers_limits_replication_and_shed_but_not_assignments() -> None:
    base = mk([("a/a1", 4), ("b/b1", 4)], {"i1": 2})
    same = mk([("a/a1", 4), ("b/b1", 4)], {"i1": 2}, [("i1", "a/a1", 0, "ok")])
    assert base.network_hash == same.network_hash
    assert mk([("a/a1", 5), ("b/b1", 4)], {"i1": 2}).network_hash != base.network_hash
    assert mk([("a/a1", 4), ("b/b1", 4)], {"i1": 1}).network_hash != base.network_hash
    assert mk([("a/a1", 4), ("b/b1", 4)], {"i2": 2}).network_hash != base.network_hash
    exiting = mk([("a/a1", 4, True), ("b/b1", 4), ("b/b2", 4)], {"i1": 1})
    assert (
        exiting.shed
        and exiting.network_hash != mk([("a/a1", 4), ("b/b1", 4), ("b/b2", 4)], {"i1": 1}).network_hash
    )


def test_should_exit_only_when_exiting_and_unassigned() -> None:
    held = mk([("a/a1", 4, True), ("b/b1", 4)], {"i1": 1}, [("i1", "a/a1", 0, "")])
    assert not held.should_exit()
    # An assignment of a deleted item does not hold the member back.
    free = mk([("a/a1", 4, True), ("b/b1", 4)], {"i1": 1}, [("gone", "a/a1", 0, "")])
    assert free.should_exit()
    assert not mk([("a/a1", 4), ("b/b1", 4)], {"i1": 1}).should_exit()


# ---- converge


def test_adds_go_under_the_target_members_lease_after_the_highest_slot() -> None:
    s = mk(
        [("a/a1", 5), ("a/a2", 5), ("b/b1", 5)], {"i": 3}, [("i", "a/a1", 0, "ok"), ("i", "b/b1", 2, "ok")]
    )
    cp = only(converge(s, {"i": [("a", "a1"), ("a", "a2"), ("b", "b1")]}, ok))
    a2 = member_of(s, "a/a2")
    assert cp.compares == [Compare(a2.key, "mod", a2.mod_revision)]
    assert cp.ops == [Put(akey("i", "a/a2", 3), b"", a2.lease)]  # no packing while adding


def test_first_adds_start_at_slot_zero() -> None:
    s = mk([("a/a1", 5), ("b/b1", 5)], {"i": 2})
    cp = only(converge(s, {"i": [("a", "a1"), ("b", "b1")]}, ok))
    assert [op.key for op in cp.ops if isinstance(op, Put)] == [akey("i", "a/a1", 0), akey("i", "b/b1", 1)]


def test_removals_wait_while_the_item_is_inconsistent() -> None:
    current = [("i", "a/old", 0, ""), ("i", "a/a1", 1, ""), ("i", "b/b1", 2, "")]
    s = mk([("a/a1", 5), ("a/old", 5), ("b/b1", 5)], {"i": 2}, current)
    assert converge(s, {"i": [("a", "a1"), ("b", "b1")]}, ok) == []


def test_removal_never_leaves_fewer_consistent_than_desired() -> None:
    # Two consistent of R=2: removing consistent old would leave one.
    current = [("i", "a/old", 0, "ok"), ("i", "a/a1", 1, ""), ("i", "b/b1", 2, "ok")]
    s = mk([("a/a1", 5), ("a/old", 5), ("b/b1", 5)], {"i": 2}, current)
    assert converge(s, {"i": [("a", "a1"), ("b", "b1")]}, ok) == []

    # Once the new replica is consistent, old goes, and a primary is promoted in the same step.
    current = [("i", "a/old", 0, "ok"), ("i", "a/a1", 1, "ok"), ("i", "b/b1", 2, "ok")]
    s = mk([("a/a1", 5), ("a/old", 5), ("b/b1", 5)], {"i": 2}, current)
    cp = only(converge(s, {"i": [("a", "a1"), ("b", "b1")]}, ok))
    item = s.items[0]
    old = s.assignments["i"][1]  # a/old#0 in key order: a1, old, b1
    a1 = s.assignments["i"][0]
    assert old.member == ("a", "old") and a1.member == ("a", "a1")
    assert cp.compares == [
        Compare(item.key, "mod", item.mod_revision),
        Compare(old.key, "mod", old.mod_revision),
        Compare(a1.key, "mod", a1.mod_revision),
    ]
    assert cp.ops == [Delete(old.key), Move(a1.key, akey("i", "a/a1", 0), a1.lease)]


def test_removals_go_busiest_member_first() -> None:
    # R=2 with three consistent replicas: one may go, the busiest member's (3 of 4, not 1 of 4).
    current = [("i", "a/busy", 1, "ok"), ("i", "a/idle", 2, "ok"), ("i", "b/keep", 0, "ok")]
    others = [(f"o{n}", "a/busy", 0, "ok") for n in range(2)]
    s = mk([("a/busy", 4), ("a/idle", 4), ("b/keep", 4)], {"i": 2, "o0": 1, "o1": 1}, current + others)
    cp = only(converge(s, {"i": [("b", "keep")], "o0": [("a", "busy")], "o1": [("a", "busy")]}, ok))
    assert [op for op in cp.ops if isinstance(op, Delete)] == [Delete(akey("i", "a/busy", 1))]


def test_promotion_prefers_consistent_then_the_lowest_primary_load() -> None:
    current = [("i", "a/a1", 1, ""), ("i", "a/a2", 2, "ok"), ("i", "b/b1", 3, "ok")]
    other = [("o", "a/a2", 0, "ok")]  # a2 is already a primary elsewhere
    s = mk([("a/a1", 5), ("a/a2", 5), ("b/b1", 5)], {"i": 3, "o": 1}, current + other)
    cps = converge(s, {"i": [("a", "a1"), ("a", "a2"), ("b", "b1")], "o": [("a", "a2")]}, ok)
    b1 = next(a for a in s.assignments["i"] if a.member == ("b", "b1"))
    assert only(cps).ops == [Move(b1.key, akey("i", "b/b1", 0), b1.lease)]
    assert only(cps).compares == [Compare(b1.key, "mod", b1.mod_revision)]


def test_packing_moves_one_slot_at_a_time_when_nothing_else_is_to_do() -> None:
    current = [("i", "a/a1", 0, "ok"), ("i", "a/a2", 4, "ok"), ("i", "b/b1", 7, "ok")]
    s = mk([("a/a1", 5), ("a/a2", 5), ("b/b1", 5)], {"i": 3}, current)
    desired = {"i": [("a", "a1"), ("a", "a2"), ("b", "b1")]}
    a2 = next(a for a in s.assignments["i"] if a.member == ("a", "a2"))
    assert only(converge(s, desired, ok)).ops == [Move(a2.key, akey("i", "a/a2", 1), a2.lease)]


def test_adds_never_exceed_the_effective_limit() -> None:
    # full holds one item and has limit 1; the add to it is dropped, the other goes ahead.
    s = mk([("a/full", 1), ("b/b1", 5)], {"x": 1, "i": 2}, [("x", "a/full", 0, "ok")])
    cps = converge(s, {"x": [("a", "full")], "i": [("a", "full"), ("b", "b1")]}, ok)
    assert only(cps).ops == [Put(akey("i", "b/b1", 0), b"", member_of(s, "b/b1").lease)]

    # Adds planned for earlier items count against the limit of later ones.
    s = mk([("a/a1", 2), ("b/b1", 5)], {"i1": 1, "i2": 1, "i3": 1})
    cps = converge(s, {i: [("a", "a1")] for i in ("i1", "i2", "i3")}, ok)
    assert [cp.ops[0].key for cp in cps] == [akey("i1", "a/a1", 0), akey("i2", "a/a1", 0)]  # type: ignore[union-attr]

    # Shed capacity lowers the effective limit of an exiting member.
    s = mk([("a/x", 4, True), ("b/b1", 4), ("b/b2", 4)], {"i": 1})
    assert s.effective_limit(member_of(s, "a/x")) == 0
    assert converge(s, {"i": [("a", "x")]}, ok) == []


def test_assignments_of_deleted_items_are_removed_guarded_by_the_items_absence() -> None:
    s = mk(
        [("a/a1", 5), ("b/b1", 5)],
        {"i": 1},
        [("i", "a/a1", 0, "ok"), ("gone", "a/a1", 0, ""), ("gone", "b/b1", 1, "")],
    )
    cp = only(converge(s, {"i": [("a", "a1")]}, ok))
    g0, g1 = s.assignments["gone"]
    assert cp.compares == [
        Compare(layout.item_key(ROOT, "gone"), "create", 0),
        Compare(g0.key, "mod", g0.mod_revision),
        Compare(g1.key, "mod", g1.mod_revision),
    ]
    assert cp.ops == [Delete(g0.key), Delete(g1.key)]


def test_a_converged_state_needs_nothing() -> None:
    current = [("i", "a/a1", 0, "ok"), ("i", "b/b1", 1, "ok")]
    s = mk([("a/a1", 5), ("b/b1", 5)], {"i": 2}, current)
    assert converge(s, {"i": [("a", "a1"), ("b", "b1")]}, ok) == []


@pytest.mark.parametrize("replication", [0, 1])
def test_an_item_wanting_fewer_replicas_sheds_them(replication: int) -> None:
    current = [("i", "a/a1", 0, "ok"), ("i", "b/b1", 1, "ok")]
    s = mk([("a/a1", 5), ("b/b1", 5)], {"i": replication}, current)
    desired = {"i": [("a", "a1")]} if replication else {}
    cp = only(converge(s, desired, ok))
    deleted = [op.key for op in cp.ops if isinstance(op, Delete)]
    assert deleted == (
        [akey("i", "b/b1", 1)] if replication else [akey("i", "a/a1", 0), akey("i", "b/b1", 1)]
    )


class _FakeKeySpace:
    """Just enough of a KeySpace for State.from_keyspace: a root, a revision and prefixed()."""

    def __init__(self, root: str, kvs: dict[str, Any]) -> None:
        from gazette.keyspace.keyspace import KeyValue

        self.root, self.revision = root, 7
        self._kvs = [KeyValue(k, v, 1, 1, 0) for k, v in sorted(kvs.items())]

    def prefixed(self, prefix: str) -> list[Any]:
        return [kv for kv in self._kvs if kv.key.startswith(prefix)]


# Items' and members' values are their replication and limit themselves.
VALUE_ADAPTER = AllocatorAdapter(
    item_replication=lambda v: v, member_limit=lambda v: v, member_exiting=lambda v: False, is_consistent=ok
)


def test_bad_adapter_values_are_named() -> None:
    adapter = VALUE_ADAPTER
    bad_item = _FakeKeySpace(ROOT, {layout.item_key(ROOT, "i"): -1})
    with pytest.raises(AdapterError, match='item "/t/items/i" has desired replication -1'):
        State.from_keyspace(bad_item, "", adapter)  # type: ignore[arg-type]
    bad_member = _FakeKeySpace(ROOT, {mkey("a/a1"): "many"})
    with pytest.raises(AdapterError, match=r"member \"/t/members/a#a1\" has item limit 'many'"):
        State.from_keyspace(bad_member, "", adapter)  # type: ignore[arg-type]
    # Malformed keys are skipped, not fatal.
    odd = _FakeKeySpace(ROOT, {f"{ROOT}/members/nohash": 3, f"{ROOT}/assign/i#a#a1#x": None, mkey("a/a1"): 2})
    state = State.from_keyspace(odd, mkey("a/a1"), adapter)  # type: ignore[arg-type]
    assert [m.key for m in state.members] == [mkey("a/a1")] and state.assignments == {}


def test_parsed_assignment_keys_are_kept_for_the_next_round_only() -> None:
    adapter = VALUE_ADAPTER
    kvs = {
        mkey("a/a1"): 2,
        layout.item_key(ROOT, "i"): 1,
        layout.item_key(ROOT, "j"): 1,
        akey("i", "a/a1", 0): "",
        akey("j", "a/a1", 0): "",
        f"{ROOT}/assign/i#a#a1#x": "",  # malformed: skipped, and not kept
    }
    parsed: dict[str, layout.AssignmentKey] = {}
    first = State.from_keyspace(_FakeKeySpace(ROOT, kvs), "", adapter, parsed)  # type: ignore[arg-type]
    assert sorted(parsed) == [akey("i", "a/a1", 0), akey("j", "a/a1", 0)]
    assert first == State.from_keyspace(_FakeKeySpace(ROOT, kvs), "", adapter)  # type: ignore[arg-type]

    del kvs[akey("j", "a/a1", 0)]
    second = State.from_keyspace(_FakeKeySpace(ROOT, kvs), "", adapter, parsed)  # type: ignore[arg-type]
    assert sorted(parsed) == [akey("i", "a/a1", 0)]  # only what this round saw
    assert [a.key for a in second.assignments["i"]] == [
        akey("i", "a/a1", 0)
    ] and "j" not in second.assignments
