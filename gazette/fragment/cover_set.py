"""CoverSet: the fragments of a journal that together cover the most offsets
(docs/semantics.md#coverset-and-index).

Sorted on begin *and* end; no fragment is contained in another, so no two share a begin or an end.
Adding prefers larger fragments and ignores empty ones. Imports gazette.fragment.fragment only.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from gazette.fragment.fragment import Fragment
from gazette.protocol.errors import ValidationError


def _begin(f: Fragment) -> int:
    return f.begin


def _end(f: Fragment) -> int:
    return f.end


class CoverSet:
    """Fragments sorted on begin and end, none fully contained in another; larger ones win."""

    __slots__ = ("_fragments",)

    def __init__(self, fragments: Iterable[Fragment] = ()) -> None:
        self._fragments: list[Fragment] = []
        for f in fragments:
            self.add(f)

    def add(self, f: Fragment) -> bool:
        """Adds `f` unless it is empty or covered by one fragment of the set; it replaces the fragments
        it covers (an equal range included). Returns whether the set changed."""
        if f.end <= f.begin:
            if f.end < f.begin:
                raise ValidationError(f"fragment [{f.begin}, {f.end}) of {f.journal} has end < begin")
            return False
        s = self._fragments
        if not s or (f.begin > s[-1].begin and f.end > s[-1].end):
            s.append(f)  # the common case: a new fragment after all others
            return True
        lo = bisect_left(s, f.begin, key=_begin)  # first with begin >= f.begin
        hi = bisect_right(s, f.end, key=_end)  # first with end > f.end
        if lo > 0 and s[lo - 1].end >= f.end:
            return False  # covered by a fragment beginning earlier
        if hi < len(s) and s[hi].begin <= f.begin:
            return False  # covered by a fragment ending later
        s[lo:hi] = [f]  # [lo, hi) lie within f
        return True

    def longest_overlapping(self, offset: int) -> tuple[int, bool]:
        """(index, True) of the fragment covering `offset` with the most content after it, or
        (index of the first fragment beginning after `offset`, False) if none covers it."""
        s = self._fragments
        i = bisect_right(s, offset, key=_begin)  # first with begin > offset
        if i > 0 and s[i - 1].end > offset:
            return i - 1, True  # ends are sorted too: the last begin <= offset has the largest end
        return i, False

    def covers(self, begin: int, end: int) -> bool:
        """Whether the union of the set's fragments covers [begin, end)."""
        offset = begin
        while offset < end:
            i, found = self.longest_overlapping(offset)
            if not found:
                return False
            offset = self._fragments[i].end
        return True

    def difference(self, other: CoverSet) -> CoverSet:
        """Fragments of this set not covered by the union of `other`'s fragments."""
        out = CoverSet()
        out._fragments = [f for f in self._fragments if not other.covers(f.begin, f.end)]
        return out

    @property
    def begin_offset(self) -> int:
        return self._fragments[0].begin if self._fragments else 0

    @property
    def end_offset(self) -> int:
        return self._fragments[-1].end if self._fragments else 0

    def __iter__(self) -> Iterator[Fragment]:
        return iter(self._fragments)

    def __len__(self) -> int:
        return len(self._fragments)

    def __getitem__(self, i: int) -> Fragment:
        return self._fragments[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CoverSet) and other._fragments == self._fragments

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "CoverSet(" + ", ".join(f"[{f.begin}, {f.end})" for f in self._fragments) + ")"
