"""The raw decoders of the append path's content messages mean what protobuf's `FromString` means,
on generated messages (any mix of fields, in protobuf's encoding and in others a peer may send),
and the raw encoders (the primary's, the client's) write protobuf's bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.broker.wire import (
    ContentChunk,
    ReplicateContent,
    decode_append_request,
    decode_replicate_request,
    encode_replicate_content,
)
from gazette.client.aio import _append_content_message
from gazette.protocol import broker_pb2 as pb

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@st.composite
def append_requests(draw) -> pb.AppendRequest:
    req = pb.AppendRequest(content=draw(st.binary(max_size=300)))
    if draw(st.booleans()):
        req.journal = draw(st.text(max_size=8))
    if draw(st.booleans()):
        req.offset = draw(INT64)
    if draw(st.booleans()):
        req.do_not_proxy = True
    if draw(st.booleans()):
        req.header.etcd.revision = draw(INT64)
    return req


@st.composite
def replicate_requests(draw) -> pb.ReplicateRequest:
    req = pb.ReplicateRequest(content=draw(st.binary(max_size=300)), content_delta=draw(INT64))
    if draw(st.booleans()):
        req.acknowledge = True
    if draw(st.booleans()):
        req.proposal.journal = draw(st.text(max_size=8))
        req.proposal.end = draw(INT64)
    if draw(st.booleans()):
        req.deprecated_journal = draw(st.text(max_size=8))
    return req


def _as_append(decoded: pb.AppendRequest | ContentChunk) -> pb.AppendRequest:
    if isinstance(decoded, ContentChunk):
        assert decoded.content.obj is decoded.raw  # a view, not a copy
        return pb.AppendRequest(content=bytes(decoded.content))
    return decoded


def _as_replicate(decoded: pb.ReplicateRequest | ReplicateContent) -> pb.ReplicateRequest:
    if isinstance(decoded, ReplicateContent):
        return pb.ReplicateRequest(content=bytes(decoded.content), content_delta=decoded.content_delta)
    return decoded


@settings(max_examples=300, deadline=None)
@given(append_requests())
def test_append_decoder_equals_protobuf(req: pb.AppendRequest) -> None:
    data = req.SerializeToString()
    decoded = decode_append_request(data)
    assert _as_append(decoded) == pb.AppendRequest.FromString(data)
    only_content = req.content and req == pb.AppendRequest(content=req.content)
    assert isinstance(decoded, ContentChunk) == bool(only_content)
    if isinstance(decoded, ContentChunk):
        assert decoded.to_proto() == req


@settings(max_examples=300, deadline=None)
@given(replicate_requests())
def test_replicate_decoder_equals_protobuf(req: pb.ReplicateRequest) -> None:
    data = req.SerializeToString()
    decoded = decode_replicate_request(data)
    assert _as_replicate(decoded) == pb.ReplicateRequest.FromString(data)
    only_content = req.content and not (req.acknowledge or req.HasField("proposal") or req.deprecated_journal)
    assert isinstance(decoded, ReplicateContent) == bool(only_content)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=300), INT64)
def test_encoder_writes_protobufs_bytes(content: bytes, delta: int) -> None:
    data = encode_replicate_content(memoryview(content), delta)
    assert data == pb.ReplicateRequest(content=content, content_delta=delta).SerializeToString()
    decoded = decode_replicate_request(data)
    assert isinstance(decoded, ReplicateContent)
    assert (bytes(decoded.content), decoded.content_delta) == (content, delta)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=40), INT64, st.sampled_from(["delta-first", "twice", "unknown", "cut"]))
def test_other_encodings_mean_what_protobuf_says(content: bytes, delta: int, how: str) -> None:
    """Encodings protobuf accepts but does not write (fields out of order, repeated, unknown), and
    truncated bytes, decode as protobuf decodes them (or fail as it fails)."""
    c = pb.ReplicateRequest(content=content).SerializeToString()
    d = pb.ReplicateRequest(content_delta=delta).SerializeToString()
    data = {
        "delta-first": d + c,
        "twice": c + c + d,
        "unknown": c + d + b"\x78\x01",  # field 15, varint
        "cut": (c + d)[:-1],
    }[how]
    try:
        expected = pb.ReplicateRequest.FromString(data)
    except Exception as exc:
        try:
            decode_replicate_request(data)
        except Exception as got:
            assert type(got) is type(exc)
        else:
            raise AssertionError("decoded bytes protobuf refuses") from exc
        return
    assert _as_replicate(decode_replicate_request(data)) == expected
    append_data = data.replace(d, b"") if how != "cut" else c[:-1]
    try:
        expected_append = pb.AppendRequest.FromString(append_data)
    except Exception:
        return
    assert _as_append(decode_append_request(append_data)) == expected_append


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=20000))
def test_clients_content_encoding_is_protobufs(content: bytes) -> None:
    data = _append_content_message(memoryview(content))
    assert data == pb.AppendRequest(content=content).SerializeToString()
    decoded = decode_append_request(data)
    assert isinstance(decoded, ContentChunk) and bytes(decoded.content) == content
