from __future__ import annotations

import pytest

from gazette.keyspace import layout

ROOT = "/gazette/cluster"


def test_keys_follow_the_reference_layout() -> None:
    assert layout.item_key(ROOT, "examples/foo/part-000") == "/gazette/cluster/items/examples/foo/part-000"
    assert layout.member_key(ROOT, "us-east-1", "broker-a") == "/gazette/cluster/members/us-east-1#broker-a"
    assert (
        layout.assignment_key(ROOT, "examples/foo", "zone", "broker-a", 2)
        == "/gazette/cluster/assign/examples/foo#zone#broker-a#2"
    )
    assert layout.items_prefix(ROOT) == "/gazette/cluster/items/"
    assert layout.members_prefix(ROOT) == "/gazette/cluster/members/"
    assert layout.assign_prefix(ROOT) == "/gazette/cluster/assign/"
    assert layout.item_assign_prefix(ROOT, "a/b") == "/gazette/cluster/assign/a/b#"


def test_round_trips() -> None:
    key = layout.member_key(ROOT, "zone-a", "host-1")
    assert layout.parse_member_key(ROOT, key) == layout.MemberKey("zone-a", "host-1")
    key = layout.assignment_key(ROOT, "journals/a/part-001", "zone-a", "host-1", 13)
    parsed = layout.parse_assignment_key(ROOT, key)
    assert parsed == layout.AssignmentKey("journals/a/part-001", "zone-a", "host-1", 13)
    assert layout.assignment_key(ROOT, parsed.item, parsed.zone, parsed.suffix, parsed.slot) == key


def test_item_assign_prefix_does_not_match_a_longer_item() -> None:
    prefix = layout.item_assign_prefix(ROOT, "a")
    assert layout.assignment_key(ROOT, "a", "z", "s", 0).startswith(prefix)
    assert not layout.assignment_key(ROOT, "ab", "z", "s", 0).startswith(prefix)


def test_key_order_is_the_natural_order() -> None:
    # '#' sorts below every allowed character, so (item, zone, suffix) order is key order.
    items = ["a", "a-b", "a/b", "aa", "b"]
    keys = [layout.assignment_key(ROOT, i, "z", "s", 0) for i in items]
    assert keys == sorted(keys)
    members = [("z", "a"), ("z", "ab"), ("z-1", "a"), ("za", "a")]
    assert [layout.member_key(ROOT, z, s) for z, s in members] == sorted(
        layout.member_key(ROOT, z, s) for z, s in members
    )


@pytest.mark.parametrize(
    "key",
    [
        "/gazette/cluster/members/zone",  # no suffix
        "/gazette/cluster/members/zone#suffix#extra",
        "/gazette/cluster/members/#suffix",
        "/gazette/cluster/members/zone#",
        "/gazette/cluster/items/zone#suffix",  # another prefix
        "/other/members/zone#suffix",
    ],
)
def test_malformed_member_keys(key: str) -> None:
    with pytest.raises(ValueError, match="key"):
        layout.parse_member_key(ROOT, key)


@pytest.mark.parametrize(
    "key",
    [
        "/gazette/cluster/assign/item#zone#suffix",
        "/gazette/cluster/assign/item#zone#suffix#1#2",
        "/gazette/cluster/assign/item#zone#suffix#x",
        "/gazette/cluster/assign/item#zone#suffix#-1",
        "/gazette/cluster/assign/item#zone#suffix#",
        "/gazette/cluster/assign/#zone#suffix#0",
        "/gazette/cluster/members/item#zone#suffix#0",
    ],
)
def test_malformed_assignment_keys(key: str) -> None:
    with pytest.raises(ValueError) as info:
        layout.parse_assignment_key(ROOT, key)
    assert key in str(info.value)


@pytest.mark.parametrize("bad", ["", "a#b", "a b", "a!b", 'a"b', "tab\t"])
def test_components_at_or_below_the_separator_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        layout.item_key(ROOT, bad)
    with pytest.raises(ValueError):
        layout.member_key(ROOT, bad, "suffix")
    with pytest.raises(ValueError):
        layout.assignment_key(ROOT, "item", "zone", bad, 0)


def test_slot_must_be_a_non_negative_int() -> None:
    for slot in (-1, True, 1.5, "1"):
        with pytest.raises(ValueError, match="slot"):
            layout.assignment_key(ROOT, "item", "zone", "suffix", slot)  # type: ignore[arg-type]
