"""No dirty reads (docs/semantics.md#no-dirty-reads): a broker serves readers only commits that every
member of the journal's route holds.

Without it a reader of a journal's primary could be served an append that is then lost: a primary
applies a commit to its own spool before its peers acknowledge it, and a primary that then loses its
lease drops that spool; the next append reuses the offsets. Found by the chaos scheduler
(tests/faults/test_chaos.py: "the concurrent reader saw bytes the journal does not hold") and
reproduced here with the project's network-namespace hosts: the primary is cut off from etcd and its
peers but not from clients. Gazette's broker does this (broker/pipeline.go scatter applies the commit
to the primary's spool, whose SpoolCommit indexes it, before gather reads the acknowledgements).

The replicas' side: a replica that committed an append its peer has not acknowledged yet (that peer
is paused) serves none of it, whether read directly (do_not_proxy) or through it, until the peer
acknowledges; then it serves it, asking the primary how far every member holds the journal.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from faults.chaos import Network, placed_spawn
from faults.harness import LEASE_TTL_S, ZONES, route_of, wait_for, wait_for_full_route
from faults.workload import Channels, append_once
from needs import NETNS_STEP, missing

import gazette.local.cluster as local_cluster
from gazette.client.loop import LoopThread
from gazette.keyspace.etcd import EmbeddedEtcd
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb

JOURNAL = "faults/dirty-read/part-000"


@pytest.fixture
def network() -> Iterator[Network]:
    net, why = Network.make(brokers=3, members=0)
    if net is None:
        missing(f"this reproduction needs the network-namespace hosts: {why}", NETNS_STEP)
    try:
        yield net
    finally:
        net.close()


async def _channels() -> Channels:
    return Channels()  # made on the loop that uses it


async def _append(channels: Channels, endpoint: str, content: bytes) -> pb.AppendResponse:
    return await append_once(channels.stub(endpoint), JOURNAL, [content], do_not_proxy=True)


async def _read_at(channels: Channels, endpoint: str, offset: int) -> bytes:
    """A non-blocking read at `endpoint` alone (do_not_proxy) from `offset`."""
    out = bytearray()
    call = channels.stub(endpoint).Read(
        pb.ReadRequest(journal=JOURNAL, offset=offset, block=False, do_not_proxy=True), timeout=3.0
    )
    try:
        async for resp in call:
            out += resp.content
    except grpc.aio.AioRpcError:
        pass
    return bytes(out)


def test_a_reader_of_the_primary_never_sees_an_append_that_is_then_lost(
    network: Network, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(local_cluster, "spawn", placed_spawn(network))
    etcd = EmbeddedEtcd(data_dir=str(tmp_path / "etcd"), host=network.etcd.address, fsync=False).start()
    cluster = LocalCluster(
        brokers=3, mode="subprocess", zones=ZONES, lease_ttl_s=LEASE_TTL_S, data_dir=str(tmp_path / "cluster"),
        exit_drain_s=2.0, etcd=etcd.endpoint, log_level="INFO",
    )  # fmt: skip
    loop = LoopThread("dirty-read")
    channels: Channels = loop.run(_channels())
    try:
        cluster.start()
        cluster.client().apply_journals([cluster.journal_spec(JOURNAL, replication=3, compression="none")])
        wait_for_full_route(cluster, JOURNAL)
        client = cluster.client()
        wait_for("a first append", lambda: client.append(JOURNAL, b"before\n", timeout=5))
        _, primary = route_of(cluster, JOURNAL)
        p = cluster.brokers[primary]
        head = client.read_head(JOURNAL)

        # The primary keeps its clients but loses etcd and its peers.
        network.partition(
            [network.brokers[primary]],
            [network.etcd, *(h for i, h in enumerate(network.brokers) if i != primary)],
        )
        lost = b"appended while cut off: never acknowledged\n"
        pending = asyncio.run_coroutine_threadsafe(_append(channels, p.endpoint, lost), loop.loop)
        seen = b""
        for _ in range(int(LEASE_TTL_S / 0.1)):
            seen = loop.run(_read_at(channels, p.endpoint, head))
            if seen:
                break
            loop.run(asyncio.sleep(0.1))
        # Its lease expires; it drops its spool and announces again once the partition heals.
        loop.run(asyncio.sleep(LEASE_TTL_S + 2))
        network.heal()
        try:
            pending.result(30)
        except Exception:
            pass  # it failed or broke: never acknowledged
        wait_for_full_route(cluster, JOURNAL, deadline_s=90)
        after = b"acknowledged after the heal\n"
        res = wait_for("an append after the heal", lambda: client.append(JOURNAL, after, timeout=5), 90)
        journal = client.read_all(JOURNAL)
        assert journal[head : head + len(lost)] != lost and res.begin == head  # the lost append is gone
        # ...and the reader of the primary was never served it.
        assert not seen or journal[head : head + len(seen)] == seen, (
            f"the primary served {seen!r} at {head}; the journal holds {journal[head : head + len(seen)]!r} there"
        )
    finally:
        network.heal()
        loop.run(channels.close())
        loop.stop()
        cluster.close()
        etcd.stop()


def test_a_replica_serves_an_append_only_once_every_member_holds_it(tmp_path: Path) -> None:
    journal = "faults/dirty-read/replica"
    with LocalCluster(
        brokers=3, mode="subprocess", zones=ZONES, data_dir=str(tmp_path), log_level="INFO", lease_ttl_s=30
    ) as cluster:  # (the paused member keeps its lease)
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(journal, replication=3, compression="none")])
        members, primary = wait_for_full_route(cluster, journal)
        wait_for("a first append", lambda: client.append(journal, b"before\n", timeout=5))
        head = client.read_head(journal)
        replica, paused = [m for m in members if m != primary]
        loop = LoopThread("dirty-read-replica")
        channels: Channels = loop.run(_channels())

        async def read(endpoint: str, *, do_not_proxy: bool) -> tuple[bytes, list[int]]:
            out, statuses = bytearray(), []
            call = channels.stub(endpoint).Read(
                pb.ReadRequest(journal=journal, offset=head, block=False, do_not_proxy=do_not_proxy),
                timeout=10.0,
            )
            async for resp in call:
                out += resp.content
                statuses.append(resp.status)
            return bytes(out), statuses

        try:
            cluster.pause_broker(paused)  # it never acknowledges while paused
            content = b"committed at the primary and one replica, not yet at the third\n"
            held_before = held_back_commits(cluster, replica)

            async def append() -> pb.AppendResponse:  # (channels are made on the loop that uses them)
                return await append_once(
                    channels.stub(cluster.brokers[primary].endpoint), journal, [content], do_not_proxy=True
                )

            pending = asyncio.run_coroutine_threadsafe(append(), loop.loop)
            r = cluster.brokers[replica]
            wait_for(
                "the replica to commit the append",
                lambda: (
                    held_back_commits(cluster, replica) > held_before or (pending.done() and pending.result())
                ),
            )
            assert not pending.done(), f"the append ended while a member was paused: {pending.result()}"
            for endpoint, do_not_proxy in [
                (r.endpoint, True), (r.endpoint, False), (cluster.brokers[primary].endpoint, True),
            ]:  # fmt: skip
                got, statuses = loop.run(read(endpoint, do_not_proxy=do_not_proxy))
                assert got == b"" and statuses[-1] == pb.OFFSET_NOT_YET_AVAILABLE, (
                    endpoint,
                    do_not_proxy,
                    got,
                )
            assert not pending.done()
            cluster.resume_broker(paused)
            res = pending.result(60)
            assert res.status == pb.OK and res.commit.begin == head
            got, _ = loop.run(read(r.endpoint, do_not_proxy=True))  # asks the primary how far all hold it
            assert got == content
        finally:
            cluster.resume_broker(paused) if cluster.brokers[paused].paused else None
            loop.run(channels.close())
            loop.stop()


def held_back_commits(cluster: LocalCluster, i: int) -> float:
    """Broker `i`'s count of spool commits it applied before every member was known to hold them."""
    with urllib.request.urlopen(cluster.brokers[i].metrics, timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(r"^gazette_spool_held_back_commits_total (\S+)$", text, re.M)
    assert m, "the broker exports gazette_spool_held_back_commits_total"
    return float(m.group(1))
