"""A primary whose index lacks a committed range a peer holds (its spool missed a commit the peer got
before the old primary died, and the pipeline rolled past it) serves that range from the peer, at
once, instead of readers waiting until the peer persists it minutes later (a consumer stalled on it;
a non-blocking read ended short at it).

The missing range is made by dropping the fragment from the primary's Index (a listing that covered
it, then one that no longer does): what the primary holds after such a fail-over."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gazette.client.loop import default_loop
from gazette.client.sync import Client
from gazette.fragment.fragment import Fragment
from gazette.local.cluster import LocalCluster
from gazette.testing import wait_for

JOURNAL = "gap/primary"
READ_BOUND_S = 60.0  # far beyond the milliseconds a read takes: a read that waits fails instead


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    with LocalCluster(
        brokers=2, mode="inprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data")
    ) as c:
        yield c


def test_a_primary_reads_a_range_it_lacks_from_the_peer_that_holds_it(cluster: LocalCluster) -> None:
    client = cluster.client()
    # No store: nothing is persisted, so only the peer's spool can serve the range. The first write
    # exceeds the fragment length, so the next append rolls: it is a fragment of its own.
    client.apply_journals([cluster.journal_spec(JOURNAL, replication=2, stores=[], fragment_length=1024)])
    cluster.wait_for_routes([JOURNAL])
    before = b"committed at both replicas, then lost by the primary's spool\n" * 30
    after = b"written after the fail-over\n"
    client.append(JOURNAL, before)
    client.append(JOURNAL, after)

    (info,) = client.list_journals(f"name={JOURNAL}")
    primary = next(h for h in cluster.brokers if h.endpoint == info.route.endpoints[info.route.primary])
    index = primary.broker.replicas[JOURNAL].index
    lost = Fragment(JOURNAL, 0, len(before), backing_store="file:///nowhere/", mod_time=1)
    default_loop().run(_drop_local(index, lost), timeout=10)
    assert [(f.begin, f.end) for f in index.fragments()] == [(len(before), len(before) + len(after))]

    at_primary = Client(primary.endpoint)
    try:
        assert at_primary.read_all(JOURNAL) == before + after  # non-blocking: not ended at the gap
        assert at_primary.read_all(JOURNAL, end_offset=10) == before[:10]
        got: list[bytes] = []

        def blocking_read() -> None:
            for chunk in at_primary.read(JOURNAL, 0, block=True):
                got.append(chunk.content)
                if sum(map(len, got)) >= len(before + after):
                    return

        reader = threading.Thread(target=blocking_read, daemon=True)
        reader.start()
        reader.join(READ_BOUND_S)
        assert not reader.is_alive(), f"the blocking read at the primary waits at the gap ({b''.join(got)!r})"
        assert b"".join(got) == before + after
    finally:
        at_primary.close()
    wait_for(
        "the journal to read whole through the client", lambda: client.read_all(JOURNAL) == before + after
    )


async def _drop_local(index, lost: Fragment) -> None:
    index.replace_remote([lost])  # a listing covering it drops the local copy ...
    index.replace_remote([])  # ... and the next one no longer has it
