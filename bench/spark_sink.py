"""`python -m bench.spark_sink [--rows N] [--runs R]`: the `gazette` sink's rows/s beside Spark's Kafka
sink writing the same rows to Kafka, in one Spark session (issue 25's sink figure; goal >= 1x).

The rows (id, user, kind, amount, ts) are generated once and cached. Each run writes them with
`df.write.format("gazette")` (exactly once: uncommitted messages, ACKs from the driver) to a JSON
journal of an in-process LocalCluster broker, and with `df.write.format("kafka")` (at least once;
each row `to_json`) to a one-node Kafka broker started here, alternating; the figure is the median
seconds of each, and the ratio t(kafka) / t(gazette) (higher is better for us). Both brokers and the
Spark session share this machine. Not part of `make bench`'s table yet.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import kafka_peer

DEFAULT_ROWS = 400_000
DEFAULT_RUNS = 3
PARTITIONS = 2
GOAL = 1.0


def _rows(spark: Any, n: int) -> Any:
    df = (
        spark.range(n)
        .selectExpr(
            "id",
            "concat('user-', id % 1000) AS user",
            "element_at(array('click', 'view', 'purchase', 'signup'), CAST(id % 4 AS INT) + 1) AS kind",
            "CAST(id % 10007 AS DOUBLE) / 100 AS amount",
            "timestamp_seconds(1700000000 + id) AS ts",
        )
        .repartition(PARTITIONS)
    )
    df.cache()
    df.count()
    return df


def run(rows: int, runs: int, log: Any = print) -> dict[str, Any]:
    import fragments_io
    from gazette.local.cluster import LocalCluster

    jars = kafka_peer.spark_jars()
    with tempfile.TemporaryDirectory(prefix="bench-sink-") as tmp, kafka_peer.kafka_broker(log) as bootstrap:
        kafka_peer.create_topic(bootstrap, "sink", PARTITIONS)
        with LocalCluster(1, data_dir=str(Path(tmp) / "gazette")) as cluster:
            client = cluster.client()
            journals = [f"bench/sink-{i}" for i in range(PARTITIONS)]
            client.apply_journals(
                [
                    cluster.journal_spec(
                        j, labels={"content-type": "application/x-ndjson", "app": "bench-sink"}
                    )
                    for j in journals
                ]  # fmt: skip
            )
            cluster.wait_for_routes(journals)
            broker = cluster.broker_endpoints[0]
            spark = fragments_io.spark_session(
                "local[2]", "bench-sink",
                **{"spark.jars": ",".join(jars), "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
            )  # fmt: skip
            try:
                df = _rows(spark, rows)

                def ours() -> None:
                    (df.write.format("gazette").mode("append").option("broker", broker)
                       .option("journals", "app=bench-sink").option("key", "user").save())  # fmt: skip

                def kafka() -> None:
                    (df.selectExpr("user AS key", "to_json(struct(*)) AS value").write.format("kafka")
                       .option("kafka.bootstrap.servers", bootstrap).option("topic", "sink").save())  # fmt: skip

                seconds: dict[str, list[float]] = {"gazette": [], "kafka": []}
                ours()  # warm-up: Python workers, connections
                kafka()
                for r in range(runs):
                    for name, fn in (("gazette", ours), ("kafka", kafka)):
                        start = time.perf_counter()
                        fn()
                        seconds[name].append(time.perf_counter() - start)
                        log(f"run {r + 1}: {name} {rows:,} rows in {seconds[name][-1]:.2f} s")
            finally:
                spark.stop()
    med = {k: statistics.median(v) for k, v in seconds.items()}
    ratio = med["kafka"] / med["gazette"]
    result = {
        "rows": rows,
        "runs": runs,
        "seconds": seconds,
        "rows_per_s": {k: rows / v for k, v in med.items()},
        "ratio_vs_kafka": ratio,
        "goal": GOAL,
    }
    log(
        f"gazette sink {result['rows_per_s']['gazette']:,.0f} rows/s, Kafka sink {result['rows_per_s']['kafka']:,.0f} "
        f"rows/s: ratio {ratio:.2f}x (goal >= {GOAL:.1f}x)"
    )
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_sink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    args = parser.parse_args(argv)
    return run(args.rows, args.runs)


if __name__ == "__main__":
    main()
