"""Word count: an exactly-once consumer that counts words per shard in an SQLStore.

Words are published as JSON `{"word": w}` to `examples/words/part-NNN` journals; shard `count-NNN`
reads part NNN, keeps `counts(word, count)` in its own sqlite file and, for every word it consumes,
publishes `{"word": w, "count": n}` (uncommitted) to `examples/word-counts`. A read-committed reader of
that journal therefore sees, for each word, every count from 1 to its total exactly once.
"""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
import threading
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from gazette.client.sync import Client
from gazette.consumer import Application, ConsumerGroup, Hooks, Shard, ShardSpec, SQLStore
from gazette.consumer.store import ConsumerCheckpoint, Store
from gazette.message import Envelope, Publisher, ReadCommitted
from gazette.message.uuid import Flags
from gazette.protocol.spec import JournalSpec

WORDS_PREFIX = "examples/words/part-"
COUNTS_JOURNAL = "examples/word-counts"
JSON_LABELS = {"content-type": "application/x-ndjson"}
# Count messages are published in batches of this many while a transaction reads, so their appends
# overlap its reading instead of all waiting for its commit (the rest go out in finalize_txn).
OUTPUT_BATCH = 4096
_ACK_TXN = int(Flags.ACK_TXN)
LOAD_BATCH = 500  # words per query when a span's counts are read (under SQLite's 999 variables)


def words_journal(i: int) -> str:
    return f"{WORDS_PREFIX}{i:03d}"


def partition_of(word: str, partitions: int) -> int:
    return zlib.crc32(word.encode()) % partitions


class CountStore(SQLStore):
    """The shard's database (sqlite or PostgreSQL) with a `counts` table, plus a cache of counts.

    `counts` caches every count this store has read or written, across transactions: the shard's
    fenced primary is the only writer of its words' rows, so a row can only change through this
    store. The cache lives and dies with the store instance (a new primary builds a new store and
    reads the rows again), and a failed commit drops it (the rows may not hold what it says).
    `changed` names the words whose counts this transaction changed, and `outputs` holds the count
    messages it publishes, in consume order, published together when it finalizes.
    """

    def __init__(self, shard: Shard, url: str) -> None:
        super().__init__(shard, url)
        self.setup_schema(
            "CREATE TABLE IF NOT EXISTS counts (word TEXT PRIMARY KEY NOT NULL, count INTEGER NOT NULL)"
        )
        self.counts: dict[str, int] = {}
        self.changed: set[str] = set()
        self.outputs: list[dict[str, Any]] = []

    def count(self, word: str) -> int:
        """`word`'s count as of this transaction (read from the table once per store)."""
        n = self.counts.get(word)
        if n is None:
            row = self.execute("SELECT count FROM counts WHERE word = ?", (word,)).fetchone()
            n = self.counts[word] = int(row[0]) if row else 0
        return n

    def load(self, words: Iterable[str]) -> None:
        """Reads the counts of those of `words` not cached yet, with one query per LOAD_BATCH words
        (a span's new words at once, where `count` would query each)."""
        counts = self.counts
        missing = list({w for w in words if w not in counts})
        for i in range(0, len(missing), LOAD_BATCH):
            batch = missing[i : i + LOAD_BATCH]
            marks = ",".join("?" * len(batch))
            found = dict(
                self.execute(f"SELECT word, count FROM counts WHERE word IN ({marks})", batch).fetchall()
            )
            for word in batch:
                counts[word] = int(found.get(word, 0))

    def increment(self, word: str) -> int:
        """Adds one to `word`'s count in this transaction; returns the new count."""
        counts = self.counts
        n = counts.get(word)
        if n is None:
            n = self.count(word)
        n = counts[word] = n + 1
        self.changed.add(word)
        return n

    def start_commit(
        self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]
    ) -> concurrent.futures.Future:
        future = super().start_commit(shard, checkpoint, wait_for)
        future.add_done_callback(self._drop_counts_unless_committed)
        return future

    def _drop_counts_unless_committed(self, future: concurrent.futures.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            self.counts = {}


class WordCount(Application):
    """Counts words of its shard's source into `<db_dir>/<shard id>.db` (SQLStore: exactly once), or
    into the one database `store_url` (e.g. postgresql://...) shared by all shards when given."""

    def __init__(self, db_dir: str, output: str = COUNTS_JOURNAL, store_url: str | None = None) -> None:
        self.db_dir = db_dir
        self.output = output
        self.store_url = store_url

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        url = self.store_url or os.path.join(self.db_dir, shard.id.replace("/", "_") + ".db")
        return CountStore(shard, url)

    def consume_message(self, shard: Shard, store: Store, env: Envelope, pub: Publisher) -> None:
        self.consume_messages(shard, store, [env], pub)

    def consume_messages(
        self, shard: Shard, store: Store, envelopes: Sequence[Envelope], pub: Publisher
    ) -> None:
        """Counts the words of a committed span (ACKs ignored) and queues each new count for
        publishing: the span's uncached counts are read with one query, and the counts go out in
        batches of OUTPUT_BATCH."""
        assert isinstance(store, CountStore)
        words = [env.message["word"] for env in envelopes if env.flags != _ACK_TXN]
        counts, changed, outputs = store.counts, store.changed, store.outputs
        if not counts.keys() >= set(words):
            store.load(words)
        for word in words:
            n = counts[word] = counts[word] + 1
            outputs.append({"word": word, "count": n})
        changed.update(words)
        if len(outputs) >= OUTPUT_BATCH:
            pub.publish_uncommitted_batch(self.output, outputs)
            store.outputs = []

    def finalize_txn(self, shard: Shard, store: Store, pub: Publisher) -> None:
        assert isinstance(store, CountStore)
        # One batch for the transaction's counts: the same messages, in the same order, as publishing
        # each in consume_message, at a third of the cost per message.
        if store.outputs:
            pub.publish_uncommitted_batch(self.output, store.outputs)
            store.outputs = []
        counts = store.counts
        store.executemany(
            "INSERT INTO counts (word, count) VALUES (?, ?) ON CONFLICT (word) DO UPDATE SET count = excluded.count",
            [(word, counts[word]) for word in store.changed],
        )
        store.changed.clear()


def journals(partitions: int, replication: int = 1, store: str | None = None) -> list[JournalSpec]:
    """The word partitions and the counts journal, persisted to `store` (e.g. a LocalCluster's
    `.store`). Without one they have no store: their content lives only in the brokers' spools."""
    stores = [store] if store else []
    specs = [
        JournalSpec(name=words_journal(i), replication=replication, labels=JSON_LABELS, stores=stores)
        for i in range(partitions)
    ]
    specs.append(JournalSpec(name=COUNTS_JOURNAL, replication=replication, labels=JSON_LABELS, stores=stores))
    return specs


def shards(partitions: int, hot_standbys: int = 0, max_txn_duration: str = "1s") -> list[ShardSpec]:
    return [
        ShardSpec(
            f"count-{i:03d}", [words_journal(i)], max_txn_duration=max_txn_duration, hot_standbys=hot_standbys
        )
        for i in range(partitions)
    ]


def publish_words(client: Client, words: Iterable[str], partitions: int) -> dict[str, int]:
    """Publishes each word (committed) to its partition; returns the written heads per journal."""
    pub = Publisher(client)
    try:
        for word in words:
            pub.publish_committed(
                lambda m: (words_journal(partition_of(m["word"], partitions)), JSON_LABELS["content-type"]),
                {"word": word},
            )
        pub.flush()
    finally:
        pub.close()
    return {words_journal(i): client.read_head(words_journal(i)) for i in range(partitions)}


def read_counts(client: Client, journal: str = COUNTS_JOURNAL) -> list[tuple[str, int]]:
    """Every committed (word, count) of the output journal, in order (non-blocking)."""
    return [(e.message["word"], e.message["count"]) for e in ReadCommitted(client, journal, skip_acks=True)]


def store_counts(db_dir: str) -> dict[str, int]:
    """The committed counts of every shard database in `db_dir` (a database whose shard has not
    created its table yet counts nothing)."""
    import sqlite3

    out: dict[str, int] = {}
    for name in sorted(os.listdir(db_dir)):
        if name.endswith(".db"):
            conn = sqlite3.connect(os.path.join(db_dir, name))
            try:
                if conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counts'"
                ).fetchone():
                    out.update(dict(conn.execute("SELECT word, count FROM counts").fetchall()))
            finally:
                conn.close()
    return out


def run(
    cluster: Any,
    words: list[str],
    *,
    partitions: int = 2,
    kill_consumer_at: float | None = None,
    db_dir: str | None = None,
    timeout: float = 120.0,
    columnar: bool = False,
) -> dict[str, int]:
    """Publishes `words`, runs the word-count consumer until all are consumed and returns the stored
    counts. With `kill_consumer_at` (a fraction), the consumer crashes once it has committed about that
    fraction of the words and a fresh consumer takes over: in-process, between a store commit and its
    ACKs (a test hook); with a subprocess cluster, by a SIGKILL of the consumer process. `columnar`
    runs ColumnarWordCount (gazette.examples.wordcount_columnar, needs pyarrow) instead of WordCount."""
    client = cluster.client()
    client.apply_journals(journals(partitions, store=getattr(cluster, "store", None)))
    cluster.wait_for_routes()
    db_dir = db_dir or tempfile.mkdtemp(prefix="word-count-")
    committed = [0]
    crashed = threading.Event()
    limit = None if kill_consumer_at is None else int(len(words) * kill_consumer_at)

    def ack_gate(shard: Shard, checkpoint: Any) -> bool:
        committed[0] += 1
        if limit is not None and not crashed.is_set() and sum(checkpoint.read_through.values()) > 0:
            if sum(store_counts(db_dir).values()) >= limit:
                crashed.set()
                return False
        return not crashed.is_set()

    inprocess = getattr(cluster, "mode", "inprocess") == "inprocess"
    hooks = {"hooks": Hooks(ack_gate=ack_gate)} if inprocess else {}
    app: Application = WordCount(db_dir)
    if columnar:
        from gazette.examples.wordcount_columnar import ColumnarWordCount

        app = ColumnarWordCount(db_dir)
    group: ConsumerGroup = cluster.run_consumer(app, shards(partitions), **hooks)
    heads = publish_words(client, words, partitions)
    if limit is not None:
        if not inprocess:
            group.wait_for(
                lambda _: sum(store_counts(db_dir).values()) >= (limit or 0),
                timeout,
                f"{limit} words counted",
            )
        elif not crashed.wait(timeout):
            raise TimeoutError(f"the consumer did not commit {limit} words within {timeout:.0f} s")
        group.kill(0)
        crashed.clear()  # the restarted member acknowledges normally
        limit = None
        group.restart(0)
    group.wait_for(
        lambda _: (
            sum(store_counts(db_dir).values()) >= len(words) and all(client.read_head(j) >= 0 for j in heads)
        ),
        timeout,
        "every word to be counted",
    )
    return store_counts(db_dir)
