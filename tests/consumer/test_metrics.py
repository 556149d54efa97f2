"""Prometheus metrics of consumers (and the broker's counters) scraped over HTTP from running members."""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gazette.broker.metrics import BrokerMetrics
from gazette.consumer import Application, MemoryStore, Shard, ShardSpec
from gazette.message import Envelope, Publisher
from gazette.metrics import exposition
from gazette.protocol.spec import JournalSpec
from tests.waiting import wait_for

JSON = {"content-type": "application/x-ndjson"}


class Count(Application):
    """Counts the messages it consumes."""

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        store.state["n"] = store.state.get("n", 0) + 1


class Held(Application):
    """Consumes nothing until `release` is set (in-process members only)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if not self.release.wait(60):
            raise TimeoutError("the test never released the consumer")


def _scrape(url: str) -> tuple[str, dict[str, dict[tuple, float]]]:
    """The raw text and {family type: {(sample name, sorted labels): value}}."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(family.type, {})[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, out


def _get(samples: dict[str, dict[tuple, float]], kind: str, name: str, **labels: str) -> float | None:
    return samples.get(kind, {}).get((name, tuple(sorted(labels.items()))))


@pytest.mark.parametrize("mode", ["inprocess", "subprocess"])
def test_consumer_metrics_move_with_transactions(cluster, mode: str) -> None:
    journal = f"tests/metrics-{mode}/part-000"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=JSON)])
    cluster.wait_for_routes()
    spec = ShardSpec(f"metrics-{mode}-000", [journal], max_txn_duration="50ms")
    group = cluster.run_consumer(Count(), [spec], mode=mode)
    (info,) = group.wait_for_primaries()
    url = group.metrics(0)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")

    def publish(n: int) -> int:
        pub = Publisher(client)
        for i in range(n):
            pub.publish_committed(journal, {"i": i})
        pub.flush()
        pub.close()
        head = client.read_head(journal)
        group.client().stat_shard(spec.id, {journal: head}, timeout=60)  # read through it, committed
        return head

    head = publish(5)
    text, first = _scrape(url)
    fqn = next(
        iter({dict(k[1])["shard"] for k in first["counter"] if k[0] == "gazette_shard_transactions_total"})
    )
    assert fqn.endswith(f"/items/{spec.id}")  # Gazette's label: the shard's etcd key
    txns = _get(first, "counter", "gazette_shard_transactions_total", shard=fqn)
    assert txns is not None and txns >= 1
    assert _get(first, "counter", "gazette_shard_read_messages_total", shard=fqn) == 5
    assert _get(first, "counter", "gazette_shard_read_bytes_total", shard=fqn) == head
    assert _get(first, "gauge", "gazette_shard_read_head", shard=fqn, journal=journal) == head
    assert _get(first, "gauge", "gazette_shard_up", shard=spec.id, status="PRIMARY") == 1
    assert _get(first, "gauge", "gazette_shard_read_lag_bytes", shard=fqn, journal=journal) == 0
    assert _get(first, "histogram", "gazette_shard_commit_seconds_count", shard=fqn) == txns
    consuming = _get(
        first, "counter", "gazette_shard_phase_seconds_total", shard=fqn, phase="20-consuming", type="sync"
    )
    assert consuming is not None and consuming >= 0

    head2 = publish(3)
    _, second = _scrape(url)
    txns2 = _get(second, "counter", "gazette_shard_transactions_total", shard=fqn)
    assert txns2 is not None and txns2 > txns
    assert _get(second, "counter", "gazette_shard_read_messages_total", shard=fqn) == 8
    assert _get(second, "counter", "gazette_shard_read_bytes_total", shard=fqn) == head2
    assert _get(second, "gauge", "gazette_shard_read_head", shard=fqn, journal=journal) == head2
    assert _get(second, "histogram", "gazette_shard_commit_seconds_count", shard=fqn) == txns2


def test_broker_counters_are_counters_under_gazettes_names() -> None:
    metrics = BrokerMetrics()
    metrics.started.labels("Append").inc()
    metrics.completed.labels("Append", "OK").inc(2)
    metrics.commit("a/journal", 10, 10)
    lines = exposition(metrics.registry).decode().splitlines()
    assert "# TYPE gazette_journal_server_started_totals counter" in lines
    assert 'gazette_journal_server_started_totals{operation="Append"} 1.0' in lines
    assert 'gazette_journal_server_completed_totals{operation="Append",status="OK"} 2.0' in lines
    assert "# TYPE gazette_spool_commits_total counter" in lines
    assert "# TYPE gazette_write_head gauge" in lines
    # Every gauge is a level that can go down; whatever only increases is a counter.
    gauges = [line.split()[2] for line in lines if line.startswith("# TYPE") and line.endswith(" gauge")]
    assert [g for g in gauges if not g.endswith("_created")] == ["gazette_write_head"]


def test_consumer_lag_per_shard_is_the_unread_bytes(cluster) -> None:
    journal = "tests/metrics-lag/part-000"
    client = cluster.client()
    client.apply_journals([JournalSpec(name=journal, replication=1, labels=JSON)])
    cluster.wait_for_routes()
    pub = Publisher(client)
    for i in range(4):
        pub.publish_committed(journal, {"i": i})
    pub.flush()
    pub.close()
    head = client.read_head(journal)
    app = Held()
    spec = ShardSpec("metrics-lag-000", [journal], max_txn_duration="50ms")
    group = cluster.run_consumer(app, [spec])
    group.wait_for_primaries()
    url = group.metrics(0)

    def lag() -> float | None:
        _, samples = _scrape(url)
        got = [v for (name, labels), v in samples.get("gauge", {}).items()
               if name == "gazette_shard_read_lag_bytes" and dict(labels)["journal"] == journal]  # fmt: skip
        return got[0] if got else None

    # Held in its first message: nothing is read through yet, the whole journal is lag.
    wait_for("the lag to show the journal's unread bytes", lambda: lag() == head)
    app.release.set()
    group.client().stat_shard(spec.id, {journal: head}, timeout=60)
    assert lag() == 0
