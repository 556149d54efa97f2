"""gazette-py's client side against three real Gazette brokers (v0.103.0, `make peers`).

Every test writes through one side and reads through the other: what gazette-py's client, message
layer, CLI and `%gazette` magics write is read back with real gazctl, and what gazctl writes is read
by gazette-py. Each test uses journals under its own prefix in the module's one cluster.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import threading

import cli_run
import orjson
import pytest
import yaml
from cli_run import ok, one_error_line
from interop.conftest import Gazctl, gazctl_for

import gazette
from gazette.client.watch import JournalWatch
from gazette.local import LocalCluster
from gazette.message import ModuloMapping, Publisher, ReadCommitted, ReadUncommitted
from gazette.message.framing import framing_for
from gazette.message.mapping import fnv1a32
from gazette.message.uuid import Clock, Flags, build_uuid, new_producer_id
from gazette.protocol.errors import GazetteError
from gazette.protocol.labels import LabelSet
from gazette.protocol.spec import JournalFlag, SpecChange, SuspendLevel
from gazette.protocol.status import Status
from gazette.testing import wait_for

NDJSON = {"content-type": "application/x-ndjson"}
JOIN_TIMEOUT_S = 60.0  # bounds a blocking read that should end by its end_offset


@pytest.fixture(scope="module")
def gazctl(gazctl_bin: str, gazette_cluster: LocalCluster, tmp_path_factory) -> Gazctl:
    return gazctl_for(gazctl_bin, gazette_cluster, str(tmp_path_factory.mktemp("gazctl")))


@pytest.fixture
def prefix(request) -> str:
    """This test's own journal directory."""
    return f"interop/py-on-gazette/{request.node.name.replace('_', '-')}/"


def create(cluster: LocalCluster, *specs) -> list[str]:
    """Applies the specs through gazette-py and waits until every broker lists each with its full
    route (so a request to any broker finds them); returns their names."""
    cluster.client().apply_journals(specs)
    names = [s.name for s in specs]
    cluster.wait_for_routes(names)
    for endpoint in cluster.broker_endpoints:
        with gazette.Client(endpoint) as client:

            def routed(client=client) -> bool:
                listed = {i.spec.name: i for i in client.list_journals()}
                return all(
                    n in listed and listed[n].route.primary >= 0
                    and len(listed[n].route.members) == listed[n].spec.replication
                    for n in names
                )  # fmt: skip

            wait_for(f"{endpoint} to list {names} with full routes", routed)
    return names


def spec(cluster: LocalCluster, name: str, **fields):
    """A spec on the cluster's store, R=3 unless given."""
    fields.setdefault("replication", 3)
    return cluster.journal_spec(name, **fields)


def gazctl_list(gazctl: Gazctl, selector: str) -> dict[str, dict]:
    """gazctl's JSON listing (one ListResponse per line): journal name -> its ListResponse.Journal."""
    out: dict[str, dict] = {}
    for line in gazctl("journals", "list", "-l", selector, "--format", "json").stdout.splitlines():
        if line.strip():
            resp = json.loads(line)
            out.update({j["spec"]["name"]: j for j in resp.get("journals", [])})
    return out


def gazctl_spec(cluster: LocalCluster, name: str, replication: int = 1, **labels: str) -> str:
    """A journal spec as gazctl applies it (gazctl checks the whole spec: fragment fields included)."""
    label_list = ", ".join(f"{{name: {k}, value: {v}}}" for k, v in labels.items())
    return (
        f"name: {name}\nreplication: {replication}\nlabels: [{label_list}]\n"
        f"fragment: {{length: 1048576, compression_codec: SNAPPY, stores: ['{cluster.store}'], refresh_interval: 1m}}\n"
    )


def gazctl_read(gazctl: Gazctl, journal: str, *args: str) -> bytes:
    return gazctl("journals", "read", "-l", f"name={journal}", *args, input=b"").stdout


def gazctl_fragments(gazctl: Gazctl, journal: str) -> list[dict]:
    out = gazctl("journals", "fragments", "-l", f"name={journal}", "--format", "json", "--url-ttl", "1m")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def first_chunk(client, journal: str, offset: int = 0):
    """The first chunk a non-blocking read from `offset` yields (None at the head); the read is closed."""
    chunks = client.read(journal, offset)
    try:
        return next(chunks, None)
    finally:
        chunks.close()


def sha1_of_sum(s: dict) -> str:
    """The hex SHA1 of Gazette's JSON SHA1Sum (three big-endian words of 8, 8 and 4 bytes)."""
    words = (int(s.get("part1", 0)), 8), (int(s.get("part2", 0)), 8), (int(s.get("part3", 0)), 4)
    return b"".join(v.to_bytes(n, "big") for v, n in words).hex()


# --- gazette.Client ------------------------------------------------------------------------------


def test_apply_and_list_routes_and_selectors_match_gazctl(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    a, b, c = f"{prefix}a", f"{prefix}b", f"{prefix}sub/c"
    create(
        gazette_cluster,
        spec(gazette_cluster, a, labels={"app": "one", **NDJSON}),
        spec(gazette_cluster, b, replication=1, labels={"app": "two"}),
        spec(gazette_cluster, c, replication=2),
    )
    listed = {i.spec.name: i for i in client.list_journals(f"prefix={prefix}")}
    assert sorted(listed) == [a, b, c]
    suffixes = {f"broker-{i}" for i in range(3)}
    for name, replication in ((a, 3), (b, 1), (c, 2)):
        route = listed[name].route
        assert listed[name].spec.replication == replication
        assert len(route.members) == replication and {s for _, s in route.members} <= suffixes
        assert 0 <= route.primary < replication
        assert set(route.endpoints) <= set(gazette_cluster.broker_endpoints)
    # Selectors, evaluated by Gazette: the "prefix" meta-label, name:prefix, set membership, absence.
    names = lambda sel: sorted(i.spec.name for i in client.list_journals(sel))  # noqa: E731
    assert names(f"name:prefix={prefix}sub/") == [c]
    assert names(f"app in (one, two), prefix={prefix}") == [a, b]
    assert names(f"!app, prefix={prefix}") == [c]
    assert names(f"app!=one, prefix={prefix}") == [b, c]
    assert names(f"name={a}") == [a]
    assert names(f"name={prefix}missing") == []

    # gazctl sees the same specs, revisions and routes.
    theirs = gazctl_list(gazctl, f"prefix={prefix}")
    assert sorted(theirs) == [a, b, c]
    for name, info in listed.items():
        j = theirs[name]
        assert j["spec"]["replication"] == info.spec.replication
        assert int(j["mod_revision"]) == info.mod_revision
        members = [(m["zone"], m["suffix"]) for m in j["route"]["members"]]
        assert tuple(members) == info.route.members and j["route"].get("primary", 0) == info.route.primary
    assert {lb["name"]: lb["value"] for lb in theirs[a]["spec"]["labels"]["labels"]} == {
        "app": "one",
        **NDJSON,
    }

    # A journal gazctl applies is listed by gazette-py with its labels and fragment settings.
    d = f"{prefix}from-gazctl"
    gazctl(
        "journals", "apply", "--specs", "/dev/stdin",
        input=f"name: {d}\nreplication: 2\nlabels: [{{name: app, value: three}}]\nfragment:\n"
        f"  length: 4096\n  compression_codec: GZIP\n  stores: [{gazette_cluster.store}]\n  refresh_interval: 2s\n",
    )  # fmt: skip
    gazette_cluster.wait_for_routes([d])
    (info,) = client.list_journals(f"name={d}")
    assert (info.spec.replication, info.spec.fragment_length, info.spec.compression.name) == (2, 4096, "GZIP")
    assert info.spec.labels.value_of("app") == "three" and info.spec.refresh_interval == 2.0
    assert info.spec.stores == (gazette_cluster.store,) and len(info.route.members) == 2

    # Compare-and-swap: a stale revision is refused with Gazette's status; deletion at the right one.
    with pytest.raises(GazetteError) as err:
        client.apply_journals([SpecChange(info.spec, expect_mod_revision=info.mod_revision - 1)])
    assert err.value.status == Status.ETCD_TRANSACTION_FAILED
    client.apply_journals([SpecChange(info.spec, expect_mod_revision=info.mod_revision, delete=True)])
    assert wait_for("gazctl to see the deletion", lambda: d not in gazctl_list(gazctl, f"prefix={prefix}"))


def test_every_broker_proxies_appends_and_reads_of_an_r1_journal(gazette_cluster, gazctl, prefix) -> None:
    """Through each broker in turn (two of them proxy to the one member), and through a client whose
    first endpoint is dead (it fails over)."""
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}r1", replication=1))
    (member,) = gazette_cluster.client().list_journals(f"name={j}")[0].route.endpoints
    written = b""
    for endpoint in gazette_cluster.broker_endpoints:
        with gazette.Client(endpoint) as client:
            line = f"via {'member' if endpoint == member else 'proxy'} {endpoint}\n".encode()
            res = client.append(j, line)
            assert (res.begin, res.end) == (len(written), len(written) + len(line))
            written += line
            assert client.read_all(j) == written and client.read_head(j) == len(written)
            assert client.read_all(f"{j};meta-segment", res.begin) == line  # a metadata path segment
    with gazette.Client(f"http://127.0.0.1:1,{gazette_cluster.broker_endpoints[1]}") as client:
        client.append(j, b"after failover\n")
        assert client.aio.endpoint == gazette_cluster.broker_endpoints[1]
    assert gazctl_read(gazctl, j) == written + b"after failover\n"


def test_journal_watch_follows_gazctl_applies(gazette_cluster, gazctl, prefix) -> None:
    """JournalWatch on Gazette's List watch, whose snapshots end with a response whose header is empty
    but present (regression: the watch took that for the next snapshot's start and never completed one)."""
    (a,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}a"))
    watch = JournalWatch(gazette_cluster.client(), f"prefix={prefix}")
    try:
        names = lambda snapshot: sorted(i.spec.name for i in snapshot)  # noqa: E731
        assert names(watch.snapshot) == [a]
        b = f"{prefix}b"
        gazctl("journals", "apply", "--specs", "/dev/stdin", input=gazctl_spec(gazette_cluster, b))
        snapshot = watch.wait_until(lambda s: names(s) == [a, b], timeout=30)
        assert next(i for i in snapshot if i.spec.name == b).spec.replication == 1
        revision = watch.revision
        (listed,) = [i for i in snapshot if i.spec.name == a]
        deletion = f"name: {a}\nrevision: {listed.mod_revision}\ndelete: true\n"
        gazctl("journals", "apply", "--specs", "/dev/stdin", input=deletion)
        watch.wait_until(lambda s: names(s) == [b], timeout=30)
        assert watch.revision > revision and watch.error is None
    finally:
        watch.close()


def test_append_and_read_offsets_both_ways(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}j"))
    assert client.read_head(j) == 0
    assert list(client.read(j)) == []  # empty: OFFSET_NOT_YET_AVAILABLE ends a non-blocking read

    first = client.append(j, b"one\ntwo\n")
    assert (first.begin, first.end) == (0, 8)
    assert first.sha1 == hashlib.sha1(b"one\ntwo\n").hexdigest()  # Gazette's commit: this append alone
    assert gazctl_read(gazctl, j) == b"one\ntwo\n"

    gazctl("journals", "append", "-l", f"name={j}", input="three\n")
    assert client.read_head(j) == 14
    chunks = list(client.read(j))
    assert b"".join(c.content for c in chunks) == b"one\ntwo\nthree\n"
    assert chunks[0].offset == 0 and chunks[0].write_head == 14
    assert chunks[0].fragment is not None and chunks[0].fragment.journal == j  # the metadata response
    assert client.read_all(j, 4) == b"two\nthree\n"
    assert client.read_all(j, 4, end_offset=8) == b"two\n"
    assert [(c.offset, c.content) for c in client.read(j, 8, end_offset=10)] == [(8, b"th")]
    assert list(client.read(j, 14)) == [] and list(client.read(j, 1000)) == []  # at / past the head
    assert list(client.read(j, -1)) == []  # -1 is the head
    with pytest.raises(GazetteError) as info:
        client.read_all(f"{prefix}missing")
    assert info.value.status == Status.JOURNAL_NOT_FOUND


def test_large_multi_chunk_append(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}big"))
    client.append(j, b"head\n")
    data = os.urandom((5 << 20) // 2 + 12_345)  # 2.5 MiB and change: three 1 MiB chunks and a tail
    res = client.append(j, [data[:100], data[100:]])  # parts are chunked and committed as one append
    assert (res.begin, res.end) == (5, 5 + len(data))
    assert res.sha1 == hashlib.sha1(data).hexdigest()
    chunks = list(client.read(j, 5))
    assert [c.offset for c in chunks] == [
        5 + sum(len(c.content) for c in chunks[:i]) for i in range(len(chunks))
    ]
    assert b"".join(c.content for c in chunks) == data
    theirs = gazctl_read(gazctl, j)
    assert theirs[:5] == b"head\n" and hashlib.sha1(theirs[5:]).digest() == hashlib.sha1(data).digest()


def test_registers_union_check_and_mismatch(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}reg"))
    # Empty registers match any check (Gazette checks only journals that have registers).
    assert client.append(j, b"a\n", check_registers="owner=nobody").registers == LabelSet()
    taken = client.append(j, b"b\n", union_registers={"owner": "alice", "epoch": "1"})
    assert taken.registers == LabelSet({"owner": "alice", "epoch": "1"})
    assert client.append(j, b"c\n", check_registers="owner=alice").registers == taken.registers
    with pytest.raises(GazetteError) as info:
        client.append(j, b"lost\n", check_registers="owner=bob", union_registers={"owner": "bob"})
    assert info.value.status == Status.REGISTER_MISMATCH
    assert info.value.registers == taken.registers  # Gazette's response carries the current registers
    after = client.append(j, b"d\n", check_registers="owner in (alice)", subtract_registers={"epoch": "1"})
    assert after.registers == LabelSet({"owner": "alice"})
    assert gazctl_read(gazctl, j) == b"a\nb\nc\nd\n"  # the refused append left nothing


def test_explicit_offsets_and_reset_head(gazette_cluster, gazctl, prefix) -> None:
    """reset_head against Gazette v0.103.0, which does not know SUSPEND_KEEP (regression: it was sent
    for every journal and refused as "invalid Suspend variant")."""
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}off"))
    client.append(j, b"x\n")
    with pytest.raises(GazetteError) as info:
        client.append(j, b"y\n", offset=1)
    assert info.value.status == Status.WRONG_APPEND_OFFSET
    assert client.append(j, b"y\n", offset=2).begin == 2
    assert client.reset_head(j) == 4
    assert client.append(j, b"z\n").begin == 4
    assert gazctl_read(gazctl, j) == b"x\ny\nz\n"


def test_blocking_read_with_a_bound_sees_a_gazctl_append(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}tail"))
    client.append(j, b"before\n")
    head = client.read_head(j)
    got: list = []
    errors: list = []

    def read() -> None:
        try:
            got.extend(client.read(j, head, block=True, end_offset=head + 9))
        except Exception as exc:  # handed to the test thread
            errors.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # Whether the read waits at the head first or starts after this append, it must end at its bound.
    gazctl("journals", "append", "-l", f"name={j}", input="from gazctl\nmore\n")
    reader.join(JOIN_TIMEOUT_S)
    assert not reader.is_alive(), "a blocking read bounded by end_offset did not end"
    assert not errors, errors
    assert b"".join(c.content for c in got) == b"from gazc"
    assert got[0].offset == head


def test_persisted_fragments_urls_and_an_offset_jump(gazette_cluster, gazctl, prefix) -> None:
    """Fragments Gazette persisted: listed alike by both sides, read through the broker, and when the
    first is deleted from the store, both readers jump over the hole."""
    client = gazette_cluster.client()
    (j,) = create(
        gazette_cluster, spec(gazette_cluster, f"{prefix}frag", fragment_length=1024, refresh_interval=1.0)
    )
    for part in (b"a" * 2000, b"b" * 2000, b"c" * 10):  # each append rolls the spool the one before filled
        client.append(j, part)

    def persisted():
        frags = client.fragments_with_urls(j, signature_ttl_s=60)
        return frags if [f.mod_time != 0 for f, _ in frags] == [True, True, False] else None

    frags = wait_for("Gazette to persist and index two fragments", persisted)
    assert [(f.begin, f.end) for f, _ in frags] == [(0, 2000), (2000, 4000), (4000, 4010)]
    store_dir = gazette_cluster.store.removeprefix("file://")
    for f, url in frags[:2]:
        assert f.backing_store == gazette_cluster.store and url == f"{gazette_cluster.store}{f.content_path}"
        assert os.path.isfile(os.path.join(store_dir, f.content_path))
    assert frags[2][0].backing_store == "" and frags[2][1] == ""
    theirs = gazctl_fragments(gazctl, j)
    assert [
        (int(t["spec"].get("begin", 0)), int(t["spec"]["end"]), sha1_of_sum(t["spec"]["sum"]),
         t["spec"].get("backing_store", ""), int(t["spec"].get("mod_time", 0)), t.get("signed_url", ""))
        for t in theirs
    ] == [(f.begin, f.end, f.sha1, f.backing_store, f.mod_time, url) for f, url in frags]  # fmt: skip
    assert client.list_fragments(j) == [f for f, _ in frags]

    # A read from a persisted fragment: its first response names the persisted fragment.
    first = first_chunk(client, j, 10)
    assert first.offset == 10 and first.fragment == frags[0][0] and first.content == b"a" * len(first.content)
    assert client.read_all(j) == b"a" * 2000 + b"b" * 2000 + b"c" * 10

    os.remove(os.path.join(store_dir, frags[0][0].content_path))
    jumped = wait_for(
        "the brokers' index refresh to drop the deleted fragment",
        lambda: (c := first_chunk(client, j)) is not None and c.offset == 2000 and c,
    )
    assert jumped.fragment == frags[1][0]
    assert client.read_all(j) == b"b" * 2000 + b"c" * 10
    assert gazctl_read(gazctl, j) == b"b" * 2000 + b"c" * 10


def test_flush_names_the_rpc_gazette_lacks(gazette_cluster, prefix) -> None:
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}flush"))
    client.append(j, b"kept\n")
    with pytest.raises(GazetteError) as info:
        client.flush(j)
    assert "/gazette_py.Flusher/Flush" in str(info.value)
    assert getattr(info.value, "grpc_code", None) == "UNIMPLEMENTED"
    assert client.read_all(j) == b"kept\n"


def test_status_of_flags_and_suspension(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    ro, wo, s = create(
        gazette_cluster,
        spec(gazette_cluster, f"{prefix}ro", flags=JournalFlag.O_RDONLY),
        spec(gazette_cluster, f"{prefix}wo", flags=JournalFlag.O_WRONLY),
        spec(gazette_cluster, f"{prefix}s"),
    )
    with pytest.raises(GazetteError) as info:
        client.append(ro, b"x\n")
    assert info.value.status == Status.NOT_ALLOWED
    assert client.append(wo, b"x\n").end == 2
    with pytest.raises(GazetteError) as info:
        client.read_all(wo)
    assert info.value.status == Status.NOT_ALLOWED

    gazctl("journals", "suspend", "-l", f"name={s}")  # an empty journal is fully suspended
    level = lambda: client.list_journals(f"name={s}")[0].spec.suspend_level  # noqa: E731
    wait_for("the listing to show the suspension", lambda: level() == SuspendLevel.FULL)
    with pytest.raises(GazetteError) as info:
        client.read_all(s)
    assert info.value.status == Status.SUSPENDED
    assert client.append(s, b"wakes it\n").begin == 0  # an append resumes (SUSPEND_RESUME)
    wait_for("the listing to show the resumption", lambda: level() == SuspendLevel.NONE)
    assert gazctl_read(gazctl, s) == b"wakes it\n"


def test_async_client_append_and_read(gazette_cluster, gazctl, prefix) -> None:
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}aio"))
    gazctl("journals", "append", "-l", f"name={j}", input="gazctl\n")

    async def run():
        client = gazette.aio.connect(gazette_cluster.etcd_endpoint, gazette_cluster.broker_endpoints[2])
        try:
            res = await client.append(j, b"async\n")
            return res, [c async for c in client.read(j)]
        finally:
            await client.close()

    res, chunks = asyncio.run(run())
    assert (res.begin, res.end) == (7, 13)
    assert b"".join(c.content for c in chunks) == b"gazctl\nasync\n"
    assert gazctl_read(gazctl, j) == b"gazctl\nasync\n"


# --- the message layer -----------------------------------------------------------------------------


def test_publisher_transactions_and_read_committed(gazette_cluster, gazctl, prefix) -> None:
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}msgs", labels=NDJSON))
    committed, txn = Publisher(client), Publisher(client)  # two producers; each flush fixes journal order
    try:
        committed.publish_committed(j, {"n": "c1"})
        committed.flush()
        txn.publish_uncommitted(j, {"n": "t1"})
        txn.publish_uncommitted(j, {"n": "t2"})
        txn.flush()
        committed.publish_committed(j, {"n": "c2"})
        committed.flush()
        first_acks = txn.build_ack_intents()
        assert [journal for journal, _ in first_acks] == [j]
        client.append(j, first_acks[0][1])  # commits t1, t2
        txn.publish_uncommitted(j, {"n": "t3"})
        txn.flush()
        txn.build_ack_intents()  # dropped: t3's transaction fails ...
        client.append(j, first_acks[0][1])  # ... and the last committed ACK, written again, rolls it back
        txn.publish_uncommitted(j, {"n": "t4"})
        txn.flush()
        (second_ack,) = txn.build_ack_intents()
        client.append(j, second_ack[1])
        committed.publish_committed(j, {"n": "c3"})
        committed.flush()
    finally:
        committed.close()
        txn.close()

    # A transaction is delivered where its ACK is read; the rolled-back t3 never is.
    delivered = list(ReadCommitted(client, j))
    assert [e.message["n"] for e in delivered if not e.is_ack] == ["c1", "c2", "t1", "t2", "t4", "c3"]
    ack_uuids = [str(e.uuid) for e in delivered if e.is_ack]
    written_acks = [orjson.loads(ack)["_meta"]["uuid"] for ack in (first_acks[0][1], second_ack[1])]
    assert ack_uuids == written_acks

    # gazctl prints the raw journal: every message, the rolled-back one and every ACK with our UUIDs.
    lines = [orjson.loads(line) for line in gazctl_read(gazctl, j).splitlines()]
    assert [m.get("n", "ACK") for m in lines] == [
        "c1",
        "t1",
        "t2",
        "c2",
        "ACK",
        "t3",
        "ACK",
        "t4",
        "ACK",
        "c3",
    ]
    raw_uuids = [m["_meta"]["uuid"] for m in lines]
    assert raw_uuids == [str(e.uuid) for e in ReadUncommitted(client, j)]
    assert [u for m, u in zip(lines, raw_uuids, strict=True) if "n" not in m] == [
        written_acks[0], written_acks[0], written_acks[1]
    ]  # fmt: skip


def test_modulo_mapping_follows_gazette_listing(gazette_cluster, gazctl, prefix) -> None:
    """A watched mapping (Gazette's List watch, regression: the watch never completed a snapshot on
    Gazette) spreads messages by FNV-1a of their key, and follows a partition gazctl adds."""
    client = gazette_cluster.client()
    parts = create(
        gazette_cluster, *(spec(gazette_cluster, f"{prefix}part-{i}", labels=NDJSON) for i in range(2))
    )
    mapping = ModuloMapping(client, f"prefix={prefix}", key=lambda m: m["key"])
    publisher = Publisher(client)
    try:
        assert mapping.journals() == tuple(parts)
        keys = [f"key-{i}" for i in range(8)]
        for k in keys:
            publisher.publish_committed(mapping, {"key": k})
        publisher.flush()
        for i, journal in enumerate(parts):
            want = [k for k in keys if fnv1a32(k.encode()) % 2 == i]
            assert [orjson.loads(x)["key"] for x in gazctl_read(gazctl, journal).splitlines()] == want

        third = f"{prefix}part-2"
        gazctl(
            "journals", "apply", "--specs", "/dev/stdin", input=gazctl_spec(gazette_cluster, third, **NDJSON)
        )
        mapping.wait_for_journals(lambda names: names == (*parts, third), timeout=30)
        key = next(k for k in (f"new-{i}" for i in range(100)) if fnv1a32(k.encode()) % 3 == 2)
        publisher.publish_committed(mapping, {"key": key})
        publisher.flush()
        assert [e.message["key"] for e in ReadCommitted(client, third)] == [key]
    finally:
        publisher.close()
        mapping.close()


def test_read_committed_of_a_transaction_gazctl_appended(gazette_cluster, gazctl, prefix) -> None:
    """Messages framed with gazette-py's UUIDs but appended by gazctl: ReadCommitted delivers exactly
    the acknowledged ones, also when its ring is too small and it must replay them (a bounded read)."""
    client = gazette_cluster.client()
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}gazctl-txn", labels=NDJSON))
    framing = framing_for(NDJSON["content-type"])
    producer, clock = new_producer_id(), Clock.now()
    stamp = lambda flags: build_uuid(producer, clock.tick(), flags)  # noqa: E731

    body = b"".join(framing.encode({"n": n}, stamp(Flags.CONTINUE_TXN)) for n in range(12))
    body += framing.encode_ack(stamp(Flags.ACK_TXN))
    body += framing.encode({"n": "pending"}, stamp(Flags.CONTINUE_TXN))  # never acknowledged
    gazctl("journals", "append", "-l", f"name={j}", input=body)
    assert gazctl_read(gazctl, j) == body
    assert [e.message["n"] for e in ReadCommitted(client, j, skip_acks=True)] == list(range(12))
    small = ReadCommitted(client, j, ring_size=4, skip_acks=True)
    assert [e.message["n"] for e in small] == list(range(12))
    assert small.replays >= 1


# --- the CLI ---------------------------------------------------------------------------------------


def cli(cluster: LocalCluster, *args: str, broker: int = 1, input: bytes = b""):
    return cli_run.gazette(*args, env={"GAZETTE_BROKER": cluster.broker_endpoints[broker]}, input=input)


def test_cli_journals_list_append_read_fragments(gazette_cluster, gazctl, prefix) -> None:
    j, p = create(
        gazette_cluster,
        spec(gazette_cluster, f"{prefix}rw", labels={"team": "cli"}),
        spec(gazette_cluster, f"{prefix}frag", fragment_length=1024, refresh_interval=1.0),
    )
    rows = json.loads(ok(cli(gazette_cluster, "journals", "list", "-l", f"prefix={prefix}", "-o", "json")))
    theirs = gazctl_list(gazctl, f"prefix={prefix}")
    assert sorted(r["name"] for r in rows) == sorted(theirs) == [p, j]
    for r in rows:
        t = theirs[r["name"]]
        members = [f"{m['zone']}#{m['suffix']}" for m in t["route"]["members"]]
        assert r["members"] == ",".join(members) and r["primary"] == members[t["route"].get("primary", 0)]
        assert r["revision"] == int(t["mod_revision"]) and r["replication"] == 3
    assert next(r for r in rows if r["name"] == j)["labels"] == "team=cli"

    out = ok(cli(gazette_cluster, "journals", "append", j, "--data", "from cli\n"))
    assert "appended [0, 9)" in out
    gazctl("journals", "append", "-l", f"name={j}", input="from gazctl\n")
    payload = bytes(range(256)) + b"\n"
    ok(
        cli(
            gazette_cluster,
            "journals",
            "append",
            j,
            "--broker",
            gazette_cluster.broker_endpoints[2],
            input=payload,
        )
    )
    assert gazctl_read(gazctl, j) == b"from cli\nfrom gazctl\n" + payload
    assert (
        cli(gazette_cluster, "journals", "read", j, broker=0).stdout == b"from cli\nfrom gazctl\n" + payload
    )
    assert (
        cli(gazette_cluster, "journals", "read", j, "--offset", "9", "--end-offset", "21").stdout
        == b"from gazctl\n"
    )

    for part in (b"p" * 1500, b"q" * 5):
        gazctl("journals", "append", "-l", f"name={p}", input=part)
    wait_for("Gazette to persist a fragment", lambda: gazette_cluster.client().list_fragments(p)[0].mod_time)
    # Through broker 0, as the wait and gazctl: each member lists its own index, refreshed on its own.
    frags = json.loads(
        ok(cli(gazette_cluster, "journals", "fragments", p, "--url-ttl", "60", "-o", "json", broker=0))
    )
    want = [
        (
            int(t["spec"].get("begin", 0)),
            int(t["spec"]["end"]),
            sha1_of_sum(t["spec"]["sum"]),
            t.get("signed_url", ""),
        )
        for t in gazctl_fragments(gazctl, p)
    ]
    assert [(f["begin"], f["end"], f["sha1"], f["url"]) for f in frags] == want
    assert [f["store"] for f in frags] == [gazette_cluster.store, "(spooled)"]

    out = ok(cli(gazette_cluster, "journals", "reset-head", "-l", f"name={j}"))  # Gazette v0.103.0 too
    assert f"{j}: head at {21 + len(payload)}" in out
    line = one_error_line(cli(gazette_cluster, "journals", "flush", "-l", f"name={j}"))
    assert "/gazette_py.Flusher/Flush" in line
    line = one_error_line(cli(gazette_cluster, "journals", "read", f"{prefix}missing"))
    assert "JOURNAL_NOT_FOUND" in line


def test_cli_yaml_round_trips_through_gazctl(gazette_cluster, gazctl, prefix) -> None:
    """`gazette journals list -o yaml` is YAML gazctl applies (regression: the codec was written in
    lower case, which gazctl refuses), and gazctl's YAML is YAML `gazette journals apply` applies."""
    (j,) = create(gazette_cluster, spec(gazette_cluster, f"{prefix}y", labels=NDJSON, compression="gzip"))
    ours = ok(cli(gazette_cluster, "journals", "list", "-l", f"name={j}", "-o", "yaml"))
    doc = yaml.safe_load(ours)
    assert doc["fragment"]["compression_codec"] == "GZIP"
    doc["replication"] = 2
    gazctl("journals", "apply", "--specs", "/dev/stdin", input=yaml.safe_dump(doc))
    listed = lambda: gazette_cluster.client().list_journals(f"name={j}")[0].spec  # noqa: E731
    wait_for("gazette-py to list gazctl's change", lambda: listed().replication == 2)
    assert listed().compression.name == "GZIP"

    theirs = gazctl("journals", "list", "-l", f"name={j}", "--format", "yaml").stdout
    assert "compression_codec: GZIP" in theirs
    edited = re.sub(r"(?m)^replication: 2$", "replication: 1", theirs)
    assert "applied 1 change(s)" in ok(cli(gazette_cluster, "journals", "apply", input=edited.encode()))
    wait_for(
        "gazctl to list our change", lambda: gazctl_list(gazctl, f"name={j}")[j]["spec"]["replication"] == 1
    )


# --- the %gazette magics ---------------------------------------------------------------------------


@pytest.fixture
def magics():
    from IPython.core.getipython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "gazette.notebook")
    m = shell.magics_manager.registry["GazetteMagics"]
    yield shell, m
    if m.connected is not None:
        m.run("down")


def test_magics_connect_to_gazette_brokers(gazette_cluster, gazctl, prefix, magics) -> None:
    from gazette.notebook import NotebookError

    shell, m = magics
    with pytest.raises(GazetteError):  # nothing answers there: not connected
        m.run("connect http://127.0.0.1:1")
    assert m.connected is None
    endpoints = ",".join(gazette_cluster.broker_endpoints)
    table = shell.run_line_magic("gazette", f"connect {endpoints} --etcd {gazette_cluster.etcd_endpoint}")
    assert table.column("endpoint") == gazette_cluster.broker_endpoints
    assert gazette_cluster.etcd_endpoint in table.title
    assert m.run("status").column("endpoint") == gazette_cluster.broker_endpoints
    with pytest.raises(NotebookError, match="connected to"):
        m.run("up")

    j = f"{prefix}nb"
    applied = shell.run_cell_magic(
        "gazette", "apply",
        f"name: {j}\nreplication: 3\nlabels: [{{name: content-type, value: application/x-ndjson}}]\n"
        f"fragment: {{stores: ['{gazette_cluster.store}']}}\n",
    )  # fmt: skip
    assert applied.column("journal") == [j]
    assert gazctl_list(gazctl, f"name={j}")[j]["spec"]["replication"] == 3
    members = lambda: m.run(f"journals -l name={j}").column("members")[0].split(",")  # noqa: E731
    wait_for("the magics to list a full route", lambda: len(members()) == 3)

    assert m.run(f"append {j} -d '{{\"n\": 1}}'").column("end") == [9]
    gazctl("journals", "append", "-l", f"name={j}", input='{"n": 2}\n')
    assert gazctl_read(gazctl, j) == b'{"n": 1}\n{"n": 2}\n'
    raw = m.run(f"read {j}")
    assert raw.column("offset") == [0, 9] and raw.column("content") == ['{"n": 1}', '{"n": 2}']
    m.run(f"publish {j} '{{\"n\": 3}}'")
    committed = m.run(f"read {j} --committed")
    assert [orjson.loads(x) for x in committed.column("message")] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert (
        orjson.loads(gazctl_read(gazctl, j).splitlines()[-1])["_meta"]["uuid"] == committed.column("uuid")[-1]
    )
    fragments = m.run(f"fragments {j}")  # contiguous (a route change while appending may roll the spool)
    assert fragments.column("begin") == [0, *fragments.column("end")[:-1]]
    assert fragments.column("end")[-1] == len(gazctl_read(gazctl, j))
    with pytest.raises(GazetteError, match="gazette_py.Flusher/Flush"):
        m.run(f"flush {j}")

    assert m.run("down") == f"disconnected from {endpoints}"
    with pytest.raises(NotebookError, match="gazette connect BROKER"):
        m.run("journals")
