"""The jobs cluster_driver.py runs on the standalone cluster, by name (JOBS). Each takes the session
and JSON arguments and returns JSON: what it observed, for test_standalone_cluster.py to judge.

A new case (a sink, live reads through brokers) is one function here registered with @job, and a
test calling `spark_cluster.run(name, **args)`. Functions shipped to executors are defined in this
module, so executors import it (its directory is on their PYTHONPATH) as they import fragments_io.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from standalone import executor_above, executor_id, proc_stat

JOBS: dict[str, Callable[..., Any]] = {}
STREAM_TIMEOUT_S = 240


def job(fn: Callable[..., Any]) -> Callable[..., Any]:
    JOBS[fn.__name__] = fn
    return fn


def _identity(_: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Where this task's Python runs: its pid and interpreter, and the executor JVM above it (the
    nearest ancestor running CoarseGrainedExecutorBackend), its executor id and its parent."""
    import fragments_io  # as the source's read() does: from the workers' PYTHONPATH

    pid = os.getpid()
    executor, chain = executor_above(pid)
    if executor is None:
        yield {"pid": pid, "python": sys.executable, "executor_pid": None, "chain": chain}
        return
    yield {
        "pid": pid,
        "python": sys.executable,
        "package": fragments_io.__file__,
        "executor_pid": executor,
        "executor_id": executor_id(executor),
        "executor_parent": proc_stat(executor)[1],
        "chain": chain,
    }


@job
def identities(spark: Any, partitions: int = 4) -> list[dict[str, Any]]:
    """One identity per task of a `partitions`-task job."""
    rdd = spark.sparkContext.parallelize(range(partitions), partitions)
    return rdd.mapPartitions(_identity).collect()


def _rows(df: Any, fields: list[str]) -> dict[str, list[list[Any]]]:
    """{journal: [[begin, *fields] ...] in begin order}; the fields are columns, or else are taken
    from the JSON of the `value` column (a read without a schema)."""
    columns = fields if all(f in df.columns for f in fields) else ["value"]
    out: dict[str, list[list[Any]]] = {}
    for row in df.select("journal", "begin", *columns).collect():
        values = (
            [row[f] for f in fields] if columns == fields else [json.loads(row.value).get(f) for f in fields]
        )
        out.setdefault(row.journal, []).append([row.begin, *values])
    return {j: sorted(v) for j, v in out.items()}


@job
def batch_read(spark: Any, fields: list[str], **options: str) -> dict[str, Any]:
    """`spark.read.format("gazette")` with `options`: its rows and its number of partitions."""
    df = spark.read.format("gazette").options(**options).load()
    return {"rows": _rows(df, fields), "partitions": df.rdd.getNumPartitions()}


@job
def read_committed(spark: Any, fields: list[str], by_fragment: bool, **options: str) -> dict[str, Any]:
    """fragments_io.read_committed with the plan given (by fragment: a shuffle across executors).
    Its `schema` parameter is a whole Spark schema, not the option's message DDL: give neither."""
    import fragments_io

    df = fragments_io.read_committed(spark, by_fragment=by_fragment, **options)
    return {"rows": _rows(df, fields)}


def _available_now(query: Any) -> int:
    """Waits for a trigger-availableNow query to finish (bounded) and returns the rows it read."""
    finished = query.awaitTermination(STREAM_TIMEOUT_S)
    if not finished:
        query.stop()
        raise RuntimeError(f"the stream did not finish within {STREAM_TIMEOUT_S} s")
    if query.exception() is not None:
        raise RuntimeError(f"the stream failed: {query.exception()}")
    return sum(p["numInputRows"] for p in query.recentProgress)


@job
def stream_to_parquet(
    spark: Any, out: str, checkpoint: str, fields: list[str], **options: str
) -> dict[str, Any]:
    """A gazette stream (trigger availableNow) into a parquet sink with a checkpoint; the sink's rows
    afterwards and the rows this run's micro-batches read."""
    query = (
        spark.readStream.format("gazette")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    read = _available_now(query)
    return {"rows": _rows(spark.read.parquet(out), fields), "read_this_run": read}


@job
def gazette_to_gazette(
    spark: Any, broker: str, journal: str, fields: list[str], **options: str
) -> dict[str, Any]:
    """A batch read of the source (`options`) written by the gazette sink into `journal` through
    `broker`: one message per row, of its journal, begin and `fields`."""
    df = spark.read.format("gazette").options(**options).load().select("journal", "begin", *fields)
    df.write.format("gazette").mode("append").option("broker", broker).option("journal", journal).save()
    return {"partitions": df.rdd.getNumPartitions()}


@job
def stream_gazette_to_gazette(
    spark: Any, broker: str, journal: str, checkpoint: str, fields: list[str], **options: str
) -> dict[str, Any]:
    """As gazette_to_gazette, as a stream (trigger availableNow) with a checkpoint: the rows read."""
    query = (
        spark.readStream.format("gazette")
        .options(**options)
        .load()
        .select("journal", "begin", *fields)
        .writeStream.format("gazette")
        .option("broker", broker)
        .option("journal", journal)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    return {"read_this_run": _available_now(query)}


@job
def committed_to_delta(
    spark: Any, path: str, app_id: str, version: int, storage_options: dict[str, str], **options: str
) -> dict[str, Any]:
    """fragments_io.to_delta of the committed rows (executors write the Parquet files, the driver
    commits once per version), then the same version again, which must write nothing."""
    import fragments_io

    df = spark.read.format("gazette").options(**options).load().select("journal", "begin")
    first = fragments_io.to_delta(df, path, app_id=app_id, version=version, storage_options=storage_options)
    again = fragments_io.to_delta(df, path, app_id=app_id, version=version, storage_options=storage_options)
    return {"first": first, "again": again}


@job
def range_to_gazette(
    spark: Any, broker: str, journal: str, rows: int, partitions: int, batch_rows: int
) -> dict[str, Any]:
    """Ids [0, rows) with a word, in `partitions` partitions (no shuffle: one stage of result
    tasks), written by the gazette sink into `journal`, `batch_rows` rows per Arrow batch (so a
    task publishes in several batches). The executors' FRAGMENTS_IO_SINK_TASK_FAULT acts here."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(batch_rows))
    try:
        df = spark.range(0, rows, 1, partitions).selectExpr("id", "concat('w', id % 7) AS word")
        df.write.format("gazette").mode("append").option("broker", broker).option("journal", journal).save()
    finally:
        spark.conf.set(key, before)
    return {"partitions": partitions}


@job
def active_executors(spark: Any, count: int) -> list[str]:
    """The ids of the application's live executors, once there are `count` (bounded)."""
    from cluster_driver import wait_for_executors

    return wait_for_executors(spark, count)


@job
def last_job_attempts(spark: Any) -> list[dict[str, Any]]:
    """Every task attempt of the application's latest job, from the driver's status store: its
    partition (index), attempt number, executor and host, status (RUNNING, SUCCESS, KILLED, FAILED),
    whether Spark launched it as a speculative copy, and its error or kill reason."""
    from cluster_driver import LISTENER_DRAIN_MS

    sc = spark.sparkContext
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup()
    if not jobs:
        return []
    info = tracker.getJobInfo(max(jobs))
    store = sc._jsc.sc().statusStore()
    sc._jsc.sc().listenerBus().waitUntilEmpty(LISTENER_DRAIN_MS)
    out = []
    for stage in info.stageIds if info is not None else []:
        tasks = store.taskList(stage, 0, 10_000)
        for i in range(tasks.size()):
            t = tasks.apply(i)
            error = t.errorMessage()
            out.append(
                {
                    "stage": stage,
                    "partition": t.index(),
                    "attempt": t.attempt(),
                    "executor": t.executorId(),
                    "host": t.host(),
                    "status": t.status(),
                    "speculative": t.speculative(),
                    "error": error.get() if error.isDefined() else None,
                }
            )
    return sorted(out, key=lambda a: (a["partition"], a["attempt"]))
