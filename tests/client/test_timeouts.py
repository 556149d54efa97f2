"""Bounded client calls: after a broker of three is SIGKILLed and not restarted, an R=3 append gives
up with a CallTimeout that says what is missing, an R=2 append still succeeds, a blocking read given
a timeout ends, and a client's default timeout applies when a call passes none. Plus the pieces:
timeout arguments, the message of a CallTimeout, and its place among the error classes.

The cluster runs real broker subprocesses (lease TTL 5 s). Assertions are about types and messages;
time bounds are only generous ceilings, so a busy machine slows the tests without failing them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import gazette
from gazette.client.aio import AsyncClient
from gazette.client.sync import Client
from gazette.client.timeouts import (
    DEFAULT_TIMEOUT_S,
    USE_CLIENT_DEFAULT,
    CallTimeout,
    CallTrace,
    resolve_timeout,
)
from gazette.local.cluster import LocalCluster
from gazette.message.publisher import Publisher
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status
from gazette.testing import wait_for

LEASE_TTL_S = 5
WAIT_S = 90.0  # a generous ceiling for the cluster to settle after the kill
R3, R2 = "timeouts/r3", "timeouts/r2"
NDJSON = {"content-type": "application/x-ndjson"}


# --- the pieces --------------------------------------------------------------------------------------


def test_call_timeout_is_a_gazette_error_and_a_timeout_error() -> None:
    assert gazette.CallTimeout is CallTimeout
    assert "CallTimeout" in gazette.__all__
    err = CallTimeout("append to a/b timed out", operation="append to", subject="a/b")
    assert isinstance(err, GazetteError) and isinstance(err, TimeoutError)
    assert err.status == Status.OK and err.last_status is None and err.subject == "a/b"
    with pytest.raises(TimeoutError):
        raise err


def test_timeout_arguments() -> None:
    assert resolve_timeout(USE_CLIENT_DEFAULT, 7.0) == 7.0
    assert resolve_timeout(USE_CLIENT_DEFAULT, None) is None
    assert resolve_timeout(None, 7.0) is None
    assert resolve_timeout(2, 7.0) == 2.0
    for bad in (0, -1, float("nan"), "3", True):
        with pytest.raises(ValueError, match="is not a positive number of seconds"):
            resolve_timeout(bad, 7.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout -5"):
        Client("http://127.0.0.1:1", timeout=-5)
    assert Client("http://127.0.0.1:1").timeout == DEFAULT_TIMEOUT_S == 60.0


def test_call_timeout_messages() -> None:
    trace = CallTrace("append to", "a/b", endpoint="http://127.0.0.1:9")
    assert str(trace.timeout_error(3)) == (
        "append to a/b timed out after 3 s (broker http://127.0.0.1:9, last status no answer yet)"
    )
    trace.saw(Status.INSUFFICIENT_JOURNAL_BROKERS)
    trace.route_members, trace.replication = ("zone-a#b1", "zone-b#b2"), 3
    err = trace.timeout_error(2.5)
    assert str(err) == (
        "append to a/b timed out after 2.5 s (broker http://127.0.0.1:9, last status "
        "INSUFFICIENT_JOURNAL_BROKERS: R=3 needs 3 brokers, 2 are in its route (zone-a#b1, zone-b#b2): "
        "the others are down or at their journal limit; restart or add a broker, or lower the journal's replication)"
    )
    assert err.last_status == Status.INSUFFICIENT_JOURNAL_BROKERS and err.endpoint == "http://127.0.0.1:9"
    assert err.operation == "append to" and err.timeout == 2.5
    trace.saw_rpc_error(_RpcError("UNAVAILABLE", "connection refused"))
    assert "last status UNAVAILABLE: connection refused" in str(trace.timeout_error(1))


class _RpcError:
    def __init__(self, code: str, details: str) -> None:
        self._code, self._details = type("Code", (), {"name": code})(), details

    def code(self):  # noqa: ANN201
        return self._code

    def details(self) -> str:
        return self._details


def test_a_dead_broker_address_times_out_with_its_name() -> None:
    """Nothing listens there: the listing gives up at once or at its timeout, never hangs."""
    with Client("http://127.0.0.1:9", timeout=2) as client, pytest.raises(GazetteError) as info:
        client.list_journals()
    assert "127.0.0.1:9" in str(info.value)


# --- a cluster that lost a broker ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(etcd, module_etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    """Three broker subprocesses with an R=3 and an R=2 journal; the broker the client does not
    talk to is SIGKILLed (and stays dead) once both journals took a first append."""
    data_dir = str(tmp_path_factory.mktemp("timeouts"))
    with LocalCluster(brokers=3, mode="subprocess", etcd=etcd.endpoint, root=module_etcd_root,
                      lease_ttl_s=LEASE_TTL_S, data_dir=data_dir) as c:  # fmt: skip
        client = c.client()
        client.apply_journals([c.journal_spec(R3, replication=3, labels=NDJSON),
                               c.journal_spec(R2, replication=2, labels=NDJSON)])  # fmt: skip
        c.wait_for_routes([R3, R2])
        client.append(R3, b"before\n")
        client.append(R2, b"before\n")
        victim = next(i for i, ep in enumerate(c.broker_endpoints) if ep != client.aio.endpoint)
        c.kill_broker(victim)
        wait_for(f"{R3}'s route to lose the killed broker", lambda: len(_route(client, R3)) == 2, WAIT_S, 0.1)
        yield c


def _route(client: Client, journal: str) -> tuple[tuple[str, str], ...]:
    (info,) = client.list_journals(f"name={journal}")
    return info.route.members


def test_r3_append_times_out_saying_what_is_missing(cluster) -> None:
    client = cluster.client()
    started = time.monotonic()
    with pytest.raises(CallTimeout) as info:
        client.append(R3, b"after\n", timeout=3)
    assert time.monotonic() - started < 45  # generous: the call is bounded, not hung
    err = info.value
    assert isinstance(err, TimeoutError) and isinstance(err, GazetteError)
    assert err.last_status == Status.INSUFFICIENT_JOURNAL_BROKERS and err.subject == R3
    message = str(err)
    assert message.startswith(f"append to {R3} timed out after 3 s (broker http://127.0.0.1:")
    assert "INSUFFICIENT_JOURNAL_BROKERS: R=3 needs 3 brokers, 2 are in its route (" in message
    assert err.endpoint in cluster.broker_endpoints


def test_r2_append_still_succeeds(cluster) -> None:
    client = cluster.client()
    before = client.read_head(R2)
    res = client.append(R2, b"after\n", timeout=WAIT_S)  # rides through re-assignment if it needs to
    assert res.begin >= before and res.end == res.begin + len(b"after\n")


def test_blocking_read_given_a_timeout_ends_with_the_error(cluster) -> None:
    client = cluster.client()
    head = client.read_head(R2)
    got = []
    with pytest.raises(CallTimeout) as info:
        for chunk in client.read(R2, head, block=True, timeout=2):
            got.append(chunk)
    assert got == []
    message = str(info.value)
    assert message.startswith(f"read of {R2} timed out after 2 s (broker http://127.0.0.1:")
    assert message.endswith(f"last status none: no content came at offset {head})")


def test_non_blocking_read_is_not_cut_short_while_it_delivers(cluster) -> None:
    client = cluster.client()
    assert client.read_all(R2, timeout=2).startswith(b"before\n")


def test_client_default_timeout_applies_when_a_call_passes_none(cluster) -> None:
    with Client(cluster.client().aio.endpoint, timeout=2) as client:
        assert client.timeout == 2
        with pytest.raises(CallTimeout, match=rf"^append to {R3} timed out after 2 s .*R=3 needs 3 brokers"):
            client.append(R3, b"default\n")
        with pytest.raises(CallTimeout, match=r"timed out after 0.5 s"):
            client.append(R3, b"given\n", timeout=0.5)  # a call's own timeout wins
    assert gazette.connect(broker=cluster.client().aio.endpoint, timeout=4).timeout == 4


async def test_async_client_default_timeout(cluster) -> None:
    async with gazette.aio.connect(broker=cluster.client().aio.endpoint, timeout=2) as client:
        assert isinstance(client, AsyncClient) and client.timeout == 2
        with pytest.raises(CallTimeout, match=rf"^append to {R3} timed out after 2 s"):
            await client.append(R3, b"async\n")


def test_publisher_flush_and_close_are_bounded(cluster) -> None:
    """The append service retries the stuck batch; flush and close give up with the journal's story."""
    with Client(cluster.client().aio.endpoint, timeout=2) as client:
        pub = Publisher(client)
        pub.publish_committed(R3, {"word": "stuck"})
        with pytest.raises(CallTimeout) as info:
            pub.flush()  # the client's default: 2 s
        message = str(info.value)
        assert message.startswith(f"flush of appends to {R3} timed out after 2 s (broker http://127.0.0.1:")
        assert "R=3 needs 3 brokers, 2 are in its route" in message
        with pytest.raises(CallTimeout, match=rf"^close of appends to {R3} timed out after 1 s"):
            pub.close(timeout=1)  # drops what could not be appended, and says so
        assert pub.service.pending() == []
