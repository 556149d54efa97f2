"""SequencerView and CheckpointView over a running shard's Inspect: a commit moves the checkpoint's
read-through offset and the transaction count, also under auto-refresh."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gazette.client.sync import Client
from gazette.consumer import Application, MemoryStore, Shard, ShardSpec
from gazette.message import Envelope, Publisher
from gazette.notebook import CheckpointView, SequencerView
from gazette.protocol.errors import GazetteError

SHARD = "nb-count-000"
DEADLINE_S = 30.0
STAT_TIMEOUT_S = 60.0


class Count(Application):
    """Counts the non-ACK messages it consumes."""

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if not env.is_ack:
            store.state["count"] = store.state.get("count", 0) + 1


def _publish(client, journal: str, n: int) -> int:
    with Publisher(client) as pub:
        futures = [pub.publish_committed(journal, {"n": i}) for i in range(n)]
        pub.flush()
    return max(f.result().end for f in futures)


def test_checkpoint_and_sequencer_views_follow_a_shards_commits(magics, journal) -> None:
    client = magics.client
    with pytest.raises(GazetteError, match=r"cluster.run_consumer"):
        magics.cluster.client().stat_shard(SHARD)
    group = magics.cluster.run_consumer(Count(), [ShardSpec(SHARD, [journal], max_txn_duration="50ms")])
    shards = group.client()
    head = _publish(client, journal, 3)
    shards.stat_shard(SHARD, {journal: head}, timeout=STAT_TIMEOUT_S)
    # The cluster's journal client answers shard calls too (API.md: client.stat_shard,
    # CheckpointView(client, shard)), through the group's ShardClient.
    journal_client = magics.cluster.client()
    assert (
        journal_client.stat_shard(SHARD, {journal: head}, timeout=STAT_TIMEOUT_S).read_through[journal]
        >= head
    )
    assert CheckpointView(journal_client, SHARD).offsets[journal] == head
    assert [info.spec.id for info in journal_client.list_shards()] == [SHARD]

    cp = CheckpointView(shards, SHARD)
    seq = SequencerView(shards, SHARD)
    assert cp.offsets[journal] == head
    first_txns = cp.transactions.value
    assert first_txns >= 1
    assert seq.state["queued"] == {"OUTSIDE_TXN/OUTSIDE_COMMIT": 3}
    assert "gazette-txns" in cp.body.value

    cp.start(0.05)
    head2 = _publish(client, journal, 2)
    shards.stat_shard(SHARD, {journal: head2}, timeout=STAT_TIMEOUT_S)
    deadline = time.monotonic() + DEADLINE_S
    while cp.offsets.get(journal) != head2:
        assert time.monotonic() < deadline, f"checkpoint view stayed at {cp.offsets} (want {head2})"
        time.sleep(0.02)
    cp.close()
    assert not cp.running
    assert cp.transactions.value > first_txns
    seq.refresh()
    assert seq.state["queued"] == {"OUTSIDE_TXN/OUTSIDE_COMMIT": 5}
    seq.close()

    listed = magics.run("shards")
    assert listed.column("shard") == [SHARD]
    assert listed.column("sources") == [journal]
    assert "PRIMARY" in listed.column("replicas")[0]
    stat = magics.run(f"stat {SHARD}")
    assert stat.column("read through") == [head2]
    assert magics.run(f"shards --root {group.root}").column("shard") == [SHARD]
    group.close()


def test_a_plain_journal_client_says_how_to_reach_shards(magics) -> None:
    client = Client(magics.cluster.client().broker)
    try:
        with pytest.raises(GazetteError, match=r"use_shards\(ShardClient"):
            client.stat_shard(SHARD)
        with pytest.raises(GazetteError, match="knows no consumer application"):
            CheckpointView(client, SHARD)
    finally:
        client.close()
