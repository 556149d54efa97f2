"""Prometheus metrics of one consumer member, on a registry of its own (gazette.metrics serves it).

Gazette's names and labels where Gazette has the metric (consumer/interfaces.go: the `shard` label
is the shard's FQN, its etcd key; `gazette_shard_up` is by shard id). Two are this project's:
`gazette_shard_commit_seconds`, a histogram of store commit latency, and
`gazette_shard_read_lag_bytes`, per source journal the write head the shard's read last saw minus
the offset its last completed transaction read through. Counters move once per completed
transaction (committed and acknowledged); `gazette_shard_up` and the lag are computed at each scrape
from the member's shards. Imports prometheus_client and nothing of the consumer at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gazette.consumer.shard import Shard

# Store commits take milliseconds (sqlite, a recovery log append) to seconds (a remote database).
COMMIT_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ConsumerMetrics:
    """The metrics of one Consumer; `shards()` lists its current shards (read at each scrape)."""

    def __init__(self, shards: Callable[[], Iterable[Shard]]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.transactions = Counter(
            "gazette_shard_transactions_total",
            "Total number of consumer transactions.",
            ["shard"],
            registry=r,
        )
        self.read_messages = Counter(
            "gazette_shard_read_messages_total",
            "Total number of messages processed by completed consumer transactions.", ["shard"], registry=r,
        )  # fmt: skip
        self.read_bytes = Counter(
            "gazette_shard_read_bytes_total",
            "Total byte-length of source journal content read by completed consumer transactions.",
            ["shard"], registry=r,
        )  # fmt: skip
        self.read_head = Gauge(
            "gazette_shard_read_head",
            "Current read head of the consumer (i.e., next journal byte offset to be read).",
            ["shard", "journal"], registry=r,
        )  # fmt: skip
        self.phase_seconds = Counter(
            "gazette_shard_phase_seconds_total", "Cumulative number of seconds processing transactions.",
            ["shard", "phase", "type"], registry=r,
        )  # fmt: skip
        self.commit_seconds = Histogram(
            "gazette_shard_commit_seconds",
            "Seconds from a transaction's commit start to its store commit completing.",
            ["shard"], buckets=COMMIT_SECONDS_BUCKETS, registry=r,
        )  # fmt: skip
        r.register(_ShardCollector(shards))

    def transaction_completed(
        self,
        fqn: str,
        *,
        messages: int,
        read_bytes: int,
        read_through: Mapping[str, int],
        consume_s: float,
        commit_s: float,
        ack_s: float,
    ) -> None:
        """Records one completed transaction of the shard `fqn` (called on the consumer's loop)."""
        self.transactions.labels(fqn).inc()
        self.read_messages.labels(fqn).inc(messages)
        self.read_bytes.labels(fqn).inc(max(read_bytes, 0))
        for journal, offset in read_through.items():
            self.read_head.labels(fqn, journal).set(offset)
        # Gazette's phase names; our consuming phase holds its stalls, committing its preparation.
        self.phase_seconds.labels(fqn, "20-consuming", "sync").inc(max(consume_s, 0.0))
        self.phase_seconds.labels(fqn, "50-committing", "async").inc(max(commit_s, 0.0))
        self.phase_seconds.labels(fqn, "60-acknowledging", "async").inc(max(ack_s, 0.0))
        self.commit_seconds.labels(fqn).observe(max(commit_s, 0.0))


class _ShardCollector(Collector):
    """`gazette_shard_up` and `gazette_shard_read_lag_bytes`, from the member's shards at scrape time.

    Scrapes run on the HTTP server's thread: shard state is copied (list(), dict()) before use, each
    copy one step under the GIL, never iterated while the loop thread may change it."""

    def __init__(self, shards: Callable[[], Iterable[Shard]]) -> None:
        self._shards = shards

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "gazette_shard_up",
            "Indicates the processing status of a shard by this consumer.",
            labels=["shard", "status"],
        )
        lag = GaugeMetricFamily(
            "gazette_shard_read_lag_bytes",
            "Bytes of a source journal not yet read through by the shard's last completed transaction "
            "(the journal's write head as its read last saw it).",
            labels=["shard", "journal"],
        )
        for shard in list(self._shards()):
            status = getattr(shard.assignment.value, "code", None)
            up.add_metric([shard.id, status.name if status is not None else "IDLE"], 1)
            loop = shard.txn_loop
            if loop is None or loop.stopped:
                continue
            read_through = dict(shard.read_through)
            for reader in list(loop.sources):
                begin = max(read_through.get(reader.journal, 0), reader.offset)  # offset: where it began
                lag.add_metric([shard.fqn, reader.journal], max(reader.write_head - begin, 0))
        yield up
        yield lag
