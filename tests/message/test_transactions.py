"""Publisher transactions that cannot drop messages: `commit()` appends each ACK after the messages it
acknowledges, `transaction()` commits on exit and rolls back on an exception (readers drop what was
appended, and a later commit does not bring it back), and `build_ack_intents()` refuses to hand out
ACKs that would land before unflushed messages. Against a real in-process broker, read back with
ReadCommitted."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Iterator

import pytest

from gazette.client.append_service import AsyncAppendService
from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.message.publisher import Publisher
from gazette.message.reader import ReadCommitted
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

WAIT_S = 60.0
NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def cluster(etcd, module_etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    tmp = tmp_path_factory.mktemp("txn")
    os.makedirs(tmp / "store", exist_ok=True)
    with LocalCluster(brokers=1, mode="inprocess", store=f"file://{tmp}/store/", etcd=etcd.endpoint,
                      root=module_etcd_root, data_dir=str(tmp / "data")) as c:  # fmt: skip
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Client:
    return cluster.client()


def _journals(cluster: LocalCluster, client: Client, prefix: str, n: int = 3) -> list[str]:
    names = [f"txn/{prefix}/part-{i:03d}" for i in range(n)]
    client.apply_journals([cluster.journal_spec(j, labels=NDJSON, fragment_length=1 << 20) for j in names])
    cluster.wait_for_routes(names)
    return names


def _committed(client: Client, journal: str) -> list[dict]:
    """The messages ReadCommitted delivers, without their UUIDs."""
    return [
        {k: v for k, v in e.message.items() if k != "_meta"}
        for e in ReadCommitted(client, journal, skip_acks=True)
    ]


def test_ack_intents_before_a_flush_are_refused(cluster, client) -> None:
    (journal,) = _journals(cluster, client, "refused", 1)
    with Publisher(client) as pub:
        for i in range(50):
            pub.publish_uncommitted(journal, {"i": i})
        if pub.service.pending_of(journal):  # (the batch may have landed already on a fast machine)
            with pytest.raises(GazetteError, match=r"flush first, or use publisher\.commit\(\)") as info:
                pub.build_ack_intents()
            assert journal in str(info.value) and "readers drop them" in str(info.value)
        pub.flush(WAIT_S)
        intents = pub.build_ack_intents()  # kept by the refusal; fine once flushed
        assert [j for j, _ in intents] == [journal]
        for j, ack in intents:
            client.append(j, ack)
    assert [m["i"] for m in _committed(client, journal)] == list(range(50))


def test_ack_intents_are_refused_while_a_batch_is_held_back(cluster, client) -> None:
    """Deterministic: a batch waiting on a dependency stays pending until released."""
    (journal,) = _journals(cluster, client, "held", 1)
    gate: concurrent.futures.Future = concurrent.futures.Future()
    service = AsyncAppendService(client)
    pub = Publisher(client, service=service)
    service.append(journal, b"", dependencies=[gate])  # the journal's queue waits on the gate
    pub.publish_uncommitted(journal, {"i": 0})
    with pytest.raises(GazetteError, match=r"not appended yet.*flush first, or use publisher\.commit\(\)"):
        pub.build_ack_intents()
    assert [j for j, _ in pub.build_ack_intents(after_messages=True)] == [journal]  # the documented escape
    gate.set_result(None)
    service.wait(WAIT_S)
    client._loop.run(service.close())


def test_commit_makes_every_message_readable(cluster, client) -> None:
    """300 messages over 3 journals, committed without flushing first: ReadCommitted delivers all.
    One journal's messages are held back a moment (behind a gate), as a slow append would be: an
    ACK appended before them would make readers drop them."""
    journals = _journals(cluster, client, "commit")
    with Publisher(client) as pub:
        gate: concurrent.futures.Future = concurrent.futures.Future()
        pub.service.append(journals[0], b"", dependencies=[gate])  # the journal's queue waits here
        for i in range(300):
            pub.publish_uncommitted(journals[i % 3], {"i": i})
        threading.Timer(1.0, gate.set_result, (None,)).start()
        acks = pub.commit(WAIT_S)
        assert sorted(acks) == journals
        assert pub.commit(WAIT_S) == {}  # nothing left to commit
    got = []
    for n, journal in enumerate(journals):
        messages = [m["i"] for m in _committed(client, journal)]
        assert messages == list(range(n, 300, 3))
        assert acks[journal].end == client.read_head(journal)  # the ACK ends the journal
        got += messages
    assert sorted(got) == list(range(300))


def test_transaction_commits_on_exit(cluster, client) -> None:
    journals = _journals(cluster, client, "exit")
    with Publisher(client) as pub:
        with pub.transaction(WAIT_S) as txn:
            assert txn is pub
            for i in range(30):
                pub.publish_uncommitted(journals[i % 3], {"i": i})
    assert sorted(m["i"] for j in journals for m in _committed(client, j)) == list(range(30))


def test_transaction_rollback_leaves_none_of_its_messages_visible(cluster, client) -> None:
    journals = _journals(cluster, client, "rollback")
    with Publisher(client) as pub:
        with pub.transaction(WAIT_S):  # an earlier commit: rollbacks must not undo it
            for j in journals:
                pub.publish_uncommitted(j, {"n": "committed"})
        with pytest.raises(RuntimeError, match="boom"), pub.transaction(WAIT_S):
            for i in range(60):
                pub.publish_uncommitted(journals[i % 3], {"n": f"rolled-{i}"})
            pub.flush(WAIT_S)  # appended: readers must drop them
            raise RuntimeError("boom")
        for j in journals:
            assert [m["n"] for m in _committed(client, j)] == ["committed"]
        # The same producer commits again: the rolled-back messages stay dropped.
        with pub.transaction(WAIT_S):
            for j in journals:
                pub.publish_uncommitted(j, {"n": "later"})
        pub.publish_committed(journals[0], {"n": "plain"})
        pub.flush(WAIT_S)
    for j in journals:
        expected = ["committed", "later"] + (["plain"] if j == journals[0] else [])
        assert [m["n"] for m in _committed(client, j)] == expected


def test_rollback_of_a_first_transaction_and_of_unflushed_messages(cluster, client) -> None:
    """No earlier ACK in the journal, and messages still buffered when the block raises."""
    journals = _journals(cluster, client, "first")
    with Publisher(client) as pub:
        with pytest.raises(KeyError), pub.transaction(WAIT_S):
            for i in range(30):
                pub.publish_uncommitted(journals[i % 3], {"n": f"rolled-{i}"})
            raise KeyError("no flush")
        pub.commit(WAIT_S)  # nothing to commit; and the rolled-back messages are not committed
        with pub.transaction(WAIT_S):
            pub.publish_uncommitted(journals[1], {"n": "kept"})
    assert [_committed(client, j) for j in journals] == [[], [{"n": "kept"}], []]


def test_transaction_refuses_open_messages_and_nesting(cluster, client) -> None:
    (journal,) = _journals(cluster, client, "refuse", 1)
    with Publisher(client) as pub:
        pub.publish_uncommitted(journal, {"n": 1})
        with pytest.raises(GazetteError, match=r"commit\(\) or rollback\(\) them first"), pub.transaction():
            pass
        assert pub.rollback(WAIT_S) == [journal]
        with pub.transaction(WAIT_S):
            with pytest.raises(GazetteError, match="do not nest"), pub.transaction():
                pass
            pub.publish_uncommitted(journal, {"n": 2})
    assert _committed(client, journal) == [{"n": 2}]


def test_a_rollback_that_cannot_append_continues_as_a_new_producer(cluster, client, monkeypatch) -> None:
    """If the rollback ACK cannot be written, no later ACK of this publisher may commit the abandoned
    messages: it takes a new producer id, so they stay pending for ever (invisible)."""
    (journal,) = _journals(cluster, client, "newproducer", 1)
    with Publisher(client) as pub:
        first = pub.producer_id
        pub.publish_uncommitted(journal, {"n": "abandoned"})
        pub.flush(WAIT_S)
        real_append = pub.service.append

        def failing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise GazetteError(Status.JOURNAL_NOT_FOUND, "simulated")

        monkeypatch.setattr(pub.service, "append", failing)
        with pytest.raises(GazetteError, match="simulated") as info:
            pub.rollback(WAIT_S)
        assert pub.producer_id != first
        assert any("new producer" in note for note in info.value.__notes__)
        monkeypatch.setattr(pub.service, "append", real_append)
        with pub.transaction(WAIT_S):
            pub.publish_uncommitted(journal, {"n": "kept"})
    assert _committed(client, journal) == [{"n": "kept"}]


async def test_async_commit_and_transaction(cluster) -> None:
    from gazette.client.aio import AsyncClient

    async with AsyncClient(cluster.client().aio.endpoint) as aio:
        journal = "txn/async/part-000"
        await aio.apply_journals([cluster.journal_spec(journal, labels=NDJSON)])
        pub = Publisher(aio)
        await pub.prepare(journal)
        pub.publish_uncommitted(journal, {"n": 1})
        assert sorted(await pub.acommit(WAIT_S)) == [journal]
        with pytest.raises(ValueError):
            async with pub.atransaction(WAIT_S):
                pub.publish_uncommitted(journal, {"n": "rolled"})
                raise ValueError
        async with pub.atransaction(WAIT_S):
            pub.publish_uncommitted(journal, {"n": 2})
        with pytest.raises(RuntimeError, match="await it instead"):
            pub.commit()
        await pub.aclose()
        got = [e.message["n"] async for e in ReadCommitted(aio, journal, skip_acks=True)]
    assert got == [1, 2]
