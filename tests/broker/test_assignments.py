"""The primary's etcd writes (UpdateAssignments, UpdateSuspend) answer with a revision the KeySpace
is sure to reach, whether they applied or lost a race: the append FSM resolves again through it, and
a revision nothing will ever write (a quiet cluster after a rebalance) would hang the append."""

from __future__ import annotations

import asyncio

import pytest

from gazette.allocator.journals import route_equivalent
from gazette.broker.assignments import assignments_of, route_value, update_assignments, update_suspend
from gazette.broker.resolver import decode_value
from gazette.keyspace import layout
from gazette.keyspace.etcd import connect
from gazette.keyspace.keyspace import KeySpace
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.spec import JournalSpec, SuspendLevel

JOURNAL = "assign/one"


def _route(*suffixes: str, primary: int = 0) -> pb.Route:
    return pb.Route(members=[pb.ProcessSpec.ID(zone="z", suffix=s) for s in suffixes], primary=primary)


@pytest.fixture
async def keyspace(etcd, etcd_root):
    client = connect(etcd.endpoint)
    ks = KeySpace(client, etcd_root, decode_value(etcd_root), watch_apply_delay_s=0.0)
    spec = JournalSpec(name=JOURNAL, replication=2)
    await client.put(layout.item_key(etcd_root, JOURNAL).encode(), spec.to_proto().SerializeToString())
    for slot, suffix in enumerate(("a", "b")):
        key = layout.assignment_key(etcd_root, JOURNAL, "z", suffix, slot)
        await client.put(key.encode(), route_value(_route("a")))
    await ks.start()
    try:
        yield client, ks, spec
    finally:
        await ks.stop()
        await client.close()


async def _seen(ks: KeySpace, revision: int) -> None:
    await asyncio.wait_for(ks.wait_for_revision(revision), 10)


async def test_update_assignments_applied_answers_its_write_revision(keyspace) -> None:
    client, ks, _ = keyspace
    ok, revision = await update_assignments(client, assignments_of(ks, JOURNAL), _route("a", "b"))
    assert ok
    await _seen(ks, revision)
    kvs = assignments_of(ks, JOURNAL)
    assert {kv.mod_revision for kv in kvs} == {revision}
    assert len(kvs) == 2 and all(route_equivalent(kv.decoded, _route("a", "b")) for kv in kvs)


async def test_update_assignments_that_lost_a_race_answers_a_revision_holding_the_winner(keyspace) -> None:
    client, ks, _ = keyspace
    stale = assignments_of(ks, JOURNAL)
    # Another writer changes an assignment, and the KeySpace has already seen it when the txn runs:
    # etcd then stays quiet, so only a revision at or before the winner's can be read through.
    winner = layout.assignment_key(ks.root, JOURNAL, "z", "b", 1)
    await client.put(winner.encode(), route_value(_route("b")))
    won_at = ks.revision + 1
    await _seen(ks, won_at)

    ok, revision = await update_assignments(client, stale, _route("a", "b"))
    assert not ok
    assert revision >= won_at, "the answered revision must hold the change that failed the compare"
    await _seen(ks, revision)  # reached at once: nothing else needs to be written to etcd
    untouched = ks.get(layout.assignment_key(ks.root, JOURNAL, "z", "a", 0))
    assert untouched is not None and untouched.mod_revision < won_at, "a failed txn wrote nothing"


async def test_update_suspend_that_lost_a_race_answers_a_revision_holding_the_winner(keyspace) -> None:
    client, ks, spec = keyspace
    item = ks.get(layout.item_key(ks.root, JOURNAL))
    assert item is not None
    await client.put(item.key.encode(), spec.to_proto().SerializeToString())  # the spec changes meanwhile
    won_at = ks.revision + 1
    await _seen(ks, won_at)

    ok, revision = await update_suspend(client, ks, spec, item.mod_revision, SuspendLevel.FULL, 0)
    assert not ok and revision >= won_at
    await _seen(ks, revision)

    fresh = ks.get(layout.item_key(ks.root, JOURNAL))
    assert fresh is not None
    ok, revision = await update_suspend(client, ks, spec, fresh.mod_revision, SuspendLevel.FULL, 7)
    assert ok
    await _seen(ks, revision)
    suspended = ks.get(layout.item_key(ks.root, JOURNAL))
    assert suspended is not None and suspended.mod_revision == revision
    assert suspended.decoded.suspend_level == SuspendLevel.FULL and suspended.decoded.suspend_offset == 7
