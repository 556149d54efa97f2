"""The etcd key layout shared by brokers, consumers and the allocator (docs/semantics.md#etcd-key-layout).

`<root>/items/<item>`, `<root>/members/<zone>#<suffix>`, `<root>/assign/<item>#<zone>#<suffix>#<slot>`.
'#' is the lowest visible ASCII character not special to shells, so key order equals the natural
order of (item, zone, suffix); components therefore may not hold any character <= '#'.
"""

from __future__ import annotations

from dataclasses import dataclass

SEP = "#"
ITEMS = "/items/"
MEMBERS = "/members/"
ASSIGN = "/assign/"


def _check(kind: str, value: str) -> str:
    if not value:
        raise ValueError(f"{kind} is empty")
    for i, ch in enumerate(value):
        if ch <= SEP:
            raise ValueError(
                f"{kind} {value!r} has {ch!r} at index {i} (characters <= {SEP!r} are not allowed)"
            )
    return value


def items_prefix(root: str) -> str:
    return root + ITEMS


def members_prefix(root: str) -> str:
    return root + MEMBERS


def assign_prefix(root: str) -> str:
    return root + ASSIGN


def item_assign_prefix(root: str, item: str) -> str:
    """The prefix of every assignment of `item`; '#' ends it, so item "a" never matches item "ab"."""
    return root + ASSIGN + _check("item", item) + SEP


def item_key(root: str, name: str) -> str:
    return root + ITEMS + _check("item", name)


def member_key(root: str, zone: str, suffix: str) -> str:
    return root + MEMBERS + _check("member zone", zone) + SEP + _check("member suffix", suffix)


def assignment_key(root: str, item: str, zone: str, suffix: str, slot: int) -> str:
    if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
        raise ValueError(f"assignment slot {slot!r} is not a non-negative integer")
    zone, suffix = _check("member zone", zone), _check("member suffix", suffix)
    return f"{item_assign_prefix(root, item)}{zone}{SEP}{suffix}{SEP}{slot}"


@dataclass(frozen=True)
class MemberKey:
    zone: str
    suffix: str


@dataclass(frozen=True)
class AssignmentKey:
    item: str
    zone: str
    suffix: str
    slot: int


def _split(key: str, prefix: str, parts: int, shape: str) -> list[str]:
    if not key.startswith(prefix):
        raise ValueError(f'key "{key}" is not under "{prefix}" (expected {prefix}{shape})')
    fields = key[len(prefix) :].split(SEP)
    if len(fields) != parts or not all(fields):
        raise ValueError(f'key "{key}" is malformed (expected {prefix}{shape})')
    return fields


def parse_member_key(root: str, key: str) -> MemberKey:
    zone, suffix = _split(key, members_prefix(root), 2, "<zone>#<suffix>")
    return MemberKey(zone, suffix)


def parse_assignment_key(root: str, key: str) -> AssignmentKey:
    shape = "<item>#<zone>#<suffix>#<slot>"
    item, zone, suffix, slot = _split(key, assign_prefix(root), 4, shape)
    if not slot.isascii() or not slot.isdigit():
        raise ValueError(f'key "{key}" has slot "{slot}", not a non-negative integer (expected {shape})')
    return AssignmentKey(item, zone, suffix, int(slot))
