"""LabelSet: a sorted, unique list of (name, value) pairs (docs/semantics.md#names-labels-and-selectors), and
its proto mapping.

Names may repeat with different values. Registers are LabelSets compared by exact equality
(docs/semantics.md#spool-proposals), so the type is an immutable, hashable tuple wrapper.
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

    def _by_name(self) -> dict[str, tuple[str, ...]]:
        """Each name's sorted values, names in order."""
        out: dict[str, list[str]] = {}
        for n, v in self._items:
            out.setdefault(n, []).append(v)
        return {n: tuple(vs) for n, vs in out.items()}

    @classmethod
    def _from_groups(cls, groups: Iterable[tuple[str, tuple[str, ...]]]) -> LabelSet:
        return cls((n, v) for n, vs in groups for v in vs)

    def union(self, other: LabelSet) -> LabelSet:
        """Every label name of either set; a name both sets have keeps only this set's values.

        As Gazette's UnionLabelSets (which prefers its left side): the broker applies an append's
        union_registers as `union_registers.union(registers)`, so {author: B} replaces {author: A}.
        """
        mine, theirs = self._by_name(), other._by_name()
        names = sorted(mine.keys() | theirs.keys())
        return LabelSet._from_groups((n, mine.get(n) or theirs[n]) for n in names)

    def subtract(self, other: LabelSet) -> LabelSet:
        """This set without each label name whose values are exactly that name's values in `other`.

        As Gazette's SubtractLabelSet: a name is dropped whole or kept whole ({a: [1, 2]} minus {a: 1}
        keeps both values), and an empty value is an ordinary value, not "any value".
        """
        theirs = other._by_name()
        return LabelSet._from_groups((n, vs) for n, vs in self._by_name().items() if theirs.get(n) != vs)

    def intersect(self, other: LabelSet) -> LabelSet:
        """The label names whose values are exactly equal in both sets (Gazette's IntersectLabelSets)."""
        theirs = other._by_name()
        return LabelSet._from_groups((n, vs) for n, vs in self._by_name().items() if theirs.get(n) == vs)

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
