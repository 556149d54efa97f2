"""grpc.aio reports a call whose peer went away while a request was being written as INTERNAL
"Internal error from Core" (grpc/grpc#36066), hiding the UNAVAILABLE a killed broker's end carries:
the client retries it as it retries UNAVAILABLE, and nothing else that is INTERNAL (found by
test_client_fails_over_when_its_broker_is_killed, which failed once on it in a fresh-clone run)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gazette.client.aio import AsyncClient
from gazette.client.policy import Deadline, is_retried
from gazette.client.timeouts import CallTrace
from gazette.protocol.errors import GazetteError


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def test_only_unavailable_and_the_lost_status_are_retried() -> None:
    assert is_retried(_error(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    assert is_retried(_error(grpc.StatusCode.INTERNAL, "Internal error from Core"))
    assert not is_retried(_error(grpc.StatusCode.INTERNAL, "a broker's own internal error"))
    assert not is_retried(_error(grpc.StatusCode.ABORTED, "Internal error from Core"))


def test_a_call_whose_status_was_lost_is_tried_again_on_the_next_broker() -> None:
    async def main() -> tuple[object, list[str]]:
        client = AsyncClient("http://127.0.0.1:1,http://127.0.0.1:2", timeout=30)
        tried: list[str] = []

        async def call(stub):  # type: ignore[no-untyped-def]
            tried.append(client.endpoint)
            if len(tried) == 1:
                raise _error(grpc.StatusCode.INTERNAL, "Internal error from Core")
            return "answered"

        try:
            return await client._call(call, Deadline(30, CallTrace("append to", "j"))), tried
        finally:
            await client.close()

    resp, tried = asyncio.run(main())
    assert resp == "answered" and tried == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


def test_a_brokers_own_internal_error_is_not_retried() -> None:
    async def main() -> int:
        client = AsyncClient("http://127.0.0.1:1", timeout=30)
        calls = 0

        async def call(stub):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            raise _error(grpc.StatusCode.INTERNAL, "a broker's own internal error")

        try:
            with pytest.raises(GazetteError):
                await client._call(call, Deadline(30, CallTrace("append to", "j")))
        finally:
            await client.close()
        return calls

    assert asyncio.run(main()) == 1
