"""A reader of a journal's primary can be served an append that is then lost: the primary applies a
commit to its own spool (and its index) before its peers acknowledged it, and a primary that then
loses its lease drops that spool. Found by the chaos scheduler (tests/faults/test_chaos.py: "the
concurrent reader saw bytes the journal does not hold"), reproduced here with the project's
network-namespace hosts: the primary is cut off from etcd and its peers but not from clients.

Gazette's broker does the same (broker/pipeline.go scatter applies the commit to the primary's spool,
whose SpoolCommit indexes it, before gather reads the replicas' acknowledgements; a Gazette broker
that loses its lease exits and its spool is gone), so this is marked xfail (strict) until the
primary indexes a commit only once every peer acknowledged it. The append itself is never
acknowledged: no acknowledged byte is lost, but a reader saw bytes no journal copy keeps.
"""

from __future__ import annotations

import asyncio
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


# raises=AssertionError: only the check failing is the expected failure; without it a setup failure
# (no network-namespace hosts under CI: tests/needs.py) would be reported as this xfail, silently.
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="a primary indexes its own commit before its peers acknowledge it (as Gazette's does)",
)
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
        # The reader of the primary was served it all the same.
        assert not seen or journal[head : head + len(seen)] == seen, (
            f"the primary served {seen!r} at {head}; the journal holds {journal[head : head + len(seen)]!r} there"
        )
    finally:
        network.heal()
        loop.run(channels.close())
        loop.stop()
        cluster.close()
        etcd.stop()
