"""Replication across in-process brokers: the pipeline, route advertisement, proxying, hand-off.

Each test starts its own LocalCluster of four brokers in two zones (one spare, so a graceful exit
can drain); SIGKILL and SIGSTOP scenarios live in tests/faults/ (subprocesses).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import pytest

from gazette.allocator.journals import route_equivalent
from gazette.broker.replicate import apply_replicate
from gazette.fragment.fragment import ZERO_SUM, Codec, Fragment
from gazette.fragment.spool import Spool
from gazette.keyspace import layout
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.labels import LabelSet
from gazette.testing import wait_for

J = "replicated/journal/one"


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=4, mode="inprocess", zones=("a", "b"), store=f"file://{tmp_path}/store/", etcd=etcd.endpoint,
        root=etcd_root, data_dir=str(tmp_path / "data"), lease_ttl_s=5,
    ) as c:  # fmt: skip
        yield c


def _route(client, journal=J):
    (info,) = client.list_journals(f"name={journal}")
    return info.route


def _raw_append(
    cluster: LocalCluster, endpoint: str, content: bytes, do_not_proxy: bool = False
) -> pb.AppendResponse:
    """One Append RPC without the client's retries."""

    async def call():
        async with grpc.aio.insecure_channel(endpoint.removeprefix("http://")) as ch:

            async def reqs():
                yield pb.AppendRequest(journal=J, do_not_proxy=do_not_proxy)
                yield pb.AppendRequest(content=content)
                yield pb.AppendRequest()

            return await pb_grpc.JournalStub(ch).Append(reqs())

    return cluster._loop.run(call())


def _replica(cluster: LocalCluster, member: tuple[str, str], journal=J):
    broker = next(h.broker for h in cluster.brokers if h.broker is not None and (h.zone, h.suffix) == member)
    return broker.replicas.get(journal)


def _advertised(cluster: LocalCluster, journal=J) -> bool:
    """Every assignment value holds the route its keys give (reference 12, item 2)."""
    ks = next(h.broker for h in cluster.brokers if h.broker is not None).ks
    kvs = ks.prefixed(layout.item_assign_prefix(ks.root, journal))
    route = pb.Route(primary=-1)
    for kv in kvs:
        key = layout.parse_assignment_key(ks.root, kv.key)
        if key.slot == 0:
            route.primary = len(route.members)
        route.members.add(zone=key.zone, suffix=key.suffix)
    return bool(kvs) and all(route_equivalent(kv.decoded, route) for kv in kvs)


def test_appends_land_identically_on_every_replica_across_zones(cluster):
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(J, replication=3)])
    cluster.wait_for_routes([J])
    route = _route(client)
    assert len(route.members) == 3 and {z for z, _ in route.members} == {"a", "b"}  # zone spread
    records = [b"record %03d\n" % i for i in range(50)]
    for r in records:
        client.append(J, r)
    assert client.read_all(J) == b"".join(records)
    fragments = {_replica(cluster, m).spool.fragment for m in route.members}
    assert len(fragments) == 1, fragments  # same begin, end, SHA1 and codec on all three
    (frag,) = fragments
    assert frag.end == sum(map(len, records))
    wait_for("the primary to advertise its route in every assignment", lambda: _advertised(cluster))


def test_non_primary_proxies_unless_told_not_to(cluster):
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(J, replication=2)])
    cluster.wait_for_routes([J])
    route = _route(client)
    primary = route.primary_id
    other = next(h for h in cluster.brokers if (h.zone, h.suffix) != primary)
    from gazette import connect

    with connect(broker=other.endpoint) as via_other:
        res = via_other.append(J, b"proxied\n")
    assert (res.begin, res.end) == (0, 8)

    resp = _raw_append(cluster, other.endpoint, b"x", do_not_proxy=True)
    assert resp.status == pb.NOT_JOURNAL_PRIMARY_BROKER
    assert (resp.header.process_id.zone, resp.header.process_id.suffix) == (other.zone, other.suffix)
    assert client.read_all(J) == b"proxied\n"  # the refused append left nothing behind


def test_graceful_exit_of_the_primary_hands_off_without_loss(cluster):
    cluster.client().apply_journals([cluster.journal_spec(J, replication=3)])
    cluster.wait_for_routes([J])
    old = _route(cluster.client()).primary_id
    index = next(h.index for h in cluster.brokers if (h.zone, h.suffix) == old)
    survivor = next(h for h in cluster.brokers if h.index != index)
    from gazette import connect

    client = connect(broker=survivor.endpoint)  # stays connected to a broker that does not exit
    client.append(J, b"before\n", union_registers={"owner": "one"})
    cluster.stop_broker(index)
    route = wait_for(
        "the route to move off the exiting broker",
        lambda: (r := _route(client)).primary >= 0 and old not in r.members and len(r.members) == 3 and r,
    )
    res = client.append(J, b"after\n", check_registers="owner=one")  # registers survived the hand-off
    assert res.begin == len(b"before\n")
    assert res.registers == LabelSet({"owner": "one"})
    assert client.read_all(J) == b"before\nafter\n"
    assert route.primary_id != old
    client.close()


def test_flush_rolls_every_replica_and_persists(cluster):
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(J, replication=3)])
    cluster.wait_for_routes([J])
    client.append(J, b"one\n")
    client.append(J, b"two\n")
    persisted = client.flush(J)
    assert persisted is not None and persisted.end == 8
    for member in _route(client).members:
        frag = _replica(cluster, member).spool.fragment
        assert (frag.begin, frag.end) == (8, 8)  # the roll reached every peer through the pipeline
    assert [(f.begin, f.end) for f in client.list_fragments(J) if f.backing_store][-1:] == [
        (persisted.begin, 8)
    ]


def test_too_few_brokers_for_the_replication_is_refused(cluster):
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(J, replication=5)])  # only four brokers
    wait_for("the allocator to assign every broker", lambda: len(_route(client).members) == 4)
    resp = _raw_append(cluster, cluster.brokers[0].endpoint, b"nope\n")  # the client would retry
    assert resp.status == pb.INSUFFICIENT_JOURNAL_BROKERS
    assert client.read_all(J) == b""


def test_replicate_requests_follow_the_proposal_rules():
    """A replica's answer to proposals (reference 3.7, 12 item 1): a mismatch carries its fragment
    and registers; content must come with the delta it extends."""
    spool = Spool("a/journal", _NullObserver())
    regs = LabelSet({"k": "v"})
    roll = Fragment(journal="a/journal", begin=5, end=5, sum=ZERO_SUM, codec=Codec.NONE)  # adopts registers
    assert (
        apply_replicate(
            spool, pb.ReplicateRequest(proposal=roll.to_proto(), registers=regs.to_proto())
        ).status
        == pb.OK
    )
    assert apply_replicate(spool, pb.ReplicateRequest(content=b"abc", content_delta=0)).status == pb.OK
    bad = Fragment(journal="a/journal", begin=5, end=8, sum=b"\x01" * 20, codec=Codec.NONE)
    resp = apply_replicate(spool, pb.ReplicateRequest(proposal=bad.to_proto(), registers=regs.to_proto()))
    assert resp.status == pb.PROPOSAL_MISMATCH
    assert Fragment.from_proto(resp.fragment) == roll and LabelSet.from_proto(resp.registers) == regs
    with pytest.raises(Exception, match="content_delta"):
        apply_replicate(spool, pb.ReplicateRequest(content=b"d", content_delta=7))
    with pytest.raises(Exception, match="registers"):
        apply_replicate(spool, pb.ReplicateRequest(proposal=roll.to_proto()))


class _NullObserver:
    def on_commit(self, fragment, file) -> None:
        pass

    def on_complete(self, completed) -> None:
        completed.file.close()
