"""`python kafka_spark_check.py WORKDIR BOOTSTRAP`: bench/spark.py's query over a tiny data set, read by Spark's Kafka
source (the data set replayed by bench/kafka_peer.py into the Kafka broker at BOOTSTRAP) and by our committed source.

Run in its own process by tests/test_bench_kafka_peer.py: a Spark session takes its jars when its JVM
starts, and the test process may already have one without Spark's Kafka source. Prints one JSON line:
both readers' result rows, the data set's committed count and the replay's transactions.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fragments_io  # noqa: E402
from bench import kafka_peer, spark  # noqa: E402

SETTINGS = spark.Settings(
    "smoke", gigabytes=0.001, journals=2, fragment_mib=1, runs=1, codec="none", profile=False
)


def _rows(rows: list) -> list[list[str]]:
    """Comparable rows: sums of doubles rounded (the readers add them in different orders)."""
    return sorted([[f"{v:.6f}" if isinstance(v, float) else str(v) for v in row] for row in rows])


def main(workdir: str, bootstrap: str) -> None:
    t0 = time.monotonic()
    data = spark.generate(Path(workdir), SETTINGS, lambda _: None)
    with kafka_peer.spark_source(data, log, bootstrap) as source:
        log(f"data set in Kafka after {time.monotonic() - t0:.1f} s")
        session = fragments_io.spark_session(
            "local[2]", "kafka-spark-check",
            **{"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "2",
               **source.session_conf()},
        )  # fmt: skip
        log(f"Spark session after {time.monotonic() - t0:.1f} s")
        try:
            readers = spark._contenders(session, data, "all columns", source)
            out = {
                "kafka": _rows(spark._query(readers[spark.KAFKA]())),
                "ours": _rows(spark._query(readers["committed"]())),
                "committed": data.committed,
                "messages": data.messages,
                "transactions": source.transactions,
            }
            log(f"queries done after {time.monotonic() - t0:.1f} s")
        finally:
            session.stop()
    print(json.dumps(out))


def log(line: str) -> None:
    print(line, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
