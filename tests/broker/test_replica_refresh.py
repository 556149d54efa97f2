"""A Replica's store listings and persistence timing: it lists the stores at once when it becomes the
journal's primary (it may hold, as unpersisted spools, fragments the old primary persisted since) and
until a range a peer alone held is listed; a spool ahead of a syncing primary is persisted at once,
not after the replica delay (it may be the only copy of a range the journal has moved past)."""

from __future__ import annotations

import hashlib

from gazette.broker.replica import Replica
from gazette.fragment.content import list_fragments, persist
from gazette.fragment.fragment import Codec, Fragment
from gazette.fragment.persister import Persister
from gazette.protocol.labels import LabelSet
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import Status
from gazette.testing import async_wait_for

J = "refresh/journal"


async def test_a_replica_that_becomes_primary_lists_the_stores_at_once(tmp_path):
    store = f"file://{tmp_path}/store/"
    spec = JournalSpec(J, replication=2, stores=[store], refresh_interval="1h")
    persister = Persister()
    await persister.start()
    replica = Replica(spec, 1, persister, spool_dir=str(tmp_path / "spool"))
    replica.start()
    try:
        await replica.index.wait_first_refresh()
        assert replica.index.fragments() == []
        # The primary (another broker) persists a fragment after this replica's first listing.
        content = b"persisted by the old primary\n"
        written = await persist(
            Fragment(J, 0, len(content), hashlib.sha1(content).digest(), Codec.NONE),
            lambda: iter([content]), store, "",
        )  # fmt: skip
        replica.set_primary(False)  # staying a replica changes nothing
        replica.set_primary(True)
        await async_wait_for("the new primary to list the store", lambda: replica.index.fragments() == [written],
                             timeout=20)  # far short of the hour-long refresh_interval
    finally:
        await replica.stop()
        await persister.stop()


async def _replica(tmp_path, store: str, replica_delay_s: float = 3600.0) -> tuple[Replica, Persister]:
    persister = Persister(replica_delay_s=replica_delay_s)
    await persister.start()
    replica = Replica(JournalSpec(J, replication=2, stores=[store], refresh_interval="1h"), 1, persister,
                      spool_dir=str(tmp_path))  # fmt: skip
    replica.start()
    await replica.index.wait_first_refresh()
    return replica, persister


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


async def test_a_range_only_a_peer_held_is_listed_once_the_peer_persists_it(tmp_path):
    store = f"file://{tmp_path}/store/"
    replica, persister = await _replica(tmp_path, store)
    try:
        content = b"a peer's commit\n"
        replica.refresh_until_covered(0, len(content))
        assert not replica.index.covers(0, len(content))
        await persist(Fragment(J, 0, len(content), hashlib.sha1(content).digest(), Codec.NONE),
                      lambda: iter([content]), store, "")  # fmt: skip
        await async_wait_for("the index to cover the range", lambda: replica.index.covers(0, len(content)),
                             timeout=20)  # fmt: skip
    finally:
        await replica.stop()
        await persister.stop()
