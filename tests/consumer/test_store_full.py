"""A shard's SQLite store on a full disk (a small tmpfs): the commit fails, the shard is FAILED with an
error naming the shard and the database, nothing of the failed transaction is stored, and once the disk
has room an unassigned shard recovers and counts every word exactly once.

Needs root (to mount a tmpfs); skipped otherwise, saying so, and a failure under CI (tests/needs.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import tmpfs
from needs import require_root

from gazette.consumer import ReplicaCode, ShardInfo
from gazette.examples import wordcount
from gazette.testing import wait_for

WAIT_S = 90.0
WORDS = [f"word-{i:05d}" for i in range(3000)] * 2  # distinct words: the counts table outgrows 96 KiB


@pytest.fixture(autouse=True)
def as_root() -> None:
    """Mounting a tmpfs for the shard store needs root: without it these tests skip, or fail under CI."""
    require_root("mounting a tmpfs for the shard store")


@pytest.fixture
def db_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "db"
    path.mkdir()
    with tmpfs.mounted(path, "96k"):
        yield path


def _primary_status(shards: list[ShardInfo]):
    primary = shards[0].primary
    return None if primary is None else primary.status


def test_a_full_store_disk_fails_the_shard_naming_the_database_and_loses_nothing(cluster, db_dir):
    client = cluster.client()
    client.apply_journals(wordcount.journals(1, store=cluster.store))
    cluster.wait_for_routes()
    group = cluster.run_consumer(
        wordcount.WordCount(str(db_dir)), wordcount.shards(1, max_txn_duration="50ms")
    )
    group.wait_for_primaries()
    wordcount.publish_words(client, WORDS, 1)

    (info,) = group.wait_for(
        lambda shards: (s := _primary_status(shards)) is not None and s.code == ReplicaCode.FAILED,
        WAIT_S, "the shard to fail on the full disk",
    )  # fmt: skip
    error = _primary_status([info]).errors[0]
    assert "SQLStoreError" in error and "count-000" in error, error
    assert str(db_dir / "count-000.db") in error and "database or disk is full" in error, error
    stored = wordcount.store_counts(str(db_dir))
    assert sum(stored.values()) < len(WORDS)  # it failed before the end ...
    assert all(n <= 2 for n in stored.values())  # ... and nothing was counted twice

    tmpfs.resize(db_dir, "16m")
    group.client().unassign(["count-000"])  # as an operator would, once the disk has room
    group.wait_for(
        lambda shards: (s := _primary_status(shards)) is not None and s.code == ReplicaCode.PRIMARY,
        WAIT_S, "the shard back as PRIMARY",
    )  # fmt: skip
    expected = Counter(WORDS)

    def done() -> bool:
        return wordcount.store_counts(str(db_dir)) == expected

    wait_for("every word counted exactly once", done, WAIT_S)
