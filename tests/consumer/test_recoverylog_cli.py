"""`gazette shards recover`, `shards prune` and `shards list --lag` against a real broker, etcd and
consumers: a JSONFileStore shard's log played into a directory equals the live store's files; prune
removes exactly the persisted fragments below the offset the stored hints need, and a fresh recovery
still works after it; lag is source head minus the committed checkpoint's read-through."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from typing import Any

from cli_run import gazette, ok, one_error_line

from gazette.consumer import Application, MemoryStore, ReplicaCode, Shard, ShardChange, ShardInfo, ShardSpec
from gazette.consumer.json_store import JSONFileStore, decode_state_file
from gazette.consumer.recoverylog import backup_hints_key, fetch_hints, primary_hints_key
from gazette.consumer.recoverylog.prune import needed_offset, stored_hints
from gazette.keyspace.etcd import connect
from gazette.message import Envelope, Publisher
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG
from gazette.testing import wait_for

WAIT_S = 60.0
SOURCE = "tests/rlcli/input"
PREFIX = "tests/rlcli/recovery"
SHARD_ID = "rlcli-000"
LOG = f"{PREFIX}/{SHARD_ID}"
NDJSON = {"content-type": "application/x-ndjson"}


class Tally(Application):
    """Counts messages per key in a JSONFileStore (a file of the shard's recorded directory)."""

    def new_store(self, shard: Shard, recorder: Any) -> JSONFileStore:
        return JSONFileStore(recorder, {"counts": {}})

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if not env.is_ack:
            counts = store.state["counts"]
            counts[env.message["k"]] = counts.get(env.message["k"], 0) + 1


def _publish(client, keys: list[str]) -> int:
    pub = Publisher(client)
    for k in keys:
        pub.publish_committed(SOURCE, {"k": k})
    pub.flush()
    pub.close()
    return client.read_head(SOURCE)


def _files(directory: str) -> dict[str, bytes]:
    out = {}
    for parent, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


def _primary(group) -> Shard:
    for consumer in group.consumers:
        shard = consumer.shards.get(SHARD_ID) if consumer is not None else None
        if shard is not None and shard.is_primary:
            return shard
    raise AssertionError(f"no in-process primary of {SHARD_ID}")


def _hints(etcd_endpoint: str, spec: ShardSpec):
    async def run():
        etcd = connect(etcd_endpoint)
        try:
            return await fetch_hints(etcd, spec.hint_prefix, spec.id, spec.hint_backups)
        finally:
            await etcd.close()

    return asyncio.run(run())


def _stored(store_dir: str, frag) -> bool:
    return os.path.exists(os.path.join(store_dir, frag.content_path))


def test_recover_then_prune_by_hints(cluster, etcd_root, tmp_path) -> None:
    store_dir = str(tmp_path / "store")
    client = cluster.client()
    client.apply_journals(
        [
            cluster.journal_spec(SOURCE, replication=1, labels=NDJSON),
            cluster.journal_spec(LOG, replication=1, labels={"content-type": CONTENT_TYPE_RECOVERY_LOG}),
        ]
    )
    cluster.wait_for_routes([SOURCE, LOG])
    spec = ShardSpec(
        SHARD_ID, [SOURCE], max_txn_duration="50ms", hot_standbys=1,
        recovery_log_prefix=PREFIX, hint_prefix=f"{etcd_root}/hints", hint_backups=1,
    )  # fmt: skip
    group = cluster.run_consumer(Tally(), [spec], processes=2)
    env = {
        "GAZETTE_ETCD": cluster.etcd_endpoint,
        "GAZETTE_CONSUMER_ROOT": group.root,
        "GAZETTE_BROKER": cluster.broker_endpoints[0],
    }

    def placed(shards: list[ShardInfo]) -> bool:
        return [(r.slot, r.status.code) for r in shards[0].replicas] == [
            (0, ReplicaCode.PRIMARY),
            (1, ReplicaCode.STANDBY),
        ]

    (info,) = group.wait_for(placed, WAIT_S, "a PRIMARY and a STANDBY")
    shard_client = group.client()

    # Only the first primary's recovery of the empty log is hinted (no live files): nothing to prune.
    out = ok(gazette("shards", "prune", "--shard", SHARD_ID, env=env))
    assert "nothing to prune" in out and "list no live files" in out and "0 fragment(s) pruned" in out

    keys: list[str] = []
    ends = []  # the log's head after each batch, where its flush cut a persisted fragment
    for batch in range(3):
        more = [f"k{i % (batch + 3)}" for i in range(40)]
        keys += more
        shard_client.stat_shard(SHARD_ID, {SOURCE: _publish(client, more)}, timeout=WAIT_S)
        frag = client.flush(LOG)
        assert frag is not None and frag.backing_store
        ends.append(frag.end)

    # recover: the log played into a new directory holds the live store's files, byte for byte.
    live = _primary(group)
    recovered_dir = str(tmp_path / "recovered")
    out = ok(gazette("shards", "recover", "--shard", SHARD_ID, "--dir", recovered_dir, env=env))
    assert f"recovered shard {SHARD_ID} from {LOG}" in out and "state.json" in out
    assert _files(recovered_dir) == _files(live.recovery.directory)
    assert set(_files(recovered_dir)) == {"state.json"}
    assert decode_state_file(_files(recovered_dir)["state.json"]).state == {"counts": dict(Counter(keys))}
    # ... a directory that is not empty is refused before anything is read or removed.
    line = one_error_line(gazette("shards", "recover", "--shard", SHARD_ID, "--dir", recovered_dir, env=env))
    assert "is not empty" in line and recovered_dir in line
    assert set(os.listdir(recovered_dir)) == {"state.json"}
    line = one_error_line(
        gazette("shards", "recover", "--shard", "nope-000", "--dir", str(tmp_path / "x"), env=env)
    )
    assert 'shard "nope-000" is not a shard' in line

    # A hints update: the primary crashes, the standby recovers and stores its verified hints.
    standby = info.replicas[1]
    group.kill(int(info.replicas[0].suffix.split("-")[1]))
    wait_for(
        "the standby to become PRIMARY",
        lambda: (
            [(r.suffix, r.status.code) for r in group.list_shards()[0].replicas][:1]
            == [(standby.suffix, ReplicaCode.PRIMARY)]
        ),
        WAIT_S,
    )
    hints = wait_for(
        "backup hints with live files",
        lambda: (h := _hints(cluster.etcd_endpoint, spec)).backups[0] and h.backups[0].live_nodes and h,
        WAIT_S,
    )
    needed = needed_offset(LOG, stored_hints(hints, spec.hint_prefix, SHARD_ID))
    assert needed.hints_key == backup_hints_key(spec.hint_prefix, SHARD_ID, 0)
    # The Shard service's GetHints answers the same hints; Apply's primary_hints writes the
    # `.primary` key (here: the verified backup, which needs no lower offset than the stored ones).
    fetched = shard_client.get_hints(SHARD_ID)
    assert (fetched.primary, fetched.backups) == (hints.primary, hints.backups)
    shard_client.apply_shards(
        [ShardChange(upsert=spec, expect_mod_revision=-1, primary_hints=hints.backups[0])]
    )
    assert (
        shard_client.get_hints(SHARD_ID).primary
        == hints.backups[0]
        == _hints(cluster.etcd_endpoint, spec).primary
    )
    hints = _hints(cluster.etcd_endpoint, spec)
    offset = needed.offset
    needed = needed_offset(LOG, stored_hints(hints, spec.hint_prefix, SHARD_ID))
    assert (needed.offset, needed.hints_key) == (offset, primary_hints_key(spec.hint_prefix, SHARD_ID))
    assert ends[1] <= needed.offset < ends[2]  # the last commit of batch 3

    more = [f"m{i % 4}" for i in range(30)]
    keys += more
    shard_client.stat_shard(SHARD_ID, {SOURCE: _publish(client, more)}, timeout=WAIT_S)
    assert client.flush(LOG) is not None
    persisted = [f for f in client.list_fragments(LOG) if f.backing_store]
    assert [f.begin for f in persisted[1:]] == [f.end for f in persisted[:-1]]  # contiguous
    expect_removed = [f for f in persisted if f.end <= needed.offset]
    assert {f.end for f in expect_removed} >= set(ends[:2]) and len(expect_removed) < len(persisted)

    # A dry run names them and removes nothing.
    out = ok(gazette("shards", "prune", "--shard", SHARD_ID, "--dry-run", env=env))
    assert f"hints need offset {needed.offset} onward" in out
    assert f"{len(expect_removed)} fragment(s) to prune" in out
    for f in persisted:
        assert (f"would remove [{f.begin}, {f.end})" in out) == (f in expect_removed)
        assert _stored(store_dir, f)

    out = ok(gazette("shards", "prune", "-l", f"id={SHARD_ID}", env=env))
    assert f"{len(expect_removed)} fragment(s) pruned" in out
    assert [f for f in persisted if not _stored(store_dir, f)] == expect_removed
    # The brokers' indices still list removed fragments until their next refresh; pruning again
    # (removing absent objects) is harmless.
    ok(gazette("shards", "prune", "--shard", SHARD_ID, env=env))
    assert [f for f in persisted if _stored(store_dir, f)] == persisted[len(expect_removed) :]

    # A fresh recovery after pruning starts at the hinted offset and rebuilds the live store.
    again_dir = str(tmp_path / "again")
    out = ok(gazette("shards", "recover", "--shard", SHARD_ID, "--dir", again_dir, "-o", "json", env=env))
    doc = json.loads(out)
    assert doc["hints_key"] == needed.hints_key and doc["start_offset"] == needed.offset
    assert [f["path"] for f in doc["files"]] == ["state.json"]
    assert _files(again_dir) == _files(_primary(group).recovery.directory)
    assert decode_state_file(_files(again_dir)["state.json"]).state == {"counts": dict(Counter(keys))}


class Gated(Application):
    """Counts messages in memory; a message {"k": "hold"} blocks its transaction until `gate` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.holding = threading.Event()

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if not env.is_ack and env.message["k"] == "hold":
            self.holding.set()
            assert self.gate.wait(WAIT_S), "the test never opened the gate"


def test_list_lag_is_source_head_minus_checkpoint(cluster, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(SOURCE, replication=1, labels=NDJSON)])
    cluster.wait_for_routes([SOURCE])
    app = Gated()
    group = cluster.run_consumer(app, [ShardSpec(SHARD_ID, [SOURCE], max_txn_duration="50ms")])
    env = {"GAZETTE_ETCD": cluster.etcd_endpoint, "GAZETTE_CONSUMER_ROOT": group.root,
           "GAZETTE_BROKER": cluster.broker_endpoints[0]}  # fmt: skip
    try:
        group.wait_for_primaries()
        head = _publish(client, [f"a{i}" for i in range(10)])
        group.client().stat_shard(SHARD_ID, {SOURCE: head}, timeout=WAIT_S)
        (row,) = json.loads(ok(gazette("shards", "list", "--lag", "-o", "json", env=env)))
        assert (row["lag"], row["source_lag"]) == (0, {SOURCE: 0})

        held = _publish(client, ["hold"] + [f"b{i}" for i in range(5)])
        assert app.holding.wait(WAIT_S)  # the transaction reading them cannot commit
        (row,) = json.loads(ok(gazette("shards", "list", "--lag", "-o", "json", env=env)))
        assert (row["lag"], row["source_lag"]) == (held - head, {SOURCE: held - head})
        table = ok(gazette("shards", "list", "--lag", "-v", env=env))
        assert "lag" in table and f"{SOURCE}={held - head}" in table
        assert "source lag" not in ok(gazette("shards", "list", "--lag", env=env))

        app.gate.set()
        group.client().stat_shard(SHARD_ID, {SOURCE: held}, timeout=WAIT_S)
        (row,) = json.loads(ok(gazette("shards", "list", "--lag", "-o", "json", env=env)))
        assert row["lag"] == 0
    finally:
        app.gate.set()
