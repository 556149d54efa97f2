"""Runs the measurements: a subprocess broker (LocalCluster), the raw gRPC server, and the disk.

Every run measures every figure once, limits included, so each ratio compares figures taken seconds
apart on the same machine state. Each run starts after an os.sync() and gets fresh journals: the
sequential appender's journal is read back from its spool, flushed, then read again from the file
store; the concurrent appenders' journals are flushed after their figure, untimed.
The gazette client and the raw gRPC client both run on the client's loop thread, as coroutines, so
neither figure pays the sync facade's thread hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import grpc

from bench import rawgrpc
from bench.figures import Figure, journal_broker_figures, percentile
from gazette.client.aio import AsyncClient
from gazette.keyspace.procutil import spawn, terminate
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb

MIB = 1 << 20
SMALL_APPEND_BYTES = 100
CONCURRENT_APPENDERS = 4
READY_TIMEOUT_S = 30.0
STORE_WAIT_S = 15.0
# Larger than any run writes, so no spool rolls (and no persist competes for the CPU) mid-figure.
FRAGMENT_LENGTH = 1 << 32


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    runs: int
    append_mib: int  # bytes per throughput figure, in 1 MiB appends (and the raw stream's length)
    small_appends: int  # latency samples per run (and raw unary round trips)


# Sized so that `python -m bench --quick` takes under 2 minutes and the full suite under 10 on two cores.
QUICK = Settings("quick", runs=3, append_mib=64, small_appends=300)
FULL = Settings("full", runs=5, append_mib=256, small_appends=1000)


@contextlib.contextmanager
def raw_server() -> Iterator[str]:
    """Starts rawgrpc.py in a subprocess (dying with us); yields its endpoint."""
    proc = spawn([sys.executable, rawgrpc.__file__], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        if not line:
            raise RuntimeError(
                f"the raw gRPC server did not report its endpoint within {READY_TIMEOUT_S:.0f} s"
            )
        yield json.loads(line)["endpoint"]
    finally:
        terminate(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def run(settings: Settings, log: Callable[[str], None]) -> dict[str, Figure]:
    """Measures every figure `settings.runs` times; returns the figures with their samples."""
    figures = journal_broker_figures()
    payload = os.urandom(MIB)
    with raw_server() as endpoint, LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        loop = client._loop
        specs = ["bench/small", *(f"bench/seq-{i}" for i in range(settings.runs))]
        specs += [f"bench/par-{i}-{k}" for i in range(settings.runs) for k in range(CONCURRENT_APPENDERS)]
        client.apply_journals(
            cluster.journal_spec(
                name, fragment_length=FRAGMENT_LENGTH, compression="none", refresh_interval="1s"
            )
            for name in specs
        )
        chan = loop.run(_open_channel(endpoint))
        try:
            loop.run(_warm_up(client.aio, chan, payload))
            for i in range(settings.runs):
                log(f"run {i + 1}/{settings.runs}")
                os.sync()  # start each run with no dirty pages of the last one being written back
                samples = loop.run(_network_figures(client.aio, chan, payload, settings, i))
                samples["disk_fsync"] = disk_fsync_rate(cluster.data_dir, payload, settings.append_mib)
                for key, value in samples.items():
                    figures[key].samples.append(value)
                log("  " + ", ".join(f"{k} {v:.4g}" for k, v in samples.items()))
        finally:
            loop.run(chan.close())
    return figures


async def _open_channel(endpoint: str) -> grpc.aio.Channel:
    return rawgrpc.channel(endpoint)


async def _warm_up(aio: AsyncClient, chan: grpc.aio.Channel, payload: bytes) -> None:
    """Connects both channels and takes each path once (the first write to a journal also rolls)."""
    await rawgrpc.stream_rate(chan, payload, 8)
    await rawgrpc.unary_latencies(chan, payload[:SMALL_APPEND_BYTES], 50)
    for _ in range(50):
        await aio.append("bench/small", payload[:SMALL_APPEND_BYTES])


async def _network_figures(
    aio: AsyncClient, chan: grpc.aio.Channel, payload: bytes, settings: Settings, run: int
) -> dict[str, float]:
    n = settings.append_mib
    small = payload[:SMALL_APPEND_BYTES]
    out: dict[str, float] = {"raw_stream": await rawgrpc.stream_rate(chan, payload, n)}

    seq = f"bench/seq-{run}"
    begin = (await aio.append(seq, payload)).end  # the journal's first write rolls its spool: not timed
    out["append_seq"] = await append_sequential(aio, seq, payload, n)
    end = begin + n * len(payload)
    out["read_spool"] = await read_rate(aio, seq, begin, end, from_store=False)
    await aio.flush(seq)
    await _wait_store_serves(aio, seq, begin)
    out["read_store"] = await read_rate(aio, seq, begin, end, from_store=True)

    par = [f"bench/par-{run}-{k}" for k in range(CONCURRENT_APPENDERS)]
    for journal in par:
        await aio.append(journal, payload)
    out["append_x4"] = await append_concurrent(aio, par, payload, n // CONCURRENT_APPENDERS)
    for journal in par:  # persisted now, untimed, rather than all at once when the broker stops
        await aio.flush(journal)

    raw = await rawgrpc.unary_latencies(chan, small, settings.small_appends)
    ours = await append_latencies(aio, "bench/small", small, settings.small_appends)
    out |= {"raw_unary_p50": percentile(raw, 50), "raw_unary_p99": percentile(raw, 99)}
    out |= {"small_append_p50": percentile(ours, 50), "small_append_p99": percentile(ours, 99)}
    return out


async def append_sequential(aio: AsyncClient, journal: str, payload: bytes, count: int) -> float:
    """`count` appends of `payload`, one RPC each, one after another; MB/s."""
    start = time.perf_counter()
    for _ in range(count):
        res = await aio.append(journal, payload)
        if res.end - res.begin != len(payload):
            raise RuntimeError(
                f"append to {journal} committed {res.end - res.begin} bytes (expected {len(payload)})"
            )
    return count * len(payload) / (time.perf_counter() - start) / 1e6


async def append_concurrent(aio: AsyncClient, journals: list[str], payload: bytes, count_each: int) -> float:
    """One sequential appender per journal, all at once over the one client channel; MB/s in all."""

    async def appender(journal: str) -> None:
        for _ in range(count_each):
            await aio.append(journal, payload)

    start = time.perf_counter()
    await asyncio.gather(*(appender(j) for j in journals))
    return len(journals) * count_each * len(payload) / (time.perf_counter() - start) / 1e6


async def append_latencies(aio: AsyncClient, journal: str, payload: bytes, count: int) -> list[float]:
    """`count` sequential appends of `payload`; each one's latency in ms."""
    out = []
    for _ in range(count):
        start = time.perf_counter()
        await aio.append(journal, payload)
        out.append((time.perf_counter() - start) * 1e3)
    return out


async def read_rate(aio: AsyncClient, journal: str, begin: int, end: int, *, from_store: bool) -> float:
    """Reads [begin, end) of `journal`, checking every chunk came from where we claim; MB/s."""
    where = "the file store" if from_store else "the spool"
    got = 0
    start = time.perf_counter()
    async for chunk in aio.read(journal, begin, end_offset=end):
        if chunk.fragment is None or bool(chunk.fragment.backing_store) != from_store:
            raise RuntimeError(f"read of {journal} at {chunk.offset} was not served from {where}")
        got += len(chunk.content)
    elapsed = time.perf_counter() - start
    if got != end - begin:
        raise RuntimeError(
            f"read of {journal} [{begin}, {end}) returned {got} bytes (expected {end - begin})"
        )
    return got / elapsed / 1e6


async def _wait_store_serves(aio: AsyncClient, journal: str, offset: int) -> None:
    """Waits until the broker's index serves `offset` from the store (its refresh follows a flush)."""
    deadline = time.monotonic() + STORE_WAIT_S
    while True:
        call = aio.stub.Read(pb.ReadRequest(journal=journal, offset=offset, metadata_only=True))
        try:
            resp = await call.read()
        finally:
            call.cancel()
        if resp.fragment.backing_store:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{journal} at {offset} was still served from the spool {STORE_WAIT_S:.0f} s after flush"
            )
        await asyncio.sleep(0.05)


def disk_fsync_rate(directory: str, payload: bytes, count: int) -> float:
    """Writes `payload` `count` times to a new file in `directory`, then fsyncs; MB/s including the fsync."""
    fd, path = tempfile.mkstemp(prefix="bench-disk-", dir=directory)
    try:
        start = time.perf_counter()
        for _ in range(count):
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
        return count * len(payload) / (time.perf_counter() - start) / 1e6
    finally:
        os.close(fd)
        os.unlink(path)
