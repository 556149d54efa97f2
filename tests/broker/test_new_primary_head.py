"""A journal's head, read right after its route changed, is what every member holds, at the new
primary and at its replica alike, before any append or pulse ran under the new route
(docs/semantics.md#no-dirty-reads).

Until its pipeline syncs under the new route, a new primary's index is behind: a former replica
holds its commits back (only the old primary knew every member had them), and a new member holds
nothing. A head read at the primary therefore syncs the pipeline first (one pulse, bounded). Here
the replicas' own pulse loops are idled, so only the read can make that sync happen: without it the
head read answers 0 (a new member) or the former replica's last released offset. This was a race in
tests/broker/test_read_jump.py, which read the head before the pulse that a route change starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gazette.broker.replica import Replica
from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.testing import wait_for

JOURNAL = "head/after-route-change"


async def _no_pulses(self: Replica) -> None:
    await asyncio.Event().wait()  # idle until the replica stops (it cancels its tasks)


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path, monkeypatch) -> Iterator[LocalCluster]:
    monkeypatch.setattr(Replica, "_pulse_loop", _no_pulses)
    with LocalCluster(
        brokers=2, mode="inprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data")
    ) as c:
        yield c


def members_of(client: Client) -> tuple[set[str], int]:
    (info,) = client.list_journals(f"name={JOURNAL}")
    return {suffix for _zone, suffix in info.route.members}, info.route.primary


def test_the_head_after_a_route_change_is_what_every_member_holds(cluster: LocalCluster) -> None:
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(JOURNAL, replication=2, stores=[])])
    cluster.wait_for_routes([JOURNAL])
    for i in range(5):
        client.append(JOURNAL, b"committed at both members %d\n" % i)
    head = client.read_head(JOURNAL)
    assert head > 0

    cluster.add_broker()
    cluster.stop_broker(0)
    with Client(cluster.brokers[1].endpoint) as at_one:
        wait_for(f"the route of {JOURNAL} to be broker-1 and broker-2",
                 lambda: (m := members_of(at_one))[0] == {"broker-1", "broker-2"} and m[1] >= 0, 60)  # fmt: skip
    for i in (1, 2):  # the former replica and the new member: one is the primary, one its replica
        with Client(cluster.brokers[i].endpoint) as c:
            assert c.read_head(JOURNAL) == head, f"broker-{i}"
    # And the journal goes on from there.
    with Client(cluster.brokers[1].endpoint) as c:
        c.append(JOURNAL, b"after\n")
        assert c.read_head(JOURNAL) == head + len(b"after\n")
