"""Bounded shard calls: every ShardClient call takes `timeout=` (the client's default unless given)
and gives up with ShardTimeoutError, a `gazette.CallTimeout`, naming the shard, the consumer member
asked and the last status: members that do not answer, a primary that never comes, no members in
etcd. Time bounds are generous ceilings only."""

from __future__ import annotations

import time

import grpc
import pytest

import gazette
from gazette.consumer.client import AsyncShardClient, ShardClient, ShardTimeoutError
from gazette.protocol import shard_pb2, shard_pb2_grpc
from gazette.protocol.errors import GazetteError

DEAD = "http://127.0.0.1:9"  # nothing listens there


def test_shard_timeout_error_is_a_call_timeout() -> None:
    assert issubclass(ShardTimeoutError, gazette.CallTimeout)
    assert issubclass(ShardTimeoutError, TimeoutError) and issubclass(ShardTimeoutError, GazetteError)


def test_default_timeout_bounds_every_call_to_unanswering_members() -> None:
    with ShardClient(DEAD, timeout=1) as client:
        assert client.timeout == 1
        started = time.monotonic()
        with pytest.raises(ShardTimeoutError) as info:
            client.list_shards()
        assert time.monotonic() - started < 30
        assert str(info.value).startswith(
            f"listing of shards timed out after 1 s (consumer {DEAD}, last status UNAVAILABLE"
        )
        with pytest.raises(
            ShardTimeoutError,
            match=r"^stat of shard shard-1 \(read_through \{'ex/words': 5\}\) timed out after 1 s",
        ):
            client.stat_shard("shard-1", {"ex/words": 5})
        with pytest.raises(ShardTimeoutError, match=r"^inspect of shard shard-1 timed out after 0.5 s"):
            client.inspect("shard-1", timeout=0.5)  # a call's own timeout wins
        with pytest.raises(ShardTimeoutError, match=r"^unassign of shard-1 timed out"):
            client.unassign("shard-1")
    with pytest.raises(ValueError, match="is not a positive number of seconds"):
        ShardClient(DEAD, timeout=0)


class _NoPrimary(shard_pb2_grpc.ShardServicer):
    """A consumer member whose shard never gets a primary."""

    async def Stat(self, request, context):  # noqa: ANN001, ANN201, N802
        return shard_pb2.StatResponse(status=shard_pb2.NO_SHARD_PRIMARY)


async def test_a_primary_that_never_comes_times_out_with_the_last_status() -> None:
    server = grpc.aio.server()
    shard_pb2_grpc.add_ShardServicer_to_server(_NoPrimary(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with AsyncShardClient(f"http://127.0.0.1:{port}", timeout=1.5) as client:
            with pytest.raises(ShardTimeoutError) as info:
                await client.stat_shard("shard-2")
    finally:
        await server.stop(None)
    err = info.value
    assert str(err) == (
        f"stat of shard shard-2 timed out after 1.5 s (consumer http://127.0.0.1:{port}, "
        "last status NO_SHARD_PRIMARY)"
    )
    assert err.subject == "shard-2" and err.endpoint == f"http://127.0.0.1:{port}"


def test_no_members_in_etcd_times_out_saying_so(etcd, etcd_root) -> None:
    with ShardClient(etcd=etcd.endpoint, root=etcd_root, timeout=1) as client:
        with pytest.raises(ShardTimeoutError) as info:
            client.list_shards()
    assert "timed out after 1 s" in str(info.value)
    assert f'no consumer member under "{etcd_root}" announces a Shard service endpoint' in str(info.value)
