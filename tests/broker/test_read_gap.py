"""A blocking read at a non-primary stops waiting once its offset becomes a gap there (content past
it arrived, the offset itself never will), so the read can move to the primary at once instead of
waiting minutes for the range to be persisted and listed. Driven on an Index directly."""

from __future__ import annotations

import asyncio
import hashlib

from gazette.broker.read import _content_or_gap
from gazette.fragment.fragment import Fragment
from gazette.fragment.index import Index
from gazette.protocol.status import Status

J = "a/journal"


def local(begin: int, end: int) -> Fragment:
    return Fragment(J, begin, end, hashlib.sha1(b"L%d" % begin).digest())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_wait_that_turns_into_a_gap_returns(files) -> None:
    index = Index(J)
    task = asyncio.create_task(_content_or_gap(index, 50, 0, watch_gap=True))
    await settle()
    assert not task.done()  # nothing known past 50 yet: an ordinary wait for content
    index.spool_commit(local(100, 180), files(100))  # re-synced past 50: 50 will never arrive here
    res = await asyncio.wait_for(task, 5)
    assert (res.status, res.offset, res.write_head, res.fragment) == (Status.OFFSET_NOT_YET_AVAILABLE, 50, 180, None)


async def test_without_watching_gaps_it_waits_for_the_content(files) -> None:
    index = Index(J)
    task = asyncio.create_task(_content_or_gap(index, 50, 0, watch_gap=False))
    index.spool_commit(local(100, 180), files(100))
    await settle()
    assert not task.done()  # the primary's way: a gap is not a reason to stop
    index.spool_commit(local(0, 100), files(0))
    res = await asyncio.wait_for(task, 5)
    assert (res.status, res.offset, res.fragment) == (Status.OK, 50, local(0, 100))


async def test_a_read_from_the_head_waits_at_the_head_it_began_at(files) -> None:
    index = Index(J)
    index.spool_commit(local(0, 100), files(0))
    task = asyncio.create_task(_content_or_gap(index, -1, 0, watch_gap=True))
    await settle()
    assert not task.done()
    index.spool_commit(local(100, 180), files(100))
    res = await asyncio.wait_for(task, 5)  # not chasing the new head: it reads what came after 100
    assert (res.status, res.offset, res.fragment) == (Status.OK, 100, local(100, 180))
