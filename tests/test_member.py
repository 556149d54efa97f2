"""The member runtime shared by brokers and consumers (gazette/member.py): its task group stops within
its bound naming what it cancelled, and a malformed assignment key is skipped by both kinds of members
instead of ending their reconcile loop."""

from __future__ import annotations

import asyncio

import pytest

from gazette.broker.broker import Broker
from gazette.broker.resolver import decode_value as broker_decode_value
from gazette.client.loop import default_loop
from gazette.client.sync import Client
from gazette.consumer.allocation import decode_value as consumer_decode_value
from gazette.keyspace import layout
from gazette.keyspace.etcd import connect
from gazette.protocol.spec import JournalSpec
from gazette.tasks import TaskGroup
from gazette.testing import wait_for


def test_a_task_group_stop_waits_for_tasks_that_end_and_names_those_it_cancels() -> None:
    async def main() -> tuple[list[str], list[str], bool]:
        group = TaskGroup("test")
        ended = asyncio.Event()

        async def quick() -> None:
            await asyncio.sleep(0)
            ended.set()

        group.spawn(quick(), "quick")
        first = await group.stop(5.0)  # everything ends on its own: nothing cancelled
        stuck = group.spawn(asyncio.Event().wait(), "waits forever")
        group.spawn(quick(), "quick again")
        second = await group.stop(0.05)
        return first, second, stuck.cancelled() and ended.is_set() and len(group) == 0

    first, second, clean = asyncio.run(main())
    assert first == []
    assert second == ["waits forever"]
    assert clean


def test_a_task_group_stop_called_from_its_own_task_does_not_wait_for_itself() -> None:
    async def main() -> list[str]:
        group = TaskGroup("test")

        async def stopper() -> list[str]:
            return await group.stop(1.0)

        return await group.spawn(stopper(), "stopper")

    assert asyncio.run(main()) == []


def test_a_malformed_assignment_key_does_not_stop_a_broker_from_taking_journals(
    etcd, etcd_root, tmp_path
) -> None:
    loop = default_loop()

    async def put_malformed() -> None:
        client = connect(etcd.endpoint)
        try:
            await client.put(f"{layout.assign_prefix(etcd_root)}not-an-assignment".encode(), b"")
        finally:
            await client.close()

    loop.run(put_malformed(), timeout=30)
    broker = Broker(etcd.endpoint, root=etcd_root, spool_dir=str(tmp_path), lease_ttl_s=5)
    loop.run(broker.start(), timeout=60)
    try:
        with Client(broker.endpoint) as client:
            journal = "member/part-000"
            client.apply_journals([JournalSpec(name=journal, replication=1)])
            res = wait_for("an append", lambda: client.append(journal, b"taken\n", timeout=5), 60)
            assert res.end == len(b"taken\n")
            assert client.read_all(journal) == b"taken\n"
    finally:
        loop.run(broker.stop(graceful=False), timeout=60)


def test_both_members_key_space_decoders_refuse_a_malformed_assignment_key() -> None:
    root = "/member-test"
    bad = f"{layout.assign_prefix(root)}journal#zone#suffix#not-a-slot"
    for decode in (broker_decode_value(root), consumer_decode_value(root)):
        with pytest.raises(ValueError, match="not-a-slot"):
            decode(bad, b"")
