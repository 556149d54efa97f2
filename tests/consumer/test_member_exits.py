"""A consumer member that exits by itself is reported and restarted by its group (LocalCluster's
run_consumer), and `gazette consumer run` says why it exits, with a non-zero status.

The subprocess case is the real one: a member SIGSTOPped past its lease loses it (its shards go to
the other member), ends itself once resumed (as Gazette's members do) with LEASE_LOST_EXIT_CODE and
its exit line, and is restarted, while the group's shards keep being served. In process, a member
whose lease is declared lost stops itself the same way: restarted, or only reported when
`restart_exited=False`.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator

import pytest

from gazette.client.loop import default_loop
from gazette.consumer import ReplicaCode, ShardInfo
from gazette.consumer.serve import EXIT_LINE_PREFIX, LEASE_LOST_EXIT_CODE
from gazette.examples import wordcount
from gazette.local.cluster import LocalCluster
from gazette.testing import wait_for


def _cluster(etcd, etcd_root, data, mode: str, lease_ttl_s: int) -> LocalCluster:
    os.makedirs(data / "store", exist_ok=True)
    return LocalCluster(
        brokers=1,
        mode=mode,
        store=f"file://{data}/store/",
        etcd=etcd.endpoint,
        root=f"{etcd_root}/brokers",
        data_dir=str(data / "data"),
        lease_ttl_s=lease_ttl_s,
    )


@pytest.fixture
def subprocess_cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    with _cluster(etcd, etcd_root, tmp_path, "subprocess", 2) as c:
        yield c


@pytest.fixture
def inprocess_cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    with _cluster(etcd, etcd_root, tmp_path, "inprocess", 3) as c:
        yield c


def _suffixes(shards: list[ShardInfo]) -> set[str]:
    return {r.suffix for s in shards for r in s.replicas}


def _all_primary(shards: list[ShardInfo]) -> bool:
    return all(s.primary is not None and s.primary.status.code == ReplicaCode.PRIMARY for s in shards)


def test_a_member_paused_past_its_lease_exits_saying_why_and_is_restarted(
    subprocess_cluster: LocalCluster, tmp_path, caplog
) -> None:
    cluster = subprocess_cluster
    client = cluster.client()
    client.apply_journals(wordcount.journals(2, store=cluster.store))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    group = cluster.run_consumer(
        wordcount.WordCount(db_dir), wordcount.shards(2, max_txn_duration="50ms"), processes=2
    )
    group.wait_for_primaries()
    shards = group.client()
    words = [f"w{i % 7}" for i in range(300)]
    heads = wordcount.publish_words(client, words[:100], 2)
    for i in range(2):
        shards.stat_shard(
            f"count-{i:03d}", {wordcount.words_journal(i): heads[wordcount.words_journal(i)]}, timeout=60
        )

    victim = group.members[0]
    old_pid, old_suffix, old_log = victim.proc.pid, victim.suffix, victim.log_path
    cluster.pause_consumer(0)
    try:
        # Its lease expires: its member key and assignments go, and the other member takes its shards.
        group.wait_for(
            lambda s: old_suffix not in _suffixes(s) and _all_primary(s),
            60,
            "the paused member's shards to move",
        )
    finally:
        cluster.resume_consumer(0)

    with caplog.at_level(logging.WARNING, logger="gazette.consumer.runner"):
        wait_for("the resumed member to exit and be restarted", lambda: group.restarts == 1, 60)
    (exit_,) = group.exits
    assert (exit_.index, exit_.suffix, exit_.returncode, exit_.restarted) == (
        0,
        old_suffix,
        LEASE_LOST_EXIT_CODE,
        True,
    )
    assert (
        exit_.reason.startswith("its etcd lease was lost")
        and f"exit status {LEASE_LOST_EXIT_CODE}" in exit_.reason
    )
    assert cluster.consumer_restarts == 1 and group.members[0].restarts == 1
    assert group.members[0].proc.pid != old_pid and group.members[0].suffix != old_suffix
    assert (
        f"consumer member 0 (local#{old_suffix})" in caplog.text and "its etcd lease was lost" in caplog.text
    )
    # `gazette consumer run`'s own last word, in the old member's log.
    exit_lines = [line for line in open(old_log).read().splitlines() if line.startswith(EXIT_LINE_PREFIX)]
    assert exit_lines == [
        f"{EXIT_LINE_PREFIX}local#{old_suffix} of {group.root} exits with status {LEASE_LOST_EXIT_CODE}: "
        + exit_.reason.removesuffix(f" (exit status {LEASE_LOST_EXIT_CODE})")
    ]

    # The group's shards keep being served.
    assert group.members[0].running
    group.wait_for_primaries()
    heads = wordcount.publish_words(client, words[100:], 2)
    for i in range(2):
        shards.stat_shard(
            f"count-{i:03d}", {wordcount.words_journal(i): heads[wordcount.words_journal(i)]}, timeout=60
        )
    assert wordcount.store_counts(db_dir) == dict(Counter(words))
    assert group.restarts == 1  # one exit, one restart

    # A member the group stops itself is not restarted.
    group.kill(1)
    assert group.members[1].proc.returncode == -9
    group.wait_for(
        lambda s: group.members[1].suffix not in _suffixes(s) and _all_primary(s), 60, "member 1 gone"
    )
    assert group.restarts == 1 and len(group.exits) == 1


@pytest.mark.parametrize("restart", [True, False])
def test_an_in_process_member_that_stops_itself_is_restarted_or_reported(
    inprocess_cluster: LocalCluster, tmp_path, caplog, restart: bool
) -> None:
    cluster = inprocess_cluster
    client = cluster.client()
    client.apply_journals(wordcount.journals(1, store=cluster.store))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    group = cluster.run_consumer(
        wordcount.WordCount(db_dir), wordcount.shards(1, max_txn_duration="50ms"), restart_exited=restart
    )
    group.wait_for_primaries()
    consumer = group.members[0].consumer
    old_suffix = group.members[0].suffix
    with caplog.at_level(logging.WARNING, logger="gazette.consumer.runner"):
        default_loop().run(_declare_lost(consumer), timeout=30)
        wait_for("the member's exit to be reported", lambda: group.exits, 60)
    (exit_,) = group.exits
    assert (exit_.index, exit_.suffix, exit_.returncode, exit_.restarted) == (0, old_suffix, None, restart)
    assert "its etcd lease was lost (the test says so)" in exit_.reason
    assert f"consumer member 0 (local#{old_suffix})" in caplog.text
    if restart:
        assert group.restarts == cluster.consumer_restarts == 1 and group.members[0].consumer is not consumer
        group.wait_for(
            lambda s: _all_primary(s) and s[0].primary.suffix == group.members[0].suffix, 60, "it back"
        )
        heads = wordcount.publish_words(client, ["a", "b", "a"], 1)
        group.client().stat_shard("count-000", heads, timeout=60)
        assert wordcount.store_counts(db_dir) == {"a": 2, "b": 1}
    else:
        assert group.restarts == cluster.consumer_restarts == 0 and group.members[0].consumer is consumer
        assert "not restarted (restart_exited=False)" in caplog.text


async def _declare_lost(consumer) -> None:
    consumer.session.declare_lost("the test says so")
