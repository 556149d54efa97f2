"""SQLStore: the checkpoint commits with application rows; the fence refuses a deposed primary."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import threading
from types import SimpleNamespace

import pytest

from gazette.consumer import ConsumerCheckpoint, FencingError, SQLStore
from gazette.message.checkpoint import Checkpoint
from gazette.protocol.errors import GazetteError, ValidationError

SHARD = SimpleNamespace(fqn="/root/items/count-000")


def _checkpoint(offset: int) -> ConsumerCheckpoint:
    return ConsumerCheckpoint(Checkpoint({"words/part-000": offset}, []), {"out/journal": b"ack\n"})


def _store(path: str) -> SQLStore:
    store = SQLStore(SHARD, f"sqlite://{path}")
    store.conn.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER)")
    return store


def _rows(path: str) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT k, v FROM t").fetchall())
    finally:
        conn.close()


def _done() -> concurrent.futures.Future:
    f: concurrent.futures.Future = concurrent.futures.Future()
    f.set_result(None)
    return f


def test_commit_restore_and_fence(tmp_path) -> None:
    path = str(tmp_path / "shard.db")
    old = _store(path)
    assert old.restore_checkpoint(SHARD) == ConsumerCheckpoint()
    assert old.fence == 1
    old.execute("INSERT INTO t VALUES ('a', 1)")
    assert old.start_commit(SHARD, _checkpoint(10), [_done()]).result() == _checkpoint(10)

    new = _store(path)  # a new primary takes over: the fence moves on
    assert new.restore_checkpoint(SHARD) == _checkpoint(10)
    assert new.fence == 2

    old.execute("INSERT INTO t VALUES ('zombie', 1)")
    future = old.start_commit(SHARD, _checkpoint(99), [])
    with pytest.raises(FencingError, match="fence is no longer 1"):
        future.result()
    assert _rows(path) == {"a": 1}  # the zombie's rows rolled back with its refused checkpoint

    new.execute("INSERT INTO t VALUES ('b', 2)")
    new.start_commit(SHARD, _checkpoint(20), []).result()
    assert _rows(path) == {"a": 1, "b": 2}
    again = _store(path)
    assert again.restore_checkpoint(SHARD) == _checkpoint(20) and again.fence == 3
    for s in (old, new, again):
        s.destroy()


def test_commit_waits_for_and_fails_with_dependencies(tmp_path) -> None:
    path = str(tmp_path / "shard.db")
    store = _store(path)
    store.restore_checkpoint(SHARD)
    failed: concurrent.futures.Future = concurrent.futures.Future()
    failed.set_exception(GazetteError(0, "append failed"))
    store.execute("INSERT INTO t VALUES ('a', 1)")
    with pytest.raises(GazetteError, match="an append it depends on failed"):
        store.start_commit(SHARD, _checkpoint(5), [_done(), failed]).result()
    assert _rows(path) == {}
    assert _store(path).restore_checkpoint(SHARD) == ConsumerCheckpoint()
    store.destroy()


def test_bad_urls_and_commit_before_restore(tmp_path) -> None:
    with pytest.raises(ValidationError, match="postgres://x is not supported|not supported"):
        SQLStore(SHARD, "postgres://x")
    store = _store(str(tmp_path / "s.db"))
    with pytest.raises(FencingError, match="before restore_checkpoint"):
        store.start_commit(SHARD, _checkpoint(1), []).result()
    store.destroy()


def test_connections_opening_one_new_database_together_all_get_wal(tmp_path) -> None:
    """Switching a new database to WAL needs a lock sqlite does not wait for (no busy handler):
    several stores opening one new database at once used to fail at random with "database is
    locked" (about one round in fifteen of eight connections here). Every connection must open."""
    from gazette.consumer.sql_store import _SQLiteDialect

    n, rounds = 8, 60
    for r in range(rounds):
        path = str(tmp_path / f"new-{r}.db")
        barrier = threading.Barrier(n)

        def open_one(_: int, path: str = path, barrier: threading.Barrier = barrier) -> str:
            barrier.wait()
            conn = _SQLiteDialect(path).connect()
            try:
                return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            finally:
                conn.close()

        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            assert list(pool.map(open_one, range(n))) == ["wal"] * n, f"round {r}"
