"""JournalSpec.max_append_rate and the minimum append rate on a real in-process broker (broker/flow.py).

Timing decides only a physical lower bound: a journal limited to R bytes/s cannot have admitted more
than R bytes (its first append's burst) plus R per second since it was created."""

from __future__ import annotations

import asyncio
import os
import time

import grpc
import pytest

from gazette.broker import flow
from gazette.client.loop import default_loop
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc

RATE = 200_000  # bytes/s
BIG = 1 << 20
CHUNK = 1 << 16
HANG_GUARD_S = 60.0  # only so a broken broker fails the test instead of hanging it


def _apply(cluster, client, name: str, **fields) -> None:
    client.apply_journals([cluster.journal_spec(name, replication=1, fragment_length=1 << 22, **fields)])
    cluster.wait_for_routes([name])


def _raw_append(cluster, journal: str, chunks, stall: bool = False) -> pb.AppendResponse:
    """An Append RPC over a plain stub, sent as the given content chunks (then the commit message,
    unless `stall`: then the client sends nothing more and never closes)."""
    loop = default_loop()

    async def run() -> pb.AppendResponse:
        async with grpc.aio.insecure_channel(cluster.broker_endpoints[0].removeprefix("http://")) as ch:
            never = asyncio.Event()

            async def requests():
                yield pb.AppendRequest(journal=journal)
                for c in chunks:
                    yield pb.AppendRequest(content=c)
                if stall:
                    await never.wait()
                yield pb.AppendRequest()

            try:
                return await asyncio.wait_for(pb_grpc.JournalStub(ch).Append(requests()), HANG_GUARD_S)
            finally:
                never.set()  # a stalled request stream ends, so gRPC's task sending it finishes
                await asyncio.sleep(0.1)

    return loop.run(run())


def test_a_limited_journal_admits_no_more_than_its_rate(cluster, client):
    journal = "examples/rate/limited"
    started = time.monotonic()  # before the journal exists: its flow control starts later
    _apply(cluster, client, journal, max_append_rate=RATE)
    client.append(journal, b"warm-up\n")  # the route is settled (an invalidation would lift the limit)
    big = os.urandom(BIG)
    before_big = time.monotonic() - started
    resp = _raw_append(cluster, journal, [big[i : i + CHUNK] for i in range(0, BIG, CHUNK)])
    elapsed = time.monotonic() - started

    assert resp.status == pb.OK
    assert (resp.commit.begin, resp.commit.end) == (8, 8 + BIG)
    assert resp.total_chunks == BIG // CHUNK + 1  # and the empty commit chunk, as Gazette counts
    # Some chunk waited for credit, unless setup was so slow that the bank could hold all of it.
    assert resp.delayed_chunks >= 1 or RATE * (1 + before_big) >= BIG
    # At most RATE (the burst) plus RATE per second since creation was admitted; 10 ms for clock rounding.
    admitted = 8 + BIG
    assert elapsed >= (admitted - RATE) / RATE - 0.01, f"{admitted} bytes admitted in {elapsed:.2f} s"
    assert client.read_all(journal) == b"warm-up\n" + big


def test_an_unlimited_journal_takes_the_same_append(cluster, client):
    journal = "examples/rate/unlimited"
    _apply(cluster, client, journal)
    big = os.urandom(BIG)
    res = client.append(journal, big)
    assert (res.begin, res.end) == (0, BIG)
    resp = _raw_append(cluster, journal, [big[:CHUNK], big[CHUNK:]])
    assert resp.status == pb.OK and resp.delayed_chunks == 0
    assert client.read_all(journal) == big + big


def test_a_client_below_the_minimum_rate_is_aborted_and_rolled_back(cluster, client, monkeypatch):
    journal = "examples/rate/stalled"
    _apply(cluster, client, journal)
    client.append(journal, b"before\n")
    monkeypatch.setattr(flow, "MIN_APPEND_BYTES_PER_S", 10_000)  # a second's slack: 10 KB
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        _raw_append(cluster, journal, [b"torn content that must never be visible"], stall=True)
    assert exc.value.code() == grpc.StatusCode.ABORTED
    assert "minimum append rate of 10000 bytes/s" in (exc.value.details() or "")
    res = client.append(journal, b"after\n")
    assert res.begin == len(b"before\n")  # the aborted append's content was rolled back
    assert client.read_all(journal) == b"before\nafter\n"
