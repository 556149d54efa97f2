"""The raw gRPC limit: a minimal grpc.aio server with no .proto, and the client calls that measure it.

Run as a script (`python bench/rawgrpc.py`) it serves `/bench.Raw/Stream` (client-streaming: counts
the bytes of every message and returns the count) and `/bench.Raw/Echo` (unary: returns its request)
on 127.0.0.1 port 0, with the broker's message-size options, and prints one JSON line
{"endpoint": ...} when ready. Messages are raw bytes with identity (de)serializers, so the figures
are gRPC's own cost on loopback with no protobuf work: the ceiling for any RPC-based broker here.
The client helpers are coroutines for a grpc.aio channel, measured from the same loop the gazette
client runs on.
"""

from __future__ import annotations

import asyncio
import json
import time

import grpc

SERVICE = "bench.Raw"
STREAM_METHOD = f"/{SERVICE}/Stream"
ECHO_METHOD = f"/{SERVICE}/Echo"
# The broker's (gazette.broker.broker) and client's settings, so both sides allow the same messages.
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 8 << 20),
    ("grpc.max_send_message_length", 8 << 20),
]


def _identity(data: bytes) -> bytes:
    return data


async def _stream(requests, context) -> bytes:
    total = 0
    async for message in requests:
        total += len(message)
    return total.to_bytes(8, "big")


async def _echo(request: bytes, context) -> bytes:
    return request


async def _serve() -> None:
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Stream": grpc.stream_unary_rpc_method_handler(
                _stream, request_deserializer=_identity, response_serializer=_identity
            ),
            "Echo": grpc.unary_unary_rpc_method_handler(
                _echo, request_deserializer=_identity, response_serializer=_identity
            ),
        },
    )
    server = grpc.aio.server(options=[*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"endpoint": f"127.0.0.1:{port}"}), flush=True)
    await server.wait_for_termination()


def channel(endpoint: str) -> grpc.aio.Channel:
    """A channel to the raw server; create it on the loop that will use it."""
    return grpc.aio.insecure_channel(endpoint, options=CHANNEL_OPTIONS)


async def stream_rate(chan: grpc.aio.Channel, payload: bytes, count: int) -> float:
    """Streams `payload` `count` times in one RPC; returns MB/s (10^6 bytes) including the reply."""
    call = chan.stream_unary(STREAM_METHOD, request_serializer=_identity, response_deserializer=_identity)

    async def messages():
        for _ in range(count):
            yield payload

    start = time.perf_counter()
    reply = await call(messages())
    elapsed = time.perf_counter() - start
    received = int.from_bytes(reply, "big")
    if received != len(payload) * count:
        raise RuntimeError(f"raw gRPC server counted {received} bytes (expected {len(payload) * count})")
    return received / elapsed / 1e6


async def unary_latencies(chan: grpc.aio.Channel, payload: bytes, count: int) -> list[float]:
    """`count` sequential Echo round trips of `payload`; returns each one's latency in ms."""
    call = chan.unary_unary(ECHO_METHOD, request_serializer=_identity, response_deserializer=_identity)
    out = []
    for _ in range(count):
        start = time.perf_counter()
        await call(payload)
        out.append((time.perf_counter() - start) * 1e3)
    return out


if __name__ == "__main__":
    asyncio.run(_serve())
