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
import cProfile
import os
import pstats
import time

from gazette.client.aio import AsyncClient
from gazette.local.cluster import LocalCluster

MIB = 1 << 20
JOURNAL = "bench/profile"


async def _append_for(
    aio: AsyncClient, payload: bytes, seconds: float, profiler: cProfile.Profile
) -> tuple[int, float]:
    """Appends `payload` until `seconds` pass, profiling this (the loop's) thread; returns (appends, elapsed)."""
    count = 0
    profiler.enable()
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            await aio.append(JOURNAL, payload)
            count += 1
    finally:
        profiler.disable()
    return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_append", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to append under the profiler")
    parser.add_argument("--top", type=int, default=25, help="how many entries to print per listing")
    args = parser.parse_args()

    payload = os.urandom(MIB)
    profiler = cProfile.Profile()
    with LocalCluster(brokers=1, mode="inprocess") as cluster:
        client = cluster.client()
        client.apply_journals(
            [
                cluster.journal_spec(
                    JOURNAL, fragment_length=1 << 34, compression="none", refresh_interval="1s"
                )
            ]
        )
        for _ in range(8):  # the first write rolls the spool; warm both sides up before profiling
            client.append(JOURNAL, payload)
        count, elapsed = client._loop.run(_append_for(client.aio, payload, args.seconds, profiler))

    print(
        f"{count} appends of 1 MiB in {elapsed:.1f} s under cProfile: {count * MIB / elapsed / 1e6:.0f} MB/s"
    )
    for order in ("cumulative", "tottime"):
        print(f"\n=== top {args.top} by {order} ===")
        pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(args.top)


if __name__ == "__main__":
    main()
