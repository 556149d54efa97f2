"""A broker's spool disk fills up (a small tmpfs as its spool directory): appends fail with one clear error
naming the broker, the journal and the directory, nothing acknowledged is lost, and appends resume once
the spool's persisted fragments are dropped from the disk.

Needs root (to mount a tmpfs); skipped otherwise, saying so, and a failure under CI (tests/needs.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import tmpfs
from needs import require_root

from gazette.local.cluster import LocalCluster
from gazette.protocol.errors import GazetteError
from gazette.testing import wait_for

J = "examples/full-disk/part-000"
CHUNK = 100_000
SPOOL_TMPFS = "512k"  # room for five chunks
WAIT_S = 60.0


@pytest.fixture(autouse=True)
def as_root() -> None:
    """Mounting a tmpfs as the spool directory needs root: without it these tests skip, or fail under CI."""
    require_root("mounting a tmpfs as the spool directory")


def _chunk(i: int) -> bytes:
    return bytes([ord("a") + i % 26]) * (CHUNK - 1) + b"\n"


@pytest.fixture
def spool_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/data/spool/broker-<i> for brokers 0 and 1, the last on a 512 KiB tmpfs."""
    for suffix in ("broker-0", "broker-1"):
        (tmp_path / "data" / "spool" / suffix).mkdir(parents=True)
    full = tmp_path / "data" / "spool" / "broker-1"
    with tmpfs.mounted(full, SPOOL_TMPFS):
        yield full


def _cluster(etcd, etcd_root, tmp_path: Path, brokers: int) -> LocalCluster:
    (tmp_path / "store").mkdir()
    return LocalCluster(
        brokers=brokers, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint,
        root=etcd_root, data_dir=str(tmp_path / "data"),
    )  # fmt: skip


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_a_full_spool_disk_fails_appends_clearly_and_loses_nothing(etcd, etcd_root, tmp_path, spool_tmpfs):
    """One broker, its spool on the tmpfs: appends fill it, the next fails RESOURCE_EXHAUSTED (at once,
    not retried) naming broker, journal and directory; every acknowledged byte reads back; after a
    Flush persists the spool and the index refresh drops its local files, appends go on."""
    # broker-1 is the tmpfs: give the cluster two brokers and a journal only broker-1 serves.
    with _cluster(etcd, etcd_root, tmp_path, brokers=2) as cluster:
        client = cluster.client()
        spec = cluster.journal_spec(J, replication=1, fragment_length=1 << 30, refresh_interval="1s")
        client.apply_journals([spec])
        cluster.wait_for_routes([J])
        primary = next(i for i in client.list_journals() if i.spec.name == J).route.primary_id
        assert primary is not None
        if primary[1] != "broker-1":  # move it: broker-0 stops, broker-1 takes the journal
            cluster.stop_broker(0)
            cluster.wait_for_routes([J])
        acked = b""
        for i in range(20):
            try:
                client.append(J, _chunk(i), timeout=WAIT_S)
            except GazetteError as exc:
                failure = str(exc)
                break
            acked += _chunk(i)
        else:
            pytest.fail(f"20 appends of {CHUNK} bytes fitted in a {SPOOL_TMPFS} spool directory")
        assert len(acked) >= 3 * CHUNK
        assert "RESOURCE_EXHAUSTED" in failure and "broker-1" in failure and J in failure, failure
        assert str(spool_tmpfs) in failure and "No space left on device" in failure, failure
        assert client.read_all(J) == acked  # nothing acknowledged lost, nothing of the failed append

        assert client.flush(J) is not None  # persisted; the next refresh drops the local spool files
        wait_for("the persisted spool files freed", lambda: _free_bytes(spool_tmpfs) >= 2 * CHUNK, WAIT_S)
        more = _chunk(25)
        client.append(J, more, timeout=WAIT_S)
        assert client.read_all(J) == acked + more


def test_a_replica_whose_spool_disk_is_full_is_named_in_the_append_error(
    etcd, etcd_root, tmp_path, spool_tmpfs
):
    """R=2 over two brokers, only broker-1's spool is full: where broker-1 is the replica, appends time
    out (a replication failure is retried, as a replica may be replaced) with the last status naming it
    and its directory (where it is the primary, they fail at once as above); everything acknowledged
    before reads back."""
    with _cluster(etcd, etcd_root, tmp_path, brokers=2) as cluster:
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(J, replication=2, fragment_length=1 << 30)])
        cluster.wait_for_routes([J])
        acked = b""
        for i in range(20):
            try:
                client.append(J, _chunk(i), timeout=20)
            except GazetteError as exc:  # CallTimeout where broker-1 is the replica
                failure = str(exc)
                break
            acked += _chunk(i)
        else:
            pytest.fail(f"20 appends of {CHUNK} bytes fitted in a {SPOOL_TMPFS} spool directory")
        assert "broker-1" in failure and str(spool_tmpfs) in failure, failure
        assert "No space left on device" in failure, failure
        # A failed replication is indeterminate (the primary may have committed it, as Gazette's): what
        # was acknowledged is there, in order, at the start.
        assert client.read_all(J)[: len(acked)] == acked


def test_a_full_store_keeps_the_spool_and_flush_names_the_error(etcd, etcd_root, tmp_path):
    """The file:// store on a 64 KiB tmpfs: a Flush of 200 KB answers FRAGMENT_STORE_UNHEALTHY naming
    the object and ENOSPC within the caller's bound, no partial object is left, the content still
    reads back from the spool, and once the store has room the persister's retry stores it whole."""
    store = tmp_path / "store"
    store.mkdir()
    with tmpfs.mounted(store, "64k"):
        with LocalCluster(
            brokers=1, mode="inprocess", store=f"file://{store}/", etcd=etcd.endpoint, root=etcd_root,
            data_dir=str(tmp_path / "data"),
        ) as cluster:  # fmt: skip
            client = cluster.client()
            client.apply_journals([cluster.journal_spec(J, compression="none", fragment_length=1 << 30)])
            cluster.wait_for_routes([J])
            data = os.urandom(200_000)
            client.append(J, data)
            with pytest.raises(GazetteError) as failed:
                client.flush(J, timeout=10)
            message = str(failed.value)
            assert "FRAGMENT_STORE_UNHEALTHY" in message and "No space left on device" in message, message
            assert f"file://{store}/" in message, message
            assert client.read_all(J) == data
            partial = [
                p for p in store.rglob("*") if p.is_file() and ".test" not in p.relative_to(store).parts
            ]
            assert partial == []  # the failed puts left nothing (the health check's probe aside)

            tmpfs.resize(store, "4m")
            fragment = client.flush(J, timeout=WAIT_S)
            assert fragment is not None and (fragment.begin, fragment.end) == (0, len(data))
            assert (store / fragment.content_path).read_bytes() == data
