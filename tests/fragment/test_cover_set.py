"""CoverSet (reference 2.4): larger fragments win, covered ones are ignored, longest overlap.

Cases follow Gazette's cover_set_test.go; a property test checks the ordering invariants.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.fragment.cover_set import CoverSet
from gazette.fragment.fragment import Fragment, parse_content_name
from gazette.protocol.errors import ValidationError


def frag(begin: int, end: int) -> Fragment:
    return Fragment("a/journal", begin, end)


def ranges(s: CoverSet) -> list[tuple[int, int]]:
    return [(f.begin, f.end) for f in s]


def add_all(s: CoverSet, *rs: tuple[int, int]) -> list[bool]:
    return [s.add(frag(b, e)) for b, e in rs]


@pytest.mark.parametrize(
    "adds, expect",
    [
        # insert at end
        ([(100, 200), (200, 300), (201, 301)], [(100, 200), (200, 300), (201, 301)]),
        # replace a range at the end
        ([(100, 200), (200, 300), (300, 400), (400, 500), (150, 500)], [(100, 200), (150, 500)]),
        # replace one at the end
        ([(100, 200), (200, 300), (199, 300)], [(100, 200), (199, 300)]),
        ([(100, 200), (200, 300), (200, 301)], [(100, 200), (200, 301)]),
        # replace a range in the middle
        ([(100, 200), (200, 300), (300, 400), (400, 500), (150, 450)], [(100, 200), (150, 450), (400, 500)]),
        # replace one in the middle
        ([(100, 200), (200, 300), (300, 400), (150, 350)], [(100, 200), (150, 350), (300, 400)]),
        # insert in the middle, exact and close boundaries
        ([(100, 200), (300, 400), (200, 300)], [(100, 200), (200, 300), (300, 400)]),
        ([(100, 200), (300, 400), (201, 299)], [(100, 200), (201, 299), (300, 400)]),
        # replace a range / one at the beginning
        ([(100, 200), (200, 300), (300, 400), (100, 300)], [(100, 300), (300, 400)]),
        ([(100, 200), (200, 300), (300, 400), (99, 200)], [(99, 200), (200, 300), (300, 400)]),
        # insert at the beginning
        ([(200, 300), (300, 400), (199, 200)], [(199, 200), (200, 300), (300, 400)]),
    ],
)
def test_add(adds, expect):
    s = CoverSet()
    assert all(add_all(s, *adds))
    assert ranges(s) == expect


def test_add_overlapping_ranges():
    s = CoverSet()
    assert all(add_all(s, (100, 150), (149, 201), (200, 250), (250, 300), (299, 351), (350, 400)))
    assert all(add_all(s, (200, 300), (300, 400), (100, 200)))
    assert ranges(s) == [(100, 200), (149, 201), (200, 300), (299, 351), (300, 400)]


def test_covered_fragments_are_ignored_and_equal_ones_replace():
    s = CoverSet()
    add_all(s, (100, 200), (200, 300), (300, 400))
    assert add_all(s, (101, 200), (100, 199), (100, 200), (201, 300), (200, 299), (200, 300)) == [
        False,
        False,
        True,
        False,
        False,
        True,
    ]
    assert ranges(s) == [(100, 200), (200, 300), (300, 400)]
    persisted = Fragment("a/journal", 100, 200, backing_store="file:///s/", mod_time=7)
    assert s.add(persisted)
    assert s[0] is persisted  # an equal range replaces: the newer description wins


def test_empty_fragments_are_ignored_and_inverted_ones_refused():
    s = CoverSet()
    assert not s.add(frag(5, 5))
    assert len(s) == 0
    with pytest.raises(ValidationError, match="end < begin"):
        s.add(frag(6, 5))


def test_offsets():
    s = CoverSet()
    assert (s.begin_offset, s.end_offset) == (0, 0)
    s.add(frag(100, 150))
    assert (s.begin_offset, s.end_offset) == (100, 150)
    s.add(frag(140, 250))
    assert (s.begin_offset, s.end_offset) == (100, 250)
    s.add(frag(50, 100))
    assert (s.begin_offset, s.end_offset) == (50, 250)


def test_longest_overlapping():
    s = CoverSet()
    add_all(s, (100, 200), (149, 201), (200, 300), (299, 351), (300, 400), (500, 600))
    cases = [
        (0, 0, False),
        (100, 0, True),
        (148, 0, True),
        (149, 1, True),
        (199, 1, True),
        (200, 2, True),
        (298, 2, True),
        (299, 3, True),
        (300, 4, True),
        (350, 4, True),
        (399, 4, True),
        (400, 5, False),
        (401, 5, False),
        (499, 5, False),
        (500, 5, True),
        (599, 5, True),
        (600, 6, False),
    ]
    for offset, ind, found in cases:
        assert s.longest_overlapping(offset) == (ind, found), offset


def test_difference_drops_fragments_covered_by_the_union():
    b = CoverSet()
    add_all(b, (100, 200), (150, 225), (225, 250), (250, 300), (301, 400))
    a = CoverSet()
    add_all(
        a,
        (99, 105),  # begins before b
        (100, 110),  # within one fragment of b
        (110, 120),
        (130, 210),  # covered by two fragments of b
        (150, 225),  # equal to one of b
        (151, 300),  # covered by three
        (152, 301),  # not covered: 1-byte gap at 300
        (300, 350),  # not covered: same gap
        (301, 360),  # covered
        (360, 401),  # runs past b
        (400, 450),  # outside b
    )
    assert ranges(a.difference(b)) == [(99, 105), (152, 301), (300, 350), (360, 401), (400, 450)]


def test_multiple_overlaps_from_content_names():
    names = [
        "0000000000000000-00000000400a8d41-0000000000000000000000000000000000000000.raw",
        "00000000400a8d41-00000000595722d7-0000000000000000000000000000000000000000.raw",
        "00000000400a8d41-000000007a3fb5ee-0000000000000000000000000000000000000000.raw",
        "00000000400a8d41-000000007af92e59-0000000000000000000000000000000000000000.raw",
        "00000000595722d7-000000007af92fb4-0000000000000000000000000000000000000000.raw",
        "000000007a3fb5ee-000000007af92fb4-0000000000000000000000000000000000000000.raw",
        "000000007af92e59-000000007af92e59-0000000000000000000000000000000000000000.raw",
    ]
    s = CoverSet()
    for name in names:
        begin, end, sum_, codec = parse_content_name(name)
        s.add(Fragment("a/journal", begin, end, sum_, codec))
    assert ranges(s) == [(0, 0x400A8D41), (0x400A8D41, 0x7AF92E59), (0x595722D7, 0x7AF92FB4)]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30)), max_size=30))
def test_invariants_hold_for_any_adds(pairs):
    s = CoverSet()
    added: list[tuple[int, int]] = []
    for b, n in pairs:
        s.add(frag(b, b + n))
        if n:
            added.append((b, b + n))
        rs = ranges(s)
        assert rs == sorted(rs)
        assert [e for _, e in rs] == sorted({e for _, e in rs})  # ends strictly increasing
        assert len({b_ for b_, _ in rs}) == len(rs)  # begins unique
        # Every offset ever added is still covered by some fragment.
        for ab, ae in added:
            assert s.covers(ab, ae)
