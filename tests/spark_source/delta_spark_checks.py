"""Real delta-spark checks in their own driver process (a SparkSession's jars are fixed when its JVM
starts, and the test session's has no Delta), for test_delta_spark.py.

`python delta_spark_checks.py WORKDIR STORE`: starts `fragments_io.delta_spark_session()`, runs
each check below under WORKDIR and prints one JSON object of what it observed (return values, rows,
txn versions, Delta's own history); the test module asserts on it. Nothing here decides pass/fail.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings

SCHEMA = "p INT, i INT, word STRING, n INT"


def _history(spark, path: str) -> list[str]:
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    return [r.operation for r in rows]


def _engine(path: str) -> str:
    """The engineInfo of the table's first commit (delta-spark writes `Apache-Spark/... Delta-Lake/...`)."""
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json")) as f:
        for line in f:
            action = json.loads(line)
            if "commitInfo" in action:
                return str(action["commitInfo"].get("engineInfo", ""))
    return ""


def append_checks(spark, work: str) -> dict:
    from deltalake import DeltaTable

    import fragments_io
    from fragments_io.delta import write_with_delta_spark

    path = os.path.join(work, "append")
    first = spark.range(0, 10).selectExpr("id AS k", "'a' AS v")
    second = spark.range(10, 15).selectExpr("id AS k", "'b' AS v")
    out = {
        "first": fragments_io.to_delta(first, path, app_id="load", version=0),
        "rerun": fragments_io.to_delta(first, path, app_id="load", version=0),
    }
    # Past our own check, straight to Delta's writer: Delta's txn record makes it skip the write.
    write_with_delta_spark(first, path, "load", 0)
    out["second"] = fragments_io.to_delta(second, path, app_id="load", version=1)
    out["older"] = fragments_io.to_delta(second, path, app_id="load", version=0)
    out["rows"] = spark.read.format("delta").load(path).count()
    out["keys"] = sorted(r.k for r in spark.read.format("delta").load(path).collect())
    out["history"] = _history(spark, path)
    out["txn"] = DeltaTable(path).transaction_version("load")
    out["engine"] = _engine(path)
    return out


def merge_checks(spark, work: str) -> dict:
    from deltalake import DeltaTable

    import fragments_io
    from fragments_io.delta import merge_with_delta_spark

    path = os.path.join(work, "merge")
    rows0 = [(k, "v0", 0) for k in range(5)]
    # Key 5 twice in one batch: the greater `seq` wins.
    rows1 = [(3, "v1", 1), (4, "v1", 1), (5, "old", 1), (5, "v1", 2), (6, "v1", 1)]
    cols = "k LONG, v STRING, seq INT"
    out = {
        "first": fragments_io.to_delta(
            spark.createDataFrame(rows0, cols), path, app_id="up", version=0, merge_on="k", order_by="seq"
        ),
        "second": fragments_io.to_delta(
            spark.createDataFrame(rows1, cols), path, app_id="up", version=1, merge_on="k", order_by="seq"
        ),
    }
    replay = spark.createDataFrame([(0, "replayed", 9), (9, "replayed", 9)], cols)
    out["replay"] = fragments_io.to_delta(replay, path, app_id="up", version=1, merge_on="k")
    merge_with_delta_spark(replay, path, ["k"], "up", 1)  # Delta's idempotent-DML settings skip it
    out["table"] = sorted((r.k, r.v) for r in spark.read.format("delta").load(path).collect())
    out["history"] = _history(spark, path)
    out["txn"] = DeltaTable(path).transaction_version("up")
    out["settings_left"] = [
        spark.conf.get(k, None)
        for k in ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion")
    ]
    return out


def stream_checks(spark, work: str, store: str) -> dict:
    import fragments_io

    path = os.path.join(work, "stream")
    writer = fragments_io.delta_foreach_batch(path, app_id="s1", merge_on=["journal", "begin"])
    query = (
        spark.readStream.format("gazette")
        .option("store", store)
        .option("schema", SCHEMA)
        .option("maxBytesPerTrigger", "3000")
        .load()
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", os.path.join(work, "ck"))
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(240)
    last = max(p.batchId for p in query.recentProgress)
    table = spark.read.format("delta").load(path)
    return {
        "finished": finished,
        "last_batch": last,
        "begins": sorted(r.begin for r in table.select("begin").collect()),
        "history": _history(spark, path),
    }


def main() -> None:
    work, store = sys.argv[1], sys.argv[2]
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    logging.getLogger("gazette.message.sequencer").setLevel(logging.CRITICAL)
    import fragments_io
    from fragments_io.delta import uses_delta_spark

    spark = fragments_io.delta_spark_session(
        "local[2]",
        "delta-spark-checks",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "768m",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        result = {
            "uses_delta_spark": uses_delta_spark(spark),
            "append": append_checks(spark, work),
            "merge": merge_checks(spark, work),
            "stream": stream_checks(spark, work, store),
        }
    finally:
        spark.stop()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
