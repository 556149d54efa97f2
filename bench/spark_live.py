"""`python -m bench.spark_live [--quick] [--runs N]`: live reads of the `gazette` source (issue 25), beside
Spark's Kafka source on the same machine in the same run.

Freshness: a publisher appends a small committed message every `period_s` seconds, carrying the time
it was sent; a Structured Streaming query (trigger processingTime 0.5 s, foreachBatch) notes when each
row reaches the driver (after the batch's rows are collected). Its publish-to-visible latency, p50
and p99 over the messages sent once the query is warm (WARM_BATCHES micro-batches with rows), for the gazette source reading
through a broker (nothing flushed) and for Spark's Kafka source (read_committed) over a one-node
Kafka broker fed by an idempotent producer (acks=all), each message flushed as it is sent. Goal:
p99 at most 2 s and at most Kafka's p99 + 20 %.

Throughput: a batch query (a count of committed rows) over the same messages in two journals, one
read through the broker (nothing persisted but the first fragment), one flushed and read from the
store, in turns: MB/s of journal content, the live path's ratio to the store path's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench import kafka_peer
from bench.figures import Figure, Target, percentile

TRIGGER = "0.5 seconds"
SCHEMA = "seq BIGINT, sent DOUBLE"
FRESH_TARGET = Target("value", 2000.0, "≤ 2000 ms")
VS_KAFKA_TARGET = Target("ratio", 1 / 1.2, "≤ Kafka's p99 + 20 %")
WAIT_S = 180.0
PEER_OF = {"spark_live_fresh_p50": "spark_kafka_fresh_p50", "spark_live_fresh_p99": "spark_kafka_fresh_p99"}

Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    seconds: float  # publishing per freshness run, after the query's first micro-batch
    period_s: float  # between messages
    read_mib: int  # journal content of the throughput figures
    runs: int


QUICK = Settings("quick", 8.0, 0.1, 8, 1)
FULL = Settings("full", 20.0, 0.1, 48, 3)


def live_figures() -> dict[str, Figure]:
    """The rows of this part, in table order."""
    figures = [
        Figure("spark_kafka_fresh_p50", "Peer: Spark's Kafka source, publish-to-visible p50 (trigger 0.5 s)", "ms", False),
        Figure("spark_kafka_fresh_p99", "Peer: Spark's Kafka source, publish-to-visible p99 (trigger 0.5 s)", "ms", False),
        Figure(
            "spark_live_fresh_p50", "Spark gazette source live, publish-to-visible p50 (trigger 0.5 s)", "ms", False,
            "spark_kafka_fresh_p50", FRESH_TARGET,
        ),
        Figure(
            "spark_live_fresh_p99", "Spark gazette source live, publish-to-visible p99 (trigger 0.5 s)", "ms", False,
            "spark_kafka_fresh_p99", VS_KAFKA_TARGET,
        ),
        Figure("spark_store_read", "Spark gazette source batch read from the store (after flush)", "MB/s", True),
        Figure("spark_live_read", "Spark gazette source batch read through the broker (unflushed)", "MB/s", True,
               "spark_store_read"),
    ]  # fmt: skip
    return {f.key: f for f in figures}


# -- freshness ---------------------------------------------------------------------------------------


class _Arrivals:
    """foreachBatch's record of each row's latency (driver time after collecting the batch - sent)."""

    def __init__(self) -> None:
        self.latencies: dict[int, float] = {}
        self.batches_with_rows = 0
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("seq", "sent").collect()
        now = time.time()
        with self.lock:
            self.batches_with_rows += bool(rows)
            for r in rows:
                if r.seq is not None and r.sent is not None:
                    self.latencies.setdefault(int(r.seq), (now - float(r.sent)) * 1000.0)


WARM_BATCHES = 3  # micro-batches with rows before measuring: the first ones start Spark's Python workers


def _measure_stream(
    query: Any, arrivals: _Arrivals, send: Callable[[int], None], settings: Settings
) -> list[float]:
    """Warms the query up (messages until WARM_BATCHES micro-batches delivered rows), publishes for
    settings.seconds, waits for every message sent to arrive; the latencies (ms) of those messages."""

    def check(deadline: float, what: str) -> None:
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {WAIT_S:.0f} s")

    deadline = time.monotonic() + WAIT_S
    warm = 0
    while arrivals.batches_with_rows < WARM_BATCHES:
        check(deadline, f"the streaming query did not deliver {WARM_BATCHES} micro-batches of rows")
        send(-1 - warm)
        warm += 1
        time.sleep(0.25)
    sent: list[int] = []
    end = time.monotonic() + settings.seconds
    while time.monotonic() < end:
        send(len(sent))
        sent.append(len(sent))
        time.sleep(settings.period_s)
    deadline = time.monotonic() + WAIT_S
    while not all(s in arrivals.latencies for s in sent):
        missing = sum(s not in arrivals.latencies for s in sent)
        check(deadline, f"{missing} of {len(sent)} messages never reached the query")
        time.sleep(0.05)
    return [arrivals.latencies[s] for s in sent]


def _gazette_freshness(spark: Any, cluster: Any, settings: Settings, tmp: str) -> list[float]:
    from gazette.message.framing import JSONFraming
    from gazette.message.uuid import Clock, Flags, build_uuid, new_producer_id

    client = cluster.client()
    journal = f"bench/live/fresh-{time.monotonic_ns()}"
    client.apply_journals([cluster.journal_spec(journal, labels={"content-type": "application/x-ndjson"})])
    cluster.wait_for_routes([journal])
    framing, pid, clock = JSONFraming(), new_producer_id(), Clock.now()

    def send(seq: int) -> None:
        uuid = build_uuid(pid, clock.tick(), Flags.OUTSIDE_TXN)
        client.append(journal, framing.encode({"seq": seq, "sent": time.time()}, uuid))

    arrivals = _Arrivals()
    df = (
        spark.readStream.format("gazette").option("store", cluster.store).option("journals", journal)
        .option("broker", ",".join(cluster.broker_endpoints)).option("schema", SCHEMA)
        .option("startingOffsets", "latest").load()
    )  # fmt: skip
    query = (
        df.writeStream.foreachBatch(arrivals).option("checkpointLocation", f"{tmp}/ck-gazette")
        .trigger(processingTime=TRIGGER).start()
    )  # fmt: skip
    try:
        return _measure_stream(query, arrivals, send, settings)
    finally:
        query.stop()


def _kafka_freshness(spark: Any, bootstrap: str, settings: Settings, tmp: str) -> list[float]:
    from confluent_kafka import Producer
    from pyspark.sql import functions as F

    topic = f"bench-live-fresh-{time.monotonic_ns()}"
    kafka_peer.create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})

    def send(seq: int) -> None:
        producer.produce(topic, json.dumps({"seq": seq, "sent": time.time()}).encode())
        if producer.flush(kafka_peer.CLIENT_TIMEOUT_S):
            raise RuntimeError(f"Kafka did not take message {seq} within {kafka_peer.CLIENT_TIMEOUT_S:.0f} s")

    arrivals = _Arrivals()
    raw = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed").option("startingOffsets", "latest").load()
    )  # fmt: skip
    df = raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("m")).select("m.*")
    query = (
        df.writeStream.foreachBatch(arrivals).option("checkpointLocation", f"{tmp}/ck-kafka")
        .trigger(processingTime=TRIGGER).start()
    )  # fmt: skip
    try:
        return _measure_stream(query, arrivals, send, settings)
    finally:
        query.stop()


# -- throughput --------------------------------------------------------------------------------------


def _throughput(spark: Any, cluster: Any, settings: Settings) -> tuple[float, float]:
    """MB/s of a committed count of the same messages in two journals: one unflushed, read through
    the broker, one flushed, read from the store; read in turns (live, store, live, store), the
    better of each path's two reads."""
    from gazette.message.framing import JSONFraming
    from gazette.message.uuid import Clock, Flags, build_uuid, new_producer_id

    client = cluster.client()
    stamp = time.monotonic_ns()
    live_j, store_j = f"bench/live/read-{stamp}", f"bench/live/stored-{stamp}"
    labels = {"content-type": "application/x-ndjson"}
    client.apply_journals([cluster.journal_spec(j, labels=labels) for j in (live_j, store_j)])
    cluster.wait_for_routes([live_j, store_j])
    framing, pid, clock = JSONFraming(), new_producer_id(), Clock.now()
    pad = "x" * 60
    total, rows, sent = settings.read_mib << 20, 0, 0
    while sent < total:
        batch = [framing.encode({"seq": rows + i, "sent": 0.0, "pad": pad}, build_uuid(pid, clock.tick(), Flags.OUTSIDE_TXN))
                 for i in range(8000)]  # fmt: skip
        data = b"".join(batch)
        for j in (live_j, store_j):
            client.append(j, data)
        sent += len(data)
        rows += len(batch)
    client.flush(store_j)
    broker = ",".join(cluster.broker_endpoints)

    def timed(journal: str, **options: str) -> float:
        reader = spark.read.format("gazette").option("store", cluster.store).option("journals", journal)
        for k, v in options.items():
            reader = reader.option(k, v)
        df = reader.option("schema", SCHEMA).load()
        start = time.perf_counter()
        n = df.count()
        seconds = time.perf_counter() - start
        if n != rows:
            raise RuntimeError(f"read {n} rows of {journal}, expected {rows}")
        return sent / 1e6 / seconds

    live, store = [], []
    for _ in range(2):
        live.append(timed(live_j, broker=broker))
        store.append(timed(store_j))
    return max(live), max(store)


# -- the part -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def session(jars: list[str], app: str = "bench-spark-live") -> Iterator[Any]:
    """A local[2] Spark session with `jars` (Kafka's source and sink) for the bench's Spark parts
    against Kafka (this one and bench/spark_sink.py), stopped on exit."""
    import fragments_io

    spark = fragments_io.spark_session(
        "local[2]",
        app,
        **{
            "spark.jars": ",".join(jars),
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def run(settings: Settings, log: Log) -> dict[str, Figure]:
    """Every figure of live_figures(), one sample per run; KafkaUnavailable (a PeerUnavailable) when
    Kafka or Spark's Kafka source cannot run here."""
    from gazette.local.cluster import LocalCluster

    figures = live_figures()
    jars = kafka_peer.spark_jars()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-live-"))
        spark = stack.enter_context(session(jars))  # the JVM first, before any gRPC thread runs here
        bootstrap = stack.enter_context(kafka_peer.kafka_broker(log))
        cluster = stack.enter_context(
            LocalCluster(brokers=1, store=f"file://{tmp}/store/", data_dir=f"{tmp}/data", mode="subprocess")
        )
        for k in range(settings.runs):
            ours = _gazette_freshness(spark, cluster, settings, f"{tmp}/{k}")
            kafka = _kafka_freshness(spark, bootstrap, settings, f"{tmp}/{k}")
            for name, samples in (("spark_live_fresh", ours), ("spark_kafka_fresh", kafka)):
                figures[f"{name}_p50"].samples.append(statistics.median(samples))
                figures[f"{name}_p99"].samples.append(percentile(samples, 99))
            live, store = _throughput(spark, cluster, settings)
            figures["spark_live_read"].samples.append(live)
            figures["spark_store_read"].samples.append(store)
            log(
                f"run {k + 1}: publish-to-visible p50/p99 gazette live {statistics.median(ours):.0f}/"
                f"{percentile(ours, 99):.0f} ms, Kafka {statistics.median(kafka):.0f}/{percentile(kafka, 99):.0f} ms "
                f"({len(ours)}/{len(kafka)} messages); batch read live {live:.1f} MB/s, store {store:.1f} MB/s"
            )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_live", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run")
    parser.add_argument("--runs", type=int, help="override the number of runs (each figure is their median)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs {args.runs} must be at least 1")
        settings = dataclasses.replace(settings, runs=args.runs)
    from rich.console import Console

    from bench import report

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped or captured: don't wrap the table
    figures = run(settings, console.log)
    rows = report.rows_of(figures, PEER_OF, {}, list(PEER_OF.values()))
    report.print_table(rows, "gazette source: live reads (each figure the median of its runs)", console)


if __name__ == "__main__":
    main()
