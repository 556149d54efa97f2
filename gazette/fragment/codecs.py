"""Codec encodings of persisted fragments (docs/semantics.md#fragments-and-content-names): compress,
decompress, stream either way.

GZIP is multi-member gzip (one member per 1 MiB of input), SNAPPY the snappy *framed* format, ZSTANDARD
standard frames, GZIP_OFFLOAD one gzip stream, NONE identity. Imports gazette.fragment and protocol only.
Decoders accept any concatenation of members/frames/chunks and refuse a truncated final one.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import cramjam
import zstandard

from gazette.fragment.fragment import Codec
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

GZIP_MEMBER_BYTES = 1 << 20  # uncompressed bytes per gzip member (Gazette's incremental batch size)
GZIP_LEVEL = 6  # Go's gzip.DefaultCompression
ZSTD_LEVEL = 3
_GZIP_WBITS = 31  # zlib: gzip container
_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"


class CodecError(GazetteError, ValueError):
    """Compressed bytes that don't decode: corrupt, truncated, or not of the codec."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)


def compress(codec: Codec, data: bytes) -> bytes:
    """Encodes `data` whole; the same bytes `compress_stream` yields for it."""
    return b"".join(compress_stream(codec, (data,)))


def compress_stream(codec: Codec, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Encodes a stream of uncompressed chunks, yielding non-empty compressed pieces as they form."""
    codec = Codec.parse(codec)
    if codec == Codec.NONE:
        yield from (bytes(c) for c in chunks if c)
    elif codec == Codec.GZIP:
        yield from _gzip_members(chunks)
    elif codec == Codec.GZIP_OFFLOAD_DECOMPRESSION:
        yield from _drain(zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS), chunks)
    elif codec == Codec.ZSTANDARD:
        yield from _drain(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj(), chunks)
    elif codec == Codec.SNAPPY:
        sc = cramjam.snappy.Compressor()
        for chunk in chunks:
            if chunk:
                sc.compress(chunk)
                out = bytes(sc.flush())
                if out:
                    yield out
        tail = bytes(sc.finish())
        if tail:
            yield tail
    else:  # pragma: no cover - Codec.parse admits only the members above
        raise CodecError(f"codec {codec!r} has no encoder")


def _drain(compressor: Any, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Feeds every chunk to a zlib or zstandard compressobj, then flushes it (one stream or frame)."""
    for chunk in chunks:
        out = compressor.compress(chunk)
        if out:
            yield out
    yield compressor.flush()


def _gzip_members(chunks: Iterable[bytes]) -> Iterator[bytes]:
    # A member ends after exactly GZIP_MEMBER_BYTES of input, so output doesn't depend on chunking.
    z = None
    fill = 0
    for chunk in chunks:
        view = memoryview(chunk)
        while len(view):
            if z is None:
                z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
                fill = 0
            take = min(len(view), GZIP_MEMBER_BYTES - fill)
            out = z.compress(view[:take])
            view = view[take:]
            fill += take
            if fill == GZIP_MEMBER_BYTES:
                out += z.flush()
                z = None
            if out:
                yield out
    if z is not None:
        yield z.flush()
    elif fill == 0:
        # No input at all: still a valid (empty) gzip stream.
        yield zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS).flush()


def decompress(codec: Codec, data: bytes) -> bytes:
    """Decodes a whole object (every gzip member, zstd frame and snappy chunk)."""
    d = Decompressor(codec)
    return d.feed(data) + d.finish()


class Decompressor:
    """Incremental decoder: `feed` compressed bytes as they arrive, then `finish` once at EOF.

    `finish` raises CodecError if the input ended inside a member, frame or chunk.
    """

    def __init__(self, codec: Codec) -> None:
        self.codec = Codec.parse(codec)
        self._impl: _Decoder
        if self.codec == Codec.NONE:
            self._impl = _Identity()
        elif self.codec in (Codec.GZIP, Codec.GZIP_OFFLOAD_DECOMPRESSION):
            self._impl = _MultiMember(lambda: zlib.decompressobj(_GZIP_WBITS), "gzip", zlib.error)
        elif self.codec == Codec.ZSTANDARD:
            dctx = zstandard.ZstdDecompressor()
            self._impl = _MultiMember(dctx.decompressobj, "zstandard", zstandard.ZstdError)
        else:
            self._impl = _SnappyFramed()
        self._finished = False

    def feed(self, data: bytes) -> bytes:
        if self._finished:
            raise CodecError("Decompressor.feed after finish")
        return self._impl.feed(data)

    def finish(self) -> bytes:
        if self._finished:
            return b""
        self._finished = True
        return self._impl.finish()


class _Decoder:
    def feed(self, data: bytes) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        raise NotImplementedError


class _Identity(_Decoder):
    def feed(self, data: bytes) -> bytes:
        return bytes(data)

    def finish(self) -> bytes:
        return b""


class _MultiMember(_Decoder):
    """Concatenated gzip members or zstd frames: a fresh decoder after each member's end."""

    def __init__(self, new: Callable[[], Any], name: str, error: type[Exception]) -> None:
        self._new = new
        self._name = name
        self._error = error
        self._d = new()
        self._started = False  # the current member has received input
        self._members = 0

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        try:
            while data:
                self._started = True
                out.append(self._d.decompress(data))
                if not self._d.eof:
                    break
                data = self._d.unused_data
                self._members += 1
                self._d = self._new()
                self._started = False
        except self._error as e:
            raise CodecError(f"{self._name} data is corrupt (member {self._members + 1}): {e}") from e
        return b"".join(out)

    def finish(self) -> bytes:
        if self._started:
            raise CodecError(f"{self._name} data is truncated (member {self._members + 1} has no end)")
        return b""


class _SnappyFramed(_Decoder):
    """The snappy framing format: split complete chunks here, let cramjam check CRCs and inflate."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._seen_stream_id = False

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        pieces: list[memoryview] = []
        view = memoryview(self._buf)
        pos = 0
        try:
            while len(view) - pos >= 4:
                kind = view[pos]
                size = int.from_bytes(view[pos + 1 : pos + 4], "little")
                end = pos + 4 + size
                if end > len(view):
                    break
                if kind == 0xFF:
                    if bytes(view[pos:end]) != _SNAPPY_STREAM_ID:
                        raise CodecError("snappy stream identifier chunk is corrupt")
                    self._seen_stream_id = True
                elif not self._seen_stream_id:
                    raise CodecError("snappy framed data does not start with a stream identifier")
                elif kind in (0x00, 0x01):
                    pieces.append(view[pos:end])
                elif kind < 0x80:
                    raise CodecError(f"snappy framed data has reserved unskippable chunk type {kind:#04x}")
                # 0x80..0xfe: skippable and padding chunks carry no content.
                pos = end
            if not pieces:
                out = b""
            else:
                try:
                    out = bytes(cramjam.snappy.decompress(b"".join((_SNAPPY_STREAM_ID, *pieces))))
                except Exception as e:  # cramjam raises its own DecompressionError
                    raise CodecError(f"snappy framed data is corrupt: {e}") from e
        finally:
            pieces.clear()
            view.release()
        del self._buf[:pos]
        return out

    def finish(self) -> bytes:
        if self._buf:
            raise CodecError(f"snappy framed data is truncated ({len(self._buf)} bytes of a partial chunk)")
        return b""
