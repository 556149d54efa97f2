"""ShardSpec.read_channel_size bounds what a shard's source readers buffer for its transaction loop
(gazette/consumer/read_channel.py): unit tests of the channel, stepped without timing, and a real shard
whose loop is held while its reader fills the channel."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

from gazette.consumer import Application, MemoryStore, Shard, ShardSpec
from gazette.consumer.read_channel import ReadChannel
from gazette.message import Envelope, Publisher
from gazette.protocol.spec import JournalSpec


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_puts_wait_for_room_counted_in_envelopes_and_keep_their_order():
    async def run() -> None:
        ch: ReadChannel[str] = ReadChannel(4)
        await ch.put("a", 3)
        b = asyncio.ensure_future(ch.put("b", 2))
        c = asyncio.ensure_future(ch.put("c", 1))  # would fit, but waits behind b
        await _settle()
        assert not b.done() and not c.done()
        assert (ch.buffered, ch.blocked_puts, ch.qsize()) == (3, 2, 1)
        assert ch.get_nowait() == "a"
        await _settle()
        assert b.done() and c.done()
        assert (ch.buffered, ch.high_water, ch.blocked_puts) == (3, 3, 0)
        assert [ch.get_nowait(), await ch.get()] == ["b", "c"]
        assert ch.buffered == 0
        with pytest.raises(asyncio.QueueEmpty):
            ch.get_nowait()

    asyncio.run(run())


def test_an_empty_batch_takes_one_place_and_an_oversized_one_is_refused():
    async def run() -> None:
        ch: ReadChannel[str] = ReadChannel(2)
        await ch.put("error", 0)
        assert ch.buffered == 1
        with pytest.raises(ValueError, match="a batch of 3 envelopes does not fit a read channel of 2"):
            await ch.put("big", 3)
        with pytest.raises(ValueError, match="capacity 0 is not positive"):
            ReadChannel(0)

    asyncio.run(run())


def test_a_cancelled_put_gives_its_place_back():
    async def run() -> None:
        ch: ReadChannel[str] = ReadChannel(4)
        await ch.put("a", 4)
        b = asyncio.ensure_future(ch.put("b", 3))
        c = asyncio.ensure_future(ch.put("c", 1))
        await _settle()
        b.cancel()  # waiting: c no longer waits behind it
        await _settle()
        assert ch.blocked_puts == 1 and not c.done()
        assert ch.get_nowait() == "a"
        await _settle()
        assert c.done() and ch.buffered == 1
        # Cancelled after its room was reserved but before it ran: the room is released.
        d = asyncio.ensure_future(ch.put("d", 4))
        await _settle()
        assert ch.get_nowait() == "c"  # reserves d's room and wakes it...
        d.cancel()  # ...which is cancelled before it appends
        await _settle()
        assert d.cancelled() and ch.buffered == 0 and ch.qsize() == 0

    asyncio.run(run())


def test_a_get_waits_for_an_item():
    async def run() -> None:
        ch: ReadChannel[str] = ReadChannel(1)
        got = asyncio.ensure_future(ch.get())
        await _settle()
        assert not got.done()
        await ch.put("x", 1)
        assert await got == "x"

    asyncio.run(run())


def test_producers_never_overfill_it():
    async def run() -> None:
        rng = random.Random(7)
        ch: ReadChannel[tuple[int, int]] = ReadChannel(10)
        sent = {p: [rng.randint(0, 10) for _ in range(200)] for p in range(3)}

        async def produce(p: int) -> None:
            for i, n in enumerate(sent[p]):
                await ch.put((p, i), n)
                assert ch.buffered <= ch.capacity

        producers = [asyncio.ensure_future(produce(p)) for p in sent]
        received: dict[int, list[int]] = {p: [] for p in sent}
        while sum(map(len, received.values())) < 600:
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            assert ch.buffered <= ch.capacity
            p, i = await ch.get()
            received[p].append(i)
        await asyncio.gather(*producers)
        assert received == {p: list(range(200)) for p in sent}  # each producer's order kept
        assert ch.high_water == ch.capacity

    asyncio.run(run())


INPUT = "tests/read-channel/input"
CHANNEL = 5
MESSAGES = 100
WAIT_S = 60.0


class HeldLoop(Application):
    """Holds its first message until a reader is blocked on the full read channel, then records
    what the channel held; consumes the rest freely."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.channel: ReadChannel[Any] | None = None
        self.held: tuple[int, int] | None = None  # (buffered, blocked puts) while the loop was held
        self.released = threading.Event()

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        if self.channel is None:
            assert shard.txn_loop is not None
            self.channel = channel = shard.txn_loop._queue
            deadline = time.monotonic() + WAIT_S  # a hang guard only: the reader fills it at once
            while channel.blocked_puts == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.held = (channel.buffered, channel.blocked_puts)
        self.seen.append(env.message["n"])


def test_a_shard_buffers_at_most_read_channel_size_envelopes(cluster) -> None:
    client = cluster.client()
    client.apply_journals(
        [JournalSpec(name=INPUT, replication=1, labels={"content-type": "application/x-ndjson"})]
    )
    cluster.wait_for_routes()
    pub = Publisher(client)
    for n in range(MESSAGES):  # all there before the shard starts: its reader can race ahead
        pub.publish_committed(INPUT, {"n": n})
    pub.flush()
    pub.close()
    head = client.read_head(INPUT)

    app = HeldLoop()
    group = cluster.run_consumer(app, [ShardSpec("chan-000", [INPUT], read_channel_size=CHANNEL)])
    group.wait_for_primaries()
    stat = group.client().stat_shard("chan-000", {INPUT: head}, timeout=WAIT_S)
    assert stat.read_through[INPUT] >= head

    assert app.seen == list(range(MESSAGES))  # every message, once, in order
    assert app.channel is not None and app.channel.capacity == CHANNEL
    assert app.held is not None
    buffered, blocked = app.held
    assert blocked >= 1, "the reader was never held back by the read channel"
    assert 1 <= buffered <= CHANNEL
    assert app.channel.high_water <= CHANNEL
