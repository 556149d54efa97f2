"""Bad things in the fragment store: corrupt objects are reported naming the object; foreign
objects under a journal's prefix are skipped; nothing committed is lost."""

from __future__ import annotations

import logging
import os

import pytest

from gazette.protocol.errors import GazetteError

J = "examples/store/part-000"


def _persisted(cluster, client, data: bytes, codec: str = "none"):
    client.apply_journals(
        [cluster.journal_spec(J, compression=codec, fragment_length=1 << 20, refresh_interval="1s")]
    )
    client.append(J, data)
    frag = client.flush(J)
    assert frag is not None and frag.backing_store == cluster.store
    return frag


def _object_path(cluster, frag) -> str:
    return os.path.join(cluster.store[len("file://") :], frag.content_path)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_fragment_is_reported_naming_the_object(cluster, client, damage):
    frag = _persisted(cluster, client, b"some committed content\n" * 100)
    cluster.stop_broker(0)
    path = _object_path(cluster, frag)
    raw = bytearray(open(path, "rb").read())
    if damage == "flip":
        raw[5] ^= 0xFF
    else:
        del raw[-10:]
    open(path, "wb").write(bytes(raw))
    cluster.restart_broker(0)  # the spool is gone: reads now come from the store
    with pytest.raises(GazetteError) as exc:
        client.read_all(J)
    assert frag.content_name in str(exc.value)


def test_foreign_objects_are_skipped(cluster, client, caplog):
    data = b"real content\n"
    _persisted(cluster, client, data)
    store_dir = cluster.store[len("file://") :]
    with open(os.path.join(store_dir, J, "README.txt"), "w") as f:
        f.write("not a fragment")
    cluster.stop_broker(0)
    with caplog.at_level(logging.WARNING):
        cluster.restart_broker(0)
        assert client.read_all(J) == data
        frags = client.list_fragments(J)
    assert [(f.begin, f.end) for f in frags] == [(0, len(data))]
    assert any("README.txt" in r.getMessage() for r in caplog.records)
    assert os.path.exists(os.path.join(store_dir, J, "README.txt"))  # never deleted


def test_a_truncated_spool_file_fails_reads_and_persisting_naming_it(cluster, client):
    """The broker's spool file loses the tail of committed content (truncated on disk): a read of it
    fails at once with DATA_LOSS naming the broker, the fragment and the offset (it used to wait for
    bytes that would never come), and a Flush names the short spool instead of storing a bad fragment."""
    data = os.urandom(100_000)
    client.apply_journals([cluster.journal_spec(J, compression="none", fragment_length=1 << 30)])
    cluster.wait_for_routes([J])
    client.append(J, data)
    broker = cluster.brokers[0].broker
    assert broker is not None  # in-process
    spool_file = broker.replicas[J].spool.file
    assert spool_file is not None
    os.ftruncate(spool_file._fd, 50_000)  # the disk lost the tail of the spool
    with pytest.raises(GazetteError) as read_failed:
        client.read_all(J, timeout=30)
    message = str(read_failed.value)
    assert "DATA_LOSS" in message and "broker-0" in message, message
    assert f"{J} [0, 100000) ends at offset 50000" in message, message
    assert client.read_all(J, end_offset=50_000, timeout=30) == data[:50_000]  # what it still has
    with pytest.raises(GazetteError) as flush_failed:
        client.flush(J, timeout=10)
    assert "ends at 50000 (expected bytes through 100000)" in str(flush_failed.value)
    assert client.list_fragments(J)[0].backing_store == ""  # nothing short was stored
