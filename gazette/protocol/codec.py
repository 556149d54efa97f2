"""Compression codecs of fragments (docs/semantics.md#fragments-and-content-names): the enum mirroring
broker.proto's CompressionCodec, its file extensions, and the names users may give it ("snappy", "zstd", ...).
"""

from __future__ import annotations

from enum import IntEnum

from gazette.protocol.errors import ValidationError


class Codec(IntEnum):
    NONE = 1
    GZIP = 2
    ZSTANDARD = 3
    SNAPPY = 4
    GZIP_OFFLOAD_DECOMPRESSION = 5

    @property
    def ext(self) -> str:
        return _EXT_OF[self]

    @classmethod
    def parse(cls, value: str | int | Codec) -> Codec:
        """Accepts a Codec, its number, or a name such as "snappy", "zstd", "GZIP"."""
        if isinstance(value, Codec):
            return value
        if isinstance(value, int):
            try:
                return cls(value)
            except ValueError:
                raise ValidationError(f"compression codec {value} is not valid (expected 1..5)") from None
        key = value.strip().lower().replace("-", "_")
        try:
            return _CODEC_NAMES[key]
        except KeyError:
            raise ValidationError(
                f'compression codec "{value}" is not known (expected one of none, gzip, zstandard, '
                "snappy, gzip_offload_decompression)"
            ) from None


_EXT_OF = {
    Codec.NONE: ".raw",
    Codec.GZIP: ".gz",
    Codec.ZSTANDARD: ".zst",
    Codec.SNAPPY: ".sz",
    Codec.GZIP_OFFLOAD_DECOMPRESSION: "",
}


_CODEC_NAMES = {
    "none": Codec.NONE,
    "raw": Codec.NONE,
    "gzip": Codec.GZIP,
    "gz": Codec.GZIP,
    "zstandard": Codec.ZSTANDARD,
    "zstd": Codec.ZSTANDARD,
    "snappy": Codec.SNAPPY,
    "gzip_offload_decompression": Codec.GZIP_OFFLOAD_DECOMPRESSION,
    "gzip_offload": Codec.GZIP_OFFLOAD_DECOMPRESSION,
}
