"""Codec encodings (reference 2.1): round trips, multi-member gzip, snappy framing, truncation."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest
import zstandard

from gazette.fragment.codecs import (
    GZIP_MEMBER_BYTES,
    CodecError,
    Decompressor,
    compress,
    compress_stream,
    decompress,
)
from gazette.fragment.fragment import Codec

SNAPPY_STREAM_ID = bytes.fromhex("ff060000734e61507059")


def sample(n: int) -> bytes:
    # Half incompressible, half repetitive: exercises both stored and compressed blocks.
    half = n // 2
    return os.urandom(half) + (b"gazette journal line\n" * (n // 21 + 1))[: n - half]


def gzip_member_count(data: bytes) -> int:
    members = 0
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        assert d.eof
        data = d.unused_data
        members += 1
    return members


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("size", [0, 1, 1000, 3 * GZIP_MEMBER_BYTES + 17])
def test_round_trip(codec: Codec, size: int) -> None:
    data = sample(size)
    encoded = compress(codec, data)
    assert decompress(codec, encoded) == data
    chunks = [data[i : i + 65_000] for i in range(0, len(data), 65_000)]
    streamed = b"".join(compress_stream(codec, chunks))
    assert decompress(codec, streamed) == data
    # Incremental decoding, fed in awkward pieces.
    d = Decompressor(codec)
    out = [d.feed(streamed[i : i + 4099]) for i in range(0, len(streamed), 4099)]
    out.append(d.finish())
    assert b"".join(out) == data


def test_none_is_identity() -> None:
    assert compress(Codec.NONE, b"abc") == b"abc"


def test_gzip_is_multi_member_per_mib() -> None:
    data = sample(2 * GZIP_MEMBER_BYTES + GZIP_MEMBER_BYTES // 2)
    encoded = compress(Codec.GZIP, data)
    assert gzip_member_count(encoded) == 3
    assert gzip.decompress(encoded) == data  # any standard multi-member reader agrees
    # Chunking of the input does not change the encoding.
    chunks = [data[i : i + 300_001] for i in range(0, len(data), 300_001)]
    assert b"".join(compress_stream(Codec.GZIP, chunks)) == encoded


def test_gzip_offload_is_one_stream() -> None:
    data = sample(2 * GZIP_MEMBER_BYTES)
    encoded = compress(Codec.GZIP_OFFLOAD_DECOMPRESSION, data)
    assert gzip_member_count(encoded) == 1
    assert gzip.decompress(encoded) == data


def test_snappy_is_framed_format() -> None:
    data = sample(200_000)
    encoded = compress(Codec.SNAPPY, data)
    assert encoded.startswith(SNAPPY_STREAM_ID)
    streamed = b"".join(compress_stream(Codec.SNAPPY, [data[:70_000], data[70_000:]]))
    assert streamed.startswith(SNAPPY_STREAM_ID)
    assert streamed.count(SNAPPY_STREAM_ID) == 1


def test_snappy_accepts_concatenated_streams_and_skippable_chunks() -> None:
    a, b = compress(Codec.SNAPPY, b"first "), compress(Codec.SNAPPY, b"second")
    padding = b"\xfe\x03\x00\x00abc"
    assert decompress(Codec.SNAPPY, a + padding + b) == b"first second"


def test_zstd_is_standard_frames() -> None:
    data = sample(100_000)
    encoded = compress(Codec.ZSTANDARD, data)
    assert encoded[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompressobj().decompress(encoded) == data
    # Several frames decode as their concatenation.
    assert decompress(Codec.ZSTANDARD, encoded + compress(Codec.ZSTANDARD, b"tail")) == data + b"tail"


@pytest.mark.parametrize(
    "codec", [Codec.GZIP, Codec.ZSTANDARD, Codec.SNAPPY, Codec.GZIP_OFFLOAD_DECOMPRESSION]
)
def test_truncated_input_is_an_error(codec: Codec) -> None:
    encoded = compress(codec, sample(50_000))
    with pytest.raises(CodecError, match="truncated"):
        decompress(codec, encoded[:-5])


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTANDARD, Codec.SNAPPY])
def test_garbage_is_an_error(codec: Codec) -> None:
    with pytest.raises(CodecError):
        decompress(codec, b"this is not compressed data at all")


def test_snappy_corrupt_chunk_fails_crc() -> None:
    encoded = bytearray(compress(Codec.SNAPPY, b"x" * 1000 + os.urandom(1000)))
    encoded[-3] ^= 0xFF
    with pytest.raises(CodecError, match="snappy"):
        decompress(Codec.SNAPPY, bytes(encoded))
