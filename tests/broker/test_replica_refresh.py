"""A Replica's store listings and persistence timing: it lists the stores at once when it becomes the
journal's primary (it may hold, as unpersisted spools, fragments the old primary persisted since) and
until a range a peer alone held is listed; a spool ahead of a syncing primary is persisted at once,
not after the replica delay (it may be the only copy of a range the journal has moved past)."""

from __future__ import annotations

import asyncio
import hashlib

import gazette.broker.replica as replica_module
from gazette.broker.replica import Replica
from gazette.fragment.content import list_fragments, persist
from gazette.fragment.fragment import Codec, Fragment
from gazette.fragment.persister import Persister
from gazette.protocol.labels import LabelSet
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import Status
from gazette.testing import async_wait_for

J = "refresh/journal"


async def _replica(tmp_path, store: str, replica_delay_s: float = 3600.0) -> tuple[Replica, Persister]:
    persister = Persister(replica_delay_s=replica_delay_s)
    await persister.start()
    replica = Replica(JournalSpec(J, replication=2, stores=[store], refresh_interval="1h"), 1, persister,
                      spool_dir=str(tmp_path))  # fmt: skip
    replica.start()
    await replica.index.wait_first_refresh()
    return replica, persister


async def _persist(store: str, begin: int, content: bytes) -> Fragment:
    """What another broker's persister writes: [begin, begin + len(content)) in `store`."""
    frag = Fragment(J, begin, begin + len(content), hashlib.sha1(content).digest(), Codec.NONE)
    return await persist(frag, lambda: iter([content]), store, "")


async def test_a_replica_that_becomes_primary_lists_the_stores_at_once(tmp_path):
    store = f"file://{tmp_path}/store/"
    replica, persister = await _replica(tmp_path, store)  # lists its stores once an hour
    try:
        assert replica.index.fragments() == []
        # The primary (another broker) persists a fragment after this replica's first listing.
        written = await _persist(store, 0, b"persisted by the old primary\n")
        replica.set_primary(True)
        await async_wait_for(
            "the new primary to list the store", lambda: replica.index.fragments() == [written], timeout=20
        )  # far short of the hour-long refresh_interval
    finally:
        await replica.stop()
        await persister.stop()


async def test_a_spool_ahead_of_a_syncing_primary_is_persisted_without_the_replica_delay(tmp_path):
    store = f"file://{tmp_path}/store/"
    replica, persister = await _replica(tmp_path, store)  # replicas persist an hour after completing
    try:
        spool, regs = replica.spool, LabelSet()
        for chunk in (b"acknowledged\n", b"reached only this replica\n"):
            spool.apply_content(chunk, 0)
            assert spool.apply_proposal(spool.next(), regs)[0] == Status.OK
        ours = spool.fragment
        # A new primary that lacks the second commit syncs; then it rolls every member to our end.
        first = Fragment(J, 0, 13, hashlib.sha1(b"acknowledged\n").digest(), Codec.NONE)
        assert spool.apply_proposal(first, regs)[0] == Status.PROPOSAL_MISMATCH
        assert spool.apply_proposal(Fragment(J, ours.end, ours.end, codec=Codec.NONE), regs)[0] == Status.OK

        async def listed() -> list[tuple[int, int]]:
            return [(f.begin, f.end) for f in await list_fragments(store, J)]

        # Far short of the replica delay:
        assert await async_wait_for("the completed spool in the store", listed, timeout=20) == [(0, ours.end)]
    finally:
        await replica.stop()
        await persister.stop()


async def test_a_range_only_a_peer_held_is_listed_once_the_peer_persists_it(tmp_path, monkeypatch):
    store = f"file://{tmp_path}/store/"
    # Retention left a gap [10, 20) long ago: the watch must not wait on it (it would list the stores
    # every second until GAP_REFRESH_LIMIT_S, here far beyond the bound below).
    await _persist(store, 0, b"0123456789")
    await _persist(store, 20, b"0123456789")
    monkeypatch.setattr(replica_module, "GAP_REFRESH_LIMIT_S", 3600.0)
    replica, persister = await _replica(tmp_path, store)
    try:
        watch = replica.refresh_until_covered(0, 40)  # a new primary rolled forward from 0 to 40
        assert watch is not None and not replica.index.covers(30, 40)
        await _persist(store, 30, b"a peer's!\n")  # the peer persists its spool
        await asyncio.wait_for(watch, 20)  # far short of the hour-long refresh_interval
        assert replica.index.covers(30, 40) and not replica.index.covers(0, 40)
    finally:
        await replica.stop()
        await persister.stop()
