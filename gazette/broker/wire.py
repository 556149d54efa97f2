"""Wire forms of the append path's content messages, decoded and encoded without protobuf objects.

A content-only AppendRequest (the client's chunks) and a content-only ReplicateRequest (the primary's
forwarded chunks) make up nearly every byte a broker receives, and protobuf's objects cost a copy of
the content on every access to `content`. The decoders here hand such a message over as a
`ContentChunk` / `ReplicateContent` whose `content` is a memoryview into the received buffer, and any
other message (or any encoding they do not recognise) as the generated protobuf message, so each
decoder equals `FromString` in meaning. Imports gazette.protocol only; no state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc

# Field tags (field number << 3 | wire type) of the content messages.
_CONTENT_TAG = 4 << 3 | 2  # bytes content = 4, in both AppendRequest and ReplicateRequest
_DELTA_TAG = 5 << 3 | 0  # int64 content_delta = 5 of ReplicateRequest
_CONTENT_TAG_BYTE = bytes([_CONTENT_TAG])
_DELTA_TAG_BYTE = bytes([_DELTA_TAG])
_INT64_RANGE = 1 << 64


class ContentChunk:
    """A content-only AppendRequest as received: `content` views the raw message, never copied."""

    __slots__ = ("content", "raw")

    def __init__(self, content: memoryview, raw: bytes) -> None:
        self.content = content
        self.raw = raw

    def to_proto(self) -> pb.AppendRequest:
        """The same request as a protobuf message (for forwarding it through a generated stub)."""
        return pb.AppendRequest.FromString(self.raw)


class ReplicateContent:
    """A content-only ReplicateRequest as received: `content` (a view into the raw message, never
    copied) to be spooled after `content_delta` pending bytes. It asks no acknowledgement."""

    __slots__ = ("content", "content_delta")
    acknowledge = False

    def __init__(self, content: memoryview, content_delta: int) -> None:
        self.content = content
        self.content_delta = content_delta


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it; IndexError if `data` ends inside it."""
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise IndexError("varint longer than 10 bytes")


def _encode_varint(value: int) -> bytes:
    value %= _INT64_RANGE  # negative int64s are ten-byte two's complement varints
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _content_fields(data: bytes, allow_delta: bool) -> tuple[memoryview, int] | None:
    """(content, content_delta) if `data` holds only those fields (content_delta only if
    `allow_delta`), each at most once and content non-empty; None for any other message."""
    n = len(data)
    pos = 0
    content: memoryview | None = None
    delta: int | None = None
    try:
        while pos < n:
            tag = data[pos]
            pos += 1
            if tag == _CONTENT_TAG and content is None:
                length, pos = _varint(data, pos)
                end = pos + length
                if end > n:
                    return None
                content = memoryview(data)[pos:end]
                pos = end
            elif tag == _DELTA_TAG and allow_delta and delta is None:
                delta, pos = _varint(data, pos)
                if delta >= 1 << 63:
                    delta -= _INT64_RANGE
            else:
                return None
    except IndexError:
        return None
    if not content:
        return None
    return content, delta or 0


def decode_append_request(data: bytes) -> pb.AppendRequest | ContentChunk:
    """An AppendRequest's wire bytes as a `ContentChunk` if it is content only, else as protobuf."""
    fields = _content_fields(data, allow_delta=False)
    if fields is None:
        return pb.AppendRequest.FromString(data)
    return ContentChunk(fields[0], data)


def decode_replicate_request(data: bytes) -> pb.ReplicateRequest | ReplicateContent:
    """A ReplicateRequest's wire bytes as `ReplicateContent` if it is content (and content_delta)
    only, else as protobuf."""
    fields = _content_fields(data, allow_delta=True)
    if fields is None:
        return pb.ReplicateRequest.FromString(data)
    return ReplicateContent(*fields)


def encode_replicate_content(content: bytes | memoryview, content_delta: int) -> bytes:
    """The wire bytes of ReplicateRequest(content=content, content_delta=content_delta), as protobuf
    serializes them, with one copy of `content`."""
    parts: list[bytes | memoryview] = [_CONTENT_TAG_BYTE, _encode_varint(len(content)), content]
    if content_delta:
        parts += (_DELTA_TAG_BYTE, _encode_varint(content_delta))
    return b"".join(parts)


class _Capture:
    """Stands in for a server to take the handlers the generated registration function builds."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, _handlers: Any) -> None:
        pass

    def add_registered_method_handlers(
        self, _service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = dict(handlers)


def add_journal_servicer(servicer: pb_grpc.JournalServicer, server: grpc.aio.Server) -> None:
    """As `add_JournalServicer_to_server`, but Append and Replicate requests are decoded by
    `decode_append_request` and `decode_replicate_request`."""
    capture = _Capture()
    pb_grpc.add_JournalServicer_to_server(servicer, capture)
    handlers = capture.handlers
    raw: dict[str, tuple[Callable[..., grpc.RpcMethodHandler], Callable[[bytes], Any], Any]] = {
        "Append": (grpc.stream_unary_rpc_method_handler, decode_append_request, servicer.Append),
        "Replicate": (grpc.stream_stream_rpc_method_handler, decode_replicate_request, servicer.Replicate),
    }
    for name, (make, decode, behaviour) in raw.items():
        handlers[name] = make(
            behaviour, request_deserializer=decode, response_serializer=handlers[name].response_serializer
        )
    generic = grpc.method_handlers_generic_handler("protocol.Journal", handlers)
    server.add_generic_rpc_handlers((generic,))
    server.add_registered_method_handlers("protocol.Journal", handlers)
