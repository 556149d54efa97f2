"""Fragment content in stores: list a journal's persisted fragments, persist one, read one back verified.

Objects under `<journal>/` whose names don't parse are skipped with a warning, never fatal
(docs/semantics.md#fragments-and-content-names). Reads check the decoded length against end - begin and the
SHA1 against the content name, raising CorruptFragmentError naming the object. Imports gazette.fragment and
gazette.protocol only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import tempfile
from collections.abc import Callable, Iterator

from gazette import tunables
from gazette.fragment.codecs import CodecError, Decompressor, compress_stream
from gazette.fragment.fragment import ZERO_SUM, Codec, Fragment, parse_content_path
from gazette.fragment.stores import ObjectNotFoundError, get_store
from gazette.protocol.errors import StoreError, ValidationError

log = logging.getLogger(__name__)

SPOOL_IN_MEMORY_BYTES = 8 << 20  # compressed output kept in memory before spilling to a temp file


class CorruptFragmentError(StoreError):
    """A stored fragment's content doesn't match its name (length or SHA1), or doesn't decode."""


async def list_fragments(store_url: str, journal: str) -> list[Fragment]:
    """Persisted fragments of `journal` in the store, sorted by (begin, end), postfix dirs included."""
    store = get_store(store_url)
    entries = await asyncio.to_thread(store.list, journal.rstrip("/") + "/")
    out: list[Fragment] = []
    for entry in entries:
        try:
            postfix, begin, end, sum_, codec = parse_content_path(journal, entry.path)
        except ValidationError as e:
            log.warning(
                "skipping object %r under journal %r of store %s: %s", entry.path, journal, store_url, e
            )
            continue
        out.append(Fragment(journal, begin, end, sum_, codec, store_url, entry.mod_time, postfix))
    out.sort(key=lambda f: (f.begin, f.end, f.path_postfix))
    return out


async def persist(
    completed_fragment: Fragment,
    file_reader: Callable[[], Iterator[bytes]],
    store_url: str,
    postfix: str,
) -> Fragment:
    """Uploads a completed fragment unless the store already has it; returns it as persisted.

    `file_reader()` yields the fragment's uncompressed bytes [begin, end); their SHA1 and length are
    checked before upload so a content-addressed name never holds other content.
    """
    return await asyncio.to_thread(persist_blocking, completed_fragment, file_reader, store_url, postfix)


def persist_blocking(
    completed_fragment: Fragment,
    file_reader: Callable[[], Iterator[bytes]],
    store_url: str,
    postfix: str,
) -> Fragment:
    """`persist` for callers already on a worker thread (the Persister runs it on its own pool)."""
    fragment = dataclasses.replace(completed_fragment, backing_store=store_url, path_postfix=postfix)
    return dataclasses.replace(fragment, mod_time=_upload(fragment, file_reader))


def _upload(fragment: Fragment, file_reader: Callable[[], Iterator[bytes]]) -> int:
    """Uploads `fragment` (its backing_store and path_postfix set) unless present; its mod_time."""
    store = get_store(fragment.backing_store)
    path = fragment.content_path
    try:
        return store.mod_time(path)  # content-addressed: whoever uploaded it, it is this content
    except ObjectNotFoundError:
        pass  # one lookup (one HEAD on S3) answers both "is it there" and "since when"
    sha1 = hashlib.sha1()
    length = 0

    def hashed() -> Iterator[bytes]:
        nonlocal length
        for chunk in file_reader():
            sha1.update(chunk)
            length += len(chunk)
            yield chunk

    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES) as spooled:
        for piece in compress_stream(fragment.codec, hashed()):
            spooled.write(piece)
        if length != fragment.length:
            raise CorruptFragmentError(
                f"local content of {path} has {length} bytes (expected end - begin = {fragment.length}); not persisted"
            )
        got = sha1.digest() if length else ZERO_SUM
        if got != fragment.sum:
            raise CorruptFragmentError(
                f"local content of {path} has SHA1 {got.hex()} (expected {fragment.sum.hex()}); not persisted"
            )
        spooled.seek(0)
        encoding = "gzip" if fragment.codec == Codec.GZIP_OFFLOAD_DECOMPRESSION else None
        store.put(path, spooled, content_encoding=encoding)  # type: ignore[arg-type]
    return store.mod_time(path)


def open_fragment(fragment: Fragment, offset: int | None = None) -> Iterator[bytes]:
    """Yields the decoded content of a persisted fragment from journal `offset` (default: begin).

    Blocking generator. Content longer than end - begin raises CorruptFragmentError as soon as it is
    seen; a short content or a SHA1 mismatch raises it at EOF, after earlier chunks were yielded.
    """
    if not fragment.backing_store:
        raise ValidationError(f"fragment {fragment.content_name} of {fragment.journal} has no backing store")
    start = fragment.begin if offset is None else offset
    if not fragment.begin <= start <= fragment.end:
        raise ValidationError(
            f"offset {start} is outside fragment [{fragment.begin}, {fragment.end}) of {fragment.journal}"
        )
    return _read_verified(fragment, start)


def _read_verified(fragment: Fragment, start: int) -> Iterator[bytes]:
    store = get_store(fragment.backing_store)
    key = fragment.content_path
    where = f"object {key} in store {fragment.backing_store}"
    decoder = Decompressor(fragment.codec)
    sha1 = hashlib.sha1()
    pos = fragment.begin  # journal offset of the next decoded byte

    def take(data: bytes) -> bytes:
        nonlocal pos
        if not data:
            return b""
        if pos + len(data) > fragment.end:
            raise CorruptFragmentError(
                f"{where} decodes to more than end - begin = {fragment.length} bytes "
                f"(at least {pos + len(data) - fragment.begin})"
            )
        sha1.update(data)
        skip = max(0, start - pos)
        pos += len(data)
        return data[skip:] if skip else data

    stream = store.open(key)
    try:
        while True:
            raw = stream.read(tunables.STORE_READ_CHUNK_BYTES)
            try:
                out = take(decoder.feed(raw)) if raw else take(decoder.finish())
            except CodecError as e:
                raise CorruptFragmentError(f"{where} does not decode as {fragment.codec.name}: {e}") from e
            if out:
                yield out
            if not raw:
                break
    finally:
        stream.close()
    if pos != fragment.end:
        raise CorruptFragmentError(
            f"{where} decodes to {pos - fragment.begin} bytes (expected end - begin = {fragment.length})"
        )
    got = sha1.digest() if fragment.length else ZERO_SUM
    if got != fragment.sum:
        raise CorruptFragmentError(f"{where} has SHA1 {got.hex()} (expected {fragment.sum.hex()})")
