"""The journal service over real gRPC on loopback with a real etcd: appends, reads, registers,
offsets, flags, aborts, blocking reads, Apply/List, and round trips through the store per codec."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import threading
import time

import grpc
import pytest

from gazette.client.loop import default_loop
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec, SpecChange
from gazette.protocol.status import Status

J = "examples/test/part-000"


def _apply(cluster, client, name=J, **fields):
    fields.setdefault("fragment_length", 1 << 16)
    fields.setdefault("refresh_interval", "1s")
    client.apply_journals([cluster.journal_spec(name, **fields)])


@pytest.mark.parametrize("codec", ["none", "gzip", "zstandard", "snappy"])
def test_round_trip_through_graceful_restart(cluster, client, codec):
    """Random-sized appends; SIGTERM-style stop persists the spool; after a restart every byte reads
    back from the store, byte for byte, in the codec's files."""
    _apply(cluster, client, compression=codec, fragment_length=1 << 15)
    rng = random.Random(codec)
    expected = bytearray()
    for _ in range(40):
        data = rng.randbytes(rng.randint(1, 9000))
        res = client.append(J, data)
        assert (res.begin, res.end) == (len(expected), len(expected) + len(data))
        assert res.sha1 == hashlib.sha1(data).hexdigest()
        expected += data
    cluster.stop_broker(0)
    cluster.restart_broker(0)
    assert client.read_all(J) == bytes(expected)
    frags = client.list_fragments(J)
    assert frags and all(f.backing_store == f.store_url == cluster.store for f in frags)
    assert all(f.sha1 == f.sum.hex() and len(f.sha1) == 40 for f in frags)
    assert frags[0].begin == 0 and frags[-1].end == len(expected)
    ext = {"none": ".raw", "gzip": ".gz", "zstandard": ".zst", "snappy": ".sz"}[codec]
    store_dir = cluster.store[len("file://") :]
    names = os.listdir(os.path.join(store_dir, J))
    assert names and all(n.endswith(ext) for n in names)


def test_append_to_missing_journal(client):
    with pytest.raises(GazetteError) as exc:
        client.append("examples/missing/one", b"x")
    assert exc.value.status == Status.JOURNAL_NOT_FOUND


def test_read_only_and_write_only_journals(cluster, client):
    _apply(cluster, client, "examples/flags/ro", flags="O_RDONLY")
    _apply(cluster, client, "examples/flags/wo", flags="O_WRONLY")
    with pytest.raises(GazetteError) as exc:
        client.append("examples/flags/ro", b"x")
    assert exc.value.status == Status.NOT_ALLOWED
    client.append("examples/flags/wo", b"written\n")
    with pytest.raises(GazetteError) as exc:
        client.read_all("examples/flags/wo")
    assert exc.value.status == Status.NOT_ALLOWED


def test_explicit_offsets(cluster, client):
    _apply(cluster, client)
    client.append(J, b"0123456789")
    with pytest.raises(GazetteError) as exc:
        client.append(J, b"x", offset=3)
    assert exc.value.status == Status.WRONG_APPEND_OFFSET
    res = client.append(J, b"abc", offset=10)
    assert (res.begin, res.end) == (10, 13)
    assert client.read_all(J) == b"0123456789abc"


def test_registers_check_union_subtract(cluster, client):
    _apply(cluster, client)
    # Empty registers match any selector (a fresh journal is "unlocked").
    res = client.append(J, b"a", check_registers="author=zombie", union_registers={"author": "one"})
    assert res.registers.to_dict() == {"author": "one"}
    with pytest.raises(GazetteError) as exc:
        client.append(J, b"b", check_registers="author=two")
    assert exc.value.status == Status.REGISTER_MISMATCH
    assert exc.value.registers.to_dict() == {"author": "one"}  # the response carries current registers
    res = client.append(
        J,
        b"c",
        check_registers="author=one",
        subtract_registers={"author": "one"},
        union_registers={"author": "two"},
    )
    assert res.registers.to_dict() == {"author": "two"}
    assert client.read_all(J) == b"ac"  # the refused append wrote nothing


def test_register_update_needs_bytes(cluster, client):
    _apply(cluster, client)
    with pytest.raises(GazetteError, match="register modification requires a non-empty append"):
        client.append(J, b"", union_registers={"author": "x"})
    res = client.append(J, b"")
    assert (res.begin, res.end) == (0, 0) and not res.registers  # the refused update left none


def _raw_stub(cluster):
    loop = default_loop()

    async def make():
        ch = grpc.aio.insecure_channel(cluster.broker_endpoints[0].removeprefix("http://"))
        return ch, pb_grpc.JournalStub(ch)

    return loop, loop.run(make())


def test_aborted_append_leaves_nothing(cluster, client):
    _apply(cluster, client)
    client.append(J, b"before\n")
    loop, (ch, stub) = _raw_stub(cluster)
    sent = threading.Event()

    async def abort_mid_stream():
        async def requests():
            yield pb.AppendRequest(journal=J)
            yield pb.AppendRequest(content=b"torn content that must never be visible")
            sent.set()
            yield pb.AppendRequest(content=b"more")
            # Stream ends with no empty commit message: a rollback.

        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.Append(requests())
        return exc.value.code()

    assert loop.run(abort_mid_stream()) == grpc.StatusCode.ABORTED

    async def cancel_mid_stream():
        gate = __import__("asyncio").Event()

        async def requests():
            yield pb.AppendRequest(journal=J)
            yield pb.AppendRequest(content=b"cancelled content")
            await gate.wait()  # never set: the call is cancelled while streaming

        call = stub.Append(requests())
        await __import__("asyncio").sleep(0.2)
        call.cancel()

    loop.run(cancel_mid_stream())
    res = client.append(J, b"after\n")
    assert res.begin == len(b"before\n")  # the next append lands where the aborted ones began
    assert client.read_all(J) == b"before\nafter\n"
    loop.run(ch.close())


def test_non_blocking_read_at_head_and_blocking_wakeup(cluster, client):
    _apply(cluster, client)
    client.append(J, b"abc")
    assert [c.content for c in client.read(J, 3)] == []  # nothing yet: ends at the head
    loop, (ch, stub) = _raw_stub(cluster)

    async def raw_read():
        async for resp in stub.Read(pb.ReadRequest(journal=J, offset=3)):
            return resp

    resp = loop.run(raw_read())
    assert resp.status == Status.OFFSET_NOT_YET_AVAILABLE and resp.write_head == 3

    got: list[bytes] = []
    started = threading.Event()

    def blocking_reader():
        started.set()
        for chunk in client.read(J, 3, block=True):
            got.append(chunk.content)
            return

    t = threading.Thread(target=blocking_reader)
    t.start()
    started.wait()
    client.append(J, b"def")
    t.join(timeout=30)
    assert got == [b"def"]
    loop.run(ch.close())


def test_read_end_offset_and_metadata_only(cluster, client):
    _apply(cluster, client)
    client.append(J, b"0123456789")
    assert b"".join(c.content for c in client.read(J, 2, end_offset=5)) == b"234"
    assert client.read_head(J) == 10


def test_apply_compare_and_swap_and_validation(cluster, client):
    spec = cluster.journal_spec(J, fragment_length=1 << 16)
    client.apply_journals([SpecChange(spec=spec, expect_mod_revision=0, delete=False)])
    with pytest.raises(GazetteError) as exc:  # must not exist: it does
        client.apply_journals([SpecChange(spec=spec, expect_mod_revision=0, delete=False)])
    assert exc.value.status == Status.ETCD_TRANSACTION_FAILED
    (info,) = client.list_journals(f"name={J}")
    client.apply_journals(
        [SpecChange(spec=spec.replace(replication=2), expect_mod_revision=info.mod_revision, delete=False)]
    )
    assert client.list_journals(f"name={J}")[0].spec.replication == 2
    with pytest.raises(ValidationError, match="replication"):
        client.apply_journals([spec.replace(replication=9)])
    # Server-side validation too: a raw Apply of an invalid spec is refused, naming the field.
    loop, (ch, stub) = _raw_stub(cluster)
    bad = spec.to_proto()
    bad.fragment.length = 10

    async def raw_apply():
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.Apply(
                pb.ApplyRequest(changes=[pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=bad)])
            )
        return e.value

    err = loop.run(raw_apply())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "length" in err.details()
    loop.run(ch.close())
    client.delete_journals([J])
    assert client.list_journals(f"name={J}") == []


def test_list_selectors(cluster, client):
    for name, mtype in [("examples/a/one", "A"), ("examples/a/two", "B"), ("examples/b/one", "A")]:
        client.apply_journals(
            [
                cluster.journal_spec(
                    name,
                    labels={"content-type": "application/x-ndjson", "app.gazette.dev/message-type": mtype},
                )
            ]
        )
    names = lambda sel: sorted(i.spec.name for i in client.list_journals(sel))  # noqa: E731
    assert names("prefix=examples/a/") == ["examples/a/one", "examples/a/two"]
    assert names("app.gazette.dev/message-type=A") == ["examples/a/one", "examples/b/one"]
    assert names("app.gazette.dev/message-type=A,prefix=examples/a/") == ["examples/a/one"]
    assert names("app.gazette.dev/message-type!=A") == ["examples/a/two"]
    deadline = time.monotonic() + 30
    while (info := client.list_journals("name=examples/b/one")[0]).route.primary < 0:
        assert time.monotonic() < deadline, "journal never got a primary"
        time.sleep(0.05)
    assert info.route.primary == 0 and info.route.members == (("local", "broker-0"),)


def test_invalid_journal_names_rejected(cluster, client):
    for bad in ["ab", "/abs/name", "a//b", "has space/x", "a/b/"]:
        with pytest.raises(ValidationError):
            JournalSpec(name=bad, stores=[cluster.store]).validate()
        with pytest.raises(GazetteError):
            client.append(bad, b"x")


def test_flush_after_another_roll_persisted_the_spool_returns_that_fragment(cluster, client):
    """The journal's first write is rolled by the next zero-byte append (here the broker's pulse, which
    can come after a client's first append). Once that fragment is persisted, a Flush finds an empty
    spool and nothing pending: it still answers with the persisted fragment, not None."""
    _apply(cluster, client)
    res = client.append(J, b"first write\n")
    broker = cluster.brokers[0].broker
    default_loop().run(broker.pulse(J))
    deadline = time.monotonic() + 30
    while not [f for f in client.list_fragments(J) if f.backing_store and f.end == res.end]:
        assert time.monotonic() < deadline, "the pulse's roll was not persisted"
        time.sleep(0.05)
    flushed = client.flush(J)
    assert flushed is not None and flushed.backing_store and (flushed.begin, flushed.end) == (0, res.end)


def test_list_fragments_paging_and_spooled(cluster, client):
    _apply(cluster, client, fragment_length=1024)
    for _ in range(12):
        client.append(J, b"x" * 1100)  # each append rolls the previous fragment
    client.flush(J)
    frags = client.list_fragments(J)
    assert [f.begin for f in frags] == sorted(f.begin for f in frags)
    assert frags[-1].end == 12 * 1100
    client.append(J, b"y" * 10)
    spooled = [f for f in client.list_fragments(J) if not f.backing_store]
    assert spooled and spooled[-1].end == 12 * 1100 + 10
    persisted_only = client.list_fragments(J, end_mod_time=2**40)
    assert all(f.backing_store for f in persisted_only)
    urls = client.fragments_with_urls(J, signature_ttl_s=60)
    assert [f for f, _ in urls] == client.list_fragments(J)
    for frag, url in urls:  # persisted fragments are signed (a file:// URL here); spooled ones are not
        assert url == (f"{cluster.store}{frag.content_path}" if frag.backing_store else ""), (frag, url)


def test_list_watch_sends_a_new_snapshot_on_change(cluster, client):
    """Watch mode: a snapshot, an empty message ending it, then a new snapshot once the matched set
    changes (here: a journal is added under the watched prefix)."""
    _apply(cluster, client, "examples/watch/one")
    loop, (ch, stub) = _raw_stub(cluster)

    async def watch():
        selector = LabelSelector.parse("prefix=examples/watch/").to_proto()
        call = stub.List(pb.ListRequest(selector=selector, watch=True))
        snapshots: list[list[str]] = []
        current: list[str] = []
        async for resp in call:
            if not resp.journals and not resp.HasField("header"):  # end of a snapshot
                snapshots.append(sorted(current))
                current = []
                if len(snapshots) == 1:
                    await asyncio.to_thread(_apply, cluster, client, "examples/watch/two")
                else:
                    call.cancel()
                    return snapshots
            current += [j.spec.name for j in resp.journals]
        return snapshots

    snapshots = loop.run(asyncio.wait_for(watch(), 30))
    assert snapshots == [["examples/watch/one"], ["examples/watch/one", "examples/watch/two"]]
    loop.run(ch.close())


def test_index_has_greater_offset_says_how_to_resync(cluster, client):
    """With one replica a restart loses the spool's position: plain appends are refused (Gazette's
    fail-safe) with a message naming the fix, and an empty append at the head re-syncs."""
    _apply(cluster, client)
    client.append(J, b"persisted\n")
    cluster.stop_broker(0)
    cluster.restart_broker(0)
    with pytest.raises(GazetteError, match="empty append at the write head") as exc:
        client.append(J, b"refused\n")
    assert exc.value.status == Status.INDEX_HAS_GREATER_OFFSET
    client.append(J, b"", offset=client.read_head(J))
    assert client.append(J, b"accepted\n").begin == len(b"persisted\n")
    assert client.read_all(J) == b"persisted\naccepted\n"
