"""Sessions and member announcements against a real etcd (reference 5.2)."""

from __future__ import annotations

import asyncio
import contextlib
import types

import aetcd
import pytest

from gazette.allocator.announce import AnnouncementConflict, LeaseLost, Session, announce
from gazette.allocator.journals import broker_spec_exiting
from gazette.protocol import broker_pb2 as pb

WAIT_S = 10.0


def spec(limit: int = 4) -> bytes:
    return pb.BrokerSpec(
        process_spec=pb.ProcessSpec(id=pb.ProcessSpec.ID(zone="a", suffix="member-1")), journal_limit=limit
    ).SerializeToString()


async def lease_of(client: aetcd.Client, key: str) -> int:
    got = await client.get(key.encode())
    assert got is not None, f"{key} is absent"
    return int(got.lease)


async def test_announce_puts_the_key_under_the_session_lease(
    etcd_client: aetcd.Client, etcd_root: str
) -> None:
    key = f"{etcd_root}/members/a#member-1"
    session = await Session.grant(etcd_client, 5)
    try:
        ann = await announce(etcd_client, key, spec(), session)
        got = await etcd_client.get(key.encode())
        assert got is not None and got.value == spec()
        assert got.lease == session.lease_id and got.mod_revision == ann.revision

        # Announcing again under the same lease (a lost reply retried) succeeds at once.
        again = await announce(etcd_client, key, spec(), session, retry_interval_s=60)
        assert again.revision == ann.revision
    finally:
        await session.close()
    assert await etcd_client.get(key.encode()) is None  # close() revoked the lease


async def test_announce_waits_for_a_predecessors_lease(etcd_client: aetcd.Client, etcd_root: str) -> None:
    key = f"{etcd_root}/members/a#member-1"
    old = await Session.grant(etcd_client, 30)
    new = await Session.grant(etcd_client, 5)
    try:
        await announce(etcd_client, key, spec(1), old)
        pending = asyncio.create_task(announce(etcd_client, key, spec(2), new, retry_interval_s=0.05))
        # It keeps retrying while the old key stands...
        done, _ = await asyncio.wait({pending}, timeout=0.3)
        assert not done
        assert await lease_of(etcd_client, key) == old.lease_id
        # ...and wins once the predecessor's lease ends.
        await old.close()
        ann = await asyncio.wait_for(pending, WAIT_S)
        assert await lease_of(etcd_client, key) == new.lease_id
        got = await etcd_client.get(key.encode())
        assert got is not None and got.value == spec(2) and got.mod_revision == ann.revision
    finally:
        await old.close()
        await new.close()


async def test_set_exiting_is_a_cas_that_keeps_the_lease(etcd_client: aetcd.Client, etcd_root: str) -> None:
    key = f"{etcd_root}/members/a#member-1"
    session = await Session.grant(etcd_client, 5)
    try:
        ann = await announce(etcd_client, key, spec(), session, mark_exiting=broker_spec_exiting)
        first = ann.revision
        revision = await ann.set_exiting()
        assert revision > first
        got = await etcd_client.get(key.encode())
        assert got is not None and got.mod_revision == revision
        assert got.lease == session.lease_id
        assert pb.BrokerSpec.FromString(got.value).exiting

        # Someone else rewrites the key: our next CAS fails and says why.
        await etcd_client.put(key.encode(), spec(9), lease=session.lease_id)
        with pytest.raises(AnnouncementConflict, match="modified or deleted externally"):
            await ann.update(spec(3))
        got = await etcd_client.get(key.encode())
        assert got is not None and got.value == spec(9)
    finally:
        await session.close()


async def test_set_exiting_needs_a_mark_function(etcd_client: aetcd.Client, etcd_root: str) -> None:
    session = await Session.grant(etcd_client, 5)
    try:
        ann = await announce(etcd_client, f"{etcd_root}/members/a#m-01", spec(), session)
        with pytest.raises(ValueError, match="mark_exiting"):
            await ann.set_exiting()
    finally:
        await session.close()


async def test_session_reports_a_revoked_lease(etcd_client: aetcd.Client, etcd_root: str) -> None:
    session = await Session.grant(etcd_client, 2)
    seen: list[LeaseLost] = []
    session.add_lost_callback(seen.append)
    try:
        assert not session.lost
        await etcd_client.revoke_lease(session.lease_id)
        reason = await asyncio.wait_for(session.wait_lost(), WAIT_S)
        assert isinstance(reason, LeaseLost) and "expired or was revoked" in str(reason)
        assert seen == [reason]
        late: list[LeaseLost] = []
        session.add_lost_callback(late.append)  # registered after the fact: called at once
        assert late == [reason]
        with pytest.raises(LeaseLost):
            await announce(etcd_client, f"{etcd_root}/members/a#m-01", spec(), session)
    finally:
        await session.close()


async def test_a_removed_lost_callback_is_not_called(etcd_client: aetcd.Client) -> None:
    session = await Session.grant(etcd_client, 2)
    kept: list[LeaseLost] = []
    removed: list[LeaseLost] = []
    session.add_lost_callback(kept.append)
    session.add_lost_callback(removed.append)
    session.remove_lost_callback(removed.append)
    session.remove_lost_callback(removed.append)  # not added any more: a no-op
    try:
        await etcd_client.revoke_lease(session.lease_id)
        reason = await asyncio.wait_for(session.wait_lost(), WAIT_S)
        assert kept == [reason] and removed == []
    finally:
        await session.close()


async def test_session_keeps_its_lease_alive_past_the_ttl(etcd_client: aetcd.Client, etcd_root: str) -> None:
    session = await Session.grant(etcd_client, 1)
    key = f"{etcd_root}/members/a#m-01".encode()
    try:
        await etcd_client.put(key, b"x", lease=session.lease_id)
        # Without refreshes the lease and its key would be gone after one TTL; after 2.5 they stay.
        await asyncio.sleep(2.5 * session.ttl_s)
        assert not session.lost
        assert await etcd_client.get(key) is not None
    finally:
        await session.close()


async def test_session_ttl_must_be_whole_seconds(etcd_client: aetcd.Client) -> None:
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="lease TTL"):
            await Session.grant(etcd_client, bad)  # type: ignore[arg-type]


async def test_keep_alive_ends_when_its_cancel_races_a_refresh_completing() -> None:
    """The cancel of the keep-alive task lands while a lease refresh completes in the same step: the
    task must still end (Python 3.11's asyncio.wait_for returned the refresh's result instead and
    swallowed the cancel, so Session.close waited for ever on a loop that went on refreshing)."""
    refreshed = []

    class RacingClient:
        async def refresh_lease(self, lease_id: int):
            refreshed.append(lease_id)
            assert session._task is not None
            session._task.cancel()  # arrives as the refresh returns, with nothing awaited in between
            return types.SimpleNamespace(TTL=3)

    session = Session(RacingClient(), lease_id=7, ttl_s=3)  # type: ignore[arg-type]
    session._task = asyncio.create_task(session._keep_alive())
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(session._task, timeout=10)
    assert session._task.cancelled() and refreshed == [7]
