"""The Shard service (Gazette's consumer.Shard) and ShardClient against in-process consumers on a real
broker and etcd: list and apply (compare-and-swap, validation at the server, primary hints),
get_hints, stat blocking until read-through (also proxied from a non-primary member, with the
forwarder's header), inspect after transactions (gazette_py.Shards), unassign moving the primary."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest

from gazette.consumer import (
    Application,
    MemoryStore,
    ReplicaCode,
    Shard,
    ShardChange,
    ShardClient,
    ShardInfo,
    ShardSpec,
    ShardSpecError,
    ShardTimeoutError,
)
from gazette.message import Envelope, Publisher
from gazette.protocol import broker_pb2, shard_pb2, shard_pb2_grpc
from gazette.protocol.endpoints import grpc_target
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import ShardStatus, Status

JSON = {"content-type": "application/x-ndjson"}
INPUT = "tests/service/input"
OUTPUT = "tests/service/output"


class Echo(Application):
    """Keeps consumed numbers in a MemoryStore and republishes each (uncommitted) to OUTPUT.
    A message {"n": n, "hold": true} blocks its transaction until `gate` is set; the first message
    {"n": n, "fail": true} fails the shard."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.failed = threading.Event()

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        if env.message.get("hold"):
            self.gate.wait()
        if env.message.get("fail") and not self.failed.is_set():
            self.failed.set()
            raise ValueError("asked to fail once")
        store.state.setdefault("seen", []).append(env.message["n"])
        pub.publish_uncommitted(OUTPUT, {"n": env.message["n"]})


def _journals(cluster) -> None:
    cluster.client().apply_journals(
        [
            JournalSpec(name=INPUT, replication=1, labels=JSON),
            JournalSpec(name=OUTPUT, replication=1, labels=JSON),
            JournalSpec(name="tests/service/plain", replication=1),
            JournalSpec(
                name="tests/service/octets",
                replication=1,
                labels={"content-type": "application/octet-stream"},
            ),
        ]
    )
    cluster.wait_for_routes()


def _publish(client, values: list[dict[str, Any]]) -> int:
    pub = Publisher(client)
    try:
        for v in values:
            pub.publish_committed(INPUT, v)
        pub.flush()
    finally:
        pub.close()
    return client.read_head(INPUT)


def _placed(shard_id: str, codes: list[ReplicaCode]):
    def check(shards: list[ShardInfo]) -> bool:
        info = next((s for s in shards if s.spec.id == shard_id), None)
        return info is not None and [r.status.code for r in info.replicas] == codes

    return check


def test_list_and_apply_with_compare_and_swap_and_validation(cluster) -> None:
    _journals(cluster)
    group = cluster.run_consumer(Echo(), [], processes=1)
    shards = group.client()
    assert shards.list_shards() == []

    spec = ShardSpec("echo-000", [INPUT], max_txn_duration="50ms", labels={"team": "a"})
    rev = shards.apply_shards([ShardChange(upsert=spec, expect_mod_revision=0)])
    (info,) = shards.list_shards()
    assert info.spec == spec and info.mod_revision == rev
    # Creating it again (expect "must not exist") and a stale revision both fail the CAS.
    with pytest.raises(GazetteError) as exc:
        shards.apply_shards([ShardChange(upsert=spec, expect_mod_revision=0)])
    assert (
        exc.value.status == ShardStatus.ETCD_TRANSACTION_FAILED
        and exc.value.status.name == "ETCD_TRANSACTION_FAILED"
    )
    assert exc.value.status != Status.ETCD_TRANSACTION_FAILED  # the broker's is another status (9, not 4)
    assert exc.value.status != Status.INSUFFICIENT_JOURNAL_BROKERS  # nor is its number's broker status
    edited = ShardSpec("echo-000", [INPUT], max_txn_duration="80ms", labels={"team": "b"})
    rev2 = shards.apply_shards([ShardChange(upsert=edited, expect_mod_revision=rev)])
    with pytest.raises(GazetteError) as exc:
        shards.apply_shards([ShardChange(upsert=spec, expect_mod_revision=rev)])
    assert exc.value.status == ShardStatus.ETCD_TRANSACTION_FAILED
    (info,) = shards.list_shards()
    assert info.spec.max_txn_duration == 0.08 and info.mod_revision == rev2

    # Selectors match labels and the `id` meta-label.
    other = ShardSpec("other-000", [INPUT], max_txn_duration="1s", disable=True)
    shards.apply_shards([other])
    assert [s.spec.id for s in shards.list_shards("team=b")] == ["echo-000"]
    assert [s.spec.id for s in shards.list_shards("id=other-000")] == ["other-000"]
    assert [s.spec.id for s in shards.list_shards("!team")] == ["other-000"]

    # Sources need an existing journal whose content type has a registered framing.
    for source, message in [
        (
            "tests/service/plain",
            'journal "tests/service/plain" (source of shard "bad-000") has no content-type label',
        ),
        ("tests/service/octets", '"application/octet-stream", which has no registered framing'),
        (
            "tests/service/missing",
            'journal "tests/service/missing" (source of shard "bad-000") does not exist',
        ),
    ]:
        with pytest.raises(ShardSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
            shards.apply_shards([ShardSpec("bad-000", [INPUT, source], max_txn_duration="1s")])
    assert "bad-000" not in [s.spec.id for s in shards.list_shards()]

    # The server validates what it is sent, whatever the client did.
    channel = grpc.insecure_channel(grpc_target(group.endpoint(0)))
    try:
        stub = shard_pb2_grpc.ShardStub(channel)
        bad = shard_pb2.ApplyRequest(
            changes=[
                shard_pb2.ApplyRequest.Change(expect_mod_revision=-1, upsert=shard_pb2.ShardSpec(id="x"))
            ]
        )
        with pytest.raises(grpc.RpcError) as rpc_exc:
            stub.Apply(bad, timeout=10)
        assert rpc_exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "x" in rpc_exc.value.details() and "shard" in rpc_exc.value.details()
        both = shard_pb2.ApplyRequest(
            changes=[shard_pb2.ApplyRequest.Change(upsert=spec.to_proto(), delete="echo-000")]
        )
        with pytest.raises(grpc.RpcError, match="exactly one of upsert and delete"):
            stub.Apply(both, timeout=10)
        # List answers with Gazette's messages: the spec as consumer.ShardSpec, a route, a status each.
        listed = stub.List(
            shard_pb2.ListRequest(selector=LabelSelector.parse("id=echo-000").to_proto()), timeout=10
        )
        assert listed.status == shard_pb2.OK and listed.header.etcd.revision >= rev2 > 0
        (raw,) = listed.shards
        assert ShardSpec.from_proto(raw.spec) == edited and raw.mod_revision == rev2
        assert len(raw.route.members) == len(raw.status) == 1 and raw.route.primary == 0
        assert raw.status[0].code == shard_pb2.ReplicaStatus.PRIMARY and raw.route.endpoints[0]
    finally:
        channel.close()

    # Deletion by revision; unknown shards are SHARD_NOT_FOUND for stat, and not unassigned.
    shards.apply_shards([ShardChange(delete="other-000", expect_mod_revision=-1)])
    with pytest.raises(GazetteError) as exc:
        shards.apply_shards([ShardChange(delete="echo-000", expect_mod_revision=rev)])
    assert exc.value.status == ShardStatus.ETCD_TRANSACTION_FAILED
    shards.apply_shards([ShardChange(delete="echo-000", expect_mod_revision=rev2)])
    assert shards.list_shards() == []
    with pytest.raises(GazetteError) as exc:
        shards.stat_shard("echo-000", timeout=10)
    assert exc.value.status == ShardStatus.SHARD_NOT_FOUND and "SHARD_NOT_FOUND" in str(exc.value)
    assert exc.value.status != Status.JOURNAL_NOT_FOUND  # both are 1, in different enums
    assert shards.unassign("nope-000") == []  # no assignments: nothing to remove
    with pytest.raises(GazetteError) as exc:
        shards.get_hints("echo-000")
    assert exc.value.status == ShardStatus.SHARD_NOT_FOUND
    with pytest.raises(ValidationError, match='deleting shard "echo-000" needs its mod revision'):
        ShardChange(delete="echo-000", expect_mod_revision=0)


def test_stat_blocks_until_read_through_and_inspect_reports_progress(cluster) -> None:
    _journals(cluster)
    client = cluster.client()
    app = Echo()
    spec = ShardSpec("echo-000", [INPUT], max_txn_duration="50ms", hot_standbys=1)
    group = cluster.run_consumer(app, [spec], processes=2)
    (info,) = group.wait_for(_placed("echo-000", [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]), 60, "placement")
    shards = group.client()

    head = _publish(client, [{"n": n} for n in range(5)])
    stat = shards.stat_shard("echo-000", {INPUT: head, "tests/not/a-source": 1 << 40}, timeout=60)
    assert stat.read_through[INPUT] >= head
    assert stat.member == (info.replicas[0].zone, info.replicas[0].suffix)
    # Its outputs were acknowledged: a read-committed reader of OUTPUT through publish_at sees them.
    assert stat.publish_at[OUTPUT] > 0

    # A transaction held open: stat of its offsets cannot complete until it commits.
    app.gate.clear()
    held = _publish(client, [{"n": 5, "hold": True}])
    with pytest.raises(ShardTimeoutError):
        shards.stat_shard("echo-000", {INPUT: held}, timeout=1.0)
    done: list[Any] = []
    waiter = threading.Thread(
        target=lambda: done.append(shards.stat_shard("echo-000", {INPUT: held}, timeout=60))
    )
    waiter.start()
    app.gate.set()
    waiter.join(60)
    assert done and done[0].read_through[INPUT] >= held

    # Asked at the standby's member, Stat and Inspect are proxied to the primary's.
    standby = ShardClient(group.endpoint(int(info.replicas[1].suffix.split("-")[1])))
    try:
        proxied = standby.stat_shard("echo-000", {INPUT: held}, timeout=60)
        assert proxied.member == stat.member and proxied.read_through == done[0].read_through
        assert standby.stat_shard("echo-000").member == stat.member  # no deadline to pass on
        ins = standby.inspect("echo-000", timeout=60)
    finally:
        standby.close()
    assert ins.member == stat.member
    assert ins.checkpoint.read_through == ins.read_through == done[0].read_through

    # A request with a header was proxied already (Gazette's rule): the standby's member answers
    # NOT_SHARD_PRIMARY instead of proxying again, and refuses a header naming another member.
    primary, other = info.replicas
    channel = grpc.insecure_channel(
        grpc_target(other.endpoint or group.endpoint(int(other.suffix.split("-")[1])))
    )
    try:
        stub = shard_pb2_grpc.ShardStub(channel)
        to_standby = broker_pb2.Header(
            process_id=broker_pb2.ProcessSpec.ID(zone=other.zone, suffix=other.suffix)
        )
        resp = stub.Stat(shard_pb2.StatRequest(shard="echo-000", header=to_standby), timeout=10)
        assert resp.status == shard_pb2.NOT_SHARD_PRIMARY
        assert (resp.header.process_id.zone, resp.header.process_id.suffix) == (other.zone, other.suffix)
        to_primary = broker_pb2.Header(
            process_id=broker_pb2.ProcessSpec.ID(zone=primary.zone, suffix=primary.suffix)
        )
        with pytest.raises(grpc.RpcError, match="ProcessId doesn't match") as rpc_exc:
            stub.Stat(shard_pb2.StatRequest(shard="echo-000", header=to_primary), timeout=10)
        assert rpc_exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # Without a header it is proxied: the answer's header names the primary and its route.
        resp = stub.Stat(shard_pb2.StatRequest(shard="echo-000"), timeout=30)
        assert resp.status == shard_pb2.OK and resp.header.route.primary >= 0
        assert (resp.header.process_id.zone, resp.header.process_id.suffix) == stat.member
        assert len(resp.header.route.members) == 2 and resp.header.etcd.cluster_id != 0
    finally:
        channel.close()
    assert OUTPUT in ins.checkpoint.ack_intents and ins.publish_at[OUTPUT] >= stat.publish_at[OUTPUT]
    producers = [p for p in ins.checkpoint.sequencer.producers if p.journal == INPUT]
    assert len(producers) == 2  # each _publish is a new Publisher
    assert all(p.begin == -1 for p in producers)  # committed messages leave no open span
    assert ins.sequencer["ring"]["size"] == spec.effective_ring_buffer_size == 8192
    assert ins.sequencer["offsets"][INPUT] == held
    assert ins.queued == {"OUTSIDE_TXN/OUTSIDE_COMMIT": 6}
    assert ins.transactions_completed >= 2 and len(ins.transactions) == ins.transactions_completed
    assert sum(t.messages for t in ins.transactions) == 6
    assert all(
        t.began_at > 0 and t.consume_s >= 0 and t.commit_s >= 0 and t.ack_s >= 0 for t in ins.transactions
    )
    # The held transaction spent its consuming phase blocked on the gate, which stat could not pass.
    assert ins.transactions[-1].messages == 1 and ins.transactions[-1].consume_s >= 1.0

    # An uncommitted message (an open span, never acknowledged) commits nothing, yet an idle shard's
    # read-through moves past it, so a Stat of its offset does not hang.
    pub = Publisher(client)
    pub.publish_uncommitted(INPUT, {"n": 99})
    pub.flush()
    pub.close()
    open_span = client.read_head(INPUT)
    assert shards.stat_shard("echo-000", {INPUT: open_span}, timeout=60).read_through[INPUT] == open_span
    ins = shards.inspect("echo-000", timeout=60)
    assert ins.queued == {"OUTSIDE_TXN/OUTSIDE_COMMIT": 6, "CONTINUE_TXN/CONTINUE_BEGIN_SPAN": 1}
    assert sum(t.messages for t in ins.transactions) == 6  # nothing more was consumed
    assert ins.sequencer["pending"] == 1 and ins.checkpoint.read_through[INPUT] == held


def test_unassign_moves_the_primary_to_its_standby(cluster) -> None:
    _journals(cluster)
    spec = ShardSpec("echo-000", [INPUT], max_txn_duration="50ms", hot_standbys=1)
    group = cluster.run_consumer(Echo(), [spec], processes=2)
    (info,) = group.wait_for(_placed("echo-000", [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]), 60, "placement")
    old, standby = info.replicas
    shards = group.client()

    assert shards.unassign("echo-000", dry_run=True) == ["echo-000"]
    assert shards.unassign("echo-000", only_failed=True) == []  # nothing FAILED
    assert [(r.suffix, r.slot) for r in shards.list_shards()[0].replicas] == [
        (old.suffix, 0),
        (standby.suffix, 1),
    ]

    assert shards.unassign(["echo-000"]) == ["echo-000"]

    def moved(shards_: list[ShardInfo]) -> bool:
        reps = shards_[0].replicas
        return [(r.suffix, r.status.code) for r in reps] == [
            (standby.suffix, ReplicaCode.PRIMARY),
            (old.suffix, ReplicaCode.STANDBY),
        ]

    group.wait_for(moved, 60, "the standby to become PRIMARY and the old primary a STANDBY")
    # The old primary's member runs the shard as a standby now, not as a second primary.
    old_consumer = group.consumers[int(old.suffix.split("-")[1])]
    assert old_consumer is not None and not old_consumer.shards["echo-000"].is_primary
    head = _publish(cluster.client(), [{"n": 1}])
    stat = shards.stat_shard("echo-000", {INPUT: head}, timeout=60)
    assert stat.member == (standby.zone, standby.suffix) and stat.read_through[INPUT] >= head


def test_a_failed_primary_stops_stat_until_unassigned(cluster) -> None:
    _journals(cluster)
    spec = ShardSpec("echo-000", [INPUT], max_txn_duration="50ms")
    group = cluster.run_consumer(Echo(), [spec], processes=1)
    group.wait_for_primaries()
    shards = group.client()
    head = _publish(cluster.client(), [{"n": 1}, {"n": 2, "fail": True}, {"n": 3}])
    group.wait_for(_placed("echo-000", [ReplicaCode.FAILED]), 60, "the primary to fail")
    with pytest.raises(GazetteError) as exc:
        shards.stat_shard("echo-000", {INPUT: head}, timeout=60)
    assert exc.value.status == ShardStatus.SHARD_STOPPED
    assert "ValueError: asked to fail once" in str(exc.value) and "unassign --failed" in str(exc.value)

    assert shards.unassign("echo-000", only_failed=True) == ["echo-000"]
    group.wait_for(_placed("echo-000", [ReplicaCode.PRIMARY]), 60, "a new primary")
    assert shards.stat_shard("echo-000", {INPUT: head}, timeout=60).read_through[INPUT] == head
    assert shards.unassign("echo-000", only_failed=True) == []


def test_signals_to_consumers_need_subprocess_mode(cluster) -> None:
    _journals(cluster)
    cluster.run_consumer(Echo(), [], processes=1)
    with pytest.raises(GazetteError, match='needs LocalCluster\\(mode="subprocess"\\)'):
        cluster.pause_consumer(0)
    with pytest.raises(GazetteError, match="no consumer 3"):
        cluster.kill_consumer(3)
