"""Consumers under auth keys and TLS: the Shard service verifies Gazette's tokens (refusing, narrowing),
members sign their journal calls and the calls they proxy to each other, and a subprocess group
runs the word count over mutual TLS with a member killed half way."""

from __future__ import annotations

import base64
import dataclasses
import os
import time
from collections import Counter

import grpc
import pytest

from gazette.auth.tls import sync_channel
from gazette.auth.tokens import Capability, Claims, KeyedAuth
from gazette.consumer import ShardSpec
from gazette.consumer.client import ShardClient
from gazette.examples import wordcount
from gazette.local.cluster import LocalCluster
from gazette.protocol import shard_pb2, shard_pb2_grpc
from gazette.protocol.errors import GazetteError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector

KEYS = base64.b64encode(b"consumer-auth-test-key").decode()


@pytest.fixture
def auth_cluster(etcd, etcd_root, tmp_path):
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=1, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint,
        root=f"{etcd_root}/brokers", data_dir=str(tmp_path / "data"), lease_ttl_s=3, auth_keys=KEYS,
    ) as c:  # fmt: skip
        yield c


def test_the_shard_service_verifies_and_narrows_tokens(auth_cluster, tmp_path) -> None:
    client = auth_cluster.client()
    client.apply_journals(wordcount.journals(2, store=auth_cluster.store))
    auth_cluster.wait_for_routes()
    os.makedirs(tmp_path / "db")
    group = auth_cluster.run_consumer(wordcount.WordCount(str(tmp_path / "db")), shards=wordcount.shards(2))
    shards = group.client()
    group.wait_for_primaries()
    assert {i.spec.id for i in shards.list_shards()} == {"count-000", "count-001"}
    endpoint = group.members[0].endpoint

    with ShardClient(endpoint, timeout=10) as anonymous:
        with pytest.raises(GazetteError) as refused:
            anonymous.list_shards()
        assert "UNAUTHENTICATED: missing or empty Authorization token" in refused.value.message
        with pytest.raises(GazetteError) as refused:
            anonymous.apply_shards([ShardSpec(id="count-999", sources=[wordcount.words_journal(0)])])
        assert "UNAUTHENTICATED" in refused.value.message
    with ShardClient(endpoint, timeout=10, auth_keys=base64.b64encode(b"wrong").decode()) as forged:
        with pytest.raises(GazetteError) as refused:
            forged.delete_shards(["count-000"])
        assert "token signature is invalid: signature is invalid" in refused.value.message
    assert {i.spec.id for i in shards.list_shards()} == {"count-000", "count-001"}  # nothing changed

    # A token for count-000 alone: count-001 is not listed, not found to Stat and GetHints, and an
    # Apply or Unassign naming it is refused whole.
    now = int(time.time())
    narrow = KeyedAuth(KEYS).sign(
        Claims(
            Capability.ALL, LabelSelector(include=[("id", "count-000")]), expires_at=now + 600, issued_at=now
        )
    )
    md = (("authorization", f"Bearer {narrow}"),)
    with sync_channel(endpoint, None) as channel:
        stub = shard_pb2_grpc.ShardStub(channel)
        listed = stub.List(shard_pb2.ListRequest(), metadata=md, timeout=10)
        assert [s.spec.id for s in listed.shards] == ["count-000"]
        stat = stub.Stat(shard_pb2.StatRequest(shard="count-001"), metadata=md, timeout=10)
        assert shard_pb2.Status.Name(stat.status) == "SHARD_NOT_FOUND"
        stat = stub.Stat(shard_pb2.StatRequest(shard="count-000"), metadata=md, timeout=10)
        assert shard_pb2.Status.Name(stat.status) == "OK"
        hints = stub.GetHints(shard_pb2.GetHintsRequest(shard="count-001"), metadata=md, timeout=10)
        assert shard_pb2.Status.Name(hints.status) == "SHARD_NOT_FOUND"
        spec = next(i.spec for i in shards.list_shards() if i.spec.id == "count-001")
        changed = dataclasses.replace(spec, labels=LabelSet({"touched": "yes"})).to_proto()
        for call, request in (
            (stub.Apply, shard_pb2.ApplyRequest(changes=[shard_pb2.ApplyRequest.Change(upsert=changed, expect_mod_revision=-1)])),
            (stub.Unassign, shard_pb2.UnassignRequest(shards=["count-000", "count-001"])),
        ):  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                call(request, metadata=md, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert refused.value.details() == "not authorized to count-001"
    infos = {i.spec.id: i for i in shards.list_shards()}
    assert infos["count-001"].spec.labels.value_of("touched") is None
    assert all(i.primary is not None for i in infos.values())  # neither was unassigned


def test_word_count_runs_in_subprocesses_over_mutual_tls_with_auth(tmp_path) -> None:
    with LocalCluster(
        brokers=2, mode="subprocess", auth_keys=KEYS, tls=True, data_dir=str(tmp_path / "cluster"), lease_ttl_s=3
    ) as cluster:  # fmt: skip
        assert all(e.startswith("https://") for e in cluster.broker_endpoints)
        words = [f"w{i % 7}" for i in range(300)]
        os.makedirs(tmp_path / "db")
        counts = wordcount.run(
            cluster, words, partitions=2, kill_consumer_at=0.5, db_dir=str(tmp_path / "db")
        )
        assert counts == dict(Counter(words))
        group = cluster._consumer_groups[-1]
        assert all(m.endpoint.startswith("https://") for m in group.members)
