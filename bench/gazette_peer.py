"""The peer: real Gazette brokers doing our journal broker's and replication's work, driven by our client.

Starts real `gazette serve` processes (Go, built by `make peers`) under our embedded etcd with
`LocalCluster(mode="subprocess", broker_kinds=["gazette"] * N)`, their file:// store in a temp
directory, and runs on them the workloads of bench/runner.py (one broker) and bench/replication.py
(three brokers in two zones): the same functions, settings, payloads and journal specs (no
compression, fragments larger than a run writes), and the same client, our AsyncClient on its loop
thread. Only the broker differs, so each "ratio to peer" is our broker's figure over Gazette's, the
client's cost being in both. Gazette has no Flush RPC (it persists at fragment.length or
flush_interval), so there is no peer of "Read from the file store".

`python -m bench.gazette_peer [--quick] [--ours]` runs it alone (`--ours` also measures the figures
of ours it pairs with and prints them side by side); `python -m bench` puts it beside our figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator

from bench import replication, runner
from bench.figures import Figure, PeerUnavailable, percentile
from gazette.client.aio import AsyncClient
from gazette.local import gazette_peer as peers
from gazette.local.cluster import LocalCluster
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import JournalSpec

MIB = 1 << 20
SMALL_APPEND_BYTES = runner.SMALL_APPEND_BYTES
NOT_BUILT = "real Gazette not built: run `make peers`"
REPLICATION_ZONES = ("a", "b")  # as bench/replication.py's cluster

Log = Callable[[str], None]


class GazetteUnavailable(PeerUnavailable):
    """Real Gazette's binaries are missing; the reason (and how to build them) is the message."""


# Our figure (bench/runner.py, bench/replication.py) -> Gazette's figure doing the same work.
PEER_OF = {
    "append_seq": "gz_append_seq",
    "append_x4": "gz_append_x4",
    "read_spool": "gz_read_spool",
    "small_append_p50": "gz_small_p50",
    "small_append_p99": "gz_small_p99",
    "append_r3_x4": "gz_append_r3_x4",
    "append_r1_x4": "gz_append_r1_x4",
    "small_r3_p50": "gz_small_r3_p50",
    "small_r3_p99": "gz_small_r3_p99",
    "small_r1_p50": "gz_small_r1_p50",
    "small_r1_p99": "gz_small_r1_p99",
    "visible_r3_p50": "gz_visible_r3_p50",
    "visible_r3_p99": "gz_visible_r3_p99",
}


def peer_figures() -> dict[str, Figure]:
    """Gazette's figures, in table order; each the peer of one of ours (not a limit)."""
    figures = [
        Figure("gz_append_seq", "Peer: Gazette append 1 MiB, sequential", "MB/s", True),
        Figure("gz_append_x4", "Peer: Gazette append 1 MiB, 4 appenders on 4 journals", "MB/s", True),
        Figure("gz_read_spool", "Peer: Gazette read from the spool", "MB/s", True),
        Figure("gz_small_p50", "Peer: Gazette append 100 B p50, sequential", "ms", False),
        Figure("gz_small_p99", "Peer: Gazette append 100 B p99, sequential", "ms", False),
        Figure("gz_append_r3_x4", "Peer: Gazette append 1 MiB R=3, 4 appenders, 3 brokers", "MB/s", True),
        Figure("gz_append_r1_x4", "Peer: Gazette append 1 MiB R=1, 4 appenders, same brokers", "MB/s", True),
        Figure("gz_small_r3_p50", "Peer: Gazette append 100 B R=3 p50, 8 in flight", "ms", False),
        Figure("gz_small_r3_p99", "Peer: Gazette append 100 B R=3 p99, 8 in flight", "ms", False),
        Figure("gz_small_r1_p50", "Peer: Gazette append 100 B R=1 p50, 8 in flight", "ms", False),
        Figure("gz_small_r1_p99", "Peer: Gazette append 100 B R=1 p99, 8 in flight", "ms", False),
        Figure(
            "gz_visible_r3_p50",
            "Peer: Gazette append-to-visible 100 B R=3 p50, a blocking reader",
            "ms",
            False,
        ),
        Figure(
            "gz_visible_r3_p99",
            "Peer: Gazette append-to-visible 100 B R=3 p99, a blocking reader",
            "ms",
            False,
        ),
    ]
    return {f.key: f for f in figures}


def gazette_binary() -> str:
    """The `gazette` binary LocalCluster will run; GazetteUnavailable (a skip) when it is not built."""
    try:
        return peers.find_peer("gazette")
    except GazetteError as exc:
        raise GazetteUnavailable(f"{NOT_BUILT} ({peers.peers_bin() / 'gazette'} is missing)") from exc


def version() -> str | None:
    """The version ("v0.103.0") when the binaries are built, as `make peers` recorded it; else None."""
    try:
        gazette_binary()
    except GazetteUnavailable:
        return None
    return peers.peer_version()


@contextlib.contextmanager
def gazette_cluster(brokers: int, zones: tuple[str, ...] = ("local",)) -> Iterator[LocalCluster]:
    """`brokers` real Gazette brokers under our embedded etcd. They are SIGKILLed at the end: nothing
    needs persisting, and a Gazette broker told to stop waits for its journals to move first."""
    cluster = LocalCluster(
        brokers=brokers, mode="subprocess", zones=zones, broker_kinds=["gazette"] * brokers
    )
    cluster.start()
    try:
        yield cluster
    finally:
        for i, handle in enumerate(cluster.brokers):
            if handle.running:
                with contextlib.suppress(Exception):
                    cluster.kill_broker(i)
        cluster.close()


def _spec(cluster: LocalCluster, name: str) -> JournalSpec:
    """runner.run's journal: R=1, no compression, fragments larger than a run writes."""
    return cluster.journal_spec(
        name, fragment_length=runner.FRAGMENT_LENGTH, compression="none", refresh_interval="1s"
    )


# --- one broker: bench/runner.py's work ----------------------------------------------------------


def measure_one_broker(settings: runner.Settings, payload: bytes, log: Log) -> dict[str, list[float]]:
    """runner.run's appends and spool read on one Gazette broker; per figure, one sample per run."""
    samples: dict[str, list[float]] = {}
    with gazette_cluster(1) as cluster:
        client = cluster.client()
        names = ["bench/small", *(f"bench/seq-{i}" for i in range(settings.runs))]
        names += [
            f"bench/par-{i}-{k}" for i in range(settings.runs) for k in range(runner.CONCURRENT_APPENDERS)
        ]
        client.apply_journals(_spec(cluster, name) for name in names)
        cluster.wait_for_routes()
        loop = client._loop
        loop.run(_warm_up_one(client.aio, payload))
        for i in range(settings.runs):
            log(f"gazette 1 broker, run {i + 1}/{settings.runs}")
            os.sync()  # as runner.run: no dirty pages of the last run being written back
            run = loop.run(_one_broker_run(client.aio, payload, settings, i))
            for key, value in run.items():
                samples.setdefault(key, []).append(value)
            log("  " + ", ".join(f"{k} {v:.4g}" for k, v in run.items()))
    return samples


async def _warm_up_one(aio: AsyncClient, payload: bytes) -> None:
    for _ in range(50):
        await aio.append("bench/small", payload[:SMALL_APPEND_BYTES])


async def _one_broker_run(
    aio: AsyncClient, payload: bytes, settings: runner.Settings, run: int
) -> dict[str, float]:
    n = settings.append_mib
    seq = f"bench/seq-{run}"
    begin = (await aio.append(seq, payload)).end  # the journal's first write opens its spool: not timed
    out = {"gz_append_seq": await runner.append_sequential(aio, seq, payload, n)}
    out["gz_read_spool"] = await runner.read_rate(aio, seq, begin, begin + n * len(payload), from_store=False)
    par = [f"bench/par-{run}-{k}" for k in range(runner.CONCURRENT_APPENDERS)]
    for journal in par:
        await aio.append(journal, payload)
    out["gz_append_x4"] = await runner.append_concurrent(aio, par, payload, n // runner.CONCURRENT_APPENDERS)
    small = await runner.append_latencies(
        aio, "bench/small", payload[:SMALL_APPEND_BYTES], settings.small_appends
    )
    out |= {"gz_small_p50": percentile(small, 50), "gz_small_p99": percentile(small, 99)}
    return out


# --- three brokers: bench/replication.py's work --------------------------------------------------


def measure_three_brokers(settings: runner.Settings, payload: bytes, log: Log) -> dict[str, list[float]]:
    """replication.run's R=3 and R=1 appends on three Gazette brokers in two zones."""
    samples: dict[str, list[float]] = {}
    small = payload[:SMALL_APPEND_BYTES]
    count_each = max(1, settings.append_mib // replication.THROUGHPUT_APPENDERS)
    with gazette_cluster(3, REPLICATION_ZONES) as cluster:
        journals = replication._journals(cluster, settings.runs)  # the same specs, routes waited for
        client = cluster.client()
        loop, aio = client._loop, client.aio
        loop.run(_warm_up_three(aio, journals, payload))
        for i in range(settings.runs):
            log(f"gazette 3 brokers, run {i + 1}/{settings.runs}")
            os.sync()
            run: dict[str, float] = {}
            for r in (3, 1):
                run[f"gz_append_r{r}_x4"] = loop.run(
                    replication.append_rate(aio, journals[r][0], payload, count_each)
                )
            for r in (3, 1):
                lat = loop.run(
                    replication.append_latencies(aio, journals[r][1], small, settings.small_appends)
                )
                run |= {f"gz_small_r{r}_p50": percentile(lat, 50), f"gz_small_r{r}_p99": percentile(lat, 99)}
            seen = loop.run(replication.visible_latencies(aio, journals[3][1], small, settings.small_appends))
            run |= {"gz_visible_r3_p50": percentile(seen, 50), "gz_visible_r3_p99": percentile(seen, 99)}
            for key, value in run.items():
                samples.setdefault(key, []).append(value)
            log("  " + ", ".join(f"{k} {v:.4g}" for k, v in run.items()))
    return samples


async def _warm_up_three(aio: AsyncClient, journals, payload: bytes) -> None:
    """As replication's warm-up, without the fan-out: every journal's pipeline is open once."""
    for r in (1, 3):
        par, small = journals[r]
        await replication.append_rate(aio, par, payload, 2)
        await replication.append_latencies(
            aio, small, payload[:SMALL_APPEND_BYTES], 8 * replication.IN_FLIGHT
        )


def run(settings: runner.Settings, log: Log) -> dict[str, Figure]:
    """Measures Gazette's figures `settings.runs` times with bench.runner's Settings (those of the
    figures of ours they pair with); GazetteUnavailable when the binaries are not built."""
    binary = gazette_binary()
    log(f"peer: Gazette {peers.peer_version()} ({binary}), driven by gazette-py's AsyncClient")
    figures = peer_figures()
    payload = os.urandom(MIB)
    for measured in (
        measure_one_broker(settings, payload, log),
        measure_three_brokers(settings, payload, log),
    ):
        for key, values in measured.items():
            figures[key].samples.extend(values)
    return figures


def main() -> None:
    from rich.console import Console

    from bench import report

    parser = argparse.ArgumentParser(prog="python -m bench.gazette_peer", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer and smaller runs (bench's quick settings)"
    )
    parser.add_argument("--runs", type=int, help="override the number of runs")
    parser.add_argument(
        "--ours",
        action="store_true",
        help="also measure our figures it pairs with (bench.runner, bench.replication)",
    )
    args = parser.parse_args()
    settings = runner.QUICK if args.quick else runner.FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs {args.runs} must be at least 1")
        settings = dataclasses.replace(settings, runs=args.runs)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped or captured: don't squeeze the table
    load_at_start = os.getloadavg()[0]
    figures: dict[str, Figure] = {}
    if args.ours:
        console.rule("broker")
        figures |= runner.run(settings, console.log)
        console.rule("replication")
        figures |= replication.run(settings, console.log)
    console.rule("gazette peer")
    figures |= run(settings, console.log)
    title = f"Gazette peer ({settings.name}; load average {load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)"
    report.print_table(report.rows_of(figures, PEER_OF, peer_figures=peer_figures()), title, console)


if __name__ == "__main__":
    main()
