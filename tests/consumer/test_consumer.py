"""Consumers on a real broker and etcd: placement with a hot standby, failures, exactly-once word count."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any

from gazette.consumer import (
    Application,
    ConsumerCheckpoint,
    Hooks,
    MemoryStore,
    ReplicaCode,
    Shard,
    ShardInfo,
    ShardSpec,
)
from gazette.examples import wordcount
from gazette.message import Envelope, Publisher
from gazette.message.framing import framing_for
from gazette.protocol.spec import JournalSpec
from gazette.testing import wait_for

JSON = {"content-type": "application/x-ndjson"}


class Collect(Application):
    """Keeps consumed messages in a MemoryStore; raises on a message {"fail": true}."""

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        if env.message.get("fail"):
            raise ValueError(f"message at offset {env.begin} asked to fail")
        store.state.setdefault("seen", []).append(env.message["n"])


def _codes(shard: ShardInfo) -> list[tuple[int, ReplicaCode]]:
    return [(r.slot, r.status.code) for r in shard.replicas]


def test_hot_standby_placement_and_failed_shard(cluster) -> None:
    client = cluster.client()
    client.apply_journals([JournalSpec(name="tests/input/part-000", replication=1, labels=JSON)])
    cluster.wait_for_routes()
    spec = ShardSpec("collect-000", ["tests/input/part-000"], max_txn_duration="100ms", hot_standbys=1)
    group = cluster.run_consumer(Collect(), [spec], processes=2)

    def placed(shards: list[ShardInfo]) -> bool:
        return _codes(shards[0]) == [(0, ReplicaCode.PRIMARY), (1, ReplicaCode.STANDBY)]

    (info,) = group.wait_for(placed, 60, "a PRIMARY and a STANDBY")
    assert len({(r.zone, r.suffix) for r in info.replicas}) == 2  # on different members

    # A crash of the primary's member: once its lease expires the standby is promoted to PRIMARY.
    primary, standby = info.replicas
    group.kill(int(primary.suffix.split("-")[1]))
    group.wait_for(
        lambda shards: (
            [(r.suffix, r.slot, r.status.code) for r in shards[0].replicas][:1]
            == [(standby.suffix, 0, ReplicaCode.PRIMARY)]
        ),
        60,
        "the standby to become PRIMARY",
    )
    group.restart(int(primary.suffix.split("-")[1]))
    group.wait_for(placed, 60, "a new STANDBY")

    pub = Publisher(client)
    for n in range(3):
        pub.publish_committed("tests/input/part-000", {"n": n})
    pub.publish_committed("tests/input/part-000", {"n": 3, "fail": True})
    pub.flush()
    pub.close()

    (info,) = group.wait_for(
        lambda shards: shards[0].primary is not None and shards[0].primary.status.code == ReplicaCode.FAILED,
        60,
        "the primary to fail",
    )
    assert info.primary is not None
    assert "ValueError: message at offset" in info.primary.status.error
    assert "asked to fail" in info.primary.status.error
    # FAILED stays assigned (until an unassign), and the standby is still a standby.
    assert _codes(info) == [(0, ReplicaCode.FAILED), (1, ReplicaCode.STANDBY)]


def test_word_count_exactly_once_through_a_crash_between_commit_and_acks(cluster, tmp_path) -> None:
    client = cluster.client()
    partitions = 2
    client.apply_journals(wordcount.journals(partitions))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)

    crash = threading.Event()
    held: list[ConsumerCheckpoint] = []
    crashed: list[Any] = []  # the consumer whose ACKs are held back

    def ack_gate(shard: Shard, checkpoint: ConsumerCheckpoint) -> bool:
        # The first consumer "crashes" after a commit with ACK intents once 200 words are stored:
        # its ACK appends never happen; the restarted consumer acknowledges normally.
        if shard.consumer in crashed:
            return False
        if not crashed and checkpoint.ack_intents and sum(wordcount.store_counts(db_dir).values()) >= 200:
            held.append(checkpoint)
            crashed.append(shard.consumer)
            crash.set()
            return False
        return True

    group = cluster.run_consumer(
        wordcount.WordCount(db_dir),
        wordcount.shards(partitions, max_txn_duration="50ms"),
        hooks=Hooks(ack_gate=ack_gate),
    )
    group.wait_for_primaries()

    vocabulary = [f"w{i}" for i in range(20)]
    words = [vocabulary[(i * 7) % len(vocabulary)] for i in range(1000)]
    wordcount.publish_words(client, words[:600], partitions)
    assert crash.wait(60), "no transaction reached the crash point"
    group.kill(0)  # a crash: the held ACKs and anything unsent are dropped

    # The committed transaction's outputs are pending (no ACK) for read-committed readers now.
    seen_before = wordcount.read_counts(client)
    expected_total = Counter(words)
    group.restart(0)
    wordcount.publish_words(client, words[600:], partitions)
    group.wait_for(
        lambda _: wordcount.store_counts(db_dir) == dict(expected_total), 90, "every word to be counted"
    )
    assert held and held[0].ack_intents

    def complete(counts: list[tuple[str, int]]) -> bool:
        return Counter(w for w, _ in counts) == expected_total

    group.wait_for(lambda _: complete(wordcount.read_counts(client)), 60, "every count to be readable")
    counts = wordcount.read_counts(client)
    # Exactly once: each word's published counts are 1..total, each once, in order.
    by_word: dict[str, list[int]] = {}
    for w, n in counts:
        by_word.setdefault(w, []).append(n)
    assert by_word == {w: list(range(1, n + 1)) for w, n in expected_total.items()}
    # The crash held back committed outputs: recovery re-published them (they were not visible before).
    assert len(seen_before) < len(counts)


def test_word_count_example_run_with_a_crash(cluster, tmp_path) -> None:
    words = [f"w{i % 7}" for i in range(300)]
    counts = wordcount.run(cluster, words, partitions=2, kill_consumer_at=0.5, db_dir=str(tmp_path))
    assert counts == dict(Counter(words))
    # The crashed member's held ACKs are re-published by its successor: every count becomes readable.
    client = cluster.client()
    deadline = time.monotonic() + 60
    while Counter(w for w, _ in wordcount.read_counts(client)) != Counter(words):
        assert time.monotonic() < deadline, "the held counts never became readable"
        time.sleep(0.05)
    by_word: dict[str, list[int]] = {}
    for w, n in wordcount.read_counts(client):
        by_word.setdefault(w, []).append(n)
    assert by_word == {w: list(range(1, n + 1)) for w, n in Counter(words).items()}


class CollectGoFramed(Application):
    """Records the committed messages of sources whose UUID is at /UUID (as Gazette's Go examples frame
    them), saying so with `source_framing_options`."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.lock = threading.Lock()

    def source_framing_options(self, journal: str) -> dict[str, Any]:
        return {"uuid_pointer": "/UUID"}

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if not env.is_ack:
            with self.lock:
                self.seen.append(env.message["n"])


def test_sources_are_decoded_with_the_applications_framing_options(cluster) -> None:
    """Messages with their UUID at the top level (/UUID): committed ones are consumed once each, those of
    a transaction never committed are not, and ACKs are not taken for messages."""
    journal = "tests/go-framed/part-000"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=JSON)])
    cluster.wait_for_routes()
    go_json = {JSON["content-type"]: framing_for(JSON["content-type"], uuid_pointer="/UUID")}
    committed = Publisher(client, framings=go_json)
    never_committed = Publisher(client, framings=go_json)
    committed.publish_committed(journal, {"n": 0})
    never_committed.publish_uncommitted(journal, {"n": 99})
    never_committed.flush()
    for n in (1, 2):
        committed.publish_committed(journal, {"n": n})
    committed.flush()
    raw = client.read_all(journal).splitlines()
    assert all(b'"UUID"' in line and b"_meta" not in line for line in raw)

    app = CollectGoFramed()
    group = cluster.run_consumer(app, [ShardSpec("go-framed-000", [journal], max_txn_duration="50ms")])
    group.wait_for_primaries()
    wait_for("the three committed messages consumed", lambda: len(app.seen) >= 3, 60)
    committed.publish_committed(journal, {"n": 3})  # one more after: nothing of 99 came before it
    committed.flush()
    wait_for("the fourth committed message consumed", lambda: len(app.seen) >= 4, 60)
    assert app.seen == [0, 1, 2, 3]
    for pub in (committed, never_committed):
        pub.close()
