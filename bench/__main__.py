"""`python -m bench [--quick] [--runs N] [--no-spark] [--no-gazette] [--no-kafka] [--no-allocator]`: every benchmark as one suite.

Runs the broker, message, NATS peer, Kafka peer, consumer, Kafka Streams peer, our word count in its
shape (4 journals, 2 processes, a SIGKILL), replication, Gazette
peer, allocator scale and Spark figures (the source beside spark.read.json and Kafka's source, live reads,
the sink beside Kafka's sink) in turn, prints one table, writes bench/results.json and
rewrites the README's table. A part that cannot run here (no nats-server, real Gazette not built,
Kafka's jars not fetched, Kafka Streams' word count not built, no bench/consumer.py, no Go) or fails
leaves its rows with a note saying why; a failure also makes the exit status 1, after the results are
written.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from bench import (
    allocator_scale,
    gazette_peer,
    kafka_peer,
    kstreams_peer,
    messages,
    nats_peer,
    replication,
    report,
    runner,
    spark,
    spark_live,
    spark_sink,
    wordcount_group,
)
from bench.figures import Figure, PeerUnavailable

HERE = Path(__file__).resolve().parent
TABLE_WIDTH = 160
CONSUMER_MODULE = "bench.consumer"
CONSUMER_MISSING = "bench/consumer.py not present"
SPARK_SKIPPED_QUICK = "skipped: --quick"
SPARK_SKIPPED = "skipped: --no-spark"
GAZETTE_SKIPPED = "skipped: --no-gazette"
KAFKA_SKIPPED = "skipped: --no-kafka"
ALLOCATOR_SKIPPED = "skipped: --no-allocator"
ALLOCATOR_SKIPPED_QUICK = "skipped: --quick (our allocator takes minutes at Gazette's smallest size)"

Log = Callable[[str], None]


@dataclasses.dataclass
class Part:
    """One benchmark of the suite: its figures unmeasured (to carry notes) and how to measure them."""

    name: str
    unmeasured: Callable[[], dict[str, Figure]]
    measure: Callable[[runner.Settings, Log], dict[str, Figure]] | None
    skip_note: str | None = None  # set: not run, every row says this
    settings: Any = None  # the part's own settings dataclass, recorded in results.json


def _consumer_module() -> ModuleType | None:
    try:
        return importlib.import_module(CONSUMER_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != CONSUMER_MODULE:
            raise
        return None


def _consumer_part(settings: runner.Settings) -> Part:
    module = _consumer_module()
    if module is None:
        placeholder = Figure(
            "cons_e2e", "Word count e2e exactly-once (bench/consumer.py)", messages.UNIT, True
        )
        return Part("consumer", lambda: {placeholder.key: placeholder}, None, CONSUMER_MISSING)

    def measure(settings: runner.Settings, log: Log) -> dict[str, Figure]:
        return module.run(module.settings_for(settings), log)  # type: ignore[no-any-return]

    return Part("consumer", module.consumer_figures, measure, settings=module.settings_for(settings))


def parts(args: argparse.Namespace, settings: runner.Settings, spark_details: dict[str, Any]) -> list[Part]:
    """The suite in table order. `spark_details` receives Spark's extra results (data, profiles)."""
    message_settings = messages.settings_for(settings)
    nats_settings = nats_peer.settings_for(settings.name, settings.runs)
    kstreams_settings = kstreams_peer.settings_for(settings)

    spark_settings = spark.QUICK if args.quick else spark.FULL
    if args.runs is not None:
        spark_settings = dataclasses.replace(spark_settings, runs=args.runs)

    live_settings = spark_live.QUICK if args.quick else spark_live.FULL
    if args.runs is not None:
        live_settings = dataclasses.replace(live_settings, runs=args.runs)

    sink_settings = spark_sink.QUICK if args.quick else spark_sink.FULL
    if args.runs is not None:
        sink_settings = dataclasses.replace(sink_settings, runs=args.runs)

    def spark_measure(settings: runner.Settings, log: Log) -> dict[str, Figure]:
        results = spark.run(spark_settings, log, kafka=not args.no_kafka)
        spark_details.update({k: v for k, v in results.items() if k != "readers"})
        return spark.figures_of(results)

    spark_skip = (
        SPARK_SKIPPED if args.no_spark else SPARK_SKIPPED_QUICK if args.quick and not args.spark else None
    )
    return [
        Part("broker", runner.journal_broker_figures, runner.run, settings=settings),
        Part(
            "messages",
            messages.message_figures,
            lambda s, log: messages.run(message_settings, log),
            settings=message_settings,
        ),
        Part(
            "nats peer",
            nats_peer.peer_figures,
            lambda s, log: nats_peer.run(nats_settings, log),
            settings=nats_settings,
        ),
        Part(
            "kafka peer",
            kafka_peer.part_figures,
            lambda s, log: kafka_peer.run(message_settings, log),
            KAFKA_SKIPPED if args.no_kafka else None,
            settings=message_settings,
        ),
        _consumer_part(settings),
        Part(
            "kafka streams peer",
            lambda: kstreams_peer.peer_figures(kstreams_settings),
            lambda s, log: kstreams_peer.run(kstreams_settings, log),
            KAFKA_SKIPPED if args.no_kafka else None,
            settings=kstreams_settings,
        ),
        Part(  # after Kafka Streams' part: its figure is our rows' limit and peer
            "word count group",
            lambda: wordcount_group.group_figures(kstreams_settings),
            lambda s, log: wordcount_group.run(kstreams_settings, log),
            settings=kstreams_settings,
        ),
        Part("replication", replication.replication_figures, replication.run, settings=settings),
        Part(
            "gazette peer",
            gazette_peer.peer_figures,
            gazette_peer.run,
            GAZETTE_SKIPPED if args.no_gazette else None,
            settings=settings,
        ),
        Part(
            "allocator scale",
            lambda: allocator_scale.scale_figures(allocator_scale.FULL),
            lambda s, log: allocator_scale.run_part(allocator_scale.FULL, log),
            ALLOCATOR_SKIPPED if args.no_allocator else ALLOCATOR_SKIPPED_QUICK if args.quick else None,
            settings=allocator_scale.FULL,
        ),
        Part(
            "spark",
            lambda: spark.spark_figures(spark_settings.shapes, kafka=not args.no_kafka),
            spark_measure,
            spark_skip,
            settings=spark_settings,
        ),
        Part(
            "spark live",
            spark_live.live_figures,
            lambda s, log: spark_live.run(live_settings, log),
            spark_skip or (KAFKA_SKIPPED if args.no_kafka else None),
            settings=live_settings,
        ),
        Part(
            "spark sink",
            spark_sink.sink_figures,
            lambda s, log: spark_sink.run(sink_settings, log),
            spark_skip or (KAFKA_SKIPPED if args.no_kafka else None),
            settings=sink_settings,
        ),
    ]


def run_parts(
    suite: list[Part], settings: runner.Settings, console: Console
) -> tuple[dict[str, Figure], dict[str, str], dict[str, dict[str, Any]]]:
    """Measures each part in turn; the figures in order, the notes of unmeasured ones, and per part
    its status ("ok", "skipped", "failed"), seconds and note."""
    figures: dict[str, Figure] = {}
    notes: dict[str, str] = {}
    status: dict[str, dict[str, Any]] = {}
    for part in suite:
        start = time.monotonic()
        note = part.skip_note
        state = "skipped" if note else "ok"
        measured: dict[str, Figure] | None = None
        if note is None and part.measure is not None:
            console.rule(part.name)
            try:
                measured = part.measure(settings, console.log)
            except PeerUnavailable as exc:  # not installed or not built here: a skip, not a failure
                state, note = "skipped", str(exc)
            except Exception as exc:  # the other parts still run; the exit status says it failed
                console.log(f"{part.name} failed:\n{traceback.format_exc()}")
                state, note = "failed", f"failed: {type(exc).__name__}: {exc}"
        got = measured if measured is not None else part.unmeasured()
        figures |= got
        if note is not None:
            notes |= {key: note for key in got}
        seconds = time.monotonic() - start
        status[part.name] = {"status": state, "seconds": round(seconds, 1), "note": note}
        console.log(f"{part.name}: {state} in {seconds:.0f} s" + (f" ({note})" if note else ""))
    return figures, notes, status


def _versions() -> dict[str, str | None]:
    binary = nats_peer.server_binary()
    return {
        "nats-server": nats_peer.server_version(binary) if binary else None,
        "nats-py": report.package_version("nats-py"),
        "Gazette (Go)": gazette_peer.version(),
        "Kafka": kafka_peer.version(),
        "Kafka Streams": kstreams_peer.version(),
        "confluent-kafka": report.package_version("confluent-kafka"),
        "pyspark": report.package_version("pyspark"),
        "Gazette allocator (Go)": allocator_scale.gazette_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer and shorter runs, no Spark (under 2 minutes)"
    )
    parser.add_argument("--runs", type=int, help="override the number of runs (each figure is their median)")
    parser.add_argument(
        "--no-spark", action="store_true", help="skip bench/spark.py (fragments_io vs spark.read.json)"
    )
    parser.add_argument("--spark", action="store_true", help="with --quick, run Spark's figures too")
    parser.add_argument(
        "--no-gazette", action="store_true", help="skip bench/gazette_peer.py (real Gazette brokers)"
    )
    parser.add_argument(
        "--no-kafka",
        action="store_true",
        help="skip bench/kafka_peer.py and bench/kstreams_peer.py (a Kafka broker, Kafka Streams, Spark's Kafka source)",
    )
    parser.add_argument(
        "--no-allocator",
        action="store_true",
        help="skip bench/allocator_scale.py (ours and Gazette's allocator)",
    )
    args = parser.parse_args()
    settings = runner.QUICK if args.quick else runner.FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs {args.runs} must be at least 1")
        settings = dataclasses.replace(settings, runs=args.runs)

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, TABLE_WIDTH)  # piped or captured: don't wrap the table
    started, load_at_start = time.monotonic(), os.getloadavg()
    console.log(
        f"bench ({settings.name}): {settings.runs} runs of {settings.append_mib} MiB per throughput figure "
        f"and {settings.small_appends} small appends; load average {load_at_start[0]:.1f} on {os.cpu_count()} CPUs"
    )
    spark_details: dict[str, Any] = {}
    suite = parts(args, settings, spark_details)
    figures, notes, status = run_parts(suite, settings, console)
    kafka_peer.fill_ours(figures)
    kafka_spark_note = (spark_details.get("kafka") or {}).get("note")
    if kafka_spark_note:  # the Spark part ran without its Kafka reader
        notes |= {
            k: kafka_spark_note
            for k in kafka_peer.PEER_OF.values()
            if k.startswith("spark_") and k in figures
        }
    peer_of = (
        nats_peer.PEER_OF
        | gazette_peer.PEER_OF
        | kafka_peer.PEER_OF
        | kstreams_peer.PEER_OF
        | wordcount_group.PEER_OF
        | spark_live.PEER_OF
        | spark_sink.PEER_OF
        | allocator_scale.peer_of(allocator_scale.FULL)
    )
    peers = [*nats_peer.peer_figures(), *gazette_peer.peer_figures(), *kafka_peer.peer_figures()]
    peers += [*kstreams_peer.peer_figures(), *spark_live.PEER_OF.values(), *spark_sink.PEER_OF.values()]
    peers += allocator_scale.peer_keys(allocator_scale.FULL)
    rows = report.rows_of(figures, peer_of, notes, peers)
    env = report.environment(_versions())
    env["machine"]["load_average_at_start"] = list(load_at_start)
    settings_json: dict[str, Any] = {"name": settings.name, "runs": settings.runs}
    for part in suite:
        settings_json[part.name] = (
            None if part.skip_note or part.settings is None else dataclasses.asdict(part.settings)
        )
    elapsed = time.monotonic() - started
    report.print_table(
        rows, f"gazette-py bench ({settings.name}, each figure the median of its runs)", console
    )
    extra = {"parts": status, "seconds": round(elapsed, 1), "spark": spark_details or None}
    report.write_json(HERE / "results.json", report.results_json(rows, env, settings_json, **extra))
    report.update_readme(HERE / "README.md", rows, env, settings_json)
    console.log(f"wrote {HERE / 'results.json'} and the table in {HERE / 'README.md'} after {elapsed:.0f} s")
    failed = [name for name, s in status.items() if s["status"] == "failed"]
    if failed:
        console.log(f"failed: {', '.join(failed)} (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
