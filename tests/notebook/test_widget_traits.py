"""The views are ipywidgets VBoxes whose model is traitlets: `observe()` sees each change a refresh,
an auto-refresh or ClusterView's etcd watch makes, with the old and the new value."""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets as widgets

from gazette.consumer import Application, MemoryStore, ShardSpec
from gazette.message import Publisher
from gazette.notebook import CheckpointView, ClusterView, JournalView, SequencerView
from gazette.testing import wait_for  # bounded by its default 30 s

STAT_TIMEOUT_S = 60.0
SHARD = "nb-traits-000"


class _Changes:
    """Records (name, old, new, thread name) of each change observe() reports."""

    def __init__(self, view: widgets.Widget, names: list[str]) -> None:
        self.seen: list[tuple[str, Any, Any, str]] = []
        self._lock = threading.Lock()
        view.observe(self, names=names)

    def __call__(self, change: dict[str, Any]) -> None:
        with self._lock:
            self.seen.append((change["name"], change["old"], change["new"], threading.current_thread().name))

    def of(self, name: str) -> list[tuple[Any, Any, str]]:
        with self._lock:
            return [(old, new, thread) for n, old, new, thread in self.seen if n == name]


def test_journal_view_is_a_vbox_whose_refresh_changes_its_traits(magics, journal) -> None:
    client = magics.client
    view = JournalView(client, journal)
    assert isinstance(view, widgets.VBox) and view.widget is view
    assert view.children[:2] == (view.title, view.status) and view.body in view.children
    assert {"refreshes", "last_error", "status_line", "fragments", "head"} <= set(view.trait_names())
    changes = _Changes(view, ["refreshes", "fragments", "head", "status_line"])
    view.refresh()  # nothing changed in the journal: only the refresh count moves
    assert [(old, new) for old, new, _ in changes.of("refreshes")] == [(1, 2)]
    assert changes.of("fragments") == [] and changes.of("head") == []

    client.append(journal, b"abc\n")
    view.refresh()
    assert [(old, new) for old, new, _ in changes.of("head")] == [(0, 4)]
    ((old, new, _),) = changes.of("fragments")
    assert old == [] and [(f["begin"], f["end"], f["persisted"]) for f in new] == [(0, 4, False)]
    assert changes.of("status_line")[-1][1] == view.status.value == "1 fragments (0 persisted), head 4"
    client.flush(journal)
    view.refresh()
    assert [f["persisted"] for f in changes.of("fragments")[-1][1]] == [True]
    view.close()
    assert view.comm is None and view.status.comm is None  # the VBox and its children are closed


def test_auto_refresh_reports_a_failure_through_last_error(magics, journal) -> None:
    view = JournalView(magics.client, journal)
    changes = _Changes(view, ["last_error"])
    view.start(0.05)
    magics.client.delete_journals([journal])
    wait_for("a last_error change", lambda: changes.of("last_error"))
    old, new, thread = changes.of("last_error")[0]
    assert old is None and "JOURNAL_NOT_FOUND" in new and thread == "gazette-view"
    assert view.status_line == view.status.value == f"refresh failed: {new}"
    view.close()


class _Count(Application):
    def new_store(self, shard: Any, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Any, store: Any, env: Any, pub: Any) -> None:
        if not env.is_ack:
            store.state["count"] = store.state.get("count", 0) + 1


def _publish(client, journal: str, n: int) -> int:
    with Publisher(client) as pub:
        futures = [pub.publish_committed(journal, {"n": i}) for i in range(n)]
        pub.flush()
    return max(f.result().end for f in futures)


def test_checkpoint_and_sequencer_traits_follow_a_shards_commits(magics, journal) -> None:
    client = magics.client
    group = magics.cluster.run_consumer(_Count(), [ShardSpec(SHARD, [journal], max_txn_duration="50ms")])
    try:
        shards = group.client()
        head = _publish(client, journal, 3)
        shards.stat_shard(SHARD, {journal: head}, timeout=STAT_TIMEOUT_S)
        cp, seq = CheckpointView(shards, SHARD), SequencerView(shards, SHARD)
        assert cp.offsets == {journal: head} and len(cp.producers) == 1
        cp_changes = _Changes(cp, ["offsets", "producers"])
        seq_changes = _Changes(seq, ["state"])

        head2 = _publish(client, journal, 2)
        shards.stat_shard(SHARD, {journal: head2}, timeout=STAT_TIMEOUT_S)
        cp.refresh()
        seq.refresh()
        assert [(old, new) for old, new, _ in cp_changes.of("offsets")] == [
            ({journal: head}, {journal: head2})
        ]
        ((old, new, _),) = cp_changes.of("producers")  # a second producer, the second Publisher
        assert len(old) == 1 and len(new) == 2 and old[0] in new
        ((old, new, _),) = seq_changes.of("state")
        assert old["queued"] == {"OUTSIDE_TXN/OUTSIDE_COMMIT": 3}
        assert new["queued"] == {"OUTSIDE_TXN/OUTSIDE_COMMIT": 5}
        cp.refresh()  # nothing new committed: no change reported
        assert len(cp_changes.of("offsets")) == 1
        for v in (cp, seq):
            v.close()
    finally:
        group.close()


def test_cluster_view_journals_trait_changes_from_the_etcd_watch(magics, journal) -> None:
    cluster, client = magics.cluster, magics.client
    view = ClusterView(client, selector="prefix=tests/notebook/", root=cluster.root)
    changes = _Changes(view, ["journals", "updates"])
    refreshes = view.refreshes
    fresh = journal + "-observed"
    client.apply_journals([cluster.journal_spec(fresh)])
    wait_for(
        "a journals change with the new journal's primary",
        lambda: any(new.get(fresh, {}).get("primary") for _, new, _ in changes.of("journals")),
    )
    assert view.refreshes == refreshes  # the watch changed the trait, not refresh()
    assert changes.of("updates") and all(
        t != threading.current_thread().name for _, _, t in changes.of("journals")
    )
    client.delete_journals([fresh])
    wait_for("a journals change without it", lambda: fresh not in changes.of("journals")[-1][1])
    view.close()
    assert not view.watching
