"""Fixtures of the fault suite: subprocess LocalClusters (lease TTL 5 s, two zones) whose broker
logs stay under the test's tmp_path, and Workloads (writers and a reader) closed after each test.

Faults need real processes (SIGKILL, SIGSTOP), so every cluster here is `mode="subprocess"`. The
suite runs serially; each test waits on conditions with deadlines and stops what it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from faults.harness import LEASE_TTL_S, ZONES
from faults.workload import Workload

from gazette.local.cluster import LocalCluster


@pytest.fixture
def make_cluster(etcd, etcd_root, tmp_path) -> Iterator[Callable[..., LocalCluster]]:
    """`make_cluster(brokers=3, own_etcd=False)`: a started subprocess cluster, closed after the test.
    With `own_etcd` it embeds its own etcd (for tests that restart or pause etcd)."""
    clusters: list[LocalCluster] = []

    def make(brokers: int = 3, own_etcd: bool = False) -> LocalCluster:
        data_dir = str(tmp_path / f"cluster-{len(clusters)}")
        shared = {} if own_etcd else {"etcd": etcd.endpoint, "root": etcd_root}
        cluster = LocalCluster(
            brokers=brokers, mode="subprocess", zones=ZONES, lease_ttl_s=LEASE_TTL_S, data_dir=data_dir,
            exit_drain_s=30.0, log_level="INFO", **shared,
        )  # fmt: skip
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.close()


@pytest.fixture
def workloads() -> Iterator[Callable[..., Workload]]:
    """`workloads(journal, endpoints, **kw)`: a started Workload, closed after the test."""
    started: list[Workload] = []

    def make(journal: str, endpoints: Callable[[], list[str]], **kw) -> Workload:
        w = Workload(journal, endpoints, **kw)
        started.append(w)
        return w.start()

    yield make
    for w in started:
        w.close()
