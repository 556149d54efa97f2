"""One client call policy (gazette/client/policy.py) for every client loop: unary calls, appends,
reads, the append service, journal watches and the shard client. Against real gRPC servers on
127.0.0.1 that fail every call with a chosen status, each loop

- retries UNAVAILABLE and grpc.aio's racing INTERNAL "Internal error from Core", at both endpoints
  it was given, until its deadline, then raises a CallTimeout worded alike (the operation, "timed
  out after N s", the peer, "last status <CODE>: <details>");
- stops at once on a fatal code (PERMISSION_DENIED), with a PeerError carrying it;
- on a peer's own INTERNAL: the bounded loops stop at once, the persistent ones (the append service,
  a watch) keep trying, as they do for every failure but a fatal one.

Counts and wording decide these tests; time bounds are only generous ceilings."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from gazette import tunables
from gazette.client.aio import AsyncClient
from gazette.client.append_service import AsyncAppendService
from gazette.client.policy import (
    APPEND,
    READ,
    SHARD_PRIMARY,
    UNARY,
    Attempts,
    Deadline,
    Rotation,
)
from gazette.client.timeouts import CallTimeout, CallTrace
from gazette.client.watch import JournalWatch
from gazette.consumer.client import AsyncShardClient, ShardTimeoutError
from gazette.protocol import broker_pb2_grpc, shard_pb2_grpc
from gazette.protocol.errors import GazetteError, PeerError
from gazette.protocol.status import ShardStatus, Status

J = "policy/journal"
TIMEOUT_S = 3.0  # every loop's deadline here
CEILING_S = 60.0  # a generous bound on how long a loop may take to give up

UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, "broker is down")
RACING_INTERNAL = (grpc.StatusCode.INTERNAL, "Internal error from Core")
OWN_INTERNAL = (grpc.StatusCode.INTERNAL, "a broker's own internal error")
FATAL = (grpc.StatusCode.PERMISSION_DENIED, "not yours")


class _Failing:
    """What every call of a server answers: `status` (code, details); `calls` counts the calls."""

    def __init__(self, status: tuple[grpc.StatusCode, str]) -> None:
        self.status = status
        self.calls = 0

    async def fail(self, context: grpc.aio.ServicerContext) -> Any:
        self.calls += 1
        await context.abort(*self.status)


class _Journal(broker_pb2_grpc.JournalServicer):
    def __init__(self, failing: _Failing) -> None:
        self.failing = failing

    async def List(self, request, context):  # noqa: ANN001, ANN201, N802
        await self.failing.fail(context)
        yield  # a server-streaming method

    async def Read(self, request, context):  # noqa: ANN001, ANN201, N802
        await self.failing.fail(context)
        yield

    async def Append(self, request_iterator, context):  # noqa: ANN001, ANN201, N802
        await self.failing.fail(context)

    async def Apply(self, request, context):  # noqa: ANN001, ANN201, N802
        await self.failing.fail(context)


class _Shard(shard_pb2_grpc.ShardServicer):
    def __init__(self, failing: _Failing) -> None:
        self.failing = failing

    async def List(self, request, context):  # noqa: ANN001, ANN201, N802
        await self.failing.fail(context)

    async def Stat(self, request, context):  # noqa: ANN001, ANN201, N802
        await self.failing.fail(context)


@contextlib.asynccontextmanager
async def _servers(status: tuple[grpc.StatusCode, str]) -> AsyncIterator[tuple[list[str], list[_Failing]]]:
    """Two servers (a journal and a shard service each) on 127.0.0.1 answering every call `status`."""
    servers, endpoints, failing = [], [], []
    try:
        for _ in range(2):
            f = _Failing(status)
            server = grpc.aio.server()
            broker_pb2_grpc.add_JournalServicer_to_server(_Journal(f), server)
            shard_pb2_grpc.add_ShardServicer_to_server(_Shard(f), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            servers.append(server)
            endpoints.append(f"http://127.0.0.1:{port}")
            failing.append(f)
        yield endpoints, failing
    finally:
        for server in servers:
            await server.stop(None)


# Each loop, as a coroutine of the two endpoints that runs it until it ends (with its error).


async def _unary(endpoints: list[str]) -> None:
    async with AsyncClient(endpoints, timeout=TIMEOUT_S) as client:
        await client.delete_journals([J])


async def _append(endpoints: list[str]) -> None:
    async with AsyncClient(endpoints, timeout=TIMEOUT_S) as client:
        await client.append(J, b"x\n")


async def _read(endpoints: list[str]) -> None:
    async with AsyncClient(endpoints, timeout=TIMEOUT_S) as client:
        async for _chunk in client.read(J, block=True, timeout=TIMEOUT_S):
            pass


async def _append_service(endpoints: list[str]) -> None:
    async with AsyncClient(endpoints, timeout=TIMEOUT_S) as client:
        service = AsyncAppendService(client)
        future = service.append(J, b"x\n")
        try:
            await service.flush(TIMEOUT_S)
        finally:
            await service.abort()
        future.result()


async def _watch(endpoints: list[str]) -> None:
    async with AsyncClient(endpoints, timeout=TIMEOUT_S) as client:
        watch = JournalWatch(client, f"name={J}")
        try:
            await watch.ready(TIMEOUT_S)
        finally:
            await watch.stop()


async def _shard_list(endpoints: list[str]) -> None:
    async with AsyncShardClient(endpoints, timeout=TIMEOUT_S) as client:
        await client.list_shards()


async def _shard_stat(endpoints: list[str]) -> None:
    async with AsyncShardClient(endpoints, timeout=TIMEOUT_S) as client:
        await client.stat_shard("shard-000")


Loop = Callable[[list[str]], Awaitable[None]]
# Each loop, and how its CallTimeout starts.
LOOPS: dict[str, tuple[Loop, str]] = {
    "unary": (_unary, f"delete of {J} timed out after {TIMEOUT_S:g} s (broker http://127.0.0.1:"),
    "append": (_append, f"append to {J} timed out after {TIMEOUT_S:g} s (broker http://127.0.0.1:"),
    "read": (_read, f"read of {J} timed out after {TIMEOUT_S:g} s (broker http://127.0.0.1:"),
    "append service": (
        _append_service,
        f"flush of appends to {J} timed out after {TIMEOUT_S:g} s (broker http://127.0.0.1:",
    ),
    "watch": (
        _watch,
        f"watch of journals matching 'name={J}' timed out after {TIMEOUT_S:g} s (broker http://127.0.0.1:",
    ),
    "shard list": (
        _shard_list,
        f"listing of shards timed out after {TIMEOUT_S:g} s (consumer http://127.0.0.1:",
    ),
    "shard stat": (
        _shard_stat,
        f"stat of shard shard-000 timed out after {TIMEOUT_S:g} s (consumer http://127.0.0.1:",
    ),
}
BOUNDED = ("unary", "append", "read", "shard list", "shard stat")
PERSISTENT = ("append service", "watch")


async def _run(loop: Loop, status: tuple[grpc.StatusCode, str]) -> tuple[BaseException, list[int], float]:
    """Runs `loop` against two servers answering `status`: its error, the calls each server got,
    and how long it took."""
    async with _servers(status) as (endpoints, failing):
        started = time.monotonic()
        with pytest.raises((GazetteError, TimeoutError)) as info:
            await asyncio.wait_for(loop(endpoints), CEILING_S)
        took = time.monotonic() - started
        return info.value, [f.calls for f in failing], took


@pytest.mark.parametrize("status", [UNAVAILABLE, RACING_INTERNAL], ids=["UNAVAILABLE", "racing INTERNAL"])
@pytest.mark.parametrize("name", list(LOOPS))
async def test_every_loop_retries_at_each_endpoint_until_its_deadline(name: str, status) -> None:
    loop, starts = LOOPS[name]
    err, calls, took = await _run(loop, status)
    assert isinstance(err, CallTimeout), repr(err)
    if name.startswith("shard"):
        assert isinstance(err, ShardTimeoutError)
    message = str(err)
    assert message.startswith(starts), message
    code, details = status
    assert message.endswith(f"last status {code.name}: {details})"), message
    assert err.timeout == TIMEOUT_S and err.last_status is None
    assert calls[0] >= 1 and calls[1] >= 1, calls  # retried, and at the other endpoint too
    assert took < CEILING_S


@pytest.mark.parametrize("name", list(LOOPS))
async def test_every_loop_stops_at_once_on_a_fatal_code(name: str) -> None:
    loop, _ = LOOPS[name]
    err, calls, _ = await _run(loop, FATAL)
    assert isinstance(err, PeerError) and err.grpc_code == "PERMISSION_DENIED", repr(err)  # type: ignore[attr-defined]
    assert str(err).startswith("PERMISSION_DENIED: not yours ("), str(err)
    assert sum(calls) == 1, calls


@pytest.mark.parametrize("name", BOUNDED)
async def test_a_bounded_loop_stops_at_once_on_a_peers_own_internal_error(name: str) -> None:
    loop, _ = LOOPS[name]
    err, calls, _ = await _run(loop, OWN_INTERNAL)
    assert isinstance(err, PeerError) and err.grpc_code == "INTERNAL", repr(err)  # type: ignore[attr-defined]
    assert str(err).startswith("INTERNAL: a broker's own internal error ("), str(err)
    assert sum(calls) == 1, calls


@pytest.mark.parametrize("name", PERSISTENT)
async def test_a_persistent_loop_keeps_trying_after_a_peers_own_internal_error(name: str) -> None:
    loop, starts = LOOPS[name]
    err, calls, _ = await _run(loop, OWN_INTERNAL)
    assert isinstance(err, CallTimeout) and str(err).startswith(starts), repr(err)
    assert sum(calls) >= 2, calls


# --- the policy's parts ------------------------------------------------------------------------------


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


async def test_every_bounded_policy_gives_up_after_the_same_number_of_retries() -> None:
    for policy, status in ((UNARY, None), (APPEND, Status.NO_JOURNAL_PRIMARY_BROKER),
                           (READ, Status.NOT_JOURNAL_BROKER), (SHARD_PRIMARY, ShardStatus.NO_SHARD_PRIMARY)):  # fmt: skip
        attempts = Attempts(policy, Deadline(None, CallTrace("test of", "policy")))
        attempts.attempt = tunables.CLIENT_MAX_RETRY_ATTEMPTS - 1
        assert attempts.retries_rpc(_rpc_error(*UNAVAILABLE))
        assert status is None or attempts.retries_status(status)
        attempts.attempt = tunables.CLIENT_MAX_RETRY_ATTEMPTS
        assert not attempts.retries_rpc(_rpc_error(*RACING_INTERNAL))
        assert status is None or not attempts.retries_status(status)


def test_a_failure_moves_the_rotation_once() -> None:
    rotation = Rotation(["a", "b", "c"])
    rotation.failed(0)
    rotation.failed(0)  # a second call that saw the same endpoint fail
    assert rotation.endpoint == "b"
    rotation.replace(["x", "y"])
    assert rotation.endpoint == "y"
    rotation.failed(1)
    assert rotation.endpoint == "x"


async def test_a_racing_internal_keeps_the_status_an_earlier_attempt_saw() -> None:
    """grpc.aio's racing INTERNAL stands for a status it lost: a CallTimeout after one names what the
    peer itself said last (the UNAVAILABLE case of the loop tests above failed when the last attempt
    before the deadline raced), and it is still retried at the next endpoint."""
    trace = CallTrace("append to", J)
    rotation = Rotation(["a", "b"])
    attempts = Attempts(APPEND, Deadline(None, trace), rotation)
    assert attempts.retries_rpc(_rpc_error(*RACING_INTERNAL), 0)  # alone, it is all there is to say
    assert trace.last_seen() == "INTERNAL: Internal error from Core"
    assert attempts.retries_rpc(_rpc_error(*UNAVAILABLE), 1)
    assert attempts.retries_rpc(_rpc_error(*RACING_INTERNAL), 0)
    assert trace.last_seen() == "UNAVAILABLE: broker is down" and rotation.endpoint == "b"
    assert not attempts.retries_rpc(_rpc_error(*OWN_INTERNAL), 1)  # a peer's own INTERNAL is news
    assert trace.last_seen() == "INTERNAL: a broker's own internal error"
