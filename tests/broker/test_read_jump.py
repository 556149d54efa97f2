"""A read below the first content a journal still has jumps forward to that content, as Gazette's
broker does (its index Query), instead of waiting for ever (blocking) or ending with nothing (not):
the first response carries the larger offset, and the reader says so.

Two ways to lose a journal's early content, on real in-process clusters: a journal without stores
whose replicas are replaced one by one (each new replica holds only what was written after it
joined), read at both members of its final route (primary and replica); and a store whose first
fragment file is deleted (as retention does), once the brokers' indexes have refreshed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator

import pytest

from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.message import Publisher, ReadCommitted
from gazette.protocol.spec import JournalSpec
from gazette.testing import wait_for

JOURNAL = "jump/events"
LABELS = {"content-type": "application/x-ndjson"}
READ_BOUND_S = 60.0  # far beyond what a read takes: a read that waits for ever fails the test instead


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=2,
        mode="inprocess",
        store=f"file://{tmp_path}/store/",
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as c:
        yield c


def publish(client: Client, numbers: range) -> int:
    """Publishes {"n": i} for each number (committed); returns the journal's head after them."""
    pub = Publisher(client)
    try:
        for n in numbers:
            pub.publish_committed(lambda _m: (JOURNAL, LABELS["content-type"]), {"n": n})
        pub.flush()
    finally:
        pub.close()
    return client.read_head(JOURNAL)


def route_of(client: Client) -> tuple[set[str], int]:
    (info,) = client.list_journals(f"name={JOURNAL}")
    return {suffix for _zone, suffix in info.route.members}, info.route.primary


def wait_for_route(client: Client, suffixes: set[str]) -> None:
    wait_for(f"the route of {JOURNAL} to be {sorted(suffixes)}",
             lambda: (route := route_of(client))[0] == suffixes and route[1] >= 0, 60)  # fmt: skip


def blocking_read(client: Client, offset: int, until: int) -> list[tuple[int, bytes]]:
    """A blocking read from `offset` until `until`, in a thread bounded by READ_BOUND_S."""
    got: list[tuple[int, bytes]] = []

    def run() -> None:
        for chunk in client.read(JOURNAL, offset, block=True):
            got.append((chunk.offset, chunk.content))
            if chunk.offset + len(chunk.content) >= until:
                return

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    reader.join(READ_BOUND_S)
    assert not reader.is_alive(), f"the blocking read from {offset} waits for ever (got {got[:2]!r}...)"
    return got


def check_reads_jump(endpoint: str, first: int, head: int, numbers: list[int], caplog) -> None:
    """At `endpoint`: reads from 0 (and below `first`) start at `first` and hold [first, head)."""
    client = Client(endpoint)
    try:
        expected = client.read_all(JOURNAL, first)
        assert len(expected) == head - first
        for offset in (0, first - 1):
            chunks = list(client.read(JOURNAL, offset))  # non-blocking: not empty, not stuck
            assert chunks and chunks[0].offset == first, (offset, [c.offset for c in chunks[:3]])
            assert b"".join(c.content for c in chunks) == expected
            got = blocking_read(client, offset, head)
            assert got[0][0] == first and b"".join(c for _, c in got) == expected
        # A bounded read whose end lies before the first content ends at once, with nothing.
        assert client.read_all(JOURNAL, 0, end_offset=first // 2) == b""
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gazette.message.reader"):
            assert [e.message["n"] for e in ReadCommitted(client, JOURNAL, skip_acks=True)] == numbers
        assert f"read from offset 0 starts at {first} (content before it is gone)" in caplog.text
    finally:
        client.close()


def test_a_storeless_journal_whose_replicas_were_replaced_reads_from_its_first_content(
    cluster: LocalCluster, caplog
) -> None:
    client = cluster.client()
    with caplog.at_level(logging.WARNING, logger="gazette.broker.journals"):
        client.apply_journals([JournalSpec(name=JOURNAL, replication=2, labels=LABELS)])
    assert f"journal {JOURNAL} has no fragment stores" in caplog.text  # Apply warns of it
    cluster.wait_for_routes([JOURNAL])
    publish(client, range(0, 10))

    # Replace each replica in turn: the new one holds only what is written after it joined.
    cluster.add_broker()
    cluster.stop_broker(0)
    with Client(cluster.brokers[1].endpoint) as client:
        wait_for_route(client, {"broker-1", "broker-2"})
        # Where broker-2's content begins: the head, as broker-1 knows it (broker-2 has nothing yet).
        first = client.read_head(JOURNAL)
        assert first > 0
        publish(client, range(10, 20))
    cluster.add_broker()
    cluster.stop_broker(1)
    with Client(cluster.brokers[2].endpoint) as client:
        wait_for_route(client, {"broker-2", "broker-3"})
        head = publish(client, range(20, 30))
        assert client.list_fragments(JOURNAL)[0].begin > 0  # [0, first) is gone with brokers 0 and 1

    for i in (2, 3):  # the primary and the replica of the final route
        check_reads_jump(cluster.brokers[i].endpoint, first, head, list(range(10, 30)), caplog)


def test_a_read_below_the_first_stored_fragment_left_by_retention_jumps(
    cluster: LocalCluster, caplog
) -> None:
    client = cluster.client()
    client.apply_journals(
        [cluster.journal_spec(JOURNAL, replication=1, labels=LABELS, refresh_interval="1s")]
    )
    cluster.wait_for_routes([JOURNAL])
    first = publish(client, range(0, 10))
    client.flush(JOURNAL)
    pruned = client.list_fragments(JOURNAL)  # one fragment or more, all persisted
    assert pruned[0].begin == 0 and pruned[-1].end == first and all(f.mod_time for f in pruned)
    publish(client, range(10, 20))
    kept = client.flush(JOURNAL)
    head = publish(client, range(20, 30))  # and some content still in the spool
    assert kept is not None and kept.begin == first

    for f in pruned:
        os.remove(os.path.join(cluster.store[len("file://") :], f.content_path))
    wait_for("the index to refresh without the deleted fragments",
             lambda: client.list_fragments(JOURNAL)[0].begin == first, 60)  # fmt: skip

    for h in cluster.brokers:  # the journal's broker, and the other one (which proxies to it)
        check_reads_jump(h.endpoint, first, head, list(range(10, 30)), caplog)
