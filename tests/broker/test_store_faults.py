"""Bad things in the fragment store: corrupt objects are reported naming the object; foreign
objects under a journal's prefix are skipped; nothing committed is lost."""

from __future__ import annotations

import logging
import os

import pytest

from gazette.protocol.errors import GazetteError

J = "examples/store/part-000"


def _persisted(cluster, client, data: bytes, codec: str = "none"):
    client.apply_journals([cluster.journal_spec(J, compression=codec, fragment_length=1 << 20, refresh_interval="1s")])
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
