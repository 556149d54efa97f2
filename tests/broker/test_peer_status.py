"""A replica that ends its Replicate stream with a status (a full spool disk) while the primary is still
sending: the primary must read that status, not grpc.aio's INTERNAL "Internal error from Core" that
replaces it when a write races the peer's trailers (grpc/grpc#36066)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gazette.broker.pipeline import _write_keeping_status

METHOD = "/test.Peer/Replicate"


def _identity(b: bytes) -> bytes:
    return b


async def _ends_after_first(requests, context):
    async for _ in requests:
        break
    context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
    context.set_details("spool of broker-1 is full: No space left on device")
    return
    yield  # an async generator handler


@pytest.mark.parametrize("rounds", [40])
def test_a_peers_status_survives_writes_racing_its_end(rounds):
    async def main() -> list[tuple[grpc.StatusCode, str]]:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "test.Peer",
            {"Replicate": grpc.stream_stream_rpc_method_handler(_ends_after_first, _identity, _identity)},
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        seen = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                open_stream = channel.stream_stream(
                    METHOD, request_serializer=_identity, response_deserializer=_identity
                )
                for _ in range(rounds):
                    call = open_stream(timeout=10)
                    await _write_keeping_status(call, b"x" * 100)
                    for _ in range(200):  # keep sending while the peer ends the call
                        try:
                            await _write_keeping_status(call, b"y" * 16_384)
                        except Exception:
                            break
                    with pytest.raises(grpc.aio.AioRpcError) as ended:
                        await call.read()
                    seen.append((ended.value.code(), ended.value.details() or ""))
        finally:
            await server.stop(None)
        return seen

    seen = asyncio.run(main())
    wrong = [s for s in seen if s[0] != grpc.StatusCode.RESOURCE_EXHAUSTED or "broker-1" not in s[1]]
    assert wrong == [], f"{len(wrong)} of {len(seen)} calls lost the peer's status: {wrong[:3]}"
