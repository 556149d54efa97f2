"""CPU seconds per MiB appended, by the broker processes: a figure of the append path's cost that
stays meaningful on a loaded machine, where wall-clock rates swing with the neighbours.

`python -m bench.cpu_append [--replication 1] [--size 1048576] [--mib 64] [--inflight 1]` starts a
`LocalCluster(mode="subprocess")` of `replication` brokers, appends `size`-byte appends until `mib`
MiB have been sent (`inflight` appenders at once), and prints the user+system CPU time the broker
processes spent over that span (read from /proc/<pid>/stat) divided by the MiB appended (and the
primary's share), plus the client's own CPU for the same span. Broker background work (pulses, persisting fragments to the
store) falls into the span as well; it is small beside the append path at these rates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time

from gazette.local.cluster import LocalCluster

MIB = 1 << 20
JOURNAL = "bench/cpu-append"
_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _append_all(aio, payload: bytes, count: int, inflight: int) -> list[float]:
    """Appends `payload` `count` times with `inflight` appenders; returns each append's latency."""
    latencies: list[float] = []
    left = count

    async def appender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t = time.perf_counter()
            await aio.append(JOURNAL, payload)
            latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(appender() for _ in range(inflight)))
    return latencies


def measure(replication: int, size: int, mib: float, inflight: int) -> dict[str, float]:
    """Runs one measurement (see the module docstring); returns its figures."""
    payload = os.urandom(size)
    count = max(1, int(mib * MIB) // size)
    with LocalCluster(brokers=replication, mode="subprocess", max_replication=replication) as cluster:
        client = cluster.client()
        client.apply_journals(
            [
                cluster.journal_spec(
                    JOURNAL,
                    replication=replication,
                    fragment_length=1 << 34,
                    compression="none",
                    refresh_interval="1s",
                )
            ]
        )
        cluster.wait_for_routes([JOURNAL])
        warm = max(8, min(count // 10, 200))
        client._loop.run(_append_all(client.aio, payload, warm, inflight))
        handles = [h for h in cluster.brokers if h.proc is not None]
        pids = [h.proc.pid for h in handles]
        route = client.list_journals()[0].route
        primary = [(h.zone, h.suffix) for h in handles].index(tuple(route.members[route.primary]))
        before = [process_cpu_s(p) for p in pids]
        mine = own_cpu_s()
        start = time.perf_counter()
        latencies = client._loop.run(_append_all(client.aio, payload, count, inflight))
        elapsed = time.perf_counter() - start
        each = [process_cpu_s(p) - b for p, b in zip(pids, before, strict=True)]
        mine = own_cpu_s() - mine
    sent_mib = count * size / MIB
    latencies.sort()
    brokers_cpu = sum(each)
    return {
        "broker_cpu_s_per_mib": brokers_cpu / sent_mib,
        "primary_cpu_s_per_mib": each[primary] / sent_mib,
        "client_cpu_s_per_mib": mine / sent_mib,
        "mb_per_s": count * size / elapsed / 1e6,
        "appends_per_s": count / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_append", description=__doc__.splitlines()[0])
    parser.add_argument("--replication", type=int, default=1)
    parser.add_argument("--size", type=int, default=MIB, help="bytes per append")
    parser.add_argument("--mib", type=float, default=64.0, help="MiB to append in the measured span")
    parser.add_argument("--inflight", type=int, default=1, help="concurrent appenders")
    args = parser.parse_args()
    r = measure(args.replication, args.size, args.mib, args.inflight)
    print(
        f"R={args.replication} size={args.size} inflight={args.inflight}: "
        f"brokers {r['broker_cpu_s_per_mib'] * 1e3:.1f} ms CPU/MiB (primary {r['primary_cpu_s_per_mib'] * 1e3:.1f}), client {r['client_cpu_s_per_mib'] * 1e3:.1f} ms CPU/MiB, "
        f"{r['mb_per_s']:.0f} MB/s, {r['appends_per_s']:.0f} appends/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
