"""JSONFileStore on a recovery log: commits with the checkpoint after their dependencies, the author
fence refusing a deposed primary, and a hot standby (BACKFILL, then STANDBY while tailing) taking over
from a crashed primary with its state intact, then a restarted standby playing back from hints."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from gazette.client.aio import AsyncClient
from gazette.client.append_service import AsyncAppendService
from gazette.consumer import (
    Application,
    Consumer,
    ConsumerCheckpoint,
    FencingError,
    ReplicaCode,
    Shard,
    ShardInfo,
    ShardSpec,
    json_store,
)
from gazette.consumer.json_store import JSONFileStore, decode_state_file, encode_state_file
from gazette.consumer.recoverylog import Player, Recorder, author_fence, new_author
from gazette.message import Envelope, Publisher, ReadCommitted
from gazette.message.checkpoint import Checkpoint
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG

WAIT_S = 60.0
SOURCE = "tests/tally/input"
SHARD_ID = "tally-000"
LOG = f"tests/recovery/{SHARD_ID}"
SHARD = SimpleNamespace(fqn=f"/consumers/items/{SHARD_ID}")


def _create_journals(cluster) -> None:
    cluster.client().apply_journals(
        [
            cluster.journal_spec(SOURCE, replication=1, labels={"content-type": "application/x-ndjson"}),
            cluster.journal_spec(LOG, replication=1, labels={"content-type": CONTENT_TYPE_RECOVERY_LOG}),
        ]
    )
    cluster.wait_for_routes([SOURCE, LOG])


async def _playback(aio: AsyncClient, directory: str, author: int = 0) -> Player:
    player = Player(aio, LOG, directory)
    task = asyncio.create_task(player.play())
    player.inject_handoff(author) if author else player.finish_at_head()
    await asyncio.wait_for(task, WAIT_S)
    return player


async def _store(aio: AsyncClient, directory: str) -> JSONFileStore:
    """A JSONFileStore of a new primary: the log played back and handed off to a new author."""
    author = new_author()
    player = await _playback(aio, directory, author)
    return JSONFileStore(Recorder(AsyncAppendService(aio), player.fsm, author, directory, player.write_head))


async def _recover(aio: AsyncClient, directory: str) -> dict[str, Any]:
    """state.json as an offline playback of the log rebuilds it (what `shards recover` would do),
    as {"state": ..., "checkpoint": ConsumerCheckpoint.to_dict()}; it must be in Gazette's layout."""
    await _playback(aio, directory)
    with open(os.path.join(directory, "state.json"), "rb") as f:
        decoded = decode_state_file(f.read())
    assert not decoded.legacy
    return {"state": decoded.state, "checkpoint": decoded.checkpoint.to_dict()}


def _recovered(endpoint: str, directory: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with AsyncClient(endpoint) as aio:
            return await _recover(aio, directory)

    return asyncio.run(run())


def _cp(n: int) -> ConsumerCheckpoint:
    return ConsumerCheckpoint(Checkpoint({SOURCE: n}, []), {"tests/out": b"ack %d\n" % n})


async def _done(future: concurrent.futures.Future) -> Any:
    return await asyncio.wait_for(asyncio.wrap_future(future), WAIT_S)


async def test_commits_wait_for_dependencies_and_a_deposed_primary_is_fenced(cluster, tmp_path) -> None:
    _create_journals(cluster)
    with pytest.raises(ValidationError, match="needs a recovery log"):
        JSONFileStore(None)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        old = await _store(aio, str(tmp_path / "old"))
        assert old.restore_checkpoint(SHARD) == ConsumerCheckpoint() and old.state == {}
        old.state["n"] = 1
        assert await _done(old.start_commit(SHARD, _cp(1), [])) == _cp(1)

        new = await _store(aio, str(tmp_path / "new"))  # takes the log over from `old`
        assert new.restore_checkpoint(SHARD) == _cp(1) and new.state == {"n": 1}

        old.state["n"] = 99  # the zombie's commit is refused by the author register
        with pytest.raises(FencingError, match="author register is no longer"):
            await _done(old.start_commit(SHARD, _cp(99), []))
        assert isinstance(old.start_commit(SHARD, _cp(100), []).exception(), FencingError)

        # A commit is appended only after its dependencies succeeded.
        dependency: concurrent.futures.Future = concurrent.futures.Future()
        new.state["n"] = 2
        commit = new.start_commit(SHARD, _cp(2), [dependency])
        await asyncio.sleep(0.2)
        assert not commit.done()
        dependency.set_result(None)
        assert await _done(commit) == _cp(2)

        log_bytes = await aio.read_all(LOG)
        assert b'"n":99' not in log_bytes and b'"n":2' in log_bytes
        recovered = await _recover(aio, str(tmp_path / "third"))
        assert recovered == {"state": {"n": 2}, "checkpoint": _cp(2).to_dict()}

        # A failed dependency fails the commit, and nothing of it reaches the log.
        failed: concurrent.futures.Future = concurrent.futures.Future()
        failed.set_exception(GazetteError(0, "an ACK append failed"))
        new.state["n"] = 3
        with pytest.raises(GazetteError, match="dependency failed"):
            await _done(new.start_commit(SHARD, _cp(3), [failed]))
        assert await aio.read_all(LOG) == log_bytes
        new.state["bad"] = {1, 2}  # a set is not JSON
        with pytest.raises(ValidationError, match="not JSON-serializable"):
            new.start_commit(SHARD, _cp(4), []).result()


async def test_a_state_file_of_gazette_py_before_is_rewritten_in_gazettes_layout(
    cluster, tmp_path, monkeypatch
) -> None:
    """A log whose state.json an earlier gazette-py recorded ({"state", "checkpoint"} in one object):
    the next primary restores from it, and its first commit records Gazette's layout."""
    _create_journals(cluster)

    def earlier_format(state: Any, checkpoint: ConsumerCheckpoint) -> bytes:
        return orjson.dumps({"state": state, "checkpoint": checkpoint.to_dict()})

    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        old = await _store(aio, str(tmp_path / "old"))
        old.restore_checkpoint(SHARD)
        old.state["n"] = 5
        with monkeypatch.context() as patch:
            patch.setattr(json_store, "encode_state_file", earlier_format)
            await _done(old.start_commit(SHARD, _cp(5), []))
        with open(old.path, "rb") as f:
            assert decode_state_file(f.read()).legacy

        new = await _store(aio, str(tmp_path / "new"))
        assert new.restore_checkpoint(SHARD) == _cp(5) and new.state == {"n": 5}
        new.state["n"] = 6
        assert await _done(new.start_commit(SHARD, _cp(6), [])) == _cp(6)
        with open(new.path, "rb") as f:
            assert f.read() == encode_state_file({"n": 6}, _cp(6))
        assert await _recover(aio, str(tmp_path / "third")) == {
            "state": {"n": 6},
            "checkpoint": _cp(6).to_dict(),
        }


class Tally(Application):
    """Counts messages per key in a JSONFileStore; publishes each key to `output` if given."""

    def __init__(self, output: str = "") -> None:
        self.output = output

    def new_store(self, shard: Shard, recorder: Any) -> JSONFileStore:
        return JSONFileStore(recorder, {"counts": {}})

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        counts = store.state["counts"]
        counts[env.message["k"]] = counts.get(env.message["k"], 0) + 1
        if self.output:
            pub.publish_uncommitted(self.output, {"k": env.message["k"]})


def _publish(client, keys: list[str]) -> int:
    pub = Publisher(client)
    for k in keys:
        pub.publish_committed(SOURCE, {"k": k})
    pub.flush()
    pub.close()
    return client.read_head(SOURCE)


def _primary(group) -> Shard:
    """The in-process primary Shard of SHARD_ID."""
    for consumer in group.consumers:
        shard = consumer.shards.get(SHARD_ID) if consumer is not None else None
        if shard is not None and shard.is_primary:
            return shard
    raise AssertionError(f"no in-process primary of {SHARD_ID}")


def _wait_read_through(group, offset: int) -> Shard:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            shard = _primary(group)
            if shard.read_through.get(SOURCE, 0) >= offset:
                return shard
        except AssertionError:
            pass
        assert time.monotonic() < deadline, f"the primary never read through {SOURCE}:{offset}"
        time.sleep(0.05)


def test_hot_standby_takes_over_with_state_intact(cluster, etcd_root, tmp_path, monkeypatch) -> None:
    statuses: list[tuple[str, int, ReplicaCode]] = []
    set_status = Consumer.set_status

    async def recording(self: Consumer, shard: Shard, status: Any) -> None:
        statuses.append((self.suffix, shard.assignment.slot, status.code))
        await set_status(self, shard, status)

    monkeypatch.setattr(Consumer, "set_status", recording)
    _create_journals(cluster)
    client = cluster.client()
    spec = ShardSpec(
        SHARD_ID, [SOURCE], max_txn_duration="50ms", hot_standbys=1,
        recovery_log_prefix="tests/recovery", hint_prefix=f"{etcd_root}/hints", hint_backups=2,
    )  # fmt: skip
    group = cluster.run_consumer(Tally(), [spec], processes=2)

    def placed(shards: list[ShardInfo]) -> bool:
        codes = [(r.slot, r.status.code) for r in shards[0].replicas]
        return codes == [(0, ReplicaCode.PRIMARY), (1, ReplicaCode.STANDBY)]

    (info,) = group.wait_for(placed, WAIT_S, "a PRIMARY and a STANDBY")
    primary, standby = info.replicas
    # The standby played the log back (BACKFILL) before reporting STANDBY.
    assert [code for suffix, slot, code in statuses if suffix == standby.suffix and slot == 1] == [
        ReplicaCode.BACKFILL,
        ReplicaCode.STANDBY,
    ]

    keys = [f"k{i % 7}" for i in range(150)]
    head = _publish(client, keys)
    before = _wait_read_through(group, head)
    assert before.consumer.suffix == primary.suffix
    assert before.store.state["counts"] == dict(Counter(keys))

    # A crash of the primary's member: the standby, tailing the log, takes over once the lease expires.
    group.kill(int(primary.suffix.split("-")[1]))
    group.wait_for(
        lambda shards: (
            [(r.suffix, r.slot, r.status.code) for r in shards[0].replicas][:1]
            == [(standby.suffix, 0, ReplicaCode.PRIMARY)]
        ),
        WAIT_S,
        "the standby to become PRIMARY",
    )
    after = _primary(group)
    assert after.consumer.suffix == standby.suffix
    assert after.store.state["counts"] == dict(Counter(keys))  # intact, from the tailed log
    assert after.recovery.player.tailing.is_set() and after.recovery.player.start_offset == 0
    registers = client.append(LOG, b"").registers
    assert registers.values_of("author") == [author_fence(after.recorder.author)]

    more = [f"k{i % 5}" for i in range(100)]
    head = _publish(client, more)
    _wait_read_through(group, head)
    assert after.store.state["counts"] == dict(Counter(keys + more))  # exactly once across the crash

    # The restarted member becomes the new standby, playing back from the hints its peer stored.
    group.restart(int(primary.suffix.split("-")[1]))
    (info,) = group.wait_for(placed, WAIT_S, "a new STANDBY")
    new_standby = next(c for c in group.consumers if c is not None and c.suffix == info.replicas[1].suffix)
    player = new_standby.shards[SHARD_ID].recovery.player
    assert player.hints.live_nodes and player.start_offset > 0

    recovered = _recovered(cluster.broker_endpoints[0], str(tmp_path / "recovered"))
    assert recovered["state"] == {"counts": dict(Counter(keys + more))}
    assert recovered["checkpoint"]["sequencer"]["offsets"][SOURCE] == head


def test_a_fenced_primary_fails_and_its_effects_stay_invisible(cluster, etcd_root, tmp_path) -> None:
    _create_journals(cluster)
    output = "tests/tally/output"
    client = cluster.client()
    client.apply_journals(
        [cluster.journal_spec(output, replication=1, labels={"content-type": "application/x-ndjson"})]
    )
    cluster.wait_for_routes([output])
    spec = ShardSpec(
        SHARD_ID, [SOURCE], max_txn_duration="50ms",
        recovery_log_prefix="tests/recovery", hint_prefix=f"{etcd_root}/hints",
    )  # fmt: skip
    group = cluster.run_consumer(Tally(output), [spec])
    group.wait_for_primaries()
    first = [f"k{i % 3}" for i in range(30)]
    _wait_read_through(group, _publish(client, first))

    def committed_outputs() -> list[str]:
        return [e.message["k"] for e in ReadCommitted(client, output, skip_acks=True)]

    deadline = time.monotonic() + WAIT_S
    while len(committed_outputs()) < len(first):  # ACKs follow the commit
        assert time.monotonic() < deadline, "the first outputs never became readable"
        time.sleep(0.05)

    # Another process takes the log over (as a new primary would) while this primary still runs.
    taken = _recovered(cluster.broker_endpoints[0], str(tmp_path / "successor"))
    assert taken["state"] == {"counts": dict(Counter(first))}

    async def hand_off() -> None:
        async with AsyncClient(cluster.broker_endpoints[0]) as aio:
            await _playback(aio, str(tmp_path / "successor"), new_author())

    asyncio.run(hand_off())
    _publish(client, ["zombie"] * 5)
    (info,) = group.wait_for(
        lambda shards: shards[0].primary is not None and shards[0].primary.status.code == ReplicaCode.FAILED,
        WAIT_S,
        "the fenced primary to fail",
    )
    assert info.primary is not None
    assert "FencingError" in info.primary.status.error
    assert "author register is no longer" in info.primary.status.error
    # Nothing of the fenced transaction is visible: not its state, not its published messages.
    assert _recovered(cluster.broker_endpoints[0], str(tmp_path / "after"))["state"] == {
        "counts": dict(Counter(first))
    }
    assert sorted(committed_outputs()) == sorted(first)
    assert b"zombie" in client.read_all(output)  # it did publish them, uncommitted
