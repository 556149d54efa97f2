"""Consumer faults on subprocess clusters with the stream-sum example (reference 9.1, issue 5).

Scenario 3 (a crash between the store commit and its ACK appends; recovery re-publishes the ACK
intents, read-committed readers see the outputs once) is covered in process by
tests/consumer/test_consumer.py::test_word_count_exactly_once_through_a_crash_between_commit_and_acks.
Here: 4, a SIGKILL in the middle of a transaction rolls its published outputs back; 1, four chunker
workers publish into 8 partitions while summer processes and brokers are SIGKILLed, and every stream
still verifies; 2, a primary SIGSTOPped inside a transaction while its standby is promoted and
commits, resumed believing it is still primary (the test hook holds its etcd view back): only its
store's fence (SQLStore's fence column, or JSONFileStore's recovery-log author) refuses its commit.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import threading
import time

import orjson
import pytest
from faults.harness import REPLICATION, log_tails, say, wait_for, wait_for_full_route

from gazette.consumer import ReplicaCode, ShardInfo, ShardSpec
from gazette.examples import streamsum
from gazette.testing.zombie import ENTRY_MODULE as ZOMBIE_ENTRY

LONG_TXN = "600s"  # a transaction that stays open until the test kills its process


def test_a_crash_mid_transaction_rolls_back_its_published_outputs(make_cluster, etcd_root, tmp_path) -> None:
    cluster = make_cluster(brokers=1)
    client = cluster.client()
    client.apply_journals(streamsum.journals(1))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    source = streamsum.chunks_journal(0)
    open_spec = ShardSpec("summer-000", [source], min_txn_duration=LONG_TXN, max_txn_duration=LONG_TXN)
    group = cluster.run_consumer(streamsum.Summer(db_dir), [open_spec], root=f"{etcd_root}/consumers")
    group.wait_for_primaries()

    chunker = streamsum.Chunker(client, 1, streams=6, chunks=2, seed=4)
    chunker.publish()
    # The open transaction consumed every chunk and appended each stream's sum, uncommitted.
    ids = list(chunker.expected)
    wait_for(
        "the open transaction's sums to be appended",
        lambda: all(sid.encode() in client.read_all(streamsum.SUMS_JOURNAL) for sid in ids),
    )
    assert streamsum.read_sums(client) == []  # not committed: invisible to read-committed readers
    group.kill(0)  # SIGKILL mid-transaction: its store rows and outputs never commit
    assert streamsum.read_sums(client) == []

    # A successor (with short transactions) re-consumes the chunks and commits each sum once; the
    # crashed transaction's appended sums stay rolled back.
    group.apply([ShardSpec("summer-000", [source], max_txn_duration="100ms")])
    group.restart(0)
    sums = streamsum.verify(client, chunker.expected, timeout=60, list_shards=group.list_shards)
    assert len(sums) == len(ids)
    raw = client.read_all(streamsum.SUMS_JOURNAL)
    assert all(raw.count(sid.encode()) == 2 for sid in ids)  # each appended twice, read once
    group.wait_for_primaries()
    assert streamsum.check(chunker.expected, streamsum.read_sums(client)) == len(ids)


def _replicas(shards: list[ShardInfo]) -> dict[str, dict[str, ReplicaCode]]:
    """Shard id -> consumer member suffix -> replica status code."""
    return {s.spec.id: {r.suffix: r.status.code for r in s.replicas} for s in shards}


def _member_of(suffix: str) -> int:
    return int(suffix.split("-")[1])  # ConsumerGroup suffixes are consumer-<index>-<nonce>


def _placed(shards: list[ShardInfo]) -> bool:
    """Every shard has a PRIMARY and a STANDBY."""
    return all(
        sorted(codes.values()) == sorted([ReplicaCode.PRIMARY, ReplicaCode.STANDBY])
        for codes in _replicas(shards).values()
    )


CHUNKER_WORKERS = 4
SOURCE_PARTITIONS = 8


class _Publishing:
    """Each chunker worker publishes its next `step` chunks (all with None) on its own thread."""

    def __init__(self, chunkers: list[streamsum.Chunker], step: int | None) -> None:
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._work, args=(ch, step), name=f"chunker-{i}")
            for i, ch in enumerate(chunkers)
        ]
        for t in self.threads:
            t.start()

    def _work(self, chunker: streamsum.Chunker, step: int | None) -> None:
        try:
            chunker.publish(step)
        except BaseException as exc:  # raised by join()
            self.errors.append(exc)

    def join(self, timeout_s: float = 180.0) -> None:
        for t in self.threads:
            t.join(timeout=timeout_s)
            assert not t.is_alive(), f"{t.name} still publishing after {timeout_s:.0f} s"
        if self.errors:
            raise self.errors[0]


@pytest.mark.parametrize(
    "rounds",
    [
        pytest.param(2, id="ci"),
        pytest.param(20, id="soak", marks=[pytest.mark.soak, pytest.mark.timeout(3600)]),
    ],
)
def test_stream_sums_verify_through_summer_and_broker_sigkills(
    make_cluster, etcd_root, tmp_path, rounds: int
) -> None:
    """Scenario 1: 4 chunker workers publish concurrently into 8 partitions while, one at a time, a
    summer process holding primaries and a random broker (any of the three: clients fail over) are
    SIGKILLed and restarted. Every stream's final sum verifies, exactly once."""
    seed = int(os.environ.get("GAZETTE_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    cluster = make_cluster(brokers=3)
    client = cluster.client()
    client.apply_journals(
        [
            cluster.journal_spec(j.name, replication=REPLICATION, labels=streamsum.JSON_LABELS)
            for j in streamsum.journals(SOURCE_PARTITIONS)
        ]
    )
    for j in streamsum.journals(SOURCE_PARTITIONS):
        wait_for_full_route(cluster, j.name)
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    group = cluster.run_consumer(
        streamsum.Summer(db_dir),
        streamsum.shards(SOURCE_PARTITIONS, hot_standbys=1, max_txn_duration="200ms"),
        processes=2,
        root=f"{etcd_root}/consumers",
    )
    group.wait_for(_placed, 120, "a PRIMARY and a STANDBY of every shard")
    chunkers = [
        streamsum.Chunker(
            client, SOURCE_PARTITIONS, streams=8 * rounds, chunks=3, seed=seed * CHUNKER_WORKERS + i
        )
        for i in range(CHUNKER_WORKERS)
    ]
    expected = {sid: want for ch in chunkers for sid, want in ch.expected.items()}
    step = max(1, chunkers[0].remaining // (2 * rounds + 1))
    report = [f"seed {seed}, {sum(ch.remaining for ch in chunkers)} chunks from {CHUNKER_WORKERS} workers"]
    promoted: list[str] = []
    summer_kills = broker_kills = 0

    def unconsumed() -> int:
        """Chunks not yet published (so certainly not consumed) across the workers."""
        return sum(ch.remaining for ch in chunkers)

    try:
        for n in range(rounds):
            # A summer process holding primaries: SIGKILL while workers publish; standbys take over.
            before = _replicas(group.wait_for(_placed, 120, "every shard placed"))
            victim = _member_of(
                next(s for codes in before.values() for s, c in codes.items() if c == ReplicaCode.PRIMARY)
            )
            publishing = _Publishing(chunkers, step)
            left = unconsumed()
            group.kill(victim)
            summer_kills += left > 0
            standbys = {
                sid: s for sid, codes in before.items() for s, c in codes.items() if c == ReplicaCode.STANDBY
            }

            def promotion(shards: list[ShardInfo], standbys: dict[str, str] = standbys) -> bool:
                now = _replicas(shards)
                promoted[:] = [sid for sid, s in standbys.items() if now[sid].get(s) == ReplicaCode.PRIMARY]
                return bool(promoted) and all(ReplicaCode.PRIMARY in codes.values() for codes in now.values())

            group.wait_for(promotion, 120, "a standby to become PRIMARY")
            publishing.join()
            say(report, f"round {n}: SIGKILL summer member {victim} with {left} chunks unpublished; "
                        f"standbys promoted on {len(promoted)} shards")  # fmt: skip
            group.restart(victim)

            # Any broker, broker 0 included (clients and summers fail over to the others).
            publishing = _Publishing(chunkers, step)
            left = unconsumed()
            broker = rng.choice([0, 1, 2])
            cluster.kill_broker(broker)
            broker_kills += left > 0
            cluster.restart_broker(broker)  # R=3 on 3 brokers: appends wait for it to be back
            publishing.join()
            for j in streamsum.journals(SOURCE_PARTITIONS):
                wait_for_full_route(cluster, j.name)
            say(report, f"round {n}: SIGKILL broker-{broker} with {left} chunks unpublished")
        _Publishing(chunkers, None).join()
        sums = streamsum.verify(client, expected, timeout=180, list_shards=group.list_shards)
        assert len(sums) == len(expected)
        say(report, f"{len(sums)} streams verified")
    except BaseException:
        print("\n".join(report))
        print(log_tails(cluster))
        raise
    assert summer_kills >= 1 and broker_kills >= 1, report
    assert promoted, "no standby was seen becoming PRIMARY"


def _sums_rows(path: str) -> dict[str, tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        return {sid: (seq, crc) for sid, seq, crc in conn.execute("SELECT id, seq, crc FROM sums")}
    finally:
        conn.close()


ZOMBIE_MIN_TXN = "8s"  # the zombie is stopped inside a transaction held open this long


def _raw_sums(client, offset: int = 0) -> list[dict]:
    """Every sum in the sums journal from `offset`, committed or not (what a raw reader sees; ACKs
    are left out)."""
    lines = client.read_all(streamsum.SUMS_JOURNAL, offset).splitlines()
    return [msg for msg in map(orjson.loads, lines) if "id" in msg]


@pytest.mark.parametrize("store", ["sql", "json"])
def test_a_zombie_primary_is_fenced_by_its_store(make_cluster, etcd_root, tmp_path, store: str) -> None:
    """Scenario 2: the primary is SIGSTOPped inside a transaction, its hot standby is promoted,
    recovers and commits; the old primary resumes believing it is still primary (its etcd view is
    held back by gazette.testing.zombie), and only its store's fence (SQLStore's fence column, or the
    recovery log's author register under JSONFileStore) refuses its commit. None of its effects
    (store rows or state, published sums) become visible."""
    json_store = store == "json"
    cluster = make_cluster(brokers=1)
    client = cluster.client()
    client.apply_journals(streamsum.journals(1, recovery_logs=json_store))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    app = streamsum.JSONSummer() if json_store else streamsum.Summer(db_dir)
    (spec,) = streamsum.shards(
        1, hot_standbys=1, hint_prefix=f"{etcd_root}/hints" if json_store else "",
        min_txn_duration=ZOMBIE_MIN_TXN, max_txn_duration="60s",
    )  # fmt: skip
    # Members run through the zombie entry point: a SIGUSR1 makes one a zombie.
    group = cluster.run_consumer(
        app, [spec], processes=2, root=f"{etcd_root}/consumers", entry_module=ZOMBIE_ENTRY
    )
    (placed,) = group.wait_for(_placed, 120, "a PRIMARY and a STANDBY")
    codes = _replicas([placed])[spec.id]
    zombie = _member_of(next(s for s, c in codes.items() if c == ReplicaCode.PRIMARY))
    successor_suffix = next(s for s, c in codes.items() if c == ReplicaCode.STANDBY)

    first = streamsum.Chunker(client, 1, streams=4, chunks=2, seed=1)
    first.publish()
    streamsum.verify(client, first.expected, timeout=90, list_shards=group.list_shards)
    after_first = client.read_head(streamsum.SUMS_JOURNAL)

    # The primary opens a transaction over the second batch and publishes (uncommitted) sums.
    second = streamsum.Chunker(client, 1, streams=4, chunks=2, seed=2)
    second.publish()
    wait_for("the primary's uncommitted sums of the second batch",
             lambda: {s["id"] for s in _raw_sums(client, after_first)} >= set(second.expected))  # fmt: skip
    zombie_log = group.members[zombie].log_path
    os.kill(group.pid(zombie), signal.SIGUSR1)
    wait_for("the primary to hold its etcd view", lambda: "TEST HOOK: holding" in open(zombie_log).read())
    cluster.pause_consumer(zombie)
    try:
        # Its lease expires; the standby is promoted, recovers, and commits the second batch itself.
        group.wait_for(
            lambda shards: _replicas(shards)[spec.id].get(successor_suffix) == ReplicaCode.PRIMARY,
            120, "the standby to become PRIMARY",
        )  # fmt: skip
        streamsum.verify(
            client, second.expected, offset=after_first, timeout=90, list_shards=group.list_shards
        )
    finally:
        cluster.resume_consumer(zombie)

    # The zombie's transaction ends and its commit is refused by the fence.
    fenced = "fence is no longer" if not json_store else "REGISTER_MISMATCH"
    wait_for("the zombie's commit to fail with a fencing error",
             lambda: "FencingError" in (text := open(zombie_log).read()) and fenced in text, 60)  # fmt: skip
    # Nothing of the zombie's transaction is visible: every stream's sum is committed exactly once
    # (the zombie's own sums of the second batch stay uncommitted in the journal), and the store
    # holds the successor's state.
    expected = first.expected | second.expected
    raw_ids = [s["id"] for s in _raw_sums(client, after_first)]
    assert all(raw_ids.count(sid) >= 2 for sid in second.expected)  # the zombie's and the successor's
    assert streamsum.check(expected, streamsum.read_sums(client)) == len(expected)
    third = streamsum.Chunker(client, 1, streams=4, chunks=2, seed=3)
    third.publish()  # the successor carries on
    streamsum.verify(client, expected | third.expected, timeout=90, list_shards=group.list_shards)
    if not json_store:
        rows = _sums_rows(os.path.join(db_dir, f"{spec.id}.db"))
        assert {sid: seq for sid, (seq, _) in rows.items()} == {
            sid: want["seq"] for sid, want in (expected | third.expected).items()
        }
