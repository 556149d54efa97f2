"""The read path's rules (`broker.read.next_step`), one by one without a cluster, and the Index's
holding back of commits not every member acknowledged (docs/semantics.md#no-dirty-reads)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest

from gazette.broker.read import ReadFacts, Step, next_step
from gazette.fragment.fragment import Fragment
from gazette.fragment.index import Index
from gazette.protocol.status import Status

J = "a/journal"

# A blocking read at a primary at its head, nothing held back: the base every case below changes.
BASE = ReadFacts(
    found=False, offset=100, write_head=100, pending_end=0, is_primary=True, may_proxy=True, storeless=False,
    block=True, peers_tried=False, jump_checked=False, asked=False,
)  # fmt: skip


def facts(**changes) -> ReadFacts:
    return dataclasses.replace(BASE, **changes)


@pytest.mark.parametrize(
    ("changes", "step"),
    [
        # Covered: served, wherever and however it is read.
        ({"found": True}, Step.SERVE),
        ({"found": True, "is_primary": False, "pending_end": 500}, Step.SERVE),
        # At the head: wait, or end a non-blocking read.
        ({}, Step.WAIT),
        ({"block": False}, Step.NOT_YET),
        # A primary never serves its own commits before its peers acknowledged them: it waits.
        ({"pending_end": 200}, Step.WAIT),
        ({"pending_end": 200, "block": False}, Step.NOT_YET),
        # A replica holding commits at the offset asks the primary how far every member holds them...
        ({"is_primary": False, "pending_end": 200}, Step.ASK_PRIMARY),
        ({"is_primary": False, "pending_end": 200, "block": False}, Step.ASK_PRIMARY),
        ({"is_primary": False, "pending_end": 200, "may_proxy": False}, Step.ASK_PRIMARY),
        # ...and, asked already, hands the read to the primary, or (do_not_proxy) waits to ask again.
        ({"is_primary": False, "pending_end": 200, "asked": True}, Step.AT_PRIMARY),
        ({"is_primary": False, "pending_end": 200, "asked": True, "may_proxy": False}, Step.WAIT_TO_ASK),
        (
            {"is_primary": False, "pending_end": 200, "asked": True, "may_proxy": False, "block": False},
            Step.NOT_YET,
        ),
        # Held-back commits that end at or before the offset are nothing to ask about.
        ({"is_primary": False, "pending_end": 100}, Step.WAIT),
        # A gap at a replica (it joined late): the primary serves the rest, unless do_not_proxy.
        ({"is_primary": False, "offset": 50}, Step.AT_PRIMARY),
        ({"is_primary": False, "offset": 50, "may_proxy": False}, Step.WAIT),
        ({"is_primary": False, "offset": 50, "may_proxy": False, "block": False}, Step.NOT_YET),
        # A gap at the primary: its peers once, then (storeless) the jump check once, then a wait.
        ({"offset": 50}, Step.FROM_PEERS),
        ({"offset": 50, "peers_tried": True}, Step.WAIT),
        ({"offset": 50, "peers_tried": True, "block": False}, Step.NOT_YET),
        ({"offset": 50, "peers_tried": True, "storeless": True}, Step.CHECK_JUMP),
        ({"offset": 50, "peers_tried": True, "storeless": True, "jump_checked": True}, Step.WAIT),
        # The primary's peers are asked even by a do_not_proxy read: it is this broker asking.
        ({"offset": 50, "may_proxy": False}, Step.FROM_PEERS),
    ],
)
def test_next_step(changes: dict, step: Step) -> None:
    assert next_step(facts(**changes)) == step


def local(begin: int, end: int) -> Fragment:
    return Fragment(J, begin, end, hashlib.sha1(b"L%d-%d" % (begin, end)).digest())


async def test_unacknowledged_commits_are_held_back_until_acknowledged(files) -> None:
    index = Index(J)
    index.replace_remote([])
    a = files(0)
    index.spool_commit(local(0, 10), a, acknowledged=False)
    index.spool_commit(local(0, 25), a, acknowledged=False)
    assert (index.end_offset(), index.pending_end()) == (0, 25)
    q = await index.query(0, False)
    assert (q.status, q.write_head) == (Status.OFFSET_NOT_YET_AVAILABLE, 0)

    change = index.changed()
    index.acknowledge_through(10)  # the first commit only: served with its own end (and SHA1)
    assert change.is_set()
    q = await index.query(0, False)
    assert (q.status, q.fragment, q.file, q.write_head) == (Status.OK, local(0, 10), a, 10)

    b = files(25)
    index.spool_commit(local(25, 40), b, acknowledged=False)  # the next spool
    index.acknowledge_through(40)  # releases the rest of the first spool, then the second
    assert [f for f in index.fragments()] == [local(0, 25), local(25, 40)]
    assert (index.pending_end(), index.acknowledged_end()) == (0, 40)
    # A commit already acknowledged (a replica that learned a later end first) is served at once.
    index.acknowledge_through(60)
    index.spool_commit(local(40, 60), files(40), acknowledged=False)
    assert index.end_offset() == 60 and index.pending_end() == 0


async def test_a_blocking_query_wakes_on_the_acknowledgement_not_the_commit(files) -> None:
    index = Index(J)
    index.replace_remote([])
    waiter = asyncio.create_task(index.query(0, True))
    index.spool_commit(local(0, 10), files(0), acknowledged=False)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done()
    index.acknowledge_through(10)
    q = await asyncio.wait_for(waiter, 5)
    assert (q.status, q.fragment) == (Status.OK, local(0, 10))


def test_held_back_commits_count_as_dirty_and_their_end_as_the_maximum(files) -> None:
    index = Index(J)
    index.replace_remote([dataclasses.replace(local(0, 10), mod_time=1, backing_store="file:///s/")])
    index.spool_commit(local(10, 30), files(10), acknowledged=False)
    assert index.summary() == (0, 30, 0)


def test_held_back_commits_superseded_by_the_same_spool_are_dropped_past_the_bound(
    files, monkeypatch
) -> None:
    import gazette.fragment.index as index_module

    monkeypatch.setattr(index_module, "PENDING_COMMITS_KEPT", 3)
    index = Index(J)
    index.replace_remote([])
    a = files(0)
    for end in range(1, 11):
        index.spool_commit(local(0, end), a, acknowledged=False)
    b = files(10)
    index.spool_commit(local(10, 11), b, acknowledged=False)
    assert len(index._pending) == 3  # noqa: SLF001 - the bound is the point of this test
    index.acknowledge_through(5)  # its commit was dropped: nothing ending at 5 or before is left
    assert index.end_offset() == 0
    index.acknowledge_through(11)
    assert [f for f in index.fragments()] == [local(0, 10), local(10, 11)]


def test_held_back_commits_the_stores_hold_are_dropped(files) -> None:
    index = Index(J)
    index.replace_remote([])
    index.spool_commit(local(0, 10), files(0), acknowledged=False)
    index.spool_commit(local(10, 20), files(10), acknowledged=False)
    persisted = dataclasses.replace(local(0, 10), mod_time=1, backing_store="file:///s/")
    index.replace_remote([persisted])
    assert index.pending_end() == 20 and len(index._pending) == 1  # noqa: SLF001 - no file kept for [0, 10)
    assert index.fragments() == [persisted]
