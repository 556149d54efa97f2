"""A client given every broker's endpoint survives SIGKILL of the broker it was talking to: appends,
reads, listings and heads move on to the next endpoint (any broker proxies any journal)."""

from __future__ import annotations

import pytest

from gazette.client.aio import broker_endpoints


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

