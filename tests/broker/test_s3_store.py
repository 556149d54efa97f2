"""Journals persisted to S3 (moto's server over real HTTP): round trip through a graceful restart,
and a store that goes down: appends fail FRAGMENT_STORE_UNHEALTHY naming the store's error, already
committed spools are retried and catch up when it returns, and nothing committed is lost."""

from __future__ import annotations

import asyncio
import os

import pytest

from gazette.fragment.stores import clear_store_cache
from gazette.local.cluster import LocalCluster
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

J = "examples/s3/part-000"


@pytest.fixture
def s3_cluster(etcd, etcd_root, tmp_path, s3_store_url):
    with LocalCluster(
        brokers=1,
        mode="inprocess",
        store=s3_store_url,
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as c:
        yield c


def test_s3_round_trip(s3_cluster):
    client = s3_cluster.client()
    client.apply_journals(
        [s3_cluster.journal_spec(J, compression="zstandard", fragment_length=4096, refresh_interval="1s")]
    )
    expected = b""
    for i in range(30):
        data = os.urandom(300 + i * 7)
        client.append(J, data)
        expected += data
    s3_cluster.stop_broker(0)
    s3_cluster.restart_broker(0)
    assert client.read_all(J) == expected
    frags = client.list_fragments(J)
    assert frags and all(f.backing_store == s3_cluster.store for f in frags)
    assert frags[-1].end == len(expected)


def test_store_down_then_back(etcd, etcd_root, tmp_path, dedicated_moto):
    moto = dedicated_moto()
    from gazette.testing import make_bucket

    make_bucket(moto.endpoint, "down-test")
    store = f"s3://down-test/frags/?endpoint={moto.endpoint}&region=us-east-1"
    with LocalCluster(
        brokers=1,
        mode="inprocess",
        store=store,
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as c:
        client = c.client()
        client.apply_journals([c.journal_spec(J, compression="snappy", refresh_interval="1s")])
        client.append(J, b"committed before the outage\n")
        moto.stop()
        # The committed spool cannot be persisted while the store is down: a flush does not complete.
        with pytest.raises(TimeoutError):
            c._loop.run(asyncio.wait_for(client.aio.flush(J), 5))
        # ...but it is still readable from the broker, and retried.
        assert client.read_all(J) == b"committed before the outage\n"
        moto.start()
        make_bucket(moto.endpoint, "down-test")
        clear_store_cache()
        # Waits for the queued spool's retry (None if that retry already stored it).
        frag = client.flush(J)
        assert frag is None or frag.backing_store == store
        frags = client.list_fragments(J)
        assert frags and all(f.backing_store == store for f in frags), frags
        assert frags[-1].end == len(b"committed before the outage\n")


def test_append_fails_when_first_store_is_down(etcd, etcd_root, tmp_path, closed_endpoint):
    store = f"s3://never-up/frags/?endpoint={closed_endpoint}&region=us-east-1"
    with LocalCluster(
        brokers=1,
        mode="inprocess",
        store=store,
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as c:
        client = c.client()
        client.apply_journals([c.journal_spec(J, refresh_interval="1s")])
        with pytest.raises(GazetteError) as exc:
            client.append(J, b"x")
        assert exc.value.status == Status.FRAGMENT_STORE_UNHEALTHY
        assert exc.value.store_health_error  # the store's own error rides along
