"""Widget views follow the cluster: their model fields change after appends, publishes, applies and
flushes; auto-refresh picks changes up on its own and stops cleanly."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gazette.consumer import Application, MemoryStore, ShardSpec
from gazette.local.cluster import LocalCluster
from gazette.message import Publisher, ReadCommitted
from gazette.notebook import CheckpointView, ClusterView, JournalView, SequencerView
from gazette.testing import wait_for  # bounded by its default 30 s


def test_journal_view_write_head_and_fragments_follow_appends_and_flush(magics, journal) -> None:
    client = magics.client
    view = JournalView(client, journal)
    assert view.write_head.value == 0 and view.fragments == []
    client.append(journal, b"abc\n")
    view.refresh()
    assert view.write_head.value == 4
    assert view.append_rate.value > 0
    assert [(f["begin"], f["end"], f["persisted"]) for f in view.fragments] == [(0, 4, False)]
    assert "gazette-timeline" in view.timeline.value and "#f5a623" in view.timeline.value  # spooled colour
    client.flush(journal)
    view.refresh()
    assert [f["persisted"] for f in view.fragments] == [True]
    assert "(spooled)" not in view.body.value
    view.close()


def test_auto_refresh_picks_up_an_append_and_stops_cleanly(magics, journal) -> None:
    client = magics.client
    view = JournalView(client, journal, auto_refresh_s=0.05)
    assert view.running
    client.append(journal, b"0123456789\n")
    wait_for("the auto-refreshed write head", lambda: view.write_head.value == 11)
    view.stop()
    assert not view.running
    refreshes = view.refreshes
    client.append(journal, b"more\n")
    time.sleep(0.2)  # would be several ticks if the thread were still alive
    assert view.refreshes == refreshes and view.write_head.value == 11
    with pytest.raises(ValueError, match="interval_s 0 must be > 0"):
        view.start(0)
    view.close()


def test_auto_refresh_survives_a_failing_source(magics, journal) -> None:
    client = magics.client
    with pytest.raises(Exception, match="JOURNAL_NOT_FOUND"):
        JournalView(client, "tests/notebook/never-created")
    view = JournalView(client, journal, auto_refresh_s=0.05)
    client.delete_journals([journal])
    wait_for("a failed refresh", lambda: view.last_error is not None)
    assert "JOURNAL_NOT_FOUND" in view.status.value
    assert view.running  # it retries at the next tick
    view.close()
    assert not view.running


def test_cluster_view_sees_a_new_journal_and_its_write_head(magics, journal) -> None:
    client = magics.client
    view = ClusterView(client, selector="prefix=tests/notebook/")
    assert view.journals[journal]["primary"] == "broker-0"
    assert view.journals[journal]["write_head"] == 0
    client.append(journal, b"x\n")
    count = view.count.value
    extra = journal + "-extra"
    client.apply_journals([magics.cluster.journal_spec(extra)])
    magics.cluster.wait_for_routes([extra])
    view.refresh()
    assert view.journals[journal]["write_head"] == 2
    assert extra in view.journals and view.count.value == count + 1
    view.close()


def test_sequencer_and_checkpoint_views_of_a_reader(magics, journal) -> None:
    client = magics.client
    committed = Publisher(client)
    pending = Publisher(client)
    committed.publish_committed(journal, {"n": 1})
    committed.flush()
    pending.publish_uncommitted(journal, {"n": 2})
    pending.flush()
    reader = ReadCommitted(client, journal, skip_acks=True)
    assert [e.message["n"] for e in reader] == [1]
    seq = SequencerView(reader)
    cp = CheckpointView(reader)
    assert seq.pending.value == 1  # the open transaction of `pending`
    assert {p["producer"] for p in seq.state["producers"]} == {
        committed.producer_id.hex(),
        pending.producer_id.hex(),
    }
    assert seq.ring.value >= 1 and seq.ring.max == seq.state["ring"]["size"]
    head_before = cp.offsets[journal]

    for j, ack in pending.build_ack_intents():
        client.append(j, ack)
    assert [
        e.message["n"] for e in ReadCommitted(client, journal, checkpoint=reader.checkpoint(), skip_acks=True)
    ] == [2]
    assert [e.message["n"] for e in reader] == []  # this reader stopped at the old head
    reader2 = ReadCommitted(client, journal, skip_acks=True)
    assert sorted(e.message["n"] for e in reader2) == [1, 2]
    seq2, cp2 = SequencerView(reader2), CheckpointView(reader2)
    assert seq2.pending.value == 0
    assert cp2.offsets[journal] > head_before
    assert any("COMMIT" in k for k in seq2.state["queued"])
    for v in (seq, cp, seq2, cp2):
        v.close()
    committed.close()
    pending.close()


def test_shard_views_need_a_shard_id(magics) -> None:
    class NoShards:
        def inspect(self, shard: str):  # never reached
            raise AssertionError(shard)

    with pytest.raises(ValueError, match="needs the shard id"):
        SequencerView(NoShards())


class _Idle(Application):
    """Reads its sources and keeps nothing (a shard to show)."""

    def new_store(self, shard: Any, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Any, store: Any, env: Any, pub: Any) -> None:
        pass


def test_cluster_view_follows_the_etcd_watch_without_refreshes(magics, journal) -> None:
    cluster, client = magics.cluster, magics.client
    group = cluster.run_consumer(_Idle(), [ShardSpec("nb-000", [journal], max_txn_duration="50ms")])
    try:
        view = ClusterView(
            client, selector="prefix=tests/notebook/", root=cluster.root, consumer_root=group.root
        )
        assert view.watching and len(view.watch_tasks) == 2
        b0 = cluster.brokers[0]
        assert view.brokers == {
            f"{b0.zone}#{b0.suffix}": {"zone": b0.zone, "suffix": b0.suffix, "endpoint": b0.endpoint}
        }
        assert view.broker_count.value == 1 and b0.endpoint in view.brokers_body.value
        refreshes = view.refreshes

        fresh = journal + "-watched"
        client.apply_journals([cluster.journal_spec(fresh, labels={"team": "x"})])
        wait_for(
            "the new journal's primary",
            lambda: view.journals.get(fresh, {}).get("primary") == b0.suffix,
        )
        assert view.journals[fresh]["members"] == [b0.suffix]
        assert view.count.value == len(view.journals) and fresh in view.body.value
        wait_for(
            "the shard's PRIMARY status",
            lambda: view.shards.get("nb-000", {}).get("status") == "PRIMARY",
        )
        (replica,) = view.shards["nb-000"]["replicas"]
        assert (replica["slot"], replica["status"]) == (0, "PRIMARY")
        assert view.shard_count.value == 1 and "nb-000" in view.shards_body.value

        client.delete_journals([fresh])
        group.apply([], deletes=["nb-000"])
        wait_for("the deletions", lambda: fresh not in view.journals and not view.shards)
        assert view.refreshes == refreshes and view.updates > 0  # the watch changed the model, not refresh()
        tasks = view.watch_tasks
        view.close()
        assert not view.watching and all(t.done() for t in tasks)
        client.apply_journals([cluster.journal_spec(fresh)])  # a closed view no longer follows etcd
        cluster.wait_for_routes([fresh])
        assert fresh not in view.journals
        client.delete_journals([fresh])
    finally:
        group.close()


def test_cluster_view_sees_a_killed_broker_leave(etcd, etcd_root, tmp_path) -> None:
    with LocalCluster(
        brokers=2, mode="subprocess", etcd=etcd.endpoint, root=f"{etcd_root}/brokers", lease_ttl_s=2,
        data_dir=str(tmp_path / "cluster"),
    ) as cluster:  # fmt: skip
        client = cluster.client()
        client.apply_journals([cluster.journal_spec("tests/notebook/killed", replication=2)])
        cluster.wait_for_routes()
        with pytest.raises(ValueError, match='no broker is announced under etcd root "/tests/nowhere"'):
            ClusterView(client, root="/tests/nowhere")
        polled = ClusterView(client)  # the default root is not this cluster's: it polls the brokers
        assert not polled.watching and "pass root= to watch" in polled.status.value
        assert polled.journals["tests/notebook/killed"]["write_head"] == 0
        polled.close()
        view = ClusterView(client, root=cluster.root)
        assert sorted(b["suffix"] for b in view.brokers.values()) == ["broker-0", "broker-1"]
        assert sorted(view.journals["tests/notebook/killed"]["members"]) == ["broker-0", "broker-1"]
        cluster.kill_broker(1)
        wait_for(
            "the killed broker to leave the view",
            lambda: (
                [b["suffix"] for b in view.brokers.values()] == ["broker-0"]
                and view.journals["tests/notebook/killed"]["members"] == ["broker-0"]
            ),
        )
        assert view.journals["tests/notebook/killed"]["primary"] == "broker-0"
        view.close()
        assert not view.watching
