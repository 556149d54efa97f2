"""Fixtures for broker tests: an in-process LocalCluster on the session etcd, under a unique root."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gazette.local.cluster import LocalCluster


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    """One in-process broker, a file:// store under tmp_path, short lease."""
    store = f"file://{tmp_path}/store/"
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=1,
        mode="inprocess",
        store=store,
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as c:
        yield c


@pytest.fixture
def client(cluster):
    return cluster.client()
