"""Planning: which fragments to read (CoverSet dedupe, pruning) and how to pack them into partitions.

`uncommitted` and `raw` reads split journals by fragments and prune fragments by journal, offset
and mod-time bounds. `committed` reads keep whole journals in one task (the commit decision runs
from the journal's start), so only journal bounds prune; the rest apply to rows after the decision.
RowBounds holds every bound (options and claimed filters) and is applied row-exactly in `read()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from fragments_io.discovery import JournalSource
from gazette.fragment.cover_set import CoverSet
from gazette.fragment.fragment import Fragment


@dataclasses.dataclass(frozen=True)
class RowBounds:
    """Conjunction of row predicates; None means unbounded. Offsets and times are [lo, hi)."""

    journal_in: frozenset[str] | None = None
    journal_prefixes: tuple[str, ...] = ()  # every prefix must match (AND of pushed filters)
    begin_lo: int | None = None
    begin_hi: int | None = None
    published_lo_us: int | None = None
    published_hi_us: int | None = None
    mod_time_lo: int | None = None  # unix seconds of the fragment holding the row
    mod_time_hi: int | None = None
    # Per-journal begin bounds (startingOffsets / endingOffsets), narrowing begin_lo / begin_hi.
    begin_lo_of: tuple[tuple[str, int], ...] = ()
    begin_hi_of: tuple[tuple[str, int], ...] = ()
    empty: bool = False  # contradictory bounds: nothing matches

    def begin_range(self, journal: str) -> tuple[int | None, int | None]:
        """The [lo, hi) bounds of row begins in `journal` (None: unbounded)."""
        lo, hi = self.begin_lo, self.begin_hi
        for j, v in self.begin_lo_of:
            if j == journal:
                lo = v if lo is None else max(lo, v)
        for j, v in self.begin_hi_of:
            if j == journal:
                hi = v if hi is None else min(hi, v)
        return lo, hi

    def journal_ok(self, journal: str) -> bool:
        if self.empty:
            return False
        if self.journal_in is not None and journal not in self.journal_in:
            return False
        return all(journal.startswith(p) for p in self.journal_prefixes)

    def fragment_ok(self, f: Fragment) -> bool:
        """Whether `f` can hold a row within the offset and mod-time bounds."""
        lo, hi = self.begin_range(f.journal)
        if lo is not None and f.end <= lo:
            return False
        if hi is not None and f.begin >= hi:
            return False
        if self.mod_time_lo is not None and f.mod_time < self.mod_time_lo:
            return False
        return not (self.mod_time_hi is not None and f.mod_time >= self.mod_time_hi)

    def and_(self, **changes: object) -> RowBounds:
        """These bounds narrowed by `changes` (lo: the max, hi: the min, journal sets intersected)."""
        kw: dict[str, object] = {}
        for name, value in changes.items():
            if value is None:
                continue
            cur = getattr(self, name)
            if name == "journal_in":
                assert isinstance(value, frozenset)
                kw[name] = value if cur is None else cur & value
            elif name == "journal_prefixes":
                assert isinstance(value, tuple)
                kw[name] = cur + value
            elif name.endswith("_lo"):
                kw[name] = value if cur is None else max(cur, value)  # type: ignore[call-overload]
            elif name.endswith("_hi"):
                kw[name] = value if cur is None else min(cur, value)  # type: ignore[call-overload]
            else:
                kw[name] = value
        out = dataclasses.replace(self, **kw)  # type: ignore[arg-type]
        for lo, hi in (
            (out.begin_lo, out.begin_hi),
            (out.published_lo_us, out.published_hi_us),
            (out.mod_time_lo, out.mod_time_hi),
        ):
            if lo is not None and hi is not None and hi <= lo:
                out = dataclasses.replace(out, empty=True)
        return out


@dataclasses.dataclass(frozen=True)
class Task:
    """Fragments of one journal, in offset order, read by one partition (live reads: LiveRanges too)."""

    journal: str
    framing: str
    fragments: tuple[Fragment, ...]
    whole_journal: bool = False  # committed mode: the commit decision runs over these fragments

    @property
    def size(self) -> int:
        return sum(f.length for f in self.fragments)


def spans(j: JournalSource) -> list[Fragment]:
    """What a read of `j` reads, in offset order: its cover's fragments and (live reads) the
    LiveRanges between and after them, which stand in for fragments (fragments_io.live)."""
    covered = cover(j.fragments)
    if not j.live:
        return covered
    return sorted([*covered, *j.live], key=lambda f: f.begin)


def cover(fragments: Iterable[Fragment]) -> list[Fragment]:
    """The fragments a broker's CoverSet would keep: each offset read once, larger fragments win.
    Ties (the same range persisted twice) keep one, deterministically."""
    ordered = sorted(fragments, key=lambda f: (f.begin, -f.end, f.backing_store, f.path_postfix, f.codec))
    return list(CoverSet(reversed(ordered)))


# As spark.sql.files.openCostInBytes: a task costs about as much as reading this much content, so
# content is not spread thinner than this to fill more cores.
OPEN_COST_BYTES = 4 << 20


def plan_partitions(
    journals: Iterable[JournalSource],
    isolation: str,
    bounds: RowBounds,
    max_partition_bytes: int,
    min_partitions: int = 1,
) -> list[list[Task]]:
    """Tasks packed into partitions of at most about `max_partition_bytes` of content each (never
    empty: an empty read plans one partition with no tasks). Like Spark's file sources, content
    is spread over at least `min_partitions` (the cores) when each gets OPEN_COST_BYTES or more,
    so a small read still uses every core; partitions are balanced, not filled one by one."""
    selected = [j for j in journals if bounds.journal_ok(j.name)]
    if isolation == "committed":
        tasks = [Task(j.name, j.framing, tuple(spans(j)), True) for j in selected]
        return _pack_journals(tasks, max_partition_bytes, min_partitions) or [[]]
    runs = [(j, [f for f in spans(j) if bounds.fragment_ok(f)]) for j in selected]
    total = sum(f.length for _, run in runs for f in run)
    count = max(-(-total // max_partition_bytes), min(min_partitions, total // OPEN_COST_BYTES), 1)
    target = total / count
    parts: list[list[Task]] = []
    current: list[Task] = []
    fill = 0
    for j, fragments in runs:
        run: list[Fragment] = []
        for f in fragments:
            # Cut before `f` where that lands nearer the target (and never past the maximum).
            if fill and (fill + f.length > max_partition_bytes or fill + f.length / 2 > target):
                if run:
                    current.append(Task(j.name, j.framing, tuple(run)))
                    run = []
                parts.append(current)
                current, fill = [], 0
            run.append(f)
            fill += f.length
        if run:
            current.append(Task(j.name, j.framing, tuple(run)))
    if current:
        parts.append(current)
    return parts or [[]]


def _pack_journals(tasks: list[Task], max_partition_bytes: int, min_partitions: int = 1) -> list[list[Task]]:
    """Whole journals into bins of at most `max_partition_bytes` (a bigger journal is alone); at
    least `min_partitions` bins (as journals and OPEN_COST_BYTES allow), so the journals' commit
    decisions run in parallel."""
    tasks = [t for t in tasks if t.fragments]
    total = sum(t.size for t in tasks)
    return pack_by_size(
        tasks, max_partition_bytes, min(min_partitions, len(tasks), max(1, total // OPEN_COST_BYTES))
    )


class Sized(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def journal(self) -> str: ...


S = TypeVar("S", bound=Sized)


def pack_by_size(tasks: Sequence[S], max_partition_bytes: int, min_bins: int = 0) -> list[list[S]]:
    """Tasks into bins of at most `max_partition_bytes` (a bigger task is alone), largest first, each
    into the least-filled bin with room once `min_bins` bins are open; deterministic for the same
    tasks, and each bin sorted by journal."""
    bins: list[tuple[int, list[S]]] = []
    for task in sorted(tasks, key=lambda t: (-t.size, t.journal)):
        best = None
        if len(bins) >= min_bins:
            for i, (fill, _) in enumerate(bins):
                if fill + task.size <= max_partition_bytes and (best is None or fill < bins[best][0]):
                    best = i
        if best is None:
            bins.append((task.size, [task]))
        else:
            fill, members = bins[best]
            members.append(task)
            bins[best] = (fill + task.size, members)
    return [sorted(members, key=lambda t: t.journal) for _, members in bins]
