"""A replica that joins a route after content was written holds only what came after it; the rest
lives in its peers' spools until persisted. A read through it must still return everything: the
broker hands the range it lacks to the primary instead of ending the read early at the gap."""

from __future__ import annotations

import threading
from typing import Any

from faults.harness import route_of, wait_for

from gazette.client.sync import Client

JOURNAL = "gap/part-000"
READ_BOUND_S = 60.0  # far beyond the milliseconds a read takes; a hung read fails instead of hanging


def _late_replica(make_cluster) -> tuple[Any, Any, bytes, int]:
    """3 brokers, a journal of 2 replicas without a store (what is written stays in spools, so a late
    replica can never find it persisted) with content written; then its replica is killed and the
    third broker takes its place. Returns (cluster, client, content written, the late broker)."""
    cluster = make_cluster(brokers=3)
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(JOURNAL, replication=2, stores=[])])

    def route_of_two() -> tuple[list[int], int] | None:
        members, primary = route_of(cluster, JOURNAL)
        return (members, primary) if len(members) == 2 and primary >= 0 else None

    members, primary = wait_for("a route of 2", route_of_two)
    before = b"".join(b"written before the replica joined %d\n" % i for i in range(50))
    client.append(JOURNAL, before)

    (replica,) = [m for m in members if m != primary]
    cluster.kill_broker(replica)  # its lease expires and the third broker takes its place
    (late,) = [b.index for b in cluster.brokers if b.index not in members]
    wait_for(
        "the third broker to join the route",
        lambda: (r := route_of(cluster, JOURNAL))[1] == primary and sorted(r[0]) == sorted([primary, late]),
    )
    return cluster, client, before, late


def test_a_replica_that_joined_late_reads_the_whole_journal(make_cluster) -> None:
    cluster, client, before, late = _late_replica(make_cluster)
    after = b"written after it joined\n"
    client.append(JOURNAL, after)

    via_late = Client(cluster.brokers[late].endpoint)
    try:
        assert via_late.read_head(JOURNAL) == len(before) + len(after)
        assert via_late.read_all(JOURNAL) == before + after
        assert via_late.read_all(JOURNAL, offset=len(before)) == after  # what it holds itself
    finally:
        via_late.close()


def test_a_blocking_read_at_a_late_replica_is_not_held_until_the_gap_is_persisted(make_cluster) -> None:
    """A blocking read at a late replica from an offset the replica never received returns everything,
    whether the replica knew of the gap when the read began or learned of it while the read waited
    (tests/broker/test_read_gap.py pins the second case down)."""
    cluster, client, before, late = _late_replica(make_cluster)
    after = b"".join(b"written after it joined %d\n" % i for i in range(20))
    start = len(before) - 10  # inside what only the primary holds
    via_late = Client(cluster.brokers[late].endpoint)
    got: list[bytes] = []

    def read() -> None:
        for chunk in via_late.read(JOURNAL, offset=start, block=True, end_offset=len(before) + len(after)):
            got.append(chunk.content)

    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        client.append(JOURNAL, after)
        reader.join(READ_BOUND_S)
        assert not reader.is_alive(), (
            f"the blocking read at the late replica is still waiting ({b''.join(got)!r})"
        )
        assert b"".join(got) == (before + after)[start:]
    finally:
        via_late.close()
