"""The consumer key space in etcd is Gazette's: a running member writes protobuf values under
Gazette's keys, reads the JSON values an older gazette-py wrote (a transition), and never writes
JSON again; ShardClient's inspect says clearly when a member serves no gazette_py.Shards."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gazette.client.loop import default_loop
from gazette.consumer import Application, MemoryStore, ReplicaCode, Shard, ShardClient, ShardSpec
from gazette.keyspace.etcd import connect
from gazette.message import Envelope, Publisher
from gazette.protocol import shard_pb2
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import JournalSpec

SOURCE = "tests/keyspace/input"


class Count(Application):
    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if not env.is_ack:
            store.state["n"] = store.state.get("n", 0) + 1


def _etcd(endpoint: str, fn):
    async def run():
        client = connect(endpoint)
        try:
            return await fn(client)
        finally:
            await client.close()

    return default_loop().run(run())


def _get(endpoint: str, key: str) -> bytes:
    async def get(client):
        return bytes((await client.get(key.encode())).value)

    return _etcd(endpoint, get)


def _prefix(endpoint: str, prefix: str) -> dict[str, bytes]:
    async def get(client):
        return {kv.key.decode(): bytes(kv.value) for kv in await client.get_prefix(prefix.encode())}

    return _etcd(endpoint, get)


def test_values_written_as_json_before_are_read_and_replaced_by_protobuf(cluster) -> None:
    cluster.client().apply_journals(
        [JournalSpec(name=SOURCE, replication=1, labels={"content-type": "application/x-ndjson"})]
    )
    cluster.wait_for_routes()
    root = f"{cluster.root.rsplit('/', 1)[0]}/consumers/legacy"
    # A shard spec as gazette-py stored it before it spoke Gazette's protocol.
    legacy = {
        "id": "legacy-000", "sources": [{"journal": SOURCE, "min_offset": 0}], "max_txn_duration": "50ms",
        "min_txn_duration": "0s", "hot_standbys": 0, "disable": False, "disable_wait_for_ack": False,
        "ring_buffer_size": 8192, "read_channel_size": 8192, "labels": [["team", "a"]],
        "recovery_log_prefix": "", "hint_prefix": "", "hint_backups": 0,
    }  # fmt: skip
    item = f"{root}/items/legacy-000"
    _etcd(cluster.etcd_endpoint, lambda c: c.put(item.encode(), orjson.dumps(legacy)))

    group = cluster.run_consumer(Count(), [], processes=1, root=root)
    group.wait_for(
        lambda infos: [r.status.code for i in infos for r in i.replicas] == [ReplicaCode.PRIMARY],
        60,
        "the legacy shard's PRIMARY",
    )
    shards = group.client()
    (info,) = shards.list_shards()  # through the Shard service: as consumer.ShardSpec
    expected = ShardSpec("legacy-000", [SOURCE], max_txn_duration="50ms", labels={"team": "a"},
                         ring_buffer_size=8192, read_channel_size=8192)  # fmt: skip
    assert info.spec == expected

    # The member and its assignment were written as Gazette's messages under Gazette's keys.
    (member_key, member) = next(iter(_prefix(cluster.etcd_endpoint, f"{root}/members/").items()))
    spec = shard_pb2.ConsumerSpec.FromString(member)
    primary = info.primary
    assert member_key == f"{root}/members/{primary.zone}#{primary.suffix}"
    assert (spec.process_spec.id.zone, spec.process_spec.id.suffix) == (primary.zone, primary.suffix)
    assert spec.process_spec.endpoint == primary.endpoint and spec.shard_limit > 0
    (assign_key, status) = next(iter(_prefix(cluster.etcd_endpoint, f"{root}/assign/").items()))
    assert assign_key == f"{root}/assign/legacy-000#{primary.zone}#{primary.suffix}#0"
    assert shard_pb2.ReplicaStatus.FromString(status).code == shard_pb2.ReplicaStatus.PRIMARY
    # The JSON spec stays until it is written again, then it is protobuf too.
    assert _get(cluster.etcd_endpoint, item)[:1] == b"{"
    shards.apply_shards([info.spec])
    assert ShardSpec.from_proto(shard_pb2.ShardSpec.FromString(_get(cluster.etcd_endpoint, item))) == expected
    assert [i.spec for i in group.list_shards()] == [expected]


def test_inspect_of_a_member_without_gazette_py_shards_says_so(cluster) -> None:
    """A broker serves no gazette_py.Shards, as a Gazette consumer does not: UNIMPLEMENTED, named."""
    with ShardClient(cluster.broker_endpoints[0]) as client:
        with pytest.raises(GazetteError, match="not a gazette-py consumer") as exc:
            client.inspect("count-000", timeout=30)
    assert "gazette_py.Shards/Inspect" in str(exc.value)
