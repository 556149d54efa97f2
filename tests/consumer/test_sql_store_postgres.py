"""SQLStore on both dialects (sqlite and a real PostgreSQL server): checkpoint round trips, the fence
refusing a zombie with none of its writes committed, portable placeholders, bad URLs, side-effect
registrations committed with the checkpoint; and the word-count consumer storing into PostgreSQL end
to end."""

from __future__ import annotations

import collections
import concurrent.futures
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from gazette.consumer import ConsumerCheckpoint, FencingError, Hooks, SideEffects, SQLStore
from gazette.consumer.sql_store import SQLStoreError
from gazette.examples import wordcount
from gazette.message.checkpoint import Checkpoint
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.testing import wait_for

pytest_plugins = ["fixtures_postgres"]

SHARD = SimpleNamespace(fqn="/root/items/count-000")
TABLE_DDL = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER)"


@dataclass
class Backend:
    """One database of either dialect: how to open stores on it and read what it committed."""

    name: str
    url: str
    rows: Callable[[str], list[tuple[Any, ...]]]  # a query's committed rows, on a fresh connection

    def store(self, shard: Any = SHARD) -> SQLStore:
        store = SQLStore(shard, self.url)
        store.setup_schema(TABLE_DDL)
        return store

    def table(self) -> dict[str, int]:
        return dict(self.rows("SELECT k, v FROM t"))


def _sqlite_rows(path: str) -> Callable[[str], list[tuple[Any, ...]]]:
    def rows(sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    return rows


def _postgres_rows(url: str) -> Callable[[str], list[tuple[Any, ...]]]:
    import psycopg

    def rows(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(url) as conn:
            return conn.execute(sql).fetchall()

    return rows


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path) -> Backend:
    if request.param == "sqlite":
        path = str(tmp_path / "shard.db")
        return Backend("sqlite", f"sqlite://{path}", _sqlite_rows(path))
    url = request.getfixturevalue("postgres_url")
    return Backend("postgresql", url, _postgres_rows(url))


@pytest.fixture
def stores() -> Iterator[list[SQLStore]]:
    """Stores a test opened (append them), destroyed afterwards."""
    opened: list[SQLStore] = []
    yield opened
    for store in opened:
        store.destroy()


def _checkpoint(offset: int) -> ConsumerCheckpoint:
    return ConsumerCheckpoint(Checkpoint({"words/part-000": offset}, []), {"out/journal": b"ack\n"})


def _done() -> concurrent.futures.Future:
    f: concurrent.futures.Future = concurrent.futures.Future()
    f.set_result(None)
    return f


def test_commit_restore_and_fence(backend: Backend, stores: list[SQLStore]) -> None:
    old = backend.store()
    stores.append(old)
    assert old.dialect_name == backend.name
    assert old.restore_checkpoint(SHARD) == ConsumerCheckpoint() and old.fence == 1
    old.execute("INSERT INTO t VALUES ('a', 1)")
    assert old.start_commit(SHARD, _checkpoint(10), [_done()]).result() == _checkpoint(10)

    new = backend.store()  # a new primary takes over: the fence moves on
    stores.append(new)
    assert new.restore_checkpoint(SHARD) == _checkpoint(10) and new.fence == 2

    old.execute("INSERT INTO t VALUES ('zombie', 1)")
    with pytest.raises(FencingError, match="fence is no longer 1"):
        old.start_commit(SHARD, _checkpoint(99), []).result()
    assert backend.table() == {"a": 1}  # the zombie's rows rolled back with its refused checkpoint

    new.execute("INSERT INTO t VALUES ('b', 2)")
    new.start_commit(SHARD, _checkpoint(20), []).result()
    assert backend.table() == {"a": 1, "b": 2}
    again = backend.store()
    stores.append(again)
    assert again.restore_checkpoint(SHARD) == _checkpoint(20) and again.fence == 3
    assert backend.rows("SELECT shard_fqn, fence FROM gazette_checkpoints") == [(SHARD.fqn, 3)]


def test_failed_dependency_rolls_back_application_writes(backend: Backend, stores: list[SQLStore]) -> None:
    store = backend.store()
    stores.append(store)
    store.restore_checkpoint(SHARD)
    failed: concurrent.futures.Future = concurrent.futures.Future()
    failed.set_exception(GazetteError(0, "append failed"))
    store.execute("INSERT INTO t VALUES ('a', 1)")
    with pytest.raises(GazetteError, match="an append it depends on failed"):
        store.start_commit(SHARD, _checkpoint(5), [_done(), failed]).result()
    assert backend.table() == {}
    # The store carries on: the next transaction commits (same fence: nobody took over).
    store.execute("INSERT INTO t VALUES ('b', 2)")
    store.start_commit(SHARD, _checkpoint(6), []).result()
    assert backend.table() == {"b": 2}
    fresh = backend.store()
    stores.append(fresh)
    assert fresh.restore_checkpoint(SHARD) == _checkpoint(6)


def test_shards_keep_separate_checkpoints_in_one_database(backend: Backend, stores: list[SQLStore]) -> None:
    one, two = (backend.store(SimpleNamespace(fqn=f"/root/items/count-00{i}")) for i in (1, 2))
    stores.extend((one, two))
    assert one.restore_checkpoint(None) == ConsumerCheckpoint() == two.restore_checkpoint(None)
    one.execute("INSERT INTO t VALUES ('one', 1)")
    one.start_commit(None, _checkpoint(1), []).result()
    two.execute("INSERT INTO t VALUES ('two', 2)")
    two.start_commit(None, _checkpoint(2), []).result()
    assert backend.table() == {"one": 1, "two": 2}
    assert sorted(backend.rows("SELECT shard_fqn, fence FROM gazette_checkpoints")) == [
        ("/root/items/count-001", 1),
        ("/root/items/count-002", 1),
    ]


def test_portable_placeholders_and_upserts(backend: Backend, stores: list[SQLStore]) -> None:
    store = backend.store()
    stores.append(store)
    store.restore_checkpoint(SHARD)
    # `?` / `:name` placeholders on both dialects; quoted ? and %, and casts, are left as written.
    store.execute("INSERT INTO t VALUES (?, ?)", ("50%?", 1))
    store.execute("INSERT INTO t VALUES (:k, :v)", {"k": "it's :x", "v": 2})
    upsert = "INSERT INTO t (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
    store.executemany(upsert, [("50%?", 10), ("c", 3)])
    assert store.execute("SELECT v FROM t WHERE k = ? AND k LIKE '50%?'", ("50%?",)).fetchone() == (10,)
    assert store.execute("SELECT CAST(v AS TEXT) || '?' FROM t WHERE k = :k", {"k": "c"}).fetchall() == [
        ("3?",)
    ]
    assert backend.table() == {}  # nothing is visible before the commit
    store.start_commit(SHARD, _checkpoint(1), []).result()
    assert backend.table() == {"50%?": 10, "it's :x": 2, "c": 3}


def test_concurrent_stores_on_a_new_database_get_distinct_fences(backend: Backend) -> None:
    """Schema setup and the first restore race safely (PostgreSQL's CREATE TABLE IF NOT EXISTS does not)."""
    n = 8
    barrier = threading.Barrier(n)

    def open_and_restore(_: int) -> int:
        barrier.wait()
        store = backend.store()
        try:
            store.restore_checkpoint(SHARD)
            assert store.fence is not None
            return store.fence
        finally:
            store.destroy()

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        fences = sorted(pool.map(open_and_restore, range(n)))
    assert fences == list(range(1, n + 1))


def test_postgres_zombie_with_an_open_transaction_is_fenced(
    postgres_url: str, stores: list[SQLStore]
) -> None:
    """A takeover while the deposed primary's transaction is open (sqlite would wait for its lock)."""
    backend = Backend("postgresql", postgres_url, _postgres_rows(postgres_url))
    old = backend.store()
    stores.append(old)
    old.restore_checkpoint(SHARD)
    old.execute("INSERT INTO t VALUES ('zombie', 1)")
    old.execute("UPDATE t SET v = v + 1")
    new = backend.store()
    stores.append(new)
    assert new.restore_checkpoint(SHARD) == ConsumerCheckpoint() and new.fence == 2
    with pytest.raises(FencingError, match="fence is no longer 1"):
        old.start_commit(SHARD, _checkpoint(7), []).result()
    assert backend.table() == {}
    new.execute("INSERT INTO t VALUES ('zombie', 5)")  # the zombie's row lock went with its rollback
    new.start_commit(SHARD, _checkpoint(8), []).result()
    assert backend.table() == {"zombie": 5}


def test_bad_urls_are_rejected_naming_the_url(tmp_path, postgres_server) -> None:
    with pytest.raises(ValidationError, match='"postgres://x" is not supported: .*must name its database'):
        SQLStore(SHARD, "postgres://x")
    with pytest.raises(ValidationError, match="\"mysql://u@h/db\" is not supported: unknown scheme 'mysql'"):
        SQLStore(SHARD, "mysql://u@h/db")
    with pytest.raises(ValidationError, match='"postgresql://h/db\\?bogus=1" is not supported: .*bogus'):
        SQLStore(SHARD, "postgresql://h/db?bogus=1")
    with pytest.raises(ValidationError, match="port 'nope' is not a number"):
        SQLStore(SHARD, "postgresql://u@h:nope/db")
    refused = f"postgresql://gazette:s3cret@127.0.0.1:{postgres_server.port}/no_such_db"
    with pytest.raises(SQLStoreError, match='could not connect to "postgresql://gazette:\\*\\*\\*@') as info:
        SQLStore(SHARD, refused)
    assert "s3cret" not in str(info.value) and "no_such_db" in str(info.value)


def test_commit_before_restore_is_refused(backend: Backend, stores: list[SQLStore]) -> None:
    store = backend.store()
    stores.append(store)
    with pytest.raises(FencingError, match="before restore_checkpoint"):
        store.start_commit(SHARD, _checkpoint(1), []).result()


@pytest.mark.parametrize("crash", [False, True], ids=["steady", "crash-after-commit"])
def test_word_count_consumer_stores_into_postgres(cluster, postgres_url: str, tmp_path, crash: bool) -> None:
    """Counts in PostgreSQL equal what was published, exactly once in the store and downstream; with
    `crash`, the consumer dies between a store commit and its ACKs and a fresh member takes over."""
    import psycopg

    client = cluster.client()
    client.apply_journals(wordcount.journals(2))
    cluster.wait_for_routes()
    rows = _postgres_rows(postgres_url)

    def stored() -> dict[str, int]:
        try:
            return dict(rows("SELECT word, count FROM counts"))
        except psycopg.errors.UndefinedTable:
            return {}  # no store has opened yet

    crashed, restarted = threading.Event(), threading.Event()

    def ack_gate(shard: Any, checkpoint: ConsumerCheckpoint) -> bool:
        if crash and not restarted.is_set() and sum(checkpoint.read_through.values()) > 0:
            crashed.set()  # this and every later commit of the first member never get their ACKs
        return not crashed.is_set()

    app = wordcount.WordCount(str(tmp_path), store_url=postgres_url)
    group = cluster.run_consumer(
        app, wordcount.shards(2, max_txn_duration="100ms"), hooks=Hooks(ack_gate=ack_gate)
    )
    words = [f"w{i % 23}" for i in range(300)]
    wordcount.publish_words(client, words[:150], 2)
    if crash:
        wait_for("a commit whose ACKs are held", crashed.is_set, 60)
        group.kill(0)
        restarted.set()
        crashed.clear()
        group.restart(0)  # restores the committed checkpoints (fence + 1) and re-appends their ACKs
    wordcount.publish_words(client, words[150:], 2)

    wait_for("every word counted in PostgreSQL", lambda: sum(stored().values()) == len(words), 60)
    assert stored() == collections.Counter(words)
    fences = dict(rows("SELECT shard_fqn, fence FROM gazette_checkpoints"))
    assert sorted(fences) == [f"{group.root}/items/count-00{i}" for i in (0, 1)]
    assert all(f >= 2 for f in fences.values()) if crash else set(fences.values()) == {1}

    # Exactly once downstream too: each word's committed counts are 1..n, once each.
    def all_published() -> list[tuple[str, int]] | None:
        counts = wordcount.read_counts(client)
        return counts if len(counts) >= len(words) else None

    by_word: dict[str, list[int]] = collections.defaultdict(list)
    for word, n in wait_for("every count published", all_published, 60):
        by_word[word].append(n)
    assert by_word == {w: list(range(1, n + 1)) for w, n in collections.Counter(words).items()}


def test_side_effect_registrations_commit_with_the_checkpoint(
    backend: Backend, stores: list[SQLStore], tmp_path
) -> None:
    shard = SimpleNamespace(fqn="/root/items/reports-000", id="reports-000")
    reports = f"file://{tmp_path}/reports/"
    first = SQLStore(shard, backend.url, side_effects=SideEffects([reports]))
    stores.append(first)
    first.restore_checkpoint(shard)
    assert first.side_effects is not None and first.side_effects.attempt == 1
    effect = first.side_effects.register("report", "r/{id}.json").prepare(b"x" * 10)
    first.side_effects.seal()
    first.start_commit(shard, _checkpoint(1), [_done()]).result()
    query = "SELECT id, attempt, path, sha1, size FROM gazette_side_effects"
    assert backend.rows(query) == [(effect.id, 1, effect.path, effect.sha1, 10)]

    second = SQLStore(shard, backend.url, side_effects=SideEffects([reports]))
    stores.append(second)
    second.restore_checkpoint(shard)
    assert second.side_effects is not None and second.side_effects.restored == (effect.record,)
    first.side_effects.register("report", "r/{id}.json").prepare(b"zombie")
    first.side_effects.seal()
    with pytest.raises(FencingError):
        first.start_commit(shard, _checkpoint(2), [_done()]).result()
    assert backend.rows(query) == [(effect.id, 1, effect.path, effect.sha1, 10)]
