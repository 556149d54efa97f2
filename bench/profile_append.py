"""Where an append's time goes: 1 MiB appends into an in-process broker under cProfile.

`python -m bench.profile_append [--seconds 10] [--top 25]` starts `LocalCluster(mode="inprocess")`,
whose broker shares the client's loop thread, so one profiler on that thread sees both sides of
the RPC: the client building requests, grpc.aio's Python layer, the broker's append FSM, spool
pwrite and SHA1. It prints the top entries by cumulative time, then by own (self) time.
What it cannot see: gRPC's C-core threads and time in other threads (the persister). Time the
loop spends waiting in `select.epoll.poll` is time it had no Python work, i.e. waiting on the wire
or on those threads. Profiling slows Python code, so the rate printed is below the bench's.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import time

from gazette.client.aio import AsyncClient
from gazette.local.cluster import LocalCluster

MIB = 1 << 20
JOURNAL = "bench/profile"


async def _append_for(
    aio: AsyncClient, payload: bytes, seconds: float, profiler: cProfile.Profile, inflight: int = 1
) -> tuple[int, float]:
    """Appends `payload` until `seconds` pass (`inflight` appenders at once), profiling this (the
    loop's) thread; returns (appends, elapsed)."""
    count = 0

    async def appender() -> None:
        nonlocal count
        while time.perf_counter() - start < seconds:
            await aio.append(JOURNAL, payload)
            count += 1

    profiler.enable()
    start = time.perf_counter()
    try:
        await asyncio.gather(*(appender() for _ in range(inflight)))
    finally:
        profiler.disable()
    return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_append", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to append under the profiler")
    parser.add_argument("--top", type=int, default=25, help="how many entries to print per listing")
    parser.add_argument("--replication", type=int, default=1, help="brokers, all in the route (all profiled)")
    parser.add_argument("--size", type=int, default=MIB, help="bytes per append")
    parser.add_argument("--inflight", type=int, default=1, help="concurrent appenders")
    args = parser.parse_args()

    payload = os.urandom(args.size)
    profiler = cProfile.Profile()
    r = args.replication
    with LocalCluster(brokers=r, mode="inprocess", max_replication=r) as cluster:
        client = cluster.client()
        client.apply_journals(
            [
                cluster.journal_spec(
                    JOURNAL, replication=r, fragment_length=1 << 34, compression="none", refresh_interval="1s"
                )
            ]
        )
        cluster.wait_for_routes([JOURNAL])
        for _ in range(8):  # the first write rolls the spool; warm both sides up before profiling
            client.append(JOURNAL, payload)
        count, elapsed = client._loop.run(
            _append_for(client.aio, payload, args.seconds, profiler, args.inflight)
        )

    print(
        f"{count} appends of {args.size} bytes (R={r}, {args.inflight} in flight) in {elapsed:.1f} s under "
        f"cProfile: {count * args.size / elapsed / 1e6:.1f} MB/s, {count / elapsed:.0f} appends/s"
    )
    for order in ("cumulative", "tottime"):
        print(f"\n=== top {args.top} by {order} ===")
        pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(args.top)


if __name__ == "__main__":
    main()
