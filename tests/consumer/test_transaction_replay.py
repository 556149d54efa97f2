"""The transaction loop's replay read on a real broker: with a ring of two envelopes, a transaction
whose span another producer's messages pushed out of the ring is read back from the journal when its
ACK arrives (ACK_COMMIT_REPLAY), and every message is consumed exactly once, each producer's in order,
with a deferral in the middle of the replayed span carried into the next transaction."""

from __future__ import annotations

from typing import Any

from gazette.consumer import (
    Application,
    ConsumerCheckpoint,
    DeferToNextTransaction,
    Hooks,
    MemoryStore,
    Shard,
    ShardSpec,
)
from gazette.message import Envelope, Publisher
from gazette.protocol.spec import JournalSpec

JSON = {"content-type": "application/x-ndjson"}
INPUT = "tests/txn-replay/input"
WAIT_S = 60.0


class Record(Application):
    """Records each transaction's messages; defers the message marked "boundary" once, unless it is
    the first of its transaction."""

    def __init__(self) -> None:
        self.txns: list[list[str]] = []
        self.deferred: list[str] = []

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def begin_txn(self, shard: Shard, store: Any) -> None:
        self.txns.append([])

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        name = env.message["name"]
        if env.message.get("boundary") and self.txns[-1] and name not in self.deferred:
            self.deferred.append(name)
            raise DeferToNextTransaction()
        self.txns[-1].append(name)


def test_a_span_evicted_from_the_ring_is_replayed_and_consumed_once(cluster) -> None:
    app = Record()
    checkpoints: list[ConsumerCheckpoint] = []

    def ack_gate(shard: Shard, checkpoint: ConsumerCheckpoint) -> bool:
        checkpoints.append(checkpoint)
        return True

    client = cluster.client()
    client.apply_journals([JournalSpec(name=INPUT, replication=1, labels=JSON)])
    cluster.wait_for_routes()
    spec = ShardSpec("replay-000", [INPUT], min_txn_duration="1s", max_txn_duration="10s", ring_buffer_size=2)
    group = cluster.run_consumer(app, [spec], hooks=Hooks(ack_gate=ack_gate))
    group.wait_for_primaries()

    txn, other = Publisher(client), Publisher(client)
    for i in range(4):
        txn.publish_uncommitted(INPUT, {"name": f"t{i}", "boundary": i == 2})
    txn.flush()
    for i in range(3):  # committed on their own: they push the open span out of the ring of two
        other.publish_committed(INPUT, {"name": f"o{i}"})
    other.flush()
    txn.commit()
    txn.close()
    other.close()

    head = client.read_head(INPUT)
    stat = group.client().stat_shard("replay-000", {INPUT: head}, timeout=WAIT_S)
    assert stat.read_through[INPUT] >= head
    consumed = [name for t in app.txns for name in t]
    assert consumed == ["o0", "o1", "o2", "t0", "t1", "t2", "t3"]  # each once; the span on its ACK
    assert app.deferred == ["t2"]
    assert any(t and t[0] == "t2" for t in app.txns)  # the deferral opened the next transaction
    ins = group.client().inspect("replay-000", timeout=WAIT_S)
    assert ins.queued.get("ACK_TXN/ACK_COMMIT_REPLAY") == 1, ins.queued
    assert ins.sequencer["replayed"].get(INPUT, 0) >= 3
