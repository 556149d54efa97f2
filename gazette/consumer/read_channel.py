"""The read channel: what a primary shard's source readers decoded, waiting for its transaction loop.

Gazette's shard bridges its journal readers and its transaction loop with a channel of
`ShardSpec.read_channel_size` envelopes (default 8192): a reader that gets ahead of the loop blocks
there, so memory stays bounded however far behind the shard is. Here readers put whole decoded
batches, and the bound still counts envelopes: a batch of n envelopes takes n places (an error or an
empty batch takes one) and waits, in arrival order, until it fits. A batch must not be bigger than
the channel: the caller splits it. Used on one event loop; no locks.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Generic, TypeVar

from gazette.protocol.errors import ValidationError

T = TypeVar("T")


class ReadChannel(Generic[T]):
    """A FIFO of items, bounded by the envelopes they hold: `buffered` (places taken now, counting
    those reserved by a put about to append) never exceeds `capacity`; `high_water` is the most it held."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValidationError(f"read channel capacity {capacity} is not positive")
        self.capacity = capacity
        self.buffered = 0
        self.high_water = 0
        self._items: collections.deque[tuple[T, int]] = collections.deque()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._putters: collections.deque[tuple[asyncio.Future[None], int]] = collections.deque()

    def qsize(self) -> int:
        """Items (batches) waiting."""
        return len(self._items)

    @property
    def blocked_puts(self) -> int:
        """Puts waiting for room: readers the bound holds back."""
        return len(self._putters)

    async def put(self, item: T, envelopes: int = 1) -> None:
        """Appends `item`, holding `envelopes` places (at least one), once they are free and every
        earlier put went in."""
        n = max(1, envelopes)
        if n > self.capacity:
            raise ValueError(f"a batch of {n} envelopes does not fit a read channel of {self.capacity}")
        if self._putters or self.buffered + n > self.capacity:
            room = asyncio.get_running_loop().create_future()
            entry = (room, n)
            self._putters.append(entry)
            try:
                await room  # resolved by _admit, which reserved our places
            except asyncio.CancelledError:
                if room.done() and not room.cancelled():
                    self.buffered -= n  # reserved for us, and no longer wanted
                elif entry in self._putters:
                    self._putters.remove(entry)
                self._admit()
                raise
        else:
            self._reserve(n)
        self._items.append((item, n))
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                break

    def get_nowait(self) -> T:
        """The oldest item; asyncio.QueueEmpty if there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        item, n = self._items.popleft()
        self.buffered -= n
        self._admit()
        return item

    async def get(self) -> T:
        """The oldest item, once there is one."""
        while not self._items:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                if getter in self._getters:
                    self._getters.remove(getter)
                elif self._items and self._getters:  # woken for an item we won't take: pass it on
                    nxt = self._getters.popleft()
                    if not nxt.done():
                        nxt.set_result(None)
                raise
        return self.get_nowait()

    def _reserve(self, n: int) -> None:
        self.buffered += n
        self.high_water = max(self.high_water, self.buffered)

    def _admit(self) -> None:
        """Reserves room for waiting puts, in order, while the oldest fits."""
        while self._putters and self.buffered + self._putters[0][1] <= self.capacity:
            room, n = self._putters.popleft()
            if not room.done():
                self._reserve(n)
                room.set_result(None)
