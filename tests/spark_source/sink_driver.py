"""A Spark driver the sink's fault tests run as a subprocess (so that it can be SIGKILLed): runs the
jobs of the JSON spec given as argv[1] in order, in a local[2,4] session (task retries on) or the spec's "master".

Before the first job it writes its pid and its JVM's pid to spec["pid_file"]: the sink's
FRAGMENTS_IO_SINK_FAULT hook kills both, as a crash of the driver would.

Jobs:
- {"kind": "batch", "rows": n, "start": id0, "options": {...}}: ids [start, start + n) with a word,
  shuffled over 2 partitions, written with df.write.format("gazette") and `options`;
- {"kind": "stream", "input": dir, "options": {...}}: the JSON files of `dir` (one per micro-batch)
  written with df.writeStream.format("gazette"), trigger availableNow;
- {"kind": "kafka-style", "rows": n, "broker": url, "journal": name, "kill_after": k}: the rows
  published the way an at-least-once sink does (each row committed on its own, by a producer per
  task attempt); the first attempt of partition 0 dies after `k` rows.
"""

from __future__ import annotations

import json
import os
import signal
import sys

RUN_TIMEOUT_S = 120.0


def _kafka_style(spark, job):
    broker, journal, kill_after = job["broker"], job["journal"], job["kill_after"]

    def publish(rows):
        from pyspark import TaskContext

        from gazette.client.sync import connect
        from gazette.message.publisher import Publisher

        ctx = TaskContext.get()
        client = connect(broker=broker, timeout=30.0)
        with Publisher(client) as pub:
            for n, row in enumerate(rows, 1):
                pub.publish_committed(journal, {"id": row.id, "word": row.word})
                if ctx.attemptNumber() == 0 and ctx.partitionId() == 0 and n == kill_after:
                    pub.flush(30.0)
                    os.kill(os.getpid(), signal.SIGKILL)
            pub.flush(30.0)

    _rows(spark, job).foreachPartition(publish)


def _rows(spark, job):
    return (
        spark.range(job.get("start", 0), job.get("start", 0) + job["rows"])
        .selectExpr("id", "concat('w', id % 7) AS word")
        .repartition(2)
    )


def main() -> None:
    spec = json.loads(sys.argv[1])
    import fragments_io

    master = spec.get("master", "local[2,4]")
    extra = {"spark.executor.memory": "512m"} if master.startswith("local-cluster") else {}
    spark = fragments_io.spark_session(
        master,
        "sink-driver",
        **extra,
        **{
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "50",
            "spark.driver.memory": "1g",
        },
    )
    with open(spec["pid_file"], "w") as f:
        f.write(f"{os.getpid()} {spark.sparkContext._gateway.proc.pid}\n")
    for job in spec["jobs"]:
        kind = job["kind"]
        if kind == "batch":
            w = _rows(spark, job).write.format("gazette").mode("append")
            for k, v in job["options"].items():
                w = w.option(k, v)
            w.save()
        elif kind == "stream":
            reader = spark.readStream.schema("id LONG, word STRING").option("maxFilesPerTrigger", 1)
            w = reader.json(job["input"]).writeStream.format("gazette").trigger(availableNow=True)
            for k, v in job["options"].items():
                w = w.option(k, v)
            query = w.start()
            if not query.awaitTermination(RUN_TIMEOUT_S):
                query.stop()
                raise SystemExit("the streaming query did not finish in time")
            if query.exception() is not None:
                raise SystemExit(f"the streaming query failed: {query.exception()}")
        elif kind == "kafka-style":
            _kafka_style(spark, job)
        else:
            raise SystemExit(f"unknown job kind {kind!r}")
        print(f"job done: {json.dumps(job)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
