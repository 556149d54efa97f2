"""Consumers as `gazette consumer run` subprocesses of a subprocess LocalCluster: a SIGKILLed primary's
hot standby takes over with exactly-once word counts; SIGSTOP/SIGCONT; the word-count example's run
with a consumer SIGKILL; an Application defined in a function travels by value; one that cannot be
pickled is refused with how to fix it."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gazette.consumer import Application, MemoryStore, ReplicaCode, Shard, ShardInfo, ShardSpec
from gazette.examples import wordcount
from gazette.local.cluster import LocalCluster
from gazette.message import Envelope, Publisher
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import JournalSpec


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("subprocess-consumers")
    with LocalCluster(
        brokers=1,
        mode="subprocess",
        store=f"file://{data}/store/",
        etcd=etcd.endpoint,
        root=f"{etcd_root}/brokers",
        data_dir=str(data / "data"),
        lease_ttl_s=2,
    ) as c:
        yield c


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_sigkill_of_a_primary_process_and_its_standby_taking_over(cluster, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals(wordcount.journals(1))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    spec = wordcount.shards(1, hot_standbys=1, max_txn_duration="50ms")
    group = cluster.run_consumer(wordcount.WordCount(db_dir), spec, processes=2)
    assert group.mode == "subprocess" and all(m.proc is not None for m in group.members)

    def placed(shards: list[ShardInfo]) -> bool:
        return [r.status.code for r in shards[0].replicas] == [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]

    (info,) = group.wait_for(placed, 60, "a PRIMARY and a STANDBY")
    primary, standby = info.replicas
    primary_index = int(primary.suffix.split("-")[1])
    shards = group.client()

    words = [f"w{i % 13}" for i in range(400)]
    heads = wordcount.publish_words(client, words[:200], 1)
    # Read-your-writes: once stat returns, the store has committed every word through that offset.
    stat = shards.stat_shard("count-000", heads, timeout=60)
    assert stat.member == (primary.zone, primary.suffix)
    assert wordcount.store_counts(db_dir) == dict(Counter(words[:200]))

    # Paused, the primary answers nothing; resumed, it serves again.
    pid = group.pid(primary_index)
    cluster.pause_consumer(primary_index)
    assert _state(pid) in ("T", "t")
    cluster.resume_consumer(primary_index)
    assert shards.stat_shard("count-000", heads, timeout=60).member == stat.member

    cluster.kill_consumer(primary_index)  # SIGKILL: its lease expires after lease_ttl_s
    assert group.members[primary_index].proc is not None
    assert group.members[primary_index].proc.returncode == -9

    heads = wordcount.publish_words(client, words[200:], 1)
    stat = shards.stat_shard("count-000", heads, timeout=90)
    assert stat.member == (standby.zone, standby.suffix)  # the standby took over
    assert wordcount.store_counts(db_dir) == dict(Counter(words))
    (info,) = group.list_shards()
    assert [(r.suffix, r.status.code) for r in info.replicas][0] == (standby.suffix, ReplicaCode.PRIMARY)
    # Exactly once: each word's published counts are 1..total, once each, in order.
    by_word: dict[str, list[int]] = {}
    for w, n in wordcount.read_counts(client):
        by_word.setdefault(w, []).append(n)
    assert by_word == {w: list(range(1, n + 1)) for w, n in Counter(words).items()}


def test_word_count_example_run_with_a_consumer_process_killed(cluster, tmp_path) -> None:
    words = [f"w{i % 11}" for i in range(600)]
    counts = wordcount.run(cluster, words, partitions=2, kill_consumer_at=0.5, db_dir=str(tmp_path))
    assert counts == dict(Counter(words))


def test_an_application_defined_in_a_function_runs_in_a_subprocess(cluster) -> None:
    journal = "tests/subprocess/local-app"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=wordcount.JSON_LABELS)])
    cluster.wait_for_routes([journal])

    class Tally(Application):  # not importable: cloudpickle sends it by value
        def __init__(self, factor: int) -> None:
            self.factor = factor

        def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
            return MemoryStore()

        def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
            if not env.is_ack:
                store.state["sum"] = store.state.get("sum", 0) + self.factor * env.message["n"]

    group = cluster.run_consumer(Tally(3), [ShardSpec("tally-000", [journal], max_txn_duration="50ms")])
    pub = Publisher(client)
    for n in range(10):
        pub.publish_committed(journal, {"n": n})
    pub.flush()
    pub.close()
    head = client.read_head(journal)
    stat = group.client().stat_shard("tally-000", {journal: head}, timeout=60)
    assert stat.read_through[journal] == head
    ins = group.client().inspect("tally-000", timeout=60)
    assert sum(t.messages for t in ins.transactions) == 10


def test_an_unpicklable_application_is_refused_with_how_to_fix_it(cluster) -> None:
    class Locked(Application):
        def __init__(self) -> None:
            self.lock = threading.Lock()

    with pytest.raises(GazetteError) as exc:
        cluster.run_consumer(Locked(), [])
    message = str(exc.value)
    assert "cannot run in consumer subprocesses" in message and "_thread.lock" in message
    assert "gazette consumer run module:Class" in message and "mode='inprocess'" in message
