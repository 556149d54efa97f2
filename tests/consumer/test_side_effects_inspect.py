"""Where a shard's side effects are, as Inspect shows it (issue 18): `SideEffects.state()` through
register → prepare → commit → publish → cleanup in process, then a running batch-report consumer
held at each phase boundary while Inspect (gazette_py.Shards), CheckpointView and `gazette shards
inspect` show the open, committing, committed-but-unpublished, published and cleaned-up side effects.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from cli_run import gazette, ok

from gazette.consumer import (
    FencingError,
    Shard,
    SideEffectRecord,
    SideEffects,
    SideEffectsState,
)
from gazette.consumer.store import Store
from gazette.examples import reports
from gazette.fragment.stores import StoreError, get_store
from gazette.notebook import CheckpointView
from gazette.testing import wait_for

SHARD = SimpleNamespace(fqn="/root/items/reports-000", id="reports-000")
PHASE_TIMEOUT_S = 60.0


@pytest.fixture
def store_url(tmp_path) -> str:
    (tmp_path / "side-effects").mkdir()
    return f"file://{tmp_path}/side-effects/"


class _Gates:
    """An on_phase hook that holds the thread reaching a phase (for the phases in `held`) until
    `release(phase)`: while held, the shard's state is observed at exactly that boundary."""

    def __init__(self, held: Sequence[str]) -> None:
        self.arrived = {p: threading.Event() for p in held}
        self.released = {p: threading.Event() for p in held}
        self.records: dict[str, tuple[SideEffectRecord, ...]] = {}

    def __call__(self, phase: str, records: Sequence[SideEffectRecord]) -> None:
        if phase in self.arrived and not self.arrived[phase].is_set():
            self.records[phase] = tuple(records)
            self.arrived[phase].set()
            self.released[phase].wait(PHASE_TIMEOUT_S)

    def wait(self, phase: str) -> tuple[SideEffectRecord, ...]:
        assert self.arrived[phase].wait(PHASE_TIMEOUT_S), f"no side effect reached phase {phase}"
        return self.records[phase]

    def release(self, phase: str | None = None) -> None:
        for p, event in self.released.items():
            if phase is None or p == phase:
                event.set()


def test_state_follows_each_side_effect_through_its_lifecycle(store_url) -> None:
    gates = _Gates(["committed"])
    effects = SideEffects([store_url], on_phase=gates)
    assert effects.state() == SideEffectsState(attempt=0, stores=(store_url,), staging_prefix="")
    # A new primary: its predecessor's last committed side effect is unpublished until recovered.
    prefix = ".pending/reports-000-"
    first = SideEffects([store_url])
    first.bind(SHARD.id, SHARD.fqn, 1, ())
    restored = first.register("report", "reports/{id}.json").prepare(b"restored").record
    first.seal()
    first.close()
    effects.bind(SHARD.id, SHARD.fqn, 2, (restored,))
    try:
        state = effects.state()
        assert state.attempt == 2 and state.staging_prefix.startswith(prefix)
        assert state.unpublished == (restored,) and state.published == 0
        assert get_store(store_url).exists(restored.staging)  # sealed: its prepare completed
        effects.recover()
        state = effects.state()
        assert state.unpublished == () and state.published == 1 and state.last_published == (restored,)

        effect = effects.register("report", "reports/{id}.json")
        assert effects.state().open == (effect.record,) and effect.record.sha1 == ""
        effect.prepare(b"report one")
        (prepared,) = effects.state().open
        assert prepared.sha1 == effect.sha1 != "" and prepared.size == 10

        sealed = effects.seal()
        state = effects.state()
        assert state.open == () and state.committing == sealed == (effect.record,)
        commit: concurrent.futures.Future = concurrent.futures.Future()
        published = effects.publish_after(commit, sealed)
        assert effects.state().committing == sealed  # until the store's commit resolves
        commit.set_result(None)
        assert gates.wait("committed") == sealed  # held after the commit, before publishing
        state = effects.state()
        assert state.committing == () and state.unpublished == sealed and state.published == 1
        gates.release()
        published.result(timeout=PHASE_TIMEOUT_S)
        state = effects.state()
        assert state.unpublished == () and state.published == 2 and state.last_published == sealed
        effects.publish(sealed)  # idempotent again: not counted twice
        assert effects.state().published == 2

        # A commit refused by a fence: the side effect leaves the state, unpublished and uncounted.
        zombie = effects.register("report", "reports/{id}.json").prepare(b"never committed")
        sealed = effects.seal()
        refused: concurrent.futures.Future = concurrent.futures.Future()
        refused.set_exception(FencingError("fenced"))
        with pytest.raises(FencingError):
            effects.publish_after(refused, sealed).result(timeout=PHASE_TIMEOUT_S)
        state = effects.state()
        assert (state.committing, state.unpublished, state.published) == ((), (), 2)
        assert not get_store(store_url).exists(zombie.path)

        # Proto and JSON forms carry it all.
        assert SideEffectsState.from_proto(state.to_proto()) == state
        assert json.loads(json.dumps(state.to_dict()))["last_published"][0]["sha1"] == effect.sha1
    finally:
        gates.release()
        effects.close()


def test_cleanup_state_keeps_what_it_could_not_remove(store_url, monkeypatch) -> None:
    effects = SideEffects([store_url])
    effects.bind(SHARD.id, SHARD.fqn, 5, ())
    store = get_store(store_url)
    prefix = effects.staging_prefix
    for path in ("3/3-0-a", "4/4-1-b", "5/5-0-c"):  # two fenced-out attempts' objects, and its own
        store.put(prefix + path, b"staged")
    stuck = prefix + "4/4-1-b"
    remove = type(store).remove

    def failing_remove(self: Any, path: str) -> None:
        if path == stuck:
            raise StoreError(f"removing {path}: the store is down")
        remove(self, path)

    monkeypatch.setattr(type(store), "remove", failing_remove)
    try:
        with pytest.raises(StoreError, match="the store is down"):
            effects.cleanup()
        state = effects.state()
        assert state.cleanup_pending == (store_url + stuck,)
        assert state.removed == 1 and state.cleanups == 1 and state.last_cleanup_at > 0
        assert "the store is down" in state.cleanup_error

        monkeypatch.setattr(type(store), "remove", remove)  # the store is back
        assert effects.cleanup() == [store_url + stuck]
        state = effects.state()
        assert (state.cleanup_pending, state.removed, state.cleanups, state.cleanup_error) == ((), 2, 2, "")
        assert [e.path for e in store.list(prefix)] == ["5/5-0-c"]
    finally:
        effects.close()


class _HeldReports(reports.BatchReports):
    """The batch-report example with its side effects' phases held by `gates` (in process)."""

    def __init__(self, gates: _Gates, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gates = gates

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        store = super().new_store(shard, recorder)
        assert store.side_effects is not None
        store.side_effects.on_phase = self.gates
        return store


def test_inspect_shows_side_effects_through_a_transaction(cluster, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals(reports.journals(store=cluster.store))
    cluster.wait_for_routes()
    store_url = f"file://{tmp_path}/reports/"
    gates = _Gates(["registered", "prepared", "committed", "published"])
    app = _HeldReports(gates, store_url, str(tmp_path), cleanup_interval_s=0.2)
    group = cluster.run_consumer(app, [reports.shard()])
    try:
        group.wait_for_primaries()
        shards = group.client()

        def inspect() -> SideEffectsState:
            effects = shards.inspect(reports.SHARD_ID, timeout=PHASE_TIMEOUT_S).side_effects
            assert effects is not None
            return effects

        first = wait_for("the first cleanup scan", lambda: (s := inspect()).cleanups >= 1 and s, 60)
        assert first.attempt >= 1 and first.stores == (store_url,) and first.published == 0
        assert (first.open, first.committing, first.unpublished, first.cleanup_pending) == ((), (), (), ())

        reports.publish_events(client, [0])  # one event: one transaction, one report
        (registered,) = gates.wait("registered")  # finalize_txn registered it, and is held
        state = inspect()
        assert state.open == (registered,) and registered.sha1 == ""
        assert registered.id.startswith(f"{state.attempt}-0-")
        gates.release("registered")

        (prepared,) = gates.wait("prepared")  # sealed: staged durably, the commit not begun
        state = inspect()
        assert state.open == () and state.committing == (prepared,) and prepared.sha1
        assert get_store(store_url).exists(prepared.staging)
        gates.release("prepared")

        gates.wait("committed")  # the store committed its registration; not published yet
        state = inspect()
        assert state.committing == () and state.unpublished == (prepared,) and state.published == 0
        assert not get_store(store_url).exists(prepared.path)
        assert reports.read_index(client) == []  # its ACK waits for the publication
        view = CheckpointView(shards, reports.SHARD_ID)
        # The same state, but for the periodic cleanup scans that may have run between the two asks.
        assert _without_scans(view.side_effects) == _without_scans(state)
        assert "1 committed but unpublished, 0 published" in view.body.value
        assert prepared.url in view.body.value
        view.close()
        gates.release("committed")

        gates.wait("published")
        gates.release("published")
        wait_for("the report's ACK", lambda: len(reports.read_index(client)) == 1, 60)
        (message,) = reports.verify(client, [0])
        state = inspect()
        assert state.unpublished == () and state.published == 1
        assert state.last_published == (prepared,)
        assert (message["report"]["path"], message["report"]["sha1"]) == (prepared.path, prepared.sha1)

        # What an attempt below this primary's staged (fenced out: it can never commit) is removed by
        # the next cleanup scan.
        left = f"{state.staging_prefix}0/0-0-feed"
        get_store(store_url).put(left, b"left by a fenced-out attempt")
        scans = state.cleanups
        done = wait_for("the next cleanup scans", lambda: (s := inspect()).cleanups > scans + 1 and s, 60)
        assert (done.removed, done.cleanup_pending, done.cleanup_error) == (1, (), "")
        assert not get_store(store_url).exists(left)
        assert done.last_cleanup_at > first.last_cleanup_at

        # `gazette shards inspect` prints the same (JSON).
        env = {"GAZETTE_ETCD": cluster.etcd_endpoint, "GAZETTE_CONSUMER_ROOT": group.root}
        doc = json.loads(ok(gazette("shards", "inspect", reports.SHARD_ID, env=env)))["side_effects"]
        assert doc["attempt"] == state.attempt and doc["published"] == 1 and doc["unpublished"] == []
        assert doc["removed"] == 1
        assert doc["last_published"] == [prepared.to_dict()]
        assert doc["stores"] == [store_url] and doc["cleanup_pending"] == []
    finally:
        gates.release()


def _without_scans(state: SideEffectsState | None) -> SideEffectsState | None:
    """`state` with the cleanup scans' counters zeroed: they move on their own, every few seconds."""
    return None if state is None else dataclasses.replace(state, cleanups=0, last_cleanup_at=0.0)
