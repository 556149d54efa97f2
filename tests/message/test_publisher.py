"""Publisher against a real broker: UUIDs whose clocks increase in journal order per producer (also
with threads racing on one journal), flags as published, ACK intents once per journal, clocks,
plain journal names and mappings, and the errors of bad input."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator

import orjson
import pytest

from gazette.client.aio import AsyncClient
from gazette.local.cluster import LocalCluster
from gazette.message.envelope import Envelope
from gazette.message.framing import JSONFraming, framing_for
from gazette.message.framing.base import FramingError
from gazette.message.framing.json_lines import _with_member
from gazette.message.mapping import ModuloMapping, fnv1a32
from gazette.message.publisher import Publisher
from gazette.message.uuid import CLOCK_TICK, Clock, Flags, build_uuid, clock_from_unix_ns, new_producer_id
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

WAIT_S = 60.0
NDJSON = "application/x-ndjson"


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(brokers=1, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint,
                      root=etcd_root, data_dir=str(tmp_path / "data")) as c:  # fmt: skip
        yield c


@pytest.fixture
def client(cluster):
    return cluster.client()


def _create(cluster, client, *names: str, content_type: str | None = NDJSON) -> None:
    labels = {"app.gazette.dev/message-type": "Word", "content-type": content_type} if content_type else {}
    client.apply_journals([cluster.journal_spec(n, labels=labels, fragment_length=1 << 20) for n in names])


def _read(client, journal: str) -> list[Envelope]:
    decoder = framing_for(NDJSON).decoder(journal, 0)
    envs = decoder.feed(client.read_all(journal))
    decoder.close()
    return envs


def test_uuid_layout_matches_build_uuid(client):
    pid = new_producer_id()
    pub = Publisher(client, producer_id=pid)
    rng = random.Random(7)
    for _ in range(500):
        clock, flags = rng.getrandbits(64), rng.choice([0, 1, 2, rng.getrandbits(10)])
        assert pub.uuid(clock, flags) == build_uuid(pid, clock, flags)
    assert str(pub.uuid(1 << 63, 2)) == str(build_uuid(pid, 1 << 63, 2))


def test_committed_messages_carry_increasing_clocks_in_journal_order(cluster, client):
    """Three threads share one publisher and race on one journal (and a mapping over two more):
    whatever order their writes land in, clocks increase along each journal."""
    names = ["examples/pub/a", "examples/pub/b", "examples/pub/c"]
    _create(cluster, client, *names)
    mapping = ModuloMapping(
        client, "name:prefix=examples/pub/, name!=examples/pub/a", key=lambda m: m["word"]
    )
    created_at = clock_from_unix_ns(time.time_ns())
    pub = Publisher(client)

    def publisher(t: int) -> None:
        for i in range(1500):
            pub.publish_committed("examples/pub/a", {"t": t, "i": i})
            if i % 3 == 0:
                pub.publish_committed(mapping, {"word": f"w{t}-{i}", "t": t, "i": i})

    threads = [threading.Thread(target=publisher, args=(t,)) for t in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two steps of a publish
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    pub.flush(WAIT_S)
    mapping.close()
    pub.close()

    seen = 0
    for name in names:
        envs = _read(client, name)
        clocks = [e.clock for e in envs]
        assert clocks == sorted(clocks) and len(set(clocks)) == len(clocks), (
            f"{name}: clocks out of journal order"
        )
        assert all(e.producer == pub.producer_id and e.flags == Flags.OUTSIDE_TXN for e in envs)
        for e in envs:
            assert str(e.message["_meta"]["uuid"]) == str(build_uuid(pub.producer_id, e.clock, e.flags))
            if name != "examples/pub/a":
                assert name == ["examples/pub/b", "examples/pub/c"][fnv1a32(e.message["word"].encode()) % 2]
        # Per publishing thread, its own messages keep their order too.
        for t in range(3):
            mine = [e.message["i"] for e in envs if e.message["t"] == t]
            assert mine == sorted(mine)
        seen += len(envs)
    assert seen == 3 * 1500 + 3 * 500
    assert min(e.clock for e in _read(client, "examples/pub/a")) > created_at


def test_uncommitted_messages_and_ack_intents(cluster, client):
    a, b, c = "examples/pub/txn-a", "examples/pub/txn-b", "examples/pub/plain"
    _create(cluster, client, a, b, c)
    pub = Publisher(client)
    for i in range(3):
        pub.publish_uncommitted(a, {"i": i})
    pub.publish_uncommitted(b, {"i": 0})
    pub.publish_committed(c, {"i": 0})
    last = pub.clock.value
    intents = pub.build_ack_intents(after_messages=True)  # appended below through pub.service: in order
    assert [j for j, _ in intents] == [a, b]
    assert pub.build_ack_intents() == []  # the pending set was cleared
    for journal, frame in intents:
        pub.service.append(journal, frame)
    pub.flush(WAIT_S)

    ack_clocks = []
    for journal, n in ((a, 3), (b, 1)):
        envs = _read(client, journal)
        assert [e.flags for e in envs] == [Flags.CONTINUE_TXN] * n + [Flags.ACK_TXN]
        ack = envs[-1]
        assert ack.is_ack and ack.message == {"_meta": {"uuid": ack.message["_meta"]["uuid"]}}
        assert ack.producer == pub.producer_id and ack.clock > max(e.clock for e in envs[:-1])
        ack_clocks.append(ack.clock)
    assert ack_clocks[0] > last and ack_clocks[1] == ack_clocks[0] + CLOCK_TICK  # a fresh tick each
    assert [e.flags for e in _read(client, c)] == [Flags.OUTSIDE_TXN]

    pub.publish_uncommitted(b, {"i": 1})
    assert [j for j, _ in pub.build_ack_intents(after_messages=True)] == [b]
    pub.close()


def test_external_clock_is_only_ticked(cluster, client):
    j = "examples/pub/clock"
    _create(cluster, client, j)
    start = clock_from_unix_ns(10**18)  # far ahead of wall time... or far behind, either way: not now
    clock = Clock(start)
    with Publisher(client, clock=clock) as pub:
        assert pub.clock is clock
        for i in range(5):
            pub.publish_committed(j, {"i": i})
        pub._next_clock_update = 0.0  # even when an update would be due, an external clock isn't touched
        pub.publish_committed(j, {"i": 5})
        pub.flush(WAIT_S)
    assert [e.clock for e in _read(client, j)] == [start + CLOCK_TICK * (i + 1) for i in range(6)]


def test_own_clock_follows_wall_time_but_never_goes_back(cluster, client):
    j = "examples/pub/own-clock"
    _create(cluster, client, j)
    with Publisher(client) as pub:
        ahead = clock_from_unix_ns(time.time_ns() + 3600 * 10**9)
        pub.clock.update(ahead)
        pub._next_clock_update = 0.0  # an update is due: wall time is behind, so nothing changes
        pub.publish_committed(j, {"i": 0})
        pub.flush(WAIT_S)
    with Publisher(client) as behind:
        behind.clock._value = clock_from_unix_ns(10**9)  # as if created long ago
        behind._next_clock_update = 0.0
        before = clock_from_unix_ns(time.time_ns())
        behind.publish_committed(j, {"i": 1})
        behind.flush(WAIT_S)
    envs = _read(client, j)
    assert envs[0].clock == ahead + CLOCK_TICK
    assert envs[1].clock > before  # moved up to wall time, then ticked


def test_bad_input(cluster, client):
    _create(cluster, client, "examples/pub/no-type", content_type=None)
    with pytest.raises(ValueError, match="producer_id"):
        Publisher(client, producer_id=b"short")
    pub = Publisher(client)
    with pytest.raises(GazetteError) as exc:
        pub.publish_committed("examples/pub/missing", {"x": 1})
    assert exc.value.status == Status.JOURNAL_NOT_FOUND and "examples/pub/missing" in str(exc.value)
    with pytest.raises(GazetteError, match="content-type"):
        pub.publish_committed("examples/pub/no-type", {"x": 1})
    with pytest.raises(TypeError, match="mapping"):
        pub.publish_committed(42, {"x": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Client"):
        Publisher("http://127.0.0.1:8080")  # type: ignore[arg-type]
    pub.close()


async def test_async_publisher_on_the_loop(cluster, client):
    j = "examples/pub/async"
    _create(cluster, client, j)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        pub = Publisher(aio)
        with pytest.raises(GazetteError, match="prepare"):
            pub.publish_committed(j, {"x": 0})
        assert await pub.prepare(j) == {j: NDJSON}
        futures = [pub.publish_committed(j, {"x": i}) for i in range(100)]
        assert len(set(futures)) == 1  # one batch, one RPC
        res = await futures[0]
        assert res.begin == 0 and res.end > 0
        with pytest.raises(RuntimeError, match="await"):
            pub.flush()
        await pub.aclose()
    assert [e.message["x"] for e in _read(client, j)] == list(range(100))


def test_json_frames_equal_the_general_encoding(cluster, client):
    """The publisher's spliced JSON frames (by journal name and by mapping, default and custom
    pointers, messages with and without the pointer's top member) are byte for byte what the
    framing's general path writes for the same message and UUID."""
    _create(cluster, client, "examples/pub/frames", "examples/pub/frames-upper")
    messages = [
        {"word": "a"},
        {},
        {"_meta": {"src": 1}},
        {"UUID": None, "n": [1, {"x": "é"}]},
        {"_meta": None},
    ]
    for pointer, journal in (("/_meta/uuid", "examples/pub/frames"), ("/UUID", "examples/pub/frames-upper")):
        framing = JSONFraming(uuid_pointer=pointer)
        pub = Publisher(client, framings={NDJSON: framing})
        for m in messages:
            pub.publish_committed(journal, m)
            pub.publish_uncommitted(lambda _m, j=journal: (j, NDJSON), m)
        pub.flush(WAIT_S)
        pub.close()
        data = client.read_all(journal)
        envs = framing.decoder(journal, 0).feed(data)
        published = [m for m in messages for _ in ("committed", "uncommitted")]
        assert len(envs) == len(published) and envs[-1].end == len(data)
        for m, e in zip(published, envs, strict=True):
            general = orjson.dumps(
                _with_member(m, framing._tokens, e.uuid, pointer), option=orjson.OPT_APPEND_NEWLINE
            )
            assert data[e.begin : e.end] == general
            assert e.producer == pub.producer_id
        assert [e.flags for e in envs] == [Flags.OUTSIDE_TXN, Flags.CONTINUE_TXN] * len(messages)


def test_a_batch_frames_exactly_what_publishing_each_message_would(cluster, client):
    """publish_uncommitted_batch writes the bytes (UUIDs, clocks, order) that publish_uncommitted of
    each message would, leaves the same ACK intent and rollback clock, and refuses as a whole."""
    each, batch, rolled = "examples/pub/each", "examples/pub/batch", "examples/pub/rolled"
    _create(cluster, client, each, batch, rolled)
    messages = [{"word": "a", "n": 1}, {}, {"_meta": {"src": 1}}, {"n": [1, {"x": "é"}]}]
    producer, start = new_producer_id(), clock_from_unix_ns(10**18)
    one, many = (Publisher(client, producer_id=producer, clock=Clock(start)) for _ in range(2))
    for m in messages:
        one.publish_uncommitted(each, m)
    assert many.publish_uncommitted_batch(batch, []) is None  # nothing to publish, no intent
    many.publish_uncommitted_batch(batch, messages)
    assert one.clock.value == many.clock.value == start + len(messages) * CLOCK_TICK
    one.commit(WAIT_S)
    many.commit(WAIT_S)
    (e_each, e_batch) = (_read(client, j) for j in (each, batch))
    assert client.read_all(each) == client.read_all(batch)  # the same frames, the ACKs included
    assert [{k: v for k, v in e.message.items() if k != "_meta"} for e in e_batch[:-1]] == [
        {k: v for k, v in m.items() if k != "_meta"} for m in messages
    ]
    assert [e.clock for e in e_batch] == [e.clock for e in e_each] and e_batch[-1].is_ack

    with pytest.raises(FramingError, match="cannot encode"):  # an unencodable message refuses the whole batch
        many.publish_uncommitted_batch(rolled, [{"n": 1}, {"bad": object()}])
    with pytest.raises(TypeError, match="takes a journal name"):
        many.publish_uncommitted_batch(lambda m: (rolled, NDJSON), messages)  # type: ignore[arg-type]
    assert client.read_head(rolled) == 0

    with pytest.raises(RuntimeError, match="abandon"), many.transaction(WAIT_S):
        many.publish_uncommitted_batch(rolled, messages)
        many.flush(WAIT_S)
        raise RuntimeError("abandon")
    envs = _read(client, rolled)
    assert len(envs) == len(messages) + 1 and envs[-1].is_ack
    assert envs[-1].clock == envs[0].clock - 1  # the rollback ACK, just below the batch's first clock
    many.close()
    one.close()
