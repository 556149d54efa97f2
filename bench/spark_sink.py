"""`python -m bench.spark_sink [--quick] [--rows N] [--runs R] [--json]`: the `gazette` sink's rows/s beside
Spark's Kafka sink writing the same rows to Kafka, and the `gazette` source's batch read of the sink's
rows live through a broker beside the same read from the store (issue 25's throughput figures), in one
Spark session (`local[2]`) on this machine, in the same runs.

Sink: the rows (id, user, kind, amount, ts) are generated once and cached. Each run writes them with
`df.write.format("gazette")` (exactly once: tasks append uncommitted messages, the driver ACKs them)
to two JSON journals routed by `user`, on a subprocess broker of a LocalCluster with a file:// store,
and with `df.write.format("kafka")` (at least once; each row `to_json`, keyed by `user`) to a
two-partition topic of a one-node Kafka broker started here; rows/s of each, goal: ours >= 1x Kafka's.

Read: the same cached rows written once more by the sink, before the runs and untimed, into two twin
sets of journals (fragments larger than the rows, so nothing persists by itself): one set flushed to
the store, one left in the broker's spools. Each run reads both with a batch `spark.read.format("gazette")`
(committed, every column decoded and aggregated): the flushed set from the store (the default) and the
unflushed set live through the broker (options `broker` and `live=true`); rows/s of each and the live
path's ratio to the store path's. The twins hold the same rows (the same cached DataFrame, the same
routing), differing only in their messages' UUIDs; each read's result is checked against the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import kafka_peer, spark_live
from bench.figures import Figure, Target

Log = Callable[[str], None]

PARTITIONS = 2  # Spark partitions of the rows, journals per set and Kafka partitions
UNIT = "k rows/s"
SINK_TARGET = Target("ratio", 1.0, "≥ 1× Kafka's sink")
PEER_OF = {"spark_sink_rows_s": "spark_kafka_sink_rows_s"}
READ_SCHEMA = "id BIGINT, user STRING, kind STRING, amount DOUBLE, ts TIMESTAMP"
READ_FRAGMENT_BYTES = 1 << 30  # larger than any run's rows: the unflushed twins stay in the spools
TOPIC = "bench-sink"
KINDS = ("click", "view", "purchase", "signup")
SINK_LABEL, LIVE_LABEL, STORED_LABEL = "bench-sink", "bench-sink-live", "bench-sink-stored"


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    rows: int  # per write and per read
    runs: int


QUICK = Settings("quick", 50_000, 1)
FULL = Settings("full", 200_000, 3)


def sink_figures() -> dict[str, Figure]:
    """The rows of this part, in table order. Kafka's sink is both the peer and the limit of ours (the
    target is on the median of per-run ratios); the store read is the limit of the live read (no goal:
    the ratio is reported)."""
    figures = [
        Figure("spark_kafka_sink_rows_s", "Peer: Spark's Kafka sink, df.write (at least once)", UNIT, True),
        Figure(
            "spark_sink_rows_s", "Spark gazette sink, df.write (exactly once)", UNIT, True,
            "spark_kafka_sink_rows_s", SINK_TARGET,
        ),
        Figure("spark_read_store_rows_s", "Spark gazette source batch read of the sink's rows, store", UNIT,
               True),
        Figure(
            "spark_read_live_rows_s", "Spark gazette source batch read of the sink's rows, live via broker",
            UNIT, True, "spark_read_store_rows_s",
        ),
    ]  # fmt: skip
    return {f.key: f for f in figures}


def _rows(spark: Any, n: int) -> Any:
    """n rows (id, user, kind, amount, ts) in PARTITIONS partitions, cached and materialised."""
    df = (
        spark.range(n)
        .selectExpr(
            "id",
            "concat('user-', id % 1000) AS user",
            f"element_at(array({', '.join(repr(k) for k in KINDS)}), CAST(id % 4 AS INT) + 1) AS kind",
            "CAST(id % 10007 AS DOUBLE) / 100 AS amount",
            "timestamp_seconds(1700000000 + id) AS ts",
        )
        .repartition(PARTITIONS)
    )
    df.cache()
    df.count()
    return df


class _Part:
    """The writes and reads of one part's run, over one Spark session, Kafka broker and cluster."""

    def __init__(self, spark: Any, bootstrap: str, cluster: Any, rows: int) -> None:
        self.spark, self.bootstrap, self.cluster, self.rows = spark, bootstrap, cluster, rows
        self.broker = ",".join(cluster.broker_endpoints)
        self.client = cluster.client()
        self.df = _rows(spark, rows)
        self.sets = {label: self._journals(label) for label in (SINK_LABEL, LIVE_LABEL, STORED_LABEL)}
        kafka_peer.create_topic(bootstrap, TOPIC, PARTITIONS)
        self.kafka_writes = 0
        n = rows  # what a read of the rows aggregates to (see read), worked out here, not while timed
        self.expected = (
            (n, n * (n - 1) // 2, n, max(f"user-{i}" for i in range(min(n, 1000))), max(KINDS[: min(n, 4)])),
            sum(i % 10007 for i in range(n)) / 100,
        )

    def _journals(self, label: str) -> list[str]:
        """PARTITIONS JSON journals labelled app=`label`, named bench/`label`/<i>. The sink's own keep
        the default fragment length (its rolled fragments persist as a broker would persist them); the
        read twins' fragments are larger than the rows."""
        names = [f"bench/{label}/{i}" for i in range(PARTITIONS)]
        extra = {} if label == SINK_LABEL else {"fragment_length": READ_FRAGMENT_BYTES}
        labels = {"content-type": "application/x-ndjson", "app": label}
        self.client.apply_journals([self.cluster.journal_spec(j, labels=labels, **extra) for j in names])
        self.cluster.wait_for_routes(names)
        return names

    def gazette_sink(self, label: str = SINK_LABEL) -> None:
        (self.df.write.format("gazette").mode("append").option("broker", self.broker)
            .option("journals", f"app={label}").option("key", "user").save())  # fmt: skip

    def kafka_sink(self) -> None:
        (self.df.selectExpr("user AS key", "to_json(struct(*)) AS value").write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap).option("topic", TOPIC).save())  # fmt: skip
        self.kafka_writes += 1

    def prepare_reads(self) -> None:
        """The read twins: the rows into each set, then the stored set flushed to the store."""
        for label in (LIVE_LABEL, STORED_LABEL):
            self.gazette_sink(label)
        for journal in self.sets[STORED_LABEL]:
            self.client.flush(journal)

    def read(self, live: bool) -> None:
        """A committed batch read of one twin set, every column decoded; raises if it does not hold
        exactly the rows (their count, ids and amounts)."""
        from pyspark.sql import functions as F

        label = LIVE_LABEL if live else STORED_LABEL
        reader = (
            self.spark.read.format("gazette").option("store", self.cluster.store)
            .option("journals", f"bench/{label}/").option("schema", READ_SCHEMA)
        )  # fmt: skip
        if live:
            reader = reader.option("broker", self.broker).option("live", "true")
        got = reader.load().agg(
            F.count("*").alias("n"), F.sum("id").alias("ids"), F.sum("amount").alias("amount"),
            F.count("ts").alias("ts"), F.max("user").alias("user"), F.max("kind").alias("kind"),
        ).first()  # fmt: skip
        want, amount = self.expected
        seen = (got.n, got.ids, got.ts, got.user, got.kind)
        if seen != want or got.amount is None or abs(got.amount - amount) > 1e-6 * max(1.0, amount):
            raise RuntimeError(
                f"reading bench/{label}/ (live={live}) gave {got}, not the {self.rows:,} rows written"
            )

    def check_kafka(self) -> None:
        """Kafka's topic holds at least every row written (at least once: a retried task adds more)."""
        held = sum(kafka_peer.high_watermarks(self.bootstrap, TOPIC, PARTITIONS))
        if held < self.kafka_writes * self.rows:
            raise RuntimeError(
                f"Kafka's topic {TOPIC} holds {held:,} records, not {self.kafka_writes * self.rows:,}"
            )


def _timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(settings: Settings, log: Log) -> dict[str, Figure]:
    """Every figure of sink_figures(), one sample per run; KafkaUnavailable (a PeerUnavailable) when
    Kafka or Spark's Kafka sink cannot run here."""
    from gazette.local.cluster import LocalCluster

    figures = sink_figures()
    jars = kafka_peer.spark_jars()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-sink-"))
        spark = stack.enter_context(
            spark_live.session(jars, "bench-spark-sink")
        )  # the JVM first, before any gRPC thread runs here
        bootstrap = stack.enter_context(kafka_peer.kafka_broker(log))
        cluster = stack.enter_context(
            LocalCluster(brokers=1, store=f"file://{tmp}/store/", data_dir=f"{tmp}/data", mode="subprocess")
        )
        part = _Part(spark, bootstrap, cluster, settings.rows)
        part.gazette_sink()  # warm-up: Python workers, connections, Kafka's producers
        part.kafka_sink()
        part.prepare_reads()
        part.read(live=True)  # warm-up of both read paths (and the first check of the twins)
        part.read(live=False)
        rows_k = settings.rows / 1e3
        for k in range(settings.runs):
            seconds = {
                "spark_sink_rows_s": _timed(part.gazette_sink),
                "spark_kafka_sink_rows_s": _timed(part.kafka_sink),
                "spark_read_live_rows_s": _timed(lambda: part.read(live=True)),
                "spark_read_store_rows_s": _timed(lambda: part.read(live=False)),
            }
            for key, s in seconds.items():
                figures[key].samples.append(rows_k / s)
            log(
                f"run {k + 1}: {settings.rows:,} rows; sink gazette {seconds['spark_sink_rows_s']:.2f} s, "
                f"Kafka {seconds['spark_kafka_sink_rows_s']:.2f} s; batch read live "
                f"{seconds['spark_read_live_rows_s']:.2f} s, store {seconds['spark_read_store_rows_s']:.2f} s"
            )
        part.check_kafka()
    return figures


def main(argv: list[str] | None = None) -> dict[str, Figure]:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_sink", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.rows:,} rows, {QUICK.runs} run")
    parser.add_argument("--rows", type=int, help="override the rows per write and read")
    parser.add_argument("--runs", type=int, help="override the number of runs (each figure is their median)")
    parser.add_argument("--json", action="store_true", help="print each figure's samples as one JSON line")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    for name in ("rows", "runs"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                parser.error(f"--{name} {value} must be at least 1")
            settings = dataclasses.replace(settings, **{name: value})
    from rich.console import Console

    from bench import report

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped or captured: don't wrap the table
    figures = run(settings, console.log)
    rows = report.rows_of(figures, PEER_OF, {}, list(PEER_OF.values()))
    report.print_table(rows, "gazette sink and live reads (each figure the median of its runs)", console)
    if args.json:
        print(json.dumps({k: f.samples for k, f in figures.items()}))
    return figures


if __name__ == "__main__":
    main()
