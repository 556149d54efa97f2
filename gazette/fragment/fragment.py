"""Fragment: an immutable, content-addressed span [begin, end) of a journal
(docs/semantics.md#fragments-and-content-names).

Owns the content name `%016x-%016x-<sha1 hex><ext>`, codec extensions and the proto mapping.
The SHA1 covers the uncompressed bytes; an empty fragment's sum is all zeros.
"""

from __future__ import annotations

import dataclasses
import re
import struct

from gazette.protocol import broker_pb2 as pb
from gazette.protocol.codec import Codec
from gazette.protocol.errors import ValidationError

ZERO_SUM = b"\x00" * 20


_CODEC_OF_EXT = {
    ".raw": Codec.NONE,
    ".gz": Codec.GZIP,
    ".gzip": Codec.GZIP,
    ".zst": Codec.ZSTANDARD,
    ".zstandard": Codec.ZSTANDARD,
    ".sz": Codec.SNAPPY,
    ".snappy": Codec.SNAPPY,
    "": Codec.GZIP_OFFLOAD_DECOMPRESSION,
    ".gzod": Codec.GZIP_OFFLOAD_DECOMPRESSION,
}
_NAME_RE = re.compile(r"^([0-9a-fA-F]{16})-([0-9a-fA-F]{16})-([0-9a-fA-F]{40})(\.[A-Za-z0-9]+)?$")


@dataclasses.dataclass(frozen=True, slots=True)
class Fragment:
    """An immutable span [begin, end) of a journal's bytes with the SHA1 of its uncompressed
    content (docs/semantics.md#fragments-and-content-names): what spools commit, stores hold and
    readers ask for. Local fragments have no `backing_store` and `mod_time` 0. Equality is exact
    on every field, which proposal matching relies on."""

    journal: str
    begin: int
    end: int
    sum: bytes = ZERO_SUM
    codec: Codec = Codec.NONE
    backing_store: str = ""  # store URL it was persisted to; "" while only local
    mod_time: int = 0  # unix seconds of persistence; 0 while only local
    path_postfix: str = ""

    @property
    def length(self) -> int:
        """`end - begin`: the fragment's uncompressed size in bytes."""
        return self.end - self.begin

    @property
    def sha1(self) -> str:
        """The SHA1 of the uncompressed bytes as 40 hex digits (all zeros for an empty fragment)."""
        return self.sum.hex()

    @property
    def store_url(self) -> str:
        """API.md's name for `backing_store`: the store URL it is persisted in ("" while only spooled)."""
        return self.backing_store

    @property
    def content_name(self) -> str:
        """`%016x-%016x-<sha1><ext>`: the object's name in a store, Gazette's exactly."""
        return f"{self.begin:016x}-{self.end:016x}-{self.sum.hex()}{self.codec.ext}"

    @property
    def content_path(self) -> str:
        """journal/postfix/content-name: the object key relative to the store URL's path."""
        parts = [self.journal.rstrip("/")]
        if self.path_postfix:
            parts.append(self.path_postfix.strip("/"))
        parts.append(self.content_name)
        return "/".join(parts)

    def to_proto(self) -> pb.Fragment:
        """Gazette's `protocol.Fragment` message (the SHA1 split into its three fields)."""
        p1, p2, p3 = struct.unpack(">QQI", self.sum)
        return pb.Fragment(
            journal=self.journal,
            begin=self.begin,
            end=self.end,
            sum=pb.SHA1Sum(part1=p1, part2=p2, part3=p3),
            compression_codec=int(self.codec),  # type: ignore[arg-type]
            backing_store=self.backing_store,
            mod_time=self.mod_time,
            path_postfix=self.path_postfix,
        )

    @classmethod
    def from_proto(cls, msg: pb.Fragment) -> Fragment:
        """The Fragment of a `protocol.Fragment` message; an unset codec reads as NONE."""
        s = msg.sum
        return cls(
            journal=msg.journal,
            begin=msg.begin,
            end=msg.end,
            sum=struct.pack(">QQI", s.part1, s.part2, s.part3),
            codec=Codec(msg.compression_codec or Codec.NONE),
            backing_store=msg.backing_store,
            mod_time=msg.mod_time,
            path_postfix=msg.path_postfix,
        )


def parse_content_name(name: str) -> tuple[int, int, bytes, Codec]:
    """Parses `begin-end-sha1.ext` (case-insensitive extension) into (begin, end, sum, codec)."""
    m = _NAME_RE.match(name)
    if not m:
        raise ValidationError(f'"{name}" is not a fragment content name (expected %016x-%016x-<sha1><ext>)')
    begin, end = int(m.group(1), 16), int(m.group(2), 16)
    ext = (m.group(4) or "").lower()
    if ext not in _CODEC_OF_EXT:
        raise ValidationError(f'fragment "{name}" has an unknown extension "{ext}"')
    if end < begin:
        raise ValidationError(f'fragment "{name}" has end < begin')
    return begin, end, bytes.fromhex(m.group(3)), _CODEC_OF_EXT[ext]


def parse_content_path(journal: str, rel_path: str) -> tuple[str, int, int, bytes, Codec]:
    """Splits a path relative to `journal/` into (path_postfix, begin, end, sum, codec)."""
    postfix, _, name = rel_path.rpartition("/")
    begin, end, sum_, codec = parse_content_name(name)
    return postfix, begin, end, sum_, codec
