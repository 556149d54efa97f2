"""A pytest plugin of real things to test against: `pytest_plugins = ["gazette.testing.fixtures"]`
in a conftest.py (or `-p gazette.testing.fixtures`).

`etcd` (session) is one real etcd, shared because starting one takes a while; `etcd_root` (and
`module_etcd_root`) gives each test a root of its own and deletes its keys afterwards.
`make_local_cluster(...)` starts LocalClusters on that etcd, under that root and the test's
tmp_path, and closes them after the test. `moto_server` (session), `s3_bucket` and `s3_store_url`
are moto's S3 server, a fresh bucket and a store URL on it (moto is a test extra: see s3.py).
Fixtures of your own with the same names override these.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gazette.keyspace.etcd import EmbeddedEtcd
from gazette.local.cluster import LocalCluster
from gazette.testing import s3
from gazette.testing.etcd import delete_prefix, unique_root


@pytest.fixture(scope="session")
def etcd() -> Iterator[EmbeddedEtcd]:
    """One etcd server (an EmbeddedEtcd on loopback) for the whole session; stopped at its end.
    Tests that stop, restart or pause etcd should start an EmbeddedEtcd of their own instead."""
    # No fsync, as LocalCluster's: a throwaway etcd whose disk flushes would only add latency.
    with EmbeddedEtcd(fsync=False) as server:
        yield server


def _root_of(etcd: EmbeddedEtcd) -> Iterator[str]:
    root = unique_root()
    yield root
    if etcd.pid is not None:  # the session's etcd still runs
        delete_prefix(etcd.endpoint, root + "/")


@pytest.fixture
def etcd_root(etcd: EmbeddedEtcd) -> Iterator[str]:
    """A fresh etcd root ("/gazette-test/<hex>") for this test; every key under it is deleted after."""
    yield from _root_of(etcd)


@pytest.fixture(scope="module")
def module_etcd_root(etcd: EmbeddedEtcd) -> Iterator[str]:
    """As `etcd_root`, shared by a module's tests (for module-scoped clusters)."""
    yield from _root_of(etcd)


@pytest.fixture
def make_local_cluster(
    etcd: EmbeddedEtcd, etcd_root: str, tmp_path: Path
) -> Iterator[Callable[..., LocalCluster]]:
    """`make_local_cluster(brokers=1, **options)`: a started LocalCluster, closed after the test.

    Options are LocalCluster's; the defaults are in-process brokers on the session's etcd, broker
    root `<etcd_root>/cluster-<n>/brokers` (so consumers of `run_consumer`, under
    `<etcd_root>/cluster-<n>/consumers/...`, are cleaned up too) and data (with the default
    `file://` store) under `<tmp_path>/cluster-<n>`. `etcd=None` embeds an etcd of its own, for tests
    that restart or pause it."""
    clusters: list[LocalCluster] = []

    def make(brokers: int = 1, **options: Any) -> LocalCluster:
        n = len(clusters)
        options.setdefault("mode", "inprocess")
        options.setdefault("etcd", etcd.endpoint)
        if options["etcd"] is not None:
            options.setdefault("root", f"{etcd_root}/cluster-{n}/brokers")
        options.setdefault("data_dir", str(tmp_path / f"cluster-{n}"))
        cluster = LocalCluster(brokers, **options)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in reversed(clusters):
        cluster.close()


@pytest.fixture(scope="session")
def aws_dummy_credentials() -> Iterator[None]:
    """Dummy AWS credentials and region for the session, and none of the user's own AWS setup, so
    boto3 and `s3://` stores talk to moto and never to a real account."""
    mp = pytest.MonkeyPatch()
    for name, value in s3.DUMMY_AWS_ENV.items():
        mp.setenv(name, value)
    for name in s3.UNSET_AWS_ENV:
        mp.delenv(name, raising=False)
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def moto_server(aws_dummy_credentials: None) -> Iterator[str]:
    """Endpoint URL (http://127.0.0.1:PORT) of a moto S3 server shared by the session."""
    with s3.start_moto_server() as server:
        yield server.endpoint


@pytest.fixture
def s3_bucket(moto_server: str) -> str:
    """A fresh, empty bucket on the session's moto server."""
    bucket = f"b-{uuid.uuid4().hex[:16]}"
    s3.make_bucket(moto_server, bucket)
    return bucket


@pytest.fixture
def s3_store_url(moto_server: str, s3_bucket: str) -> str:
    """A store URL (with a key prefix) on a fresh bucket of the session's moto server."""
    return s3.s3_store_url(moto_server, s3_bucket)
