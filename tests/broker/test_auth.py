"""A broker under auth keys and TLS: each RPC needs its capability (Replicate, Flush and
FragmentStoreHealth included), refusals change nothing, proxied and replicated calls are signed by
the brokers themselves, and mutual TLS refuses clients without a certificate."""

from __future__ import annotations

import base64
import os
import time

import grpc
import pytest

import gazette
from gazette.auth.tls import TLSConfig, sync_channel
from gazette.auth.tokens import Capability, Claims, KeyedAuth, name_selector
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol import gazette_py_pb2_grpc as gpy_grpc
from gazette.protocol.errors import GazetteError

KEYS = base64.b64encode(b"broker-auth-test-key").decode()
J = "tests/auth/journal"


@pytest.fixture
def secured(etcd, etcd_root, tmp_path):
    """Two in-process brokers with auth keys and mutual TLS; one R=2 journal holding "before\\n"."""
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=2, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint, root=etcd_root,
        data_dir=str(tmp_path / "data"), auth_keys=KEYS, tls=True,
    ) as c:  # fmt: skip
        client = c.client()
        client.apply_journals([c.journal_spec(J, replication=2)])
        c.wait_for_routes()
        client.append(J, b"before\n")
        yield c


def _md(capability: Capability, journal: str | None = J) -> tuple[tuple[str, str], ...]:
    now = int(time.time())
    selector = name_selector(journal) if journal else None
    claims = Claims(capability, selector or Claims(0).selector, expires_at=now + 60, issued_at=now)
    return (("authorization", "Bearer " + KeyedAuth(KEYS).sign(claims)),)


def _refusal(call) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value.code().name, refused.value.details()


def test_each_rpc_needs_its_capability_and_refusals_change_nothing(secured) -> None:
    tls = secured.security.client_tls
    client = secured.client()
    with sync_channel(secured.broker_endpoints[0], tls) as channel:
        journal, flusher = pb_grpc.JournalStub(channel), gpy_grpc.FlusherStub(channel)
        reader = _md(Capability.READ | Capability.LIST | Capability.APPLY)  # everything but APPEND, REPLICATE
        assert _refusal(lambda: journal.Append(iter([pb.AppendRequest(journal=J), pb.AppendRequest(content=b"x"),
                                                      pb.AppendRequest()]), metadata=reader)) == (
            "UNAUTHENTICATED", "authorization is missing required APPEND capability")  # fmt: skip
        assert _refusal(lambda: flusher.Flush(gpy.FlushRequest(journal=J), metadata=reader)) == (
            "UNAUTHENTICATED", "authorization is missing required APPEND capability")  # fmt: skip
        proposal = pb.ReplicateRequest(
            header=pb.Header(), proposal=pb.Fragment(journal=J), registers=pb.LabelSet(), acknowledge=True
        )
        assert _refusal(lambda: list(journal.Replicate(iter([proposal]), metadata=reader))) == (
            "UNAUTHENTICATED", "authorization is missing required REPLICATE capability")  # fmt: skip
        assert _refusal(lambda: journal.FragmentStoreHealth(
            pb.FragmentStoreHealthRequest(fragment_store=secured.store), metadata=_md(Capability.APPEND))) == (
            "UNAUTHENTICATED", "authorization is missing required READ capability")  # fmt: skip
        # A token for another journal: this one is not found to ListFragments (as Gazette answers).
        other = _md(Capability.READ, "tests/auth/other")
        resp = journal.ListFragments(pb.FragmentsRequest(journal=J), metadata=other)
        assert pb.Status.Name(resp.status) == "JOURNAL_NOT_FOUND" and not resp.fragments
    assert client.read_all(J) == b"before\n"  # nothing refused was appended
    assert client.read_head(J) == len(b"before\n")


def test_brokers_sign_what_they_proxy_and_replicate(secured) -> None:
    """Appends, reads and flushes through each broker: the one that is not primary proxies under a
    token it signs, and the primary replicates to the other under a REPLICATE token it signs."""
    tls = secured.security.client_tls
    for endpoint in secured.broker_endpoints:
        with gazette.connect(broker=endpoint, auth_keys=KEYS, tls=tls) as client:
            client.append(J, f"via {endpoint}\n".encode())
            assert client.read_all(J).startswith(b"before\n")
            client.flush(J)
    expected = b"before\n" + b"".join(f"via {e}\n".encode() for e in secured.broker_endpoints)
    assert secured.client().read_all(J) == expected
    for endpoint in secured.broker_endpoints:  # each member holds all of it
        with sync_channel(endpoint, tls) as channel:
            resp = pb_grpc.JournalStub(channel).ListFragments(
                pb.FragmentsRequest(journal=J, do_not_proxy=True), metadata=_md(Capability.READ)
            )
        assert resp.status == pb.OK and resp.fragments[-1].spec.end == len(expected)


def test_mutual_tls_refuses_clients_without_a_certificate(secured) -> None:
    endpoint = secured.broker_endpoints[0]
    assert endpoint.startswith("https://")
    ca_only = TLSConfig(ca_file=secured.security.client_tls.ca_file)
    for tls in (None, ca_only):  # the system's roots do not know the CA; without a certificate
        with gazette.connect(broker=endpoint, auth_keys=KEYS, tls=tls, timeout=5) as client:
            with pytest.raises(GazetteError) as refused:
                client.list_journals()
            assert refused.value.grpc_code == "UNAVAILABLE"
    plaintext = "http://" + endpoint.removeprefix("https://")
    with gazette.connect(broker=plaintext, auth_keys=KEYS, timeout=5) as client:
        with pytest.raises(GazetteError) as refused:
            client.list_journals()
        assert refused.value.grpc_code == "UNAVAILABLE"
