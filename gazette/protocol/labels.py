"""LabelSet: a sorted, unique list of (name, value) pairs (reference 1.1), and its proto mapping.

Names may repeat with different values. Registers are LabelSets compared by exact equality
(reference 12, item 1), so the type is an immutable, hashable tuple wrapper.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from gazette.protocol import broker_pb2 as pb


class LabelSet:
    __slots__ = ("_items",)

    def __init__(self, labels: LabelSet | Mapping[str, str] | Iterable[tuple[str, str]] | None = None):
        if labels is None:
            items: Iterable[tuple[str, str]] = ()
        elif isinstance(labels, LabelSet):
            items = labels._items
        elif isinstance(labels, Mapping):
            items = labels.items()
        else:
            items = labels
        self._items: tuple[tuple[str, str], ...] = tuple(sorted({(str(n), str(v)) for n, v in items}))

    @classmethod
    def from_proto(cls, msg: pb.LabelSet | None) -> LabelSet:
        if msg is None:
            return cls()
        return cls((lbl.name, lbl.value) for lbl in msg.labels)

    def to_proto(self) -> pb.LabelSet:
        return pb.LabelSet(labels=[pb.Label(name=n, value=v) for n, v in self._items])

    def values_of(self, name: str) -> list[str]:
        return [v for n, v in self._items if n == name]

    def value_of(self, name: str) -> str | None:
        vals = self.values_of(name)
        return vals[0] if vals else None

    def union(self, other: LabelSet) -> LabelSet:
        return LabelSet(self._items + other._items)

    def subtract(self, other: LabelSet) -> LabelSet:
        """Removes labels of `other`; a label with an empty value removes every value of its name."""
        drop_names = {n for n, v in other._items if v == ""}
        drop = set(other._items)
        return LabelSet((n, v) for n, v in self._items if n not in drop_names and (n, v) not in drop)

    def to_dict(self) -> dict[str, str]:
        """Single-valued view (the last value of a repeated name wins)."""
        return dict(self._items)

    @property
    def items(self) -> tuple[tuple[str, str], ...]:
        return self._items

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelSet) and other._items == self._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return "LabelSet(" + ", ".join(f"{n}={v}" for n, v in self._items) + ")"
