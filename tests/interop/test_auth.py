"""Authorization and TLS against real Gazette (v0.103.0): signed bearer tokens both ways, the same
refusals for the same bad tokens, and a mixed cluster whose brokers sign replication for each other.

* real gazctl with `--broker.auth-keys` (BROKER_AUTH_KEYS) works against gazette-py brokers started
  with the same keys, and is refused with other keys or none, changing nothing;
* gazette-py's client with `auth_keys=` works against Gazette brokers started with
  `--broker.auth-keys`, and is refused without them, changing nothing;
* one raw request with each kind of bad token gets the same gRPC code and message from a Gazette
  broker as from a gazette-py broker (and a too-narrow token the same narrowed answer);
* a mixed cluster (R=3 routes spanning both kinds) with auth keys and mutual TLS: appends through
  either kind commit on every route member (the primaries sign REPLICATE for their peers);
* the token gazctl sends is, byte for byte, the one gazette-py signs for the same claims.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
from collections.abc import Iterator
from functools import partial

import grpc
import pytest
from interop.conftest import GAZCTL_TIMEOUT_S, start_cluster

import gazette
from gazette.auth.tls import TLSConfig, sync_channel
from gazette.auth.tokens import Capability, Claims, KeyedAuth, name_selector
from gazette.local import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.errors import GazetteError
from gazette.protocol.selector import LabelSelector

KEYS = base64.b64encode(b"interop-auth-test-key").decode()
OTHER_KEYS = base64.b64encode(b"some other key").decode()
RPC_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def py_auth() -> Iterator[LocalCluster]:
    """Two gazette-py brokers (subprocesses) requiring tokens signed with KEYS."""
    with LocalCluster(brokers=2, mode="subprocess", auth_keys=KEYS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def gz_auth(gazette_bin) -> Iterator[LocalCluster]:
    """Two real Gazette brokers started with --broker.auth-keys=KEYS."""
    cluster = start_cluster(["gazette"] * 2, auth_keys=KEYS)
    try:
        yield cluster
    finally:
        cluster.close()


def _gazctl(binary: str, cluster: LocalCluster, cwd, *args: str, keys: str | None, input: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.endswith("AUTH_KEYS")}
    env.update(BROKER_ADDRESS=cluster.broker_endpoints[0], BROKER_CACHE_SIZE="0")
    if keys is not None:
        env["BROKER_AUTH_KEYS"] = keys
    return subprocess.run(
        [binary, *args],
        input=input,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=GAZCTL_TIMEOUT_S,
    )


def _names(cluster: LocalCluster, prefix: str) -> set[str]:
    return {i.spec.name for i in cluster.client().list_journals(f"prefix={prefix}")}


def test_gazctl_with_keys_against_gazette_py_brokers(gazctl_bin, py_auth, tmp_path):
    specs = tmp_path / "specs.yaml"
    specs.write_text(
        f"name: gzauth/\nreplication: 2\nfragment:\n  length: 4096\n  compression_codec: SNAPPY\n"
        f"  stores: [{py_auth.store}]\n  refresh_interval: 1m0s\nchildren:\n- name: gzauth/a\n"
    )

    for keys, why in ((None, "missing or empty Authorization token"),
                      (OTHER_KEYS, "token signature is invalid: signature is invalid")):  # fmt: skip
        refused = _gazctl(
            gazctl_bin, py_auth, tmp_path, "journals", "apply", "--specs", str(specs), keys=keys
        )
        assert refused.returncode != 0
        assert "Unauthenticated" in refused.stderr and why in refused.stderr, refused.stderr
    assert _names(py_auth, "gzauth/") == set()  # the refused applies changed nothing

    ok = _gazctl(gazctl_bin, py_auth, tmp_path, "journals", "apply", "--specs", str(specs), keys=KEYS)
    assert ok.returncode == 0, ok.stderr
    assert _names(py_auth, "gzauth/") == {"gzauth/a"}
    py_auth.wait_for_routes(["gzauth/a"])

    # Appends through either broker (one proxies to the primary, signing for it), then a read.
    for _ in range(2):
        ok = _gazctl(gazctl_bin, py_auth, tmp_path, "journals", "append", "-l", "name=gzauth/a",
                     keys=KEYS, input="signed\n")  # fmt: skip
        assert ok.returncode == 0, ok.stderr
    refused = _gazctl(gazctl_bin, py_auth, tmp_path, "journals", "append", "-l", "name=gzauth/a",
                      keys=OTHER_KEYS, input="forged\n")  # fmt: skip
    assert refused.returncode != 0 and "Unauthenticated" in refused.stderr, refused.stderr
    read = _gazctl(gazctl_bin, py_auth, tmp_path, "journals", "read", "-l", "name=gzauth/a", keys=KEYS)
    assert read.returncode == 0, read.stderr
    assert read.stdout == "signed\nsigned\n"
    assert py_auth.client().read_head("gzauth/a") == len("signed\n") * 2  # nothing forged landed


def test_gazette_py_client_against_gazette_brokers(gz_auth):
    endpoint = gz_auth.broker_endpoints[0]
    spec = gz_auth.journal_spec("pyauth/a", replication=2)
    for keys, why in ((None, "missing or empty Authorization token"),
                      (OTHER_KEYS, "verifying Authorization: token signature is invalid: signature is invalid")):  # fmt: skip
        with gazette.connect(broker=endpoint, auth_keys=keys, timeout=RPC_TIMEOUT_S) as client:
            with pytest.raises(GazetteError) as refused:
                client.apply_journals([spec])
            assert refused.value.grpc_code == "UNAUTHENTICATED"
            assert refused.value.message == f"UNAUTHENTICATED: {why} (apply of pyauth/a at broker {endpoint})"
    assert _names(gz_auth, "pyauth/") == set()

    with gazette.connect(broker=endpoint, auth_keys=KEYS, timeout=RPC_TIMEOUT_S) as client:
        client.apply_journals([spec])
        gz_auth.wait_for_routes(["pyauth/a"])
        first = client.append("pyauth/a", b"one\n")
        with gazette.connect(broker=gz_auth.broker_endpoints[1], auth_keys=KEYS) as other:
            second = other.append("pyauth/a", b"two\n")
        assert (first.begin, first.end, second.begin, second.end) == (0, 4, 4, 8)
        assert client.read_all("pyauth/a") == b"one\ntwo\n"
        assert [f.end for f in client.list_fragments("pyauth/a")][-1] == 8
    with gazette.connect(broker=endpoint, timeout=RPC_TIMEOUT_S) as anonymous:
        with pytest.raises(GazetteError) as refused:
            anonymous.append("pyauth/a", b"anonymous\n")
        assert refused.value.grpc_code == "UNAUTHENTICATED"
        with pytest.raises(GazetteError) as refused:
            anonymous.read_all("pyauth/a")
        assert refused.value.grpc_code == "UNAUTHENTICATED"
    assert gz_auth.client().read_head("pyauth/a") == 8  # the refused append wrote nothing


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _bad_tokens() -> dict[str, tuple[tuple[str, str], ...]]:
    auth, now = KeyedAuth(KEYS), int(time.time())

    def signed(cap: int, **kw) -> tuple[tuple[str, str], ...]:
        return _bearer(auth.sign(Claims(capability=cap, **kw)))

    return {
        "missing": (),
        "not bearer": (("authorization", "Basic dXNlcjpwYXNz"),),
        "malformed": _bearer("not.a-token"),
        "wrong key": _bearer(
            KeyedAuth(OTHER_KEYS).sign(Claims(Capability.ALL, expires_at=now + 60, issued_at=now))
        ),
        "expired": signed(Capability.ALL, expires_at=now - 60, issued_at=now - 120),
        "no exp": signed(Capability.ALL, issued_at=now),
        "issued in the future": signed(Capability.ALL, expires_at=now + 600, issued_at=now + 300),
        "too few capabilities": signed(
            Capability.READ | Capability.APPEND, expires_at=now + 60, issued_at=now
        ),
    }


def _answer(call) -> tuple[str, str]:
    try:
        result = call()
        statuses = [pb.Status.Name(r.status) for r in (result if isinstance(result, list) else [result])]
        return "OK", ",".join(statuses)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details()


def _answers(cluster: LocalCluster, tokens: dict) -> dict[str, tuple[str, str]]:
    """Each bad token on a List, an Apply and a Read of one broker of `cluster`."""
    spec = cluster.journal_spec("sameanswer/not-applied", replication=1).to_proto()
    out = {}
    with sync_channel(cluster.broker_endpoints[0], None) as channel:
        stub = pb_grpc.JournalStub(channel)
        for name, md in tokens.items():
            out[f"List {name}"] = _answer(
                lambda md=md: list(stub.List(pb.ListRequest(), metadata=md, timeout=RPC_TIMEOUT_S))[:1]
            )
            out[f"Apply {name}"] = _answer(lambda md=md: stub.Apply(
                pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec, expect_mod_revision=-1)]),
                metadata=md, timeout=RPC_TIMEOUT_S))  # fmt: skip
            out[f"Read {name}"] = _answer(lambda md=md: list(stub.Read(
                pb.ReadRequest(journal="sameanswer/not-applied", offset=0), metadata=md, timeout=RPC_TIMEOUT_S)))  # fmt: skip
    return out


def test_the_same_refusals_as_gazette(py_auth, gz_auth):
    tokens = _bad_tokens()
    ours, theirs = _answers(py_auth, tokens), _answers(gz_auth, tokens)
    assert ours == theirs
    assert ours["Apply missing"] == ("UNAUTHENTICATED", "missing or empty Authorization token")
    assert ours["List too few capabilities"] == (
        "UNAUTHENTICATED",
        "authorization is missing required LIST capability",
    )
    assert ours["Read expired"] == (
        "UNAUTHENTICATED",
        "verifying Authorization: token has invalid claims: token is expired",
    )
    for cluster in (py_auth, gz_auth):
        assert _names(cluster, "sameanswer/") == set()  # no refused Apply applied anything


def test_a_narrow_token_sees_and_changes_only_what_it_selects(py_auth, gz_auth):
    """A token whose selector matches one journal: other journals are not found to Read (status
    JOURNAL_NOT_FOUND), left out of List, and an Apply touching one is refused whole."""
    now = int(time.time())
    auth = KeyedAuth(KEYS)
    narrow = auth.sign(
        Claims(Capability.ALL, name_selector("narrow/mine"), expires_at=now + 600, issued_at=now)
    )
    seen = {}
    for kind, cluster in (("gazette-py", py_auth), ("gazette", gz_auth)):
        client = cluster.client()
        client.apply_journals(
            [cluster.journal_spec(n, replication=1) for n in ("narrow/mine", "narrow/theirs")]
        )
        cluster.wait_for_routes(["narrow/mine", "narrow/theirs"])
        client.append("narrow/theirs", b"secret\n")
        with sync_channel(cluster.broker_endpoints[0], None) as channel:
            stub = pb_grpc.JournalStub(channel)
            md = _bearer(narrow)
            listed = [j.spec.name for r in stub.List(pb.ListRequest(), metadata=md) for j in r.journals]
            reads = {
                j: [
                    (pb.Status.Name(r.status), r.content)
                    for r in stub.Read(pb.ReadRequest(journal=j), metadata=md)
                ]
                for j in ("narrow/mine", "narrow/theirs")
            }
            upserts = [
                pb.ApplyRequest.Change(
                    upsert=cluster.journal_spec(n, replication=1, labels={"touched": "yes"}).to_proto(),
                    expect_mod_revision=-1,
                )
                for n in ("narrow/mine", "narrow/theirs")
            ]
            apply = _answer(partial(stub.Apply, pb.ApplyRequest(changes=upserts), metadata=md))
        labels = {
            i.spec.name: i.spec.labels.value_of("touched") for i in client.list_journals("prefix=narrow/")
        }
        seen[kind] = (listed, reads["narrow/theirs"], apply, labels)
    assert seen["gazette-py"] == seen["gazette"]
    listed, theirs, apply, labels = seen["gazette-py"]
    assert listed == ["narrow/mine"]
    assert theirs == [("JOURNAL_NOT_FOUND", b"")]
    assert apply == ("UNAUTHENTICATED", "not authorized to narrow/theirs")
    assert labels == {"narrow/mine": None, "narrow/theirs": None}  # the refused Apply changed nothing


@pytest.mark.parametrize(
    "kinds",
    [["gazette-py", "gazette", "gazette-py"], ["gazette", "gazette-py", "gazette"]],
    ids=["gazette-py-first", "gazette-first"],
)
def test_mixed_cluster_with_auth_and_mutual_tls_replicates_both_ways(gazette_bin, tmp_path, kinds):
    """R=3 over three brokers of both kinds: every route spans both kinds, so whichever kind is
    primary replicates to the other under a REPLICATE token it signs, over mutual TLS. (The first
    broker started leads the allocator and takes the primaries, so each order has the other kind
    primary; the test holds whichever is.)"""
    cluster = LocalCluster(
        brokers=len(kinds), mode="subprocess", broker_kinds=kinds, auth_keys=KEYS, tls=True,
        data_dir=str(tmp_path / "cluster"),
    ).start()  # fmt: skip
    try:
        assert all(e.startswith("https://") for e in cluster.broker_endpoints)
        journals = [f"mixedauth/part-{i:03d}" for i in range(4)]
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(j, replication=3) for j in journals])
        cluster.wait_for_routes(journals)
        kinds = {h.suffix: h.kind for h in cluster.brokers}
        primaries = {
            j: kinds[i.route.primary_id[1]] for j in journals for i in client.list_journals(f"name={j}")
        }
        tls = cluster.security.client_tls
        for i, endpoint in enumerate(cluster.broker_endpoints):  # through each kind of broker
            with gazette.connect(broker=endpoint, auth_keys=KEYS, tls=tls, timeout=RPC_TIMEOUT_S) as through:
                for j in journals:
                    through.append(j, f"via {i}\n".encode())
        expected = b"".join(f"via {i}\n".encode() for i in range(len(kinds)))
        for j in journals:
            assert client.read_all(j) == expected, (j, primaries[j])
            # Every route member committed it: each lists its own fragments up to the same end.
            for endpoint in cluster.broker_endpoints:
                with sync_channel(endpoint, tls) as channel:
                    resp = pb_grpc.JournalStub(channel).ListFragments(
                        pb.FragmentsRequest(journal=j, do_not_proxy=True),
                        metadata=KeyedAuth(KEYS).metadata(
                            Capability.READ, LabelSelector(include=[("name", j)])
                        ),
                        timeout=RPC_TIMEOUT_S,
                    )
                assert resp.status == pb.OK and resp.fragments[-1].spec.end == len(expected), (j, endpoint)
        # A client that trusts the CA but has no certificate of its own: both kinds refuse the
        # connection itself (mutual TLS), whatever its token.
        for endpoint in cluster.broker_endpoints[:2]:
            no_cert = TLSConfig(ca_file=tls.ca_file)
            with gazette.connect(
                broker=endpoint, auth_keys=KEYS, tls=no_cert, timeout=5
            ) as client_without_cert:
                with pytest.raises(GazetteError) as refused:
                    client_without_cert.list_journals()
                assert refused.value.grpc_code == "UNAVAILABLE", endpoint
    finally:
        cluster.close()


class _Capture(pb_grpc.JournalServicer):
    """A Journal service that records each List's authorization and answers an empty listing."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []

    def List(self, request, context):
        self.authorizations.append(dict(context.invocation_metadata()).get("authorization", ""))
        yield pb.ListResponse(
            status=pb.OK,
            header=pb.Header(
                process_id=pb.ProcessSpec.ID(zone="capture", suffix="capture"),
                route=pb.Route(primary=-1),
                etcd=pb.Header.Etcd(cluster_id=1, member_id=1, revision=1, raft_term=1),
            ),
        )


def test_our_tokens_are_byte_for_byte_gazctls(gazctl_bin, tmp_path):
    """gazctl's token for `journals list -l prefix=examples/`, re-signed here from its own claims
    (its iat and exp), is the very same string: header, claims JSON and signature."""
    from concurrent import futures

    capture = _Capture()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_JournalServicer_to_server(capture, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.endswith("AUTH_KEYS")}
        env.update(BROKER_ADDRESS=f"http://127.0.0.1:{port}", BROKER_AUTH_KEYS=KEYS)
        proc = subprocess.run([gazctl_bin, "journals", "list", "-l", "prefix=examples/"], env=env,
                              capture_output=True, text=True, cwd=tmp_path, timeout=GAZCTL_TIMEOUT_S)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    finally:
        server.stop(0)
    (header,) = capture.authorizations
    claims = KeyedAuth(KEYS).verify(header, Capability.LIST)
    assert claims.capability == Capability.LIST and str(claims.selector) == "prefix=examples/"
    assert claims.expires_at - claims.issued_at == 3600  # List tokens live an hour
    ours = KeyedAuth(KEYS).sign(
        Claims(Capability.LIST, LabelSelector.parse("prefix=examples/"), claims.expires_at, claims.issued_at)
    )
    assert header == f"Bearer {ours}"
