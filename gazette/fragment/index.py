"""Index: the queryable fragments of one journal, remote (listed from stores) and local (spooled).

As in docs/semantics.md#coverset-and-index: `set` = remote ∪ local CoverSet, `local` = fragments with a
SpoolFile; an asyncio.Event replaced on every change plays Go's closed condition channel. Runs on one event
loop thread. Imports gazette.fragment (cover_set, fragment, spool_file) and gazette.protocol only.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Iterable

from gazette.fragment.cover_set import CoverSet
from gazette.fragment.fragment import Fragment
from gazette.fragment.spool_file import SpoolFile
from gazette.protocol.status import Status

# A read of an uncovered offset jumps to the next persisted fragment only if the reader is before the
# first fragment, or that fragment was persisted this long ago: a younger one may be a hand-off whose
# covering fragment is still uploading (docs/semantics.md#coverset-and-index).
OFFSET_JUMP_AGE_S = 6 * 60 * 60
# Unacknowledged commits kept per index beyond which a commit superseded by a later one of the same
# spool is dropped: the later one is released by any acknowledgement that would release it.
PENDING_COMMITS_KEPT = 1024


@dataclasses.dataclass
class QueryResult:
    status: Status  # OK or OFFSET_NOT_YET_AVAILABLE
    offset: int  # effective offset (after -1 resolution and jumps)
    write_head: int
    fragment: Fragment | None
    file: SpoolFile | None  # set when the fragment is local


class Index:
    """Local and remote fragments of `journal`; blocking queries wake on every change."""

    def __init__(self, journal: str) -> None:
        self.journal = journal
        self._set = CoverSet()  # remote ∪ local
        self._local = CoverSet()  # fragments with a SpoolFile
        self._files: dict[Fragment, SpoolFile] = {}
        self._changed = asyncio.Event()
        self._first_refresh = asyncio.Event()
        # Spool commits not yet known to be held by every member of the route, oldest first: readers
        # are never served them (docs/semantics.md#no-dirty-reads). Each is the spool's whole
        # fragment at that commit, so releasing one serves exactly the bytes (and SHA1) committed.
        self._pending: collections.deque[tuple[Fragment, SpoolFile]] = collections.deque()
        self._acknowledged = 0  # every member holds the journal's commits through this offset

    # --- updates ----------------------------------------------------------------------------------

    def spool_commit(self, fragment: Fragment, file: SpoolFile, *, acknowledged: bool = True) -> None:
        """Adds a committed local spool fragment and wakes waiters. With `acknowledged=False` the
        commit is held back from readers until `acknowledge_through` reaches its end (the broker's
        replicas commit before their peers acknowledged the same commit)."""
        if acknowledged or fragment.end <= self._acknowledged:
            self._add_local(fragment, file)
        else:
            pending = self._pending
            pending.append((fragment, file))
            while len(pending) > PENDING_COMMITS_KEPT and pending[0][0].begin == pending[1][0].begin:
                pending.popleft()  # superseded by the same spool's next commit
        self._wake()

    def acknowledge_through(self, end: int) -> None:
        """Every member of the journal's route holds its commits through `end`: releases the held
        back commits ending there or before to readers."""
        if end <= self._acknowledged:
            return
        self._acknowledged = end
        pending = self._pending
        released = False
        while pending and pending[0][0].end <= end:
            self._add_local(*pending.popleft())
            released = True
        if released:
            self._wake()

    def pending_end(self) -> int:
        """The end of the newest commit held back from readers (0: none is)."""
        return self._pending[-1][0].end if self._pending else 0

    def write_head(self) -> int:
        """The journal's head as readers are told it: the end of what the index serves, or further
        where every member is known to have agreed on a later end (a primary whose sync rolled its
        spool forward past commits only its peers hold: a gap below the head, as Gazette reports)."""
        return max(self._set.end_offset, self._acknowledged)

    def acknowledged_end(self) -> int:
        """The offset through which the index knows every member holds the journal's commits."""
        return self._acknowledged

    def _add_local(self, fragment: Fragment, file: SpoolFile) -> None:
        """A spool's commits share its begin and only grow, and spools follow one another (begins never
        go back): so the only local fragment a commit can replace is its spool's previous commit."""
        self._set.add(fragment)
        previous = self._local_at(fragment.begin)
        if self._local.add(fragment):
            self._files[fragment] = file
            if previous is not None and previous != fragment:
                self._files.pop(previous, None)  # the spool's previous, smaller commit was replaced

    def replace_remote(self, fragments: Iterable[Fragment]) -> None:
        """Replaces the remote fragments with a full listing of the stores. Local fragments covered by it
        are dropped (their files are left to GC, as readers may still hold them); the rest merge in."""
        remote = CoverSet(fragments)
        self._local = self._local.difference(remote)
        # Held-back commits the stores now hold are persisted, whoever persisted them: readers get
        # them from the listing, and their spool files need not be kept open for them.
        self._pending = collections.deque(p for p in self._pending if not remote.covers(p[0].begin, p[0].end))
        for f in self._local:
            remote.add(f)  # never covered by the listing's union, so never refused
        self._set = remote
        self._prune_files()
        self._wake()
        self._first_refresh.set()

    def _local_at(self, begin: int) -> Fragment | None:
        """The local fragment beginning at `begin`, if any (no two share a begin)."""
        i, found = self._local.longest_overlapping(begin)
        return self._local[i] if found and self._local[i].begin == begin else None

    def _prune_files(self) -> None:
        self._files = {f: self._files[f] for f in self._local if f in self._files}

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- views ------------------------------------------------------------------------------------

    @property
    def first_refresh_done(self) -> bool:
        return self._first_refresh.is_set()

    async def wait_first_refresh(self) -> None:
        await self._first_refresh.wait()

    def changed(self) -> asyncio.Event:
        """The event set at the index's next change (take it before looking, then wait on it)."""
        return self._changed

    async def wait_for_change(self) -> None:
        """Returns at the next change of the index."""
        await self._changed.wait()

    def begin_offset(self) -> int:
        return self._set.begin_offset

    def end_offset(self) -> int:
        return self._set.end_offset

    def summary(self) -> tuple[int, int, int]:
        """(first begin, last end, last fragment's mod_time; 0 if it is local or the index is empty).
        Commits held back from readers count (as local, so dirty): the journal is in use."""
        if self._pending:
            begin = self._set.begin_offset if self._set else self._pending[0][0].begin
            return begin, max(self._set.end_offset, self.pending_end()), 0
        if not self._set:
            return 0, 0, 0
        return self._set.begin_offset, self._set.end_offset, self._set[len(self._set) - 1].mod_time

    def fragments(self) -> list[Fragment]:
        """A snapshot of the CoverSet (remote ∪ local), in offset order."""
        return list(self._set)

    def covers(self, begin: int, end: int) -> bool:
        """Whether fragments of the index (persisted or spooled) cover every offset of [begin, end)."""
        at = begin
        for f in self._set:  # in offset order
            if at >= end:
                break
            if f.begin <= at < f.end:
                at = f.end
        return at >= end

    def local_fragments(self) -> list[Fragment]:
        return list(self._local)

    def local_file(self, f: Fragment) -> SpoolFile | None:
        return self._files.get(f)

    # --- query ------------------------------------------------------------------------------------

    async def query(
        self, offset: int, block: bool, begin_mod_time: int = 0, now: float | None = None
    ) -> QueryResult:
        """Query (docs/semantics.md#coverset-and-index): the fragment to read `offset` from (-1 = the write
        head).

        Blocks until one exists when `block`; cancel the awaiting task to give up."""
        effective = self.write_head() if offset == -1 else offset
        while True:
            s = self._set
            ind, found = s.longest_overlapping(effective)
            if not found and ind < len(s) and s[ind].mod_time != 0:
                now_s = time.time() if now is None else now
                if ind == 0 or offset == 0 or s[ind].mod_time < now_s - OFFSET_JUMP_AGE_S:
                    effective = s[ind].begin  # heal a hole (deleted or never-written range)
                    found = True
            if found:
                f = s[ind]
                if f.mod_time != 0 and f.mod_time < begin_mod_time:
                    effective = f.end  # persisted before the reader's lower bound: skip it
                    continue
                return QueryResult(Status.OK, effective, self.write_head(), f, self._files.get(f))
            if not block:
                return QueryResult(Status.OFFSET_NOT_YET_AVAILABLE, effective, self.write_head(), None, None)
            await self._changed.wait()
