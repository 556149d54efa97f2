"""Prometheus metrics of one broker (names as in docs/semantics.md#metrics), on a per-broker registry.

A registry per broker keeps several in-process brokers (LocalCluster inprocess mode) apart. What only
ever increases is a Counter; gazette.metrics serves the registry (and exposes the two "..._totals"
counters under Gazette's exact names).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.started = Counter(
            "gazette_journal_server_started_totals", "Total number of started JournalServer RPC invocations, "
            "by operation.", ["operation"], registry=r,
        )  # fmt: skip
        self.completed = Counter(
            "gazette_journal_server_completed_totals", "Total number of completed JournalServer RPC "
            "invocations, by operation & response status", ["operation", "status"], registry=r,
        )  # fmt: skip
        self.write_head = Gauge("gazette_write_head", "Journal write head", ["journal"], registry=r)
        self.commits = Counter("gazette_spool_commits_total", "Spool commits", registry=r)
        self.commit_bytes = Counter("gazette_spool_commit_bytes_total", "Bytes committed", registry=r)
        self.rollbacks = Counter("gazette_spool_rollbacks_total", "Spool rollbacks", registry=r)
        self.rollback_bytes = Counter("gazette_spool_rollback_bytes_total", "Bytes rolled back", registry=r)
        self.held_back = Counter(
            "gazette_spool_held_back_commits_total", "Spool commits applied here before every member of the "
            "route was known to hold them (held back from readers until it is)", registry=r,
        )  # fmt: skip
        self.completed_spools = Counter("gazette_spool_completed_total", "Spools completed", registry=r)
        self.persisted = Counter("gazette_spool_persisted_total", "Spools persisted", registry=r)
        self.read_bytes_total = Counter("gazette_read_bytes_total", "Bytes read from stores", registry=r)

    def commit(self, journal: str, nbytes: int, head: int) -> None:
        if nbytes:
            self.commits.inc()
            self.commit_bytes.inc(nbytes)
        self.write_head.labels(journal).set(head)

    def rollback(self, nbytes: int) -> None:
        self.rollbacks.inc()
        self.rollback_bytes.inc(nbytes)

    def read_bytes(self, nbytes: int) -> None:
        self.read_bytes_total.inc(nbytes)
