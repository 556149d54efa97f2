"""Client keepalive pings (`keepalive=` seconds) of journal and shard clients: a call on a connection a
network partition silently cut (packets dropped, no reset) fails over to the next broker or member
within seconds instead of waiting out its timeout. The chaos soak once waited 60 s on an append to an
isolated primary this way."""

from __future__ import annotations

import asyncio

import pytest
from blackhole import BlackHole

import gazette
from gazette.client.aio import AsyncClient
from gazette.consumer.client import AsyncShardClient
from gazette.examples import wordcount

J = "keepalive/journal"


def test_a_call_on_a_silently_cut_connection_fails_over_to_the_next_broker(make_local_cluster) -> None:
    cluster = make_local_cluster(brokers=1)
    cluster.client().apply_journals([cluster.journal_spec(J, replication=1)])
    cluster.wait_for_routes([J])
    direct = cluster.brokers[0].endpoint
    port = int(direct.rsplit(":", 1)[1])

    async def main() -> tuple[int, int, str]:
        hole = BlackHole(port)
        await hole.start()
        # Through the hole first; the same broker directly second (as another broker of a cluster).
        client = AsyncClient(f"http://127.0.0.1:{hole.port},{direct}", timeout=30, keepalive=1)
        try:
            first = await client.append(J, b"before the cut\n")
            assert client.endpoint.endswith(f":{hole.port}")
            hole.cut()  # the open connection goes silent both ways; nothing tells the client
            # Unanswered pings end the connection within 2 s; the append is tried on the next broker.
            second = await client.append(J, b"after the cut\n")
            return first.end, second.begin, client.endpoint
        finally:
            await client.close()
            await hole.close()

    first_end, second_begin, endpoint = asyncio.run(main())
    assert second_begin == first_end and endpoint == direct
    assert cluster.client().read_all(J) == b"before the cut\nafter the cut\n"  # the cut lost nothing


def test_a_shard_call_on_a_silently_cut_connection_fails_over_to_the_next_member(
    make_local_cluster, tmp_path
) -> None:
    cluster = make_local_cluster(brokers=1)
    cluster.client().apply_journals(wordcount.journals(1, store=cluster.store))
    group = cluster.run_consumer(wordcount.WordCount(str(tmp_path)), wordcount.shards(1))
    group.wait_for_primaries(60)
    direct = group.members[0].endpoint
    port = int(direct.rsplit(":", 1)[1])

    async def main() -> list[str]:
        hole = BlackHole(port)
        await hole.start()
        shards = AsyncShardClient([f"http://127.0.0.1:{hole.port}", direct], timeout=30, keepalive=1)
        try:
            await shards.list_shards()
            hole.cut()
            listed = await shards.list_shards()  # through the member's own address, once the pings fail
            return [s.spec.id for s in listed]
        finally:
            await shards.close()
            await hole.close()

    assert asyncio.run(main()) == ["count-000"]


@pytest.mark.parametrize("bad", [0, 0.5, -1, True, "2"])
def test_a_keepalive_gazette_py_servers_would_refuse_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="keepalive .* is not a number of seconds >= 1"):
        gazette.connect(broker="http://127.0.0.1:1", keepalive=bad)
    with pytest.raises(ValueError, match="keepalive .* is not a number of seconds >= 1"):
        AsyncShardClient("http://127.0.0.1:1", keepalive=bad)


def test_local_cluster_pings_only_where_every_broker_dialed_is_ours() -> None:
    """Gazette's Go brokers keep gRPC's default enforcement (no pings more often than every 5
    minutes) and answered the 2 s pings of a mixed cluster's clients with GOAWAY too_many_pings."""
    from gazette.local.cluster import LocalCluster, _BrokerHandle
    from gazette.protocol.endpoints import PEER_KEEPALIVE_S

    ours, theirs = (
        _BrokerHandle(0, "local", "broker-0"),
        _BrokerHandle(1, "local", "broker-1", kind="gazette"),
    )
    assert LocalCluster._keepalive([ours]) == PEER_KEEPALIVE_S
    assert LocalCluster._keepalive([theirs]) is None
    assert LocalCluster._keepalive([ours, theirs]) is None
