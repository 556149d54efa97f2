"""The word count's CountStore: counts cached across transactions, re-read by a new store instance,
dropped when a commit fails (here: a fenced-out primary)."""

from __future__ import annotations

import concurrent.futures
import sqlite3
from types import SimpleNamespace

import pytest

from gazette.consumer import ConsumerCheckpoint, FencingError
from gazette.examples.wordcount import CountStore, WordCount, store_counts

SHARD = SimpleNamespace(fqn="/root/items/count-000", id="count-000")


def _commit(store: CountStore) -> concurrent.futures.Future:
    WordCount("unused").finalize_txn(SHARD, store, None)  # type: ignore[arg-type]
    return store.start_commit(SHARD, ConsumerCheckpoint(), [])


def _rows(path: str) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT word, count FROM counts").fetchall())
    finally:
        conn.close()


def test_counts_carry_across_transactions_and_stores(tmp_path) -> None:
    path = str(tmp_path / "count-000.db")
    store = CountStore(SHARD, path)
    store.restore_checkpoint(SHARD)
    assert [store.increment(w) for w in "abab"] == [1, 1, 2, 2]
    _commit(store).result()
    assert store.changed == set() and _rows(path) == {"a": 2, "b": 2}
    assert [store.increment(w) for w in "bc"] == [3, 1]  # b from the cache, c read (absent: 0)
    _commit(store).result()
    assert _rows(path) == {"a": 2, "b": 3, "c": 1}
    store.destroy()

    again = CountStore(SHARD, path)  # a new primary: a new cache, filled from the table
    again.restore_checkpoint(SHARD)
    assert again.counts == {}
    assert [again.increment(w) for w in "cab"] == [2, 3, 4]
    again.destroy()


def test_a_failed_commit_drops_the_cache(tmp_path) -> None:
    path = str(tmp_path / "count-000.db")
    old = CountStore(SHARD, path)
    old.restore_checkpoint(SHARD)
    old.increment("a")
    _commit(old).result()
    new = CountStore(SHARD, path)
    new.restore_checkpoint(SHARD)  # moves the fence: the old store is a zombie now
    old.increment("a")
    with pytest.raises(FencingError):
        _commit(old).result()
    assert old.counts == {}
    assert new.increment("a") == 2 and _rows(path) == {"a": 1}
    old.destroy()
    new.destroy()


def test_store_counts_skips_a_database_whose_table_is_not_created_yet(tmp_path) -> None:
    """A shard's database file exists before its first transaction creates the table (a reader
    polling `store_counts` meanwhile must not fail); the other shards' counts are still read."""
    sqlite3.connect(tmp_path / "count-000.db").close()  # created, no table yet
    conn = sqlite3.connect(tmp_path / "count-001.db")
    conn.execute("CREATE TABLE counts (word TEXT PRIMARY KEY, count INTEGER)")
    conn.execute("INSERT INTO counts VALUES ('fox', 3)")
    conn.commit()
    conn.close()
    assert store_counts(str(tmp_path)) == {"fox": 3}
