"""Mappings: which journal of a label selector's listing a message goes to (docs/semantics.md#publisher).

A mapping is a callable `mapping(message) -> (journal name, content type)`. The watched mappings
here follow the broker's List watch of their selector (`JournalWatch`), so a journal added to the
selector starts receiving messages without a restart. Modulo and rendezvous hash the message's key
with 32-bit FNV-1a, as Gazette does, so the same keys map to the same journals.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any, Protocol

from gazette.client.aio import AsyncClient
from gazette.client.sync import Client
from gazette.client.watch import WATCH_READY_TIMEOUT_S, JournalWatch, Snapshot
from gazette.protocol.errors import ConfigurationError, StateError
from gazette.protocol.selector import LabelSelector

CONTENT_TYPE_LABEL = "content-type"
FNV32_OFFSET_BASIS = 0x811C9DC5
FNV32_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF


class Mapping(Protocol):
    def __call__(self, message: Any) -> tuple[str, str]: ...


class EmptyListingError(ConfigurationError):
    """A mapping's selector lists no journals (Gazette's ErrEmptyListResponse)."""

    def __init__(self, selector: LabelSelector) -> None:
        super().__init__(
            f'no journals match selector "{selector}": a mapping needs at least one journal to map to',
        )
        self.selector = selector


def fnv1a32(data: bytes | bytearray | memoryview) -> int:
    """32-bit FNV-1a of `data`."""
    h = FNV32_OFFSET_BASIS
    for b in bytes(data):
        h = ((h ^ b) * FNV32_PRIME) & _MASK32
    return h


def key_bytes(key: Any) -> bytes:
    """The bytes a mapping hashes: str keys as UTF-8, bytes as they are, ints as decimal text."""
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode()
    raise TypeError(f"mapping key {key!r} is a {type(key).__name__}; expected str, bytes or int")


class _Listing:
    """What a mapping derives from one snapshot, swapped in as a whole (so threads never mix two)."""

    __slots__ = ("snapshot", "names", "content_types", "hashes")

    def __init__(self, snapshot: Snapshot, with_hashes: bool) -> None:
        self.snapshot = snapshot
        self.names = tuple(info.spec.name for info in snapshot)
        self.content_types = tuple(info.spec.labels.value_of(CONTENT_TYPE_LABEL) or "" for info in snapshot)
        self.hashes = tuple(fnv1a32(n.encode()) for n in self.names) if with_hashes else ()


class _WatchedMapping:
    """A mapping over the listing of a JournalWatch, with per-snapshot derived state cached."""

    _with_hashes = False

    def __init__(
        self,
        client: Client | AsyncClient,
        selector: str | LabelSelector,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        ready_timeout_s: float = WATCH_READY_TIMEOUT_S,
    ) -> None:
        self.watch = JournalWatch(client, selector, loop=loop, ready_timeout_s=ready_timeout_s)
        self.selector = self.watch.selector
        self._listing: _Listing | None = None

    def __repr__(self) -> str:
        snapshot = self.watch.snapshot
        n = "?" if snapshot is None else len(snapshot)
        return f"{type(self).__name__}({str(self.selector)!r}, journals={n})"

    def journals(self) -> tuple[str, ...]:
        """Names of the journals currently mapped to, in listing order."""
        return self._current().names

    def _current(self) -> _Listing:
        """The listing of the latest snapshot; raises if there is none yet or it is empty."""
        listing = self._listing
        snapshot = self.watch.snapshot
        if listing is None or snapshot is not listing.snapshot:
            if snapshot is None:
                if self.watch.error is not None:
                    raise self.watch.error
                raise StateError(
                    f'mapping of "{self.selector}" has no listing yet: await mapping.ready() before using it',
                )
            listing = self._listing = _Listing(snapshot, self._with_hashes)
        if not listing.names:
            raise EmptyListingError(self.selector)
        return listing

    async def ready(self) -> None:
        await self.watch.ready()

    def wait_for_journals(
        self, predicate: Callable[[tuple[str, ...]], bool], timeout: float | None = None
    ) -> None:
        """Blocks (off the client's loop) until the listed journal names satisfy `predicate`."""
        self.watch.wait_until(lambda s: predicate(tuple(i.spec.name for i in s)), timeout)

    def close(self) -> None:
        self.watch.close()

    async def aclose(self) -> None:
        await self.watch.stop()


class RandomMapping(_WatchedMapping):
    """Maps each message to a journal of the listing chosen uniformly at random."""

    def __init__(self, client: Client | AsyncClient, selector: str | LabelSelector, **options: Any) -> None:
        super().__init__(client, selector, **options)
        self._random = random.Random()

    def __call__(self, message: Any) -> tuple[str, str]:
        listing = self._current()
        i = self._random.randrange(len(listing.names))
        return listing.names[i], listing.content_types[i]


class ModuloMapping(_WatchedMapping):
    """Maps a message to journal number fnv1a32(key(message)) mod the number of journals, in
    listing order (by name)."""

    def __init__(
        self,
        client: Client | AsyncClient,
        selector: str | LabelSelector,
        key: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        super().__init__(client, selector, **options)
        self.key = key

    def __call__(self, message: Any) -> tuple[str, str]:
        listing = self._current()
        i = fnv1a32(key_bytes(self.key(message))) % len(listing.names)
        return listing.names[i], listing.content_types[i]


class RendezvousMapping(_WatchedMapping):
    """Maps a message to the journal with the highest fnv1a32(key) XOR fnv1a32(journal name):
    adding or removing a journal moves only the keys that journal wins or held."""

    _with_hashes = True  # journal name hashes, computed once per snapshot

    def __init__(
        self,
        client: Client | AsyncClient,
        selector: str | LabelSelector,
        key: Callable[[Any], Any],
        **options: Any,
    ) -> None:
        super().__init__(client, selector, **options)
        self.key = key

    def __call__(self, message: Any) -> tuple[str, str]:
        listing = self._current()
        h = fnv1a32(key_bytes(self.key(message)))
        best, best_i = -1, 0
        for i, jh in enumerate(listing.hashes):
            score = h ^ jh
            if score > best:
                best, best_i = score, i
        return listing.names[best_i], listing.content_types[best_i]
