"""SideEffects (issue 18): register → prepare → commit → publish → cleanup, in process.

Bad input is refused naming the rule (a location not unique per attempt first); SQLStore keeps the
last committed transaction's registrations in `gazette_side_effects`, written by the commit and
refused with it when fenced; publishing is idempotent and refuses a committed side effect that
vanished; cleanup removes only what fenced-out attempts staged. Then whole consumers: the
batch-report example (SQLStore, and JSONFileStore on a recovery log through a crash), and an S3
store that cannot be reached, which leaves the transaction uncommitted until it is back.
Faults with real processes are in tests/faults/test_side_effect_faults.py.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import sqlite3
from types import SimpleNamespace

import orjson
import pytest

from gazette.consumer import (
    ConsumerCheckpoint,
    FencingError,
    ShardSpec,
    SideEffectError,
    SideEffectRecord,
    SideEffects,
    SQLStore,
    read_side_effect,
)
from gazette.examples import reports
from gazette.fragment.stores import ObjectNotFoundError, get_store
from gazette.protocol.errors import ValidationError
from gazette.testing import wait_for

SHARD = SimpleNamespace(fqn="/root/items/reports-000", id="reports-000")


def _effects(store: str, attempt: int = 3, restored: tuple[SideEffectRecord, ...] = ()) -> SideEffects:
    effects = SideEffects([store])
    effects.bind(SHARD.id, SHARD.fqn, attempt, restored)
    return effects


def _done() -> concurrent.futures.Future:
    f: concurrent.futures.Future = concurrent.futures.Future()
    f.set_result(None)
    return f


@pytest.fixture
def store_url(tmp_path) -> str:
    os.makedirs(tmp_path / "side-effects")
    return f"file://{tmp_path}/side-effects/"


def test_bad_registrations_are_refused_naming_the_rule(store_url) -> None:
    with pytest.raises(SideEffectError, match="not bound"):
        SideEffects([store_url]).register("report", "r/{id}")
    with pytest.raises(ValidationError, match="non-empty list of store URLs"):
        SideEffects(store_url)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="unsupported scheme"):
        SideEffects(["http://example.com/"])
    effects = _effects(store_url)
    try:
        with pytest.raises(
            SideEffectError, match=r'path "reports/latest.json" is not unique per attempt: .*\{id\}'
        ):
            effects.register("report", "reports/latest.json")
        with pytest.raises(SideEffectError, match="not unique per attempt"):
            effects.register("report", "reports/{shard}.json")
        with pytest.raises(ValidationError, match=r"only the placeholders .*\['txn'\]"):
            effects.register("report", "reports/{txn}/{id}")
        with pytest.raises(ValidationError, match="found a format spec"):
            effects.register("report", "reports/{id:>40}")
        with pytest.raises(SideEffectError, match="under .pending/"):
            effects.register("report", ".pending/{id}")
        with pytest.raises(ValidationError, match="not clean"):
            effects.register("report", "reports/../{id}")
        with pytest.raises(ValidationError, match="kind 'a report'"):
            effects.register("a report", "r/{id}")
        with pytest.raises(SideEffectError, match=r"store file:///elsewhere/ is not one of this shard's"):
            effects.register("report", "r/{id}", store="file:///elsewhere/")

        effect = effects.register("report", "reports/{shard}/{kind}-{id}.json")
        assert effect.path == f"reports/reports-000/report-{effect.id}.json"
        assert effect.id.startswith("3-0-") and effect.url == store_url + effect.path
        with pytest.raises(SideEffectError, match="referred to before it was prepared"):
            effect.reference()
        with pytest.raises(TypeError, match="prepare takes bytes, not str"):
            effect.prepare("text")  # type: ignore[arg-type]
        effect.prepare(b"data")
        with pytest.raises(SideEffectError, match="was already prepared"):
            effect.prepare(b"data")
        effects.register("report", "r/{id}")  # never prepared
        with pytest.raises(SideEffectError, match="registered but never prepared"):
            effects.seal()
    finally:
        effects.close()


def test_prepare_stages_invisibly_and_publish_makes_it_visible_idempotently(store_url) -> None:
    effects = _effects(store_url)
    store = get_store(store_url)
    try:
        effect = effects.register("report", "reports/{id}.json").prepare(b'{"n": 1}')
        sealed = effects.seal()
        assert sealed == (effect.record,) and effects.committing == sealed
        assert effect.sha1 == hashlib.sha1(b'{"n": 1}').hexdigest() and effect.size == 8
        assert store.list("reports/") == []  # invisible to readers of the final location
        assert store.get(effect.record.staging) == b'{"n": 1}'
        assert re.fullmatch(r"\.pending/reports-000-[0-9a-f]{8}/", effects.staging_prefix)
        assert effect.record.staging == f"{effects.staging_prefix}3/{effect.id}"
        with pytest.raises(ObjectNotFoundError):
            read_side_effect(effect.reference())

        published = effects.publish_after(_done(), sealed)
        assert published.result(timeout=30) is None
        assert read_side_effect(effect.reference()) == b'{"n": 1}'
        assert not store.exists(effect.record.staging)
        effects.publish(sealed)  # again (a new primary's recovery): the final object stays
        assert read_side_effect(effect.reference()) == b'{"n": 1}'

        store.put(effect.path, b"tampered")
        with pytest.raises(SideEffectError, match="has SHA-1 .* but the message refers to SHA-1"):
            read_side_effect(effect.reference())
        store.remove(effect.path)
        with pytest.raises(SideEffectError, match="neither its staged object .* nor its final object"):
            effects.publish(sealed)
        assert effects.register("report", "r/{id}").id.startswith("3-1-")  # the next transaction
    finally:
        effects.close()


def test_a_failed_commit_publishes_nothing(store_url) -> None:
    effects = _effects(store_url)
    try:
        effect = effects.register("report", "reports/{id}.json").prepare(b"x")
        sealed = effects.seal()
        failed: concurrent.futures.Future = concurrent.futures.Future()
        failed.set_exception(FencingError("fenced"))
        with pytest.raises(FencingError):
            effects.publish_after(failed, sealed).result(timeout=30)
        assert not get_store(store_url).exists(effect.path)
    finally:
        effects.close()


def test_a_failing_store_is_retried_until_closed_or_out_of_time(store_url, tmp_path) -> None:
    (tmp_path / "side-effects" / ".pending").write_bytes(b"")  # a file where a directory goes: puts fail
    effects = _effects(store_url)
    effects.register("report", "r/{id}").prepare(b"x")
    wait_for("a failed prepare to be retried", lambda: effects.store_retries >= 2)
    effects.close()  # the shard stops: the retries end, and the transaction does not commit
    with pytest.raises(SideEffectError, match=r"preparing side effect .* (closed|writing)"):
        effects.seal()

    bounded = SideEffects([store_url], retry_timeout_s=0.2)
    bounded.bind(SHARD.id, SHARD.fqn, 4, ())
    bounded.register("report", "r/{id}").prepare(b"x")
    with pytest.raises(SideEffectError, match=r"the store failed for 0.2 s: writing object"):
        bounded.seal()
    bounded.close()


def test_cleanup_removes_only_what_fenced_out_attempts_staged(store_url) -> None:
    store = get_store(store_url)
    prefix = _effects(store_url).staging_prefix
    for path in ("1/1-0-a", "2/2-4-b", "2/2-5-c", "3/3-0-d", "4/4-0-e", "notes.txt", "x/y"):
        store.put(prefix + path, b"staged")
    store.put("reports/2-4-b.json", b"published")
    # A shard of the same id of another application (another etcd key): not this shard's to clean.
    other = SideEffects([store_url])
    other.bind(SHARD.id, "/elsewhere/items/reports-000", 9, ())
    store.put(f"{other.staging_prefix}1/1-0-f", b"staged")
    other.close()
    # Attempt 2's last committed transaction is restored (unpublished): kept for recover().
    restored = SideEffectRecord(
        "2-5-c", 2, "report", store_url, "reports/2-5-c.json", prefix + "2/2-5-c", "", 6
    )
    effects = _effects(store_url, attempt=3, restored=(restored,))
    try:
        removed = effects.cleanup()
        assert sorted(removed) == [store_url + prefix + "1/1-0-a", store_url + prefix + "2/2-4-b"]
        assert effects.removed == 2
        assert sorted(e.path for e in store.list(prefix)) == [
            "2/2-5-c",
            "3/3-0-d",
            "4/4-0-e",
            "notes.txt",
            "x/y",
        ]
        assert store.get("reports/2-4-b.json") == b"published"  # committed side effects are never removed
        assert store.exists(f"{other.staging_prefix}1/1-0-f")
        effects.recover()
        assert store.get("reports/2-5-c.json") == b"staged" and not store.exists(prefix + "2/2-5-c")
    finally:
        effects.close()


def test_sql_store_commits_registrations_with_the_checkpoint_and_fences_them(store_url, tmp_path) -> None:
    db = f"sqlite://{tmp_path}/shard.db"
    first = SQLStore(SHARD, db, side_effects=SideEffects([store_url]))
    assert first.restore_checkpoint(SHARD) == ConsumerCheckpoint()
    effects = first.side_effects
    assert effects is not None and effects.attempt == first.fence == 1 and effects.restored == ()
    effect = effects.register("report", "reports/{id}.json").prepare(b"one")
    effects.seal()
    first.start_commit(SHARD, ConsumerCheckpoint(), [_done()]).result()
    assert _registered(tmp_path) == [(effect.id, 1, effect.path)]

    second = SQLStore(SHARD, db, side_effects=SideEffects([store_url]))  # a new primary
    second.restore_checkpoint(SHARD)
    assert second.side_effects is not None and second.side_effects.attempt == 2
    assert second.side_effects.restored == (effect.record,)

    # The deposed primary's next transaction: its registration is refused with its checkpoint.
    zombie = effects.register("report", "reports/{id}.json").prepare(b"two")
    effects.seal()
    with pytest.raises(FencingError):
        first.start_commit(SHARD, ConsumerCheckpoint(), [_done()]).result()
    assert _registered(tmp_path) == [(effect.id, 1, effect.path)]
    assert second.side_effects.cleanup() == [store_url + zombie.record.staging]

    # A transaction without side effects replaces the registrations with none.
    second.side_effects.seal()
    second.start_commit(SHARD, ConsumerCheckpoint(), [_done()]).result()
    assert _registered(tmp_path) == []
    first.destroy()
    second.destroy()


def _registered(tmp_path) -> list[tuple[str, int, str]]:
    conn = sqlite3.connect(tmp_path / "shard.db")
    try:
        return conn.execute("SELECT id, attempt, path FROM gazette_side_effects").fetchall()
    finally:
        conn.close()


def test_sql_store_refuses_a_corrupt_registration(store_url, tmp_path) -> None:
    db = f"sqlite://{tmp_path}/shard.db"
    store = SQLStore(SHARD, db, side_effects=SideEffects([store_url]))
    store.restore_checkpoint(SHARD)
    store.execute(
        "INSERT INTO gazette_side_effects VALUES (?, 'x', 'not a number', 'k', ?, 'p', 's', '', 0)",
        (SHARD.fqn, store_url),
    )
    store.conn.execute("COMMIT")
    store.destroy()
    again = SQLStore(SHARD, db, side_effects=SideEffects([store_url]))
    with pytest.raises(
        ValidationError, match=r"gazette_side_effects row of shard /root/items/reports-000\.attempt"
    ):
        again.restore_checkpoint(SHARD)
    again.destroy()


# ---- whole consumers (in-process brokers and consumers)


def test_batch_report_example_runs_exactly_once(cluster, tmp_path) -> None:
    result = reports.run(cluster, events=120, work_dir=str(tmp_path / "reports"))
    assert result["events"] == 120 and result["reports"] >= 1
    assert reports.leftovers(cluster.client(), result["store"]) == {"staged": [], "unreferenced": []}


def test_json_file_store_side_effects_survive_a_crash(cluster, etcd_root, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals(reports.journals(store=cluster.store, recovery_logs=True))
    cluster.wait_for_routes()
    store_url = f"file://{tmp_path}/reports/"
    app = reports.BatchReports(store_url, cleanup_interval_s=0.2)
    group = cluster.run_consumer(app, [reports.shard(hint_prefix=f"{etcd_root}/hints")])
    group.wait_for_primaries()
    reports.publish_events(client, range(50))
    wait_for("50 events reported", lambda: sum(m["events"] for m in reports.read_index(client)) == 50, 60)
    attempt = _side_effects(group).attempt

    # A crash leaves an attempt's staged report behind (as if it crashed between prepare and
    # commit); the new primary (a later recovery-log author: a greater attempt) removes it.
    staged = f"{_side_effects(group).staging_prefix}{attempt}/{attempt}-99-feed"
    get_store(store_url).put(staged, b"left by a crash")
    group.kill(0)
    group.restart(0)
    wait_for("a new primary", lambda: _side_effects(group, missing_ok=True), 60)
    assert _side_effects(group).attempt > attempt
    wait_for(
        "the crashed attempt's staged report to be removed",
        lambda: not get_store(store_url).exists(staged),
        60,
    )
    reports.publish_events(client, range(50, 80))
    wait_for("80 events reported", lambda: sum(m["events"] for m in reports.read_index(client)) == 80, 60)
    reports.verify(client, range(80))
    assert reports.leftovers(client, store_url) == {"staged": [], "unreferenced": []}
    # side_effects.json holds the last committed transaction's registrations (none if it reported nothing).
    stored = [r["path"] for r in _side_effects_file(group)["side_effects"]]
    assert stored in ([], [reports.read_index(client)[-1]["report"]["path"]])


def _side_effects(group, missing_ok: bool = False) -> SideEffects | None:
    """The in-process primary's SideEffects, once bound (None then, with `missing_ok`)."""
    (consumer,) = group.consumers
    shard = consumer.shards.get(reports.SHARD_ID)
    store = shard.store if shard is not None else None
    effects = store.side_effects if store is not None else None
    if effects is None or not effects.attempt:
        assert missing_ok, f"shard {reports.SHARD_ID} has no bound side effects in this consumer"
        return None
    return effects


def _side_effects_file(group) -> dict:
    (consumer,) = group.consumers
    store = consumer.shards[reports.SHARD_ID].store
    with open(os.path.join(store.directory, "side_effects.json"), "rb") as f:
        return orjson.loads(f.read())


def test_an_unreachable_store_leaves_the_transaction_uncommitted_until_it_is_back(
    cluster, tmp_path, dedicated_moto
) -> None:
    moto = dedicated_moto()
    moto.make_bucket("reports")
    store_url = f"s3://reports/batches/?endpoint={moto.endpoint}&region=us-east-1"
    client = cluster.client()
    client.apply_journals(reports.journals(store=cluster.store))
    cluster.wait_for_routes()
    group = cluster.run_consumer(reports.BatchReports(store_url, str(tmp_path)), [reports.shard()])
    effects = wait_for("the primary's side effects", lambda: _side_effects(group, missing_ok=True), 60)

    moto.stop()  # (a restarted moto server is empty: the test stops it before anything is stored)
    reports.publish_events(client, range(10))
    wait_for("a failed prepare to be retried", lambda: effects.store_retries > 0, 60)
    assert reports.read_index(client) == []  # nothing committed meanwhile
    assert not _committed_offsets_past(group, client)

    moto.start()  # the same endpoint, empty: the bucket is back once made again
    moto.make_bucket("reports")
    wait_for("10 events reported", lambda: sum(m["events"] for m in reports.read_index(client)) == 10, 90)
    index = reports.verify(client, range(10))
    assert all(m["report"]["url"].startswith("s3://reports/batches/reports/reports-000/") for m in index)


def _committed_offsets_past(group, client) -> bool:
    """Whether the shard's checkpoint has read the second batch (it must not while prepare fails)."""
    (consumer,) = group.consumers
    shard = consumer.shards[reports.SHARD_ID]
    return shard.read_through.get(reports.EVENTS_JOURNAL, 0) >= client.read_head(reports.EVENTS_JOURNAL)


def test_shard_spec_of_the_example() -> None:
    spec = reports.shard(hint_prefix="/hints")
    assert isinstance(spec, ShardSpec) and spec.recovery_log_prefix == reports.RECOVERY_PREFIX
