"""Widget views follow the cluster: their model fields change after appends, publishes, applies and
flushes; auto-refresh picks changes up on its own and stops cleanly."""

from __future__ import annotations

import time

import pytest

from gazette.message import Publisher, ReadCommitted
from gazette.notebook import CheckpointView, ClusterView, JournalView, SequencerView

DEADLINE_S = 20.0


def _wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


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
    _wait_for(lambda: view.write_head.value == 11, "the auto-refreshed write head")
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
    _wait_for(lambda: view.last_error is not None, "a failed refresh")
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
    extra = journal + "-extra"
    client.apply_journals([magics.cluster.journal_spec(extra)])
    magics.cluster.wait_for_routes([extra])
    count = view.count.value
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
