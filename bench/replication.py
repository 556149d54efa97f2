"""Replication figures: R=3 appends on 3 local brokers, beside R=1 on the same brokers and a raw gRPC
fan-out limit measured in the same run.

The limit (run as a script: `python bench/replication.py serve`) is three plain grpc.aio processes on
raw bytes: a client streams an append to process A, which forwards every chunk to B and C over a
stream of their own and acknowledges once both acknowledged the end of it. That is the least any
R=3 broker in Python does per append (two extra hops, a stream per replica), without spools,
proposals, SHA1 or etcd. Throughput: 1 MiB appends, 4 appenders on 4 journals. Latency: 100-byte
appends with 8 in flight (8 appenders on one journal, sharing its pipeline).

`python -m bench.replication --profile [--seconds 10]` runs the three brokers in-process under
cProfile with the R=3 small-append load and prints where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import grpc

from bench.figures import Figure, Target, percentile
from gazette.client.aio import AsyncClient
from gazette.keyspace.procutil import spawn, terminate
from gazette.local.cluster import LocalCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20
SMALL_APPEND_BYTES = 100
THROUGHPUT_APPENDERS = 4
IN_FLIGHT = 8
READY_TIMEOUT_S = 30.0
FRAGMENT_LENGTH = 1 << 32  # no roll (and no persist) while a figure is timed
SERVICE = "bench.Fanout"
APPEND_METHOD = f"/{SERVICE}/Append"  # client -> A: client-streaming, the reply after B and C acked
SINK_METHOD = f"/{SERVICE}/Sink"  # A -> B, C: client-streaming, the reply counts the bytes
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 8 << 20), ("grpc.max_send_message_length", 8 << 20)]

FANOUT_TARGET = Target("ratio", 0.60, "≥ 0.60 of fan-out")
P99_TARGET = Target("value", 10.0, "≤ 10 ms")
VISIBLE_TIMEOUT_S = 30.0  # an append not served to the reader within this fails the figure


def replication_figures() -> dict[str, Figure]:
    """The figures of the replication issue, in table order."""
    figures = [
        Figure("fanout_stream", "Limit: raw gRPC fan-out A→B,C, 1 MiB appends, 4 in flight", "MB/s", True),
        Figure(
            "append_r3_x4",
            "Append 1 MiB R=3, 4 appenders, 3 brokers",
            "MB/s",
            True,
            "fanout_stream",
            FANOUT_TARGET,
        ),
        Figure("append_r1_x4", "Append 1 MiB R=1, 4 appenders, same brokers", "MB/s", True, "fanout_stream"),
        Figure("fanout_p50", "Limit: raw gRPC fan-out 100 B p50, 8 in flight", "ms", False),
        Figure("fanout_p99", "Limit: raw gRPC fan-out 100 B p99, 8 in flight", "ms", False),
        Figure("small_r3_p50", "Append 100 B R=3 p50, 8 in flight", "ms", False, "fanout_p50"),
        Figure("small_r3_p99", "Append 100 B R=3 p99, 8 in flight", "ms", False, "fanout_p99", P99_TARGET),
        Figure("small_r1_p50", "Append 100 B R=1 p50, 8 in flight", "ms", False, "fanout_p50"),
        Figure("small_r1_p99", "Append 100 B R=1 p99, 8 in flight", "ms", False, "fanout_p99"),
        Figure("visible_r3_p50", "Append-to-visible 100 B R=3 p50, a blocking reader", "ms", False),
        Figure("visible_r3_p99", "Append-to-visible 100 B R=3 p99, a blocking reader", "ms", False),
    ]
    return {f.key: f for f in figures}


# --- the raw fan-out processes ---------------------------------------------------------------------
def _identity(data: bytes) -> bytes:
    return data


async def _sink(requests, context) -> bytes:
    total = 0
    async for message in requests:
        total += len(message)
    return total.to_bytes(8, "big")


def _forwarder(peers: list[str]):
    channels: list[grpc.aio.Channel] = []

    async def append(requests, context) -> bytes:
        if not channels:
            channels.extend(grpc.aio.insecure_channel(p, options=CHANNEL_OPTIONS) for p in peers)
        calls = [
            ch.stream_unary(SINK_METHOD, request_serializer=_identity, response_deserializer=_identity)()
            for ch in channels
        ]
        total = 0
        async for chunk in requests:
            total += len(chunk)
            for call in calls:
                await call.write(chunk)
        for call in calls:
            await call.done_writing()
        for call in calls:
            if int.from_bytes(await call, "big") != total:
                raise RuntimeError("a fan-out peer counted other bytes than were sent")
        return total.to_bytes(8, "big")

    return append


async def _serve(peers: list[str]) -> None:
    handlers = {
        "Sink": grpc.stream_unary_rpc_method_handler(
            _sink, request_deserializer=_identity, response_serializer=_identity
        ),
    }
    if peers:
        handlers["Append"] = grpc.stream_unary_rpc_method_handler(
            _forwarder(peers), request_deserializer=_identity, response_serializer=_identity
        )
    server = grpc.aio.server(options=[*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"endpoint": f"127.0.0.1:{port}"}), flush=True)
    await server.wait_for_termination()


def _start(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = spawn(
        [sys.executable, "-m", "bench.replication", "serve", *args],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
    line = proc.stdout.readline() if ready else b""
    if not line:
        terminate(proc)
        raise RuntimeError(f"a fan-out process did not report its endpoint within {READY_TIMEOUT_S:.0f} s")
    return proc, json.loads(line)["endpoint"]


@contextlib.contextmanager
def fanout_processes() -> Iterator[str]:
    """Starts B and C, then A forwarding to them (each a process dying with us); yields A's endpoint."""
    procs: list[subprocess.Popen] = []
    try:
        b, b_end = _start([])
        procs.append(b)
        c, c_end = _start([])
        procs.append(c)
        a, a_end = _start([b_end, c_end])
        procs.append(a)
        yield a_end
    finally:
        for p in procs:
            terminate(p)
            if p.stdout is not None:
                p.stdout.close()


# --- measurements ----------------------------------------------------------------------------------
async def _fanout_append(call, payload: bytes) -> None:
    async def one():
        for i in range(0, len(payload), MIB):
            yield payload[i : i + MIB]

    if int.from_bytes(await call(one()), "big") != len(payload):
        raise RuntimeError("the fan-out limit acknowledged other bytes than were sent")


async def fanout_rate(chan: grpc.aio.Channel, payload: bytes, count_each: int) -> float:
    call = chan.stream_unary(APPEND_METHOD, request_serializer=_identity, response_deserializer=_identity)

    async def appender() -> None:
        for _ in range(count_each):
            await _fanout_append(call, payload)

    start = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(THROUGHPUT_APPENDERS)))
    return THROUGHPUT_APPENDERS * count_each * len(payload) / (time.perf_counter() - start) / 1e6


async def fanout_latencies(chan: grpc.aio.Channel, payload: bytes, total: int) -> list[float]:
    call = chan.stream_unary(APPEND_METHOD, request_serializer=_identity, response_deserializer=_identity)
    return await _in_flight(lambda: _fanout_append(call, payload), total)


async def append_rate(aio: AsyncClient, journals: list[str], payload: bytes, count_each: int) -> float:
    async def appender(journal: str) -> None:
        for _ in range(count_each):
            res = await aio.append(journal, payload)
            if res.end - res.begin != len(payload):
                raise RuntimeError(f"append to {journal} committed {res.end - res.begin} bytes")

    start = time.perf_counter()
    await asyncio.gather(*(appender(j) for j in journals))
    return len(journals) * count_each * len(payload) / (time.perf_counter() - start) / 1e6


async def append_latencies(aio: AsyncClient, journal: str, payload: bytes, total: int) -> list[float]:
    return await _in_flight(lambda: aio.append(journal, payload), total)


async def visible_latencies(aio: AsyncClient, journal: str, payload: bytes, total: int) -> list[float]:
    """`total` sequential appends of `payload`, each timed (ms) from its start until a blocking reader
    of the journal, begun at its head, has been served it: what a tailing consumer waits. A broker
    that serves only what every replica acknowledged (gazette-py) shows it here; Gazette's serves a
    commit once its primary applied it."""
    head = await aio.read_head(journal)
    seen = head
    served = asyncio.Event()

    async def reader() -> None:
        nonlocal seen
        async for chunk in aio.read(journal, offset=head, block=True):
            seen = chunk.offset + len(chunk.content)
            served.set()

    task = asyncio.create_task(reader())
    out: list[float] = []
    try:
        for _ in range(total):
            start = time.perf_counter()
            res = await aio.append(journal, payload)
            while seen < res.end:
                if task.done():
                    task.result()
                    raise RuntimeError(f"the reader of {journal} ended at {seen}")
                served.clear()
                await asyncio.wait_for(served.wait(), VISIBLE_TIMEOUT_S)
            out.append((time.perf_counter() - start) * 1e3)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    return out


async def _in_flight(make: Callable, total: int) -> list[float]:
    """`total` operations, IN_FLIGHT at a time (each task sequential); every latency in ms."""
    out: list[float] = []

    async def worker(n: int) -> None:
        for _ in range(n):
            start = time.perf_counter()
            await make()
            out.append((time.perf_counter() - start) * 1e3)

    await asyncio.gather(*(worker(total // IN_FLIGHT) for _ in range(IN_FLIGHT)))
    return out


def _journals(cluster: LocalCluster, runs: int) -> dict[int, tuple[list[str], str]]:
    """Per replication factor: the throughput journals and the latency journal, created once."""
    out = {}
    specs = []
    for r in (1, 3):
        par = [f"bench/r{r}/par-{k}" for k in range(THROUGHPUT_APPENDERS)]
        small = f"bench/r{r}/small"
        out[r] = (par, small)
        specs += [
            cluster.journal_spec(
                name,
                replication=r,
                fragment_length=FRAGMENT_LENGTH,
                compression="none",
                refresh_interval="1s",
            )
            for name in [*par, small]
        ]
    cluster.client().apply_journals(specs)
    cluster.wait_for_routes()
    return out


def run(settings, log: Callable[[str], None]) -> dict[str, Figure]:
    """Measures every replication figure `settings.runs` times (bench.runner's Settings)."""
    figures = replication_figures()
    payload = os.urandom(MIB)
    small = payload[:SMALL_APPEND_BYTES]
    count_each = max(1, settings.append_mib // THROUGHPUT_APPENDERS)
    with (
        fanout_processes() as fanout,
        LocalCluster(brokers=3, mode="subprocess", zones=("a", "b")) as cluster,
    ):
        journals = _journals(cluster, settings.runs)
        client = cluster.client()
        loop = client._loop
        aio = client.aio
        chan = loop.run(_channel(fanout))
        try:
            loop.run(_warm_up(aio, chan, journals, payload))
            for i in range(settings.runs):
                log(f"replication run {i + 1}/{settings.runs}")
                os.sync()
                samples: dict[str, float] = {
                    "fanout_stream": loop.run(fanout_rate(chan, payload, count_each))
                }
                for r in (3, 1):
                    par, _ = journals[r]
                    samples[f"append_r{r}_x4"] = loop.run(append_rate(aio, par, payload, count_each))
                raw = loop.run(fanout_latencies(chan, small, settings.small_appends))
                samples |= {"fanout_p50": percentile(raw, 50), "fanout_p99": percentile(raw, 99)}
                for r in (3, 1):
                    ours = loop.run(append_latencies(aio, journals[r][1], small, settings.small_appends))
                    samples |= {
                        f"small_r{r}_p50": percentile(ours, 50),
                        f"small_r{r}_p99": percentile(ours, 99),
                    }
                seen = loop.run(visible_latencies(aio, journals[3][1], small, settings.small_appends))
                samples |= {"visible_r3_p50": percentile(seen, 50), "visible_r3_p99": percentile(seen, 99)}
                for key, value in samples.items():
                    figures[key].samples.append(value)
                log("  " + ", ".join(f"{k} {v:.4g}" for k, v in samples.items()))
        finally:
            loop.run(chan.close())
    return figures


async def _channel(endpoint: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(endpoint, options=CHANNEL_OPTIONS)


async def _warm_up(aio: AsyncClient, chan: grpc.aio.Channel, journals, payload: bytes) -> None:
    """Takes every path once (the first write to a journal syncs its pipeline and rolls its spool)."""
    await fanout_rate(chan, payload, 2)
    await fanout_latencies(chan, payload[:SMALL_APPEND_BYTES], 8 * IN_FLIGHT)
    for r in (1, 3):
        par, small = journals[r]
        await append_rate(aio, par, payload, 2)
        await append_latencies(aio, small, payload[:SMALL_APPEND_BYTES], 8 * IN_FLIGHT)


# --- profile ---------------------------------------------------------------------------------------
async def _profile_load(
    aio: AsyncClient, journals, seconds: float, profiler: cProfile.Profile, big: int = 2
) -> tuple[int, int]:
    """R=3 load for `seconds` under the profiler: 8 small appenders and `big` appenders of 1 MiB
    (none: the load of the "Append 100 B R=3, 8 in flight" rows alone)."""
    payload = os.urandom(MIB)
    par, small = journals[3]
    deadline = time.perf_counter() + seconds
    counts = [0, 0]

    async def small_worker() -> None:
        while time.perf_counter() < deadline:
            await aio.append(small, payload[:SMALL_APPEND_BYTES])
            counts[0] += 1

    async def big_worker(journal: str) -> None:
        while time.perf_counter() < deadline:
            await aio.append(journal, payload)
            counts[1] += 1

    profiler.enable()
    try:
        await asyncio.gather(*(small_worker() for _ in range(IN_FLIGHT)), *(big_worker(j) for j in par[:big]))
    finally:
        profiler.disable()
    return counts[0], counts[1]


def profile(seconds: float, top: int, big: int = 2) -> None:
    """Three in-process brokers and the client share one loop thread: one profiler sees them all."""
    profiler = cProfile.Profile()
    with LocalCluster(brokers=3, mode="inprocess", zones=("a", "b")) as cluster:
        journals = _journals(cluster, 1)
        client = cluster.client()
        client._loop.run(_warm_up_brokers(client.aio, journals))
        smalls, bigs = client._loop.run(_profile_load(client.aio, journals, seconds, profiler, big))
    print(
        f"R=3 under cProfile for {seconds:.0f} s: {smalls} appends of 100 B (8 in flight), {bigs} of 1 MiB ({big} in flight)"
    )
    for order in ("tottime", "cumulative"):
        print(f"\n=== top {top} by {order} ===")
        pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(top)


async def _warm_up_brokers(aio: AsyncClient, journals) -> None:
    for r in (1, 3):
        par, small = journals[r]
        for j in [*par, small]:
            await aio.append(j, b"warm-up\n")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile", action="store_true", help="profile three in-process brokers under R=3 load"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to profile")
    parser.add_argument(
        "--small-only", action="store_true", help="profile the 100 B appenders alone (no 1 MiB load)"
    )
    parser.add_argument("--top", type=int, default=30, help="how many entries to print per listing")
    parser.add_argument(
        "--quick", action="store_true", help="measure the figures with bench's quick settings"
    )
    args = parser.parse_args()
    if args.profile:
        profile(args.seconds, args.top, 0 if args.small_only else 2)
        return
    from bench import report, runner

    settings = runner.QUICK if args.quick else runner.FULL
    figures = run(settings, log=print)
    from rich.console import Console

    report.print_table(report.rows_of(figures), f"replication ({settings.name})", Console(width=140))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:  # one process of the fan-out limit (started by fanout_processes)
        asyncio.run(_serve(sys.argv[2:]))
    else:
        main()
