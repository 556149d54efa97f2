"""A client given every broker's endpoint survives SIGKILL of the broker it was talking to: appends,
reads, listings and heads move on to the next endpoint (any broker proxies any journal)."""

from __future__ import annotations

import pytest

from gazette.client.aio import broker_endpoints
from gazette.client.sync import Client
from gazette.protocol.errors import GazetteError
from gazette.testing import wait_for

WAIT_S = 60.0


def test_endpoint_lists_parse_and_refuse_empty() -> None:
    assert broker_endpoints("http://a:1, http://b:2,") == ("http://a:1", "http://b:2")
    assert broker_endpoints(["http://a:1"]) == ("http://a:1",)
    with pytest.raises(ValueError, match="no broker endpoint in ' , '"):
        broker_endpoints(" , ")


def test_client_fails_over_when_its_broker_is_killed(make_cluster) -> None:
    cluster = make_cluster(brokers=3)
    client = cluster.client()
    assert client.aio.endpoints == tuple(cluster.broker_endpoints)
    journal = "failover/part-000"
    client.apply_journals([cluster.journal_spec(journal, replication=2)])
    cluster.wait_for_routes([journal])
    first = client.append(journal, b"before\n")

    in_use = cluster.broker_endpoints.index(client.aio.endpoint)
    cluster.kill_broker(in_use)
    # The first call after the kill finds its broker UNAVAILABLE and moves on; each call succeeds.
    second = client.append(journal, b"after\n")
    assert client.aio.endpoint != cluster.broker_endpoints[in_use]
    assert second.begin == first.end
    assert client.read_head(journal) == second.end
    assert [j.spec.name for j in client.list_journals()] == [journal]
    assert client.read_all(journal) == b"before\nafter\n"


def test_a_read_proxied_to_a_killed_broker_is_retried_not_failed(make_cluster) -> None:
    """A blocking read whose broker proxies it to the journal's broker, which is then SIGKILLed: the
    proxying broker passes UNAVAILABLE on (it used to answer UNKNOWN, an error a reader does not retry,
    which failed a consumer shard), so the reader goes on with what is appended after the failover."""
    cluster = make_cluster(brokers=2)
    journal = "failover/proxied-read"
    cluster.client().apply_journals([cluster.journal_spec(journal, replication=1)])
    cluster.wait_for_routes([journal])
    info = next(i for i in cluster.client().list_journals() if i.spec.name == journal)
    assert info.route.primary_id is not None
    serving = next(h.index for h in cluster.brokers if h.suffix == info.route.primary_id[1])
    other = 1 - serving
    with Client(cluster.brokers[other].endpoint) as reader_client:
        chunks = reader_client.read(journal, 0, block=True, timeout=WAIT_S)
        cluster.client().append(journal, b"before\n")
        assert next(chunks).content == b"before\n"
        # Persisted, so the journal's next broker starts at its end (R=1: a killed broker's unpersisted
        # content is gone, and the reader would wait at an offset the journal then never reaches).
        assert cluster.client().flush(journal, timeout=WAIT_S) is not None
        cluster.kill_broker(serving)  # the journal moves to the other broker once the lease expires
        cluster.wait_for_routes([journal])
        # R=1: the new broker re-syncs at the persisted head, once every broker routes to it (a head
        # read is impatient: while the reader's broker still proxies to the dead one it fails at once).
        wait_for("the journal's head re-synced", lambda: _reset_head(cluster, journal), WAIT_S)
        cluster.client().append(journal, b"after\n", timeout=WAIT_S)
        got = b""
        while not got.endswith(b"after\n"):
            got += next(chunks).content
        assert got.endswith(b"after\n")


def _reset_head(cluster, journal: str) -> bool:
    try:
        cluster.client().reset_head(journal, timeout=10)
    except GazetteError:
        return False
    return True
