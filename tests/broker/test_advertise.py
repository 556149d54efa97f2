"""A broker bound to one address and advertised under another (`broker serve --host H --advertise A`):
its routes, peers and clients use the advertised host; a wildcard bind without one is refused."""

from __future__ import annotations

import pytest
from cli_run import gazette, one_error_line

from gazette.broker.broker import Broker
from gazette.client.loop import default_loop
from gazette.client.sync import Client
from gazette.protocol.endpoints import advertised_host
from gazette.protocol.spec import JournalSpec


def test_advertised_host_rules() -> None:
    assert advertised_host("10.0.0.11", None) == "10.0.0.11"
    assert advertised_host("0.0.0.0", "broker-a.internal") == "broker-a.internal"
    for wildcard in ("0.0.0.0", "::", ""):
        with pytest.raises(ValueError, match="--advertise HOST"):
            advertised_host(wildcard, None)


def test_routes_and_clients_use_the_advertised_host(etcd, etcd_root, tmp_path) -> None:
    loop = default_loop()
    broker = Broker(
        etcd.endpoint,
        root=etcd_root,
        host="127.0.0.1",
        advertise="localhost",
        spool_dir=str(tmp_path),
        lease_ttl_s=5,
    )
    loop.run(broker.start(), timeout=60)
    try:
        assert broker.endpoint.startswith("http://localhost:")
        assert broker.metrics_endpoint.startswith("http://localhost:")
        with Client(broker.endpoint) as client:
            journal = "advertise/part-000"
            client.apply_journals([JournalSpec(name=journal, replication=1)])
            res = client.append(journal, b"reached through the advertised name\n")
            assert res.end > 0
            (info,) = client.list_journals(f"name={journal}")
            assert info.route.endpoints == (broker.endpoint,)
    finally:
        loop.run(broker.stop(graceful=False), timeout=60)


def test_serve_refuses_a_wildcard_bind_without_advertise(etcd) -> None:
    line = one_error_line(
        gazette("broker", "serve", "--etcd", etcd.endpoint, "--host", "0.0.0.0", "--port", "0")
    )
    assert "--host 0.0.0.0" in line and "--advertise" in line
