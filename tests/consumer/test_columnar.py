"""The columnar consumer path (BatchApplication) on a real LocalCluster: the columnar word count
keeps the exactly-once oracle through a member crash, and an undecodable chunk fails its shard
naming the journal and offsets."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pyarrow as pa

from gazette.consumer import BatchApplication, MemoryStore, Shard, ShardSpec
from gazette.consumer.columnar import Columnar
from gazette.consumer.status import ReplicaCode
from gazette.examples import wordcount
from gazette.examples.wordcount_columnar import ColumnarWordCount
from gazette.message import Publisher
from gazette.protocol.spec import JournalSpec


def oracle(client: Any, words: list[str]) -> None:
    """Every count becomes readable, and each word's published counts are 1..n, each once, in order."""
    want = Counter(words)
    deadline = time.monotonic() + 60
    while Counter(w for w, _ in wordcount.read_counts(client)) != want:
        assert time.monotonic() < deadline, "the counts never became readable"
        time.sleep(0.05)
    by_word: dict[str, list[int]] = {}
    for w, n in wordcount.read_counts(client):
        by_word.setdefault(w, []).append(n)
    assert by_word == {w: list(range(1, n + 1)) for w, n in want.items()}


def test_columnar_word_count_is_exactly_once_through_a_crash(cluster, tmp_path, monkeypatch) -> None:
    """wordcount.run's crash: a member dies between a store commit and its ACKs once about half the
    words are counted, and a fresh one restores from the checkpoint the columnar path wrote."""
    tables = []
    consume = ColumnarWordCount.consume_batch

    def counted(self: Any, shard: Shard, store: Any, journal: str, batch: pa.Table, pub: Publisher) -> None:
        tables.append(batch.num_rows)
        consume(self, shard, store, journal, batch, pub)

    monkeypatch.setattr(ColumnarWordCount, "consume_batch", counted)
    words = [f"w{i % 7}" for i in range(300)]
    counts = wordcount.run(
        cluster, words, partitions=2, kill_consumer_at=0.5, db_dir=str(tmp_path), columnar=True
    )
    assert counts == dict(Counter(words))
    assert sum(tables) >= len(words)  # every word went through consume_batch (some twice: the crash)
    oracle(cluster.client(), words)


class Strict(BatchApplication):
    def new_store(self, shard: Shard, recorder: Any) -> Any:
        return MemoryStore()

    def source_schema(self, journal: str) -> pa.Schema:
        return pa.schema([pa.field("n", pa.int64())])

    def consume_batch(self, shard: Shard, store: Any, journal: str, batch: pa.Table, pub: Publisher) -> None:
        pass


def test_an_undecodable_chunk_fails_the_shard_naming_journal_and_offsets(cluster) -> None:
    journal = "tests/columnar-bad/part-000"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=wordcount.JSON_LABELS)])
    cluster.wait_for_routes()
    data = b'{"n": 1}\n{"n": "not a number"}\n'
    client.append(journal, data)
    group = cluster.run_consumer(Strict(), [ShardSpec("bad-columnar", [journal])])
    (info,) = group.wait_for(
        lambda shards: shards[0].primary is not None and shards[0].primary.status.code == ReplicaCode.FAILED,
        60,
        "the primary to fail",
    )
    error = info.primary.status.error
    assert "FramingError" in error and repr(journal) in error and f"[0, {len(data)})" in error, error


def test_read_committed_tables_equal_read_committed(cluster) -> None:
    """The columnar reader yields what ReadCommitted yields (ACKs aside; in journal order rather than
    commit order), committed and uncommitted publishers mixed, one transaction never committed, and
    resumes from its checkpoint."""
    from gazette.message import ReadCommitted
    from gazette.message.columnar import ReadCommittedTables

    journal = "tests/columnar-read/part-000"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=wordcount.JSON_LABELS)])
    cluster.wait_for_routes()
    txn, plain, never = Publisher(client), Publisher(client), Publisher(client)
    for i in range(50):
        txn.publish_uncommitted(journal, {"n": i})
        if i % 7 == 0:
            plain.publish_committed(journal, {"n": 1000 + i})
        never.publish_uncommitted(journal, {"n": -i})
        if i % 10 == 9:
            txn.commit()
    for p in (txn, plain, never):
        p.flush()
    want = [e.message["n"] for e in ReadCommitted(client, journal, skip_acks=True)]
    fields = pa.schema([pa.field("n", pa.int64())])
    reader = ReadCommittedTables(client, journal, fields)
    tables = list(reader)
    got = [n for t in tables for n in t.column("n").to_pylist()]
    assert sorted(got) == sorted(want) and len(want) == 50 + 8
    begins = [b for t in tables for b in t.column("_begin").to_pylist()]
    assert begins == sorted(begins)
    txn.publish_uncommitted(journal, {"n": 50})
    txn.commit()
    txn.flush()
    resumed = ReadCommittedTables(client, journal, fields, checkpoint=reader.checkpoint())
    assert [n for t in resumed for n in t.column("n").to_pylist()] == [50]
    for p in (txn, plain, never):
        p.close()


class Deferring(BatchApplication):
    """Defers the first table that does not open its transaction; records what it consumed."""

    defers = True

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.deferred = 0
        self.calls = 0
        self.opening = False

    def new_store(self, shard: Shard, recorder: Any) -> Any:
        return MemoryStore()

    def source_schema(self, journal: str) -> pa.Schema:
        return pa.schema([pa.field("n", pa.int64())])

    def begin_txn(self, shard: Shard, store: Any) -> None:
        self.opening = True

    def consume_batch(
        self, shard: Shard, store: Any, journal: str, batch: pa.Table, pub: Publisher
    ) -> int | None:
        self.calls += 1
        if not self.opening and not self.deferred:
            self.deferred += 1
            return 0
        self.opening = False
        self.seen.extend(batch.column("n").to_pylist())
        return None


def test_a_deferred_table_is_consumed_once_in_the_next_transaction(cluster) -> None:
    journal = "tests/columnar-defer/part-000"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=wordcount.JSON_LABELS)])
    cluster.wait_for_routes()
    app = Deferring()
    # A transaction stays open 3 s after its first table: the next append's table comes within it.
    group = cluster.run_consumer(
        app, [ShardSpec("defer-columnar", [journal], min_txn_duration=3.0, max_txn_duration=5.0)]
    )
    group.wait_for(lambda s: s[0].primary is not None, 30, "a primary")
    with Publisher(client) as pub:
        for i in range(40):  # one append per transaction: read chunks of a few each
            pub.publish_uncommitted(journal, {"n": i})
            pub.commit()
            pub.flush()
    group.wait_for(lambda _: len(app.seen) >= 40, 60, "every message consumed")
    assert sorted(app.seen) == list(range(40))  # once each, deferred or not
    assert app.deferred == 1


def test_a_span_open_across_a_restore_is_replayed_from_the_journal(cluster, tmp_path, monkeypatch) -> None:
    """A transaction left open when the primary's checkpoint was committed (its span begun before
    it), then the member crashes; once the new primary restored that checkpoint, the transaction's
    ACK commits the span, whose messages it reads back from the journal (the history read on the
    event loop): every word counted once, each word's counts 1..n once."""
    reads: list[tuple[str, int, int]] = []
    history = Columnar.history

    def recorded(self: Columnar, journal: str, lo: int, hi: int) -> pa.Table:
        reads.append((journal, lo, hi))
        return history(self, journal, lo, hi)

    monkeypatch.setattr(Columnar, "history", recorded)
    client = cluster.client()
    client.apply_journals(wordcount.journals(1))
    cluster.wait_for_routes()
    journal = wordcount.words_journal(0)
    db_dir = str(tmp_path)
    group = cluster.run_consumer(ColumnarWordCount(db_dir), wordcount.shards(1))
    group.wait_for(lambda s: s[0].primary is not None, 30, "a primary")
    open_txn, committed = Publisher(client), Publisher(client)
    early = ["a", "b", "a"]
    for w in early:
        open_txn.publish_uncommitted(journal, {"word": w})
    open_txn.flush()
    for w in ["c", "a", "d"]:
        committed.publish_committed(journal, {"word": w})
    committed.flush()
    group.wait_for(
        lambda _: sum(wordcount.store_counts(db_dir).values()) >= 3, 30, "the committed words counted"
    )
    group.kill(0)
    late = ["b", "e"]
    for w in late:
        open_txn.publish_uncommitted(journal, {"word": w})
    open_txn.commit()
    open_txn.flush()
    group.restart(0)
    words = early + ["c", "a", "d"] + late
    group.wait_for(
        lambda _: sum(wordcount.store_counts(db_dir).values()) >= len(words), 60, "every word counted"
    )
    assert wordcount.store_counts(db_dir) == dict(Counter(words))
    oracle(client, words)
    assert reads and reads[0][:2] == (journal, 0)  # the open span, from its first message
    open_txn.close()
    committed.close()
