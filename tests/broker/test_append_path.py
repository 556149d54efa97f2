"""Pieces of the broker's append path: a content ReplicateRequest encoded without protobuf copies
(must equal protobuf's own encoding) and ReadAhead, which reads a client's messages ahead of the FSM
within a byte budget."""

from __future__ import annotations

import asyncio
import os

import pytest

from gazette.broker.append import ReadAhead
from gazette.broker.pipeline import content_request_bytes
from gazette.protocol import broker_pb2 as pb


@pytest.mark.parametrize("length", [0, 1, 127, 128, 16_383, 16_384, 1 << 20])
@pytest.mark.parametrize("delta", [0, 1, 127, 128, 1 << 20, (1 << 42) + 3])
def test_content_request_bytes_is_protobufs_encoding(length: int, delta: int):
    content = os.urandom(length)
    encoded = content_request_bytes(content, delta)
    assert encoded == pb.ReplicateRequest(content=content, content_delta=delta).SerializeToString()
    parsed = pb.ReplicateRequest.FromString(encoded)
    assert parsed.content == content and parsed.content_delta == delta


def test_content_request_bytes_rejects_a_negative_delta():
    with pytest.raises(ValueError, match="content_delta -1 is negative"):
        content_request_bytes(b"x", -1)


class _Client:
    """A client stream that counts how many messages were taken from it."""

    def __init__(self, messages: list[pb.AppendRequest], error: Exception | None = None) -> None:
        self.messages = messages
        self.taken = 0
        self.error = error

    def __aiter__(self) -> _Client:
        return self

    async def __anext__(self) -> pb.AppendRequest:
        if self.taken == len(self.messages):
            if self.error is not None:
                raise self.error
            raise StopAsyncIteration
        self.taken += 1
        return self.messages[self.taken - 1]


async def _settle() -> None:
    for _ in range(20):  # let the read-ahead task run as far as it may
        await asyncio.sleep(0)


async def test_read_ahead_reads_within_its_budget_and_in_order():
    chunks = [os.urandom(400) for _ in range(6)]
    client = _Client([pb.AppendRequest(content=c) for c in chunks] + [pb.AppendRequest()])
    ahead = ReadAhead(client, max_bytes=1000)
    try:
        await _settle()
        assert client.taken == 3  # 1200 bytes: the third message reached the budget
        got = []
        async for req, content in ahead:
            assert req.content == content
            got.append(content)
        assert got == [*chunks, b""] and client.taken == 7
    finally:
        await ahead.close()


async def test_read_ahead_of_a_small_append_takes_it_all():
    client = _Client([pb.AppendRequest(content=b"hello"), pb.AppendRequest()])
    ahead = ReadAhead(client)
    try:
        await _settle()
        assert client.taken == 2
        assert [r.content async for r in ahead.requests()] == [b"hello", b""]
        with pytest.raises(StopAsyncIteration):  # the end stays the end
            await anext(ahead)
    finally:
        await ahead.close()


async def test_read_ahead_passes_on_a_broken_stream_after_what_came_before():
    client = _Client([pb.AppendRequest(content=b"a")], error=ConnectionResetError("client went away"))
    ahead = ReadAhead(client)
    try:
        req, content = await anext(ahead)
        assert content == b"a"
        with pytest.raises(ConnectionResetError, match="went away"):
            await anext(ahead)
    finally:
        await ahead.close()


async def test_read_ahead_close_stops_a_waiting_reader():
    never = asyncio.Event()

    async def stalled():
        yield pb.AppendRequest(content=b"a")
        await never.wait()
        yield pb.AppendRequest()  # pragma: no cover

    ahead = ReadAhead(stalled())
    assert (await anext(ahead))[1] == b"a"
    await ahead.close()
    with pytest.raises(asyncio.CancelledError):  # a reader after close() is told, not left waiting
        await anext(ahead)
    with pytest.raises(ValueError, match="not positive"):
        ReadAhead(stalled(), max_bytes=0)
