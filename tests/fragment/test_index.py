"""Index (reference 2.4): spool commits, remote listings, and Query's head, jump and skip rules.

Times are passed as `now`, so no test depends on the clock or on sleeping.
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from gazette.fragment.fragment import Fragment
from gazette.fragment.index import OFFSET_JUMP_AGE_S, Index
from gazette.fragment.spool import CompletedSpool, Spool
from gazette.fragment.spool_file import SpoolFile
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status

J = "a/journal"
NOW = 1_700_000_000.0
RECENT = int(NOW) - 60
OLD = int(NOW) - OFFSET_JUMP_AGE_S - 1


def remote(begin: int, end: int, mod_time: int = RECENT) -> Fragment:
    return Fragment(
        J, begin, end, hashlib.sha1(b"%d" % begin).digest(), backing_store="file:///s/", mod_time=mod_time
    )


def local(begin: int, end: int) -> Fragment:
    return Fragment(J, begin, end, hashlib.sha1(b"L%d" % begin).digest())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_empty_index_head_is_zero():
    index = Index(J)
    res = await index.query(-1, block=False)
    assert (res.status, res.offset, res.write_head, res.fragment, res.file) == (
        Status.OFFSET_NOT_YET_AVAILABLE,
        0,
        0,
        None,
        None,
    )
    assert (index.begin_offset(), index.end_offset()) == (0, 0)
    assert index.summary() == (0, 0, 0)


async def test_spool_commit_is_queryable_with_its_file(files):
    index = Index(J)
    f1 = files(0)
    index.spool_commit(local(0, 100), f1)
    index.spool_commit(Fragment(J, 0, 150, local(0, 0).sum), f1)  # the spool grew: replaces [0, 100)
    assert [(f.begin, f.end) for f in index.fragments()] == [(0, 150)]
    res = await index.query(10, block=False)
    assert (res.status, res.offset, res.write_head) == (Status.OK, 10, 150)
    assert res.fragment == index.fragments()[0] and res.file is f1
    assert index.local_file(local(0, 100)) is None  # replaced, no longer indexed

    head = await index.query(-1, block=False)
    assert (head.status, head.offset, head.write_head) == (Status.OFFSET_NOT_YET_AVAILABLE, 150, 150)
    assert (index.begin_offset(), index.end_offset(), bool(index.local_fragments())) == (0, 150, True)


async def test_growing_spools_keep_one_file_entry_each(files):
    # Each commit replaces its spool's previous one; an earlier spool's fragment and file stay.
    index = Index(J)
    fa, fb = files(0), files(100)
    index.spool_commit(local(0, 100), fa)
    for end in range(110, 200, 10):
        index.spool_commit(Fragment(J, 100, end, local(100, 0).sum), fb)
    last = Fragment(J, 100, 190, local(100, 0).sum)
    assert index.local_fragments() == [local(0, 100), last]
    assert index.local_file(local(0, 100)) is fa and index.local_file(last) is fb
    assert index.local_file(Fragment(J, 100, 180, local(100, 0).sum)) is None
    assert len(index._files) == 2  # replaced commits are forgotten, not accumulated
    index.spool_commit(Fragment(J, 100, 150, local(100, 0).sum), fb)  # covered: no change
    assert index.local_file(last) is fb and len(index._files) == 2


async def test_blocking_query_wakes_on_spool_commit(files):
    index = Index(J)
    index.spool_commit(local(0, 100), files(0))
    task = asyncio.create_task(index.query(-1, block=True))
    await settle()
    assert not task.done()
    index.spool_commit(local(100, 180), files(100))
    res = await asyncio.wait_for(task, 5)
    assert (res.status, res.offset, res.write_head) == (Status.OK, 100, 180)
    assert res.fragment == local(100, 180)


async def test_blocking_query_is_cancellable():
    index = Index(J)
    task = asyncio.create_task(index.query(0, block=True))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wait_for_change_and_first_refresh(files):
    index = Index(J)
    assert not index.first_refresh_done
    change = asyncio.create_task(index.wait_for_change())
    refresh = asyncio.create_task(index.wait_first_refresh())
    await settle()
    assert not change.done() and not refresh.done()
    index.spool_commit(local(0, 10), files(0))
    await asyncio.wait_for(change, 5)
    await settle()
    assert not refresh.done()  # a spool commit is not a refresh
    index.replace_remote([])
    await asyncio.wait_for(refresh, 5)
    assert index.first_refresh_done
    await asyncio.wait_for(index.wait_first_refresh(), 5)  # stays done


async def test_jump_before_first_fragment_even_if_recent():
    index = Index(J)
    index.replace_remote([remote(100, 200), remote(200, 300)])
    for offset in (0, 50):
        res = await index.query(offset, block=False, now=NOW)
        assert (res.status, res.offset, res.fragment) == (Status.OK, 100, remote(100, 200))
        assert res.file is None


async def test_jump_over_a_hole_only_to_old_fragments():
    index = Index(J)
    index.replace_remote([remote(0, 100), remote(200, 300, mod_time=RECENT)])
    res = await index.query(150, block=False, now=NOW)
    assert (res.status, res.offset, res.write_head) == (Status.OFFSET_NOT_YET_AVAILABLE, 150, 300)

    index.replace_remote([remote(0, 100), remote(200, 300, mod_time=OLD)])
    res = await index.query(150, block=False, now=NOW)
    assert (res.status, res.offset, res.fragment) == (Status.OK, 200, remote(200, 300, mod_time=OLD))


async def test_no_jump_to_a_local_fragment(files):
    index = Index(J)
    index.replace_remote([remote(0, 100, mod_time=OLD)])
    index.spool_commit(local(200, 300), files(200))
    res = await index.query(150, block=False, now=NOW)
    assert res.status == Status.OFFSET_NOT_YET_AVAILABLE


async def test_a_blocked_read_below_the_first_fragment_jumps_once_a_listing_arrives():
    # Gazette's Query: an offset below the first fragment, with a persisted fragment past it, jumps
    # there (a blocking query too: it wakes on the listing and returns the larger offset).
    index = Index(J)
    task = asyncio.create_task(index.query(30, block=True, now=NOW))
    await settle()
    assert not task.done()
    index.replace_remote([remote(100, 200), remote(200, 300)])
    res = await asyncio.wait_for(task, 5)
    assert (res.status, res.offset, res.write_head, res.fragment) == (Status.OK, 100, 300, remote(100, 200))


async def test_a_read_below_fragments_pruned_from_the_store_jumps_after_the_refresh():
    # Retention deleted [0, 200) from the store: until a refresh the index still serves it; the
    # refresh's listing no longer has it, and reads below 200 (blocking or not) jump to 200.
    index = Index(J)
    index.replace_remote([remote(0, 100, mod_time=OLD), remote(100, 200, mod_time=OLD), remote(200, 300)])
    res = await index.query(50, block=False, now=NOW)
    assert (res.offset, res.fragment) == (50, remote(0, 100, mod_time=OLD))
    index.replace_remote([remote(200, 300)])
    for block in (False, True):
        res = await asyncio.wait_for(index.query(50, block=block, now=NOW), 5)
        assert (res.status, res.offset, res.fragment) == (Status.OK, 200, remote(200, 300))


async def test_a_read_blocked_in_a_recent_hole_jumps_once_the_fragments_before_it_are_pruned():
    index = Index(J)
    index.replace_remote([remote(0, 100), remote(200, 300)])
    task = asyncio.create_task(index.query(150, block=True, now=NOW))
    await settle()
    assert not task.done()  # a recent hole: a fragment covering it may still be uploading
    index.replace_remote([remote(200, 300)])  # [0, 100) pruned: 150 is now below the first fragment
    res = await asyncio.wait_for(task, 5)
    assert (res.status, res.offset, res.fragment) == (Status.OK, 200, remote(200, 300))


async def test_below_a_first_fragment_that_is_only_local_the_index_does_not_jump(files):
    # As Gazette's: an unpersisted first fragment is no reason to jump (the range below may still be
    # uploading from another broker). For a journal without stores the broker's read decides, from
    # what every replica holds (gazette/broker/read.py).
    index = Index(J)
    index.spool_commit(local(100, 200), files(100))
    res = await index.query(0, block=False, now=NOW)
    assert (res.status, res.offset, res.write_head) == (Status.OFFSET_NOT_YET_AVAILABLE, 0, 200)


async def test_blocked_read_in_a_recent_hole_wakes_when_it_is_filled():
    index = Index(J)
    index.replace_remote([remote(0, 100), remote(200, 300)])
    task = asyncio.create_task(index.query(150, block=True, now=NOW))
    await settle()
    assert not task.done()
    index.replace_remote([remote(0, 100), remote(100, 200), remote(200, 300)])
    res = await asyncio.wait_for(task, 5)
    assert (res.status, res.offset, res.fragment) == (Status.OK, 150, remote(100, 200))


async def test_begin_mod_time_skips_older_fragments(files):
    index = Index(J)
    index.replace_remote([remote(0, 100, mod_time=1000), remote(100, 200, mod_time=2000)])
    f = files(200)
    index.spool_commit(local(200, 300), f)

    res = await index.query(0, block=False, begin_mod_time=1500)
    assert (res.status, res.offset, res.fragment) == (Status.OK, 100, remote(100, 200, mod_time=2000))
    res = await index.query(50, block=False, begin_mod_time=2500)
    assert (res.status, res.offset, res.fragment, res.file) == (Status.OK, 200, local(200, 300), f)
    res = await index.query(0, block=False, begin_mod_time=1000)  # not below: served
    assert (res.offset, res.fragment) == (0, remote(0, 100, mod_time=1000))


async def test_replace_remote_drops_covered_local_fragments(files):
    index = Index(J)
    fa, fb = files(0), files(100)
    index.spool_commit(local(0, 100), fa)
    index.spool_commit(local(100, 200), fb)

    index.replace_remote([remote(0, 60), remote(60, 100)])  # covers [0, 100) as a union
    assert index.local_fragments() == [local(100, 200)]
    assert index.fragments() == [remote(0, 60), remote(60, 100), local(100, 200)]
    assert index.local_file(local(0, 100)) is None and index.local_file(local(100, 200)) is fb
    res = await index.query(70, block=False)
    assert (res.fragment, res.file) == (remote(60, 100), None)
    res = await index.query(150, block=False)
    assert (res.fragment, res.file) == (local(100, 200), fb)
    assert index.summary() == (0, 200, 0)  # last fragment is local

    index.replace_remote([remote(0, 60), remote(60, 100), remote(100, 200)])
    assert index.local_fragments() == []
    assert (index.begin_offset(), index.end_offset(), bool(index.local_fragments())) == (0, 200, False)
    assert index.summary() == (0, 200, RECENT)
    res = await index.query(150, block=False)
    assert (res.fragment, res.file) == (remote(100, 200), None)


async def test_replace_remote_keeps_local_fragments_that_are_not_covered(files):
    index = Index(J)
    f = files(50)
    index.spool_commit(local(50, 150), f)
    index.replace_remote([remote(0, 100)])  # only partly covers the local fragment
    assert index.fragments() == [remote(0, 100), local(50, 150)]
    res = await index.query(120, block=False)
    assert (res.fragment, res.file) == (local(50, 150), f)
    res = await index.query(60, block=False)  # the local fragment has more content after 60
    assert res.fragment == local(50, 150)


class _Replica:
    """A minimal SpoolObserver wiring a Spool to an Index, as the broker does."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.completed: list[CompletedSpool] = []

    def on_commit(self, fragment: Fragment, file: SpoolFile) -> None:
        self.index.spool_commit(fragment, file)

    def on_complete(self, completed: CompletedSpool) -> None:
        self.completed.append(completed)


async def test_spool_commits_reach_a_blocked_reader(tmp_path):
    index = Index(J)
    replica = _Replica(index)
    spool = Spool(J, replica, directory=str(tmp_path))
    task = asyncio.create_task(index.query(0, block=True))
    await settle()
    spool.apply_content(b"hello", 0)
    await settle()
    assert not task.done()  # uncommitted bytes are not readable
    spool.apply_proposal(spool.next(), LabelSet())
    res = await asyncio.wait_for(task, 5)
    assert res.status == Status.OK and res.file is spool.file
    assert res.fragment is not None and res.file is not None
    assert b"".join(res.file.reader(res.offset, res.fragment.end)) == b"hello"


def test_covers_needs_every_offset_of_the_range(files):
    index = Index(J)
    index.replace_remote([remote(0, 100), remote(150, 200)])
    index.spool_commit(local(200, 260), files(200))
    assert index.covers(0, 100) and index.covers(10, 20) and index.covers(150, 260)
    assert not index.covers(90, 160)  # [100, 150) is a gap
    assert not index.covers(250, 300)  # past the end
    assert index.covers(120, 120)  # an empty range
