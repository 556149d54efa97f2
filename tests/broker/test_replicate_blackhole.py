"""A primary cut off from its replica by a partition that drops packets (no reset, no FIN) must not
leave the replica's Replicate handler holding the spool for good: the replica's server pings its
clients, finds the connection dead within seconds, and the spool goes back to its slot, so the
journal takes appends again (the chaos soak stalled on this after partitions between brokers)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
from blackhole import BlackHole

from gazette.broker.proxy import REPLICATE_METHOD
from gazette.client.loop import default_loop
from gazette.local import LocalCluster
from gazette.protocol import broker_pb2 as pb

J = "examples/blackhole/part-000"
BOUND_S = 30.0  # far above the servers' keepalive (2 s) plus its timeout (4 s)


def _released(replica) -> bool:  # type: ignore[no-untyped-def]
    """The spool is back in its slot, or in a pipeline built since (a pulse's)."""
    if replica.spool_slot.qsize():
        return True
    pipeline = replica.pipeline_slot._queue[0] if replica.pipeline_slot.qsize() else None
    return pipeline is not None


def test_a_replicate_stream_cut_silently_releases_the_spool(etcd, etcd_root, tmp_path: Path) -> None:
    with LocalCluster(
        brokers=1, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint, root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as cluster:  # fmt: skip
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(J, replication=1)])
        cluster.wait_for_routes([J])
        broker = cluster.brokers[0].broker
        port = int(broker.endpoint.rsplit(":", 1)[1])
        loop = default_loop()

        async def hold_spool_then_cut() -> tuple[BlackHole, grpc.aio.Channel]:
            res = await broker.resolver.resolve(J, require_primary=False, may_proxy=False)
            replica = res.replica
            assert replica is not None
            hole = BlackHole(port)
            await hole.start()
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{hole.port}")
            stream = channel.stream_stream(
                REPLICATE_METHOD,
                request_serializer=lambda b: b,
                response_deserializer=pb.ReplicateResponse.FromString,
            )()
            first = pb.ReplicateRequest(
                header=res.header, proposal=pb.Fragment(journal=J, begin=0, end=0), registers=pb.LabelSet(),
                acknowledge=True,
            )  # fmt: skip
            await stream.write(first.SerializeToString())
            await stream.read()  # the handler holds the spool from here (an idle pipeline was shut down)
            assert not _released(replica)
            hole.cut()
            return hole, channel

        hole, channel = loop.run(hold_spool_then_cut(), timeout=30)
        try:

            async def spool_back() -> float:
                res = await broker.resolver.resolve(J, require_primary=False, may_proxy=False)
                started = time.monotonic()
                while not _released(res.replica):
                    assert time.monotonic() - started < BOUND_S, "the cut stream still holds the spool"
                    await asyncio.sleep(0.1)
                return time.monotonic() - started

            loop.run(spool_back(), timeout=BOUND_S + 10)
            res = client.append(J, b"after the cut\n", timeout=BOUND_S)
            assert client.read_all(J) == b"after the cut\n" and res.end == len(b"after the cut\n")
        finally:
            loop.run(channel.close(None), timeout=10)
            loop.run(hole.close(), timeout=10)
