"""Fixtures for consumer tests: an in-process broker cluster on the session etcd; consumers run
under `<etcd_root>/consumers/...` beside the brokers' `<etcd_root>/brokers`, so both are cleaned up."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gazette.local.cluster import LocalCluster


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=1,
        mode="inprocess",
        store=f"file://{tmp_path}/store/",
        etcd=etcd.endpoint,
        root=f"{etcd_root}/brokers",
        data_dir=str(tmp_path / "data"),
        lease_ttl_s=3,
    ) as c:
        yield c
