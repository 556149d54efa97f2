"""A Replica's index listing of the stores: on its refresh interval, and at once when it becomes the
journal's primary (it may hold, as unpersisted spools, fragments the old primary persisted since)."""

from __future__ import annotations

import hashlib

from gazette.broker.replica import Replica
from gazette.fragment.content import persist
from gazette.fragment.fragment import Codec, Fragment
from gazette.fragment.persister import Persister
from gazette.protocol.spec import JournalSpec
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
