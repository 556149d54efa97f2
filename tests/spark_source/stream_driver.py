"""A streaming query in its own driver process, for the kill -9 restart test of test_streaming.py.

`python stream_driver.py CONFIG_JSON`: reads the gazette stream of `store` with trigger availableNow
into a parquet sink with a checkpoint, then prints one JSON line of the run's progress. With `block`
set, the first micro-batch with rows writes the marker file `block` and waits there (its executor
worker exits when its parent does), so the test can SIGKILL the driver mid-batch.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _blocking_hook(marker: str):
    def hook(batches):
        for batch in batches:
            if batch.num_rows:
                with open(marker + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.replace(marker + ".tmp", marker)
                parent = os.getppid()
                while os.getppid() == parent:  # until the driver (and with it our parent) is gone
                    time.sleep(0.05)
                os._exit(1)
            yield batch

    return hook


def main() -> None:
    config = json.loads(sys.argv[1])
    import fragments_io

    spark = fragments_io.spark_session(
        "local[2]",
        "fragments_io-stream-driver",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "512m",
        },
    )
    reader = (
        spark.readStream.format("gazette").option("store", config["store"]).option("schema", config["schema"])
    )
    for key, value in config.get("options", {}).items():
        reader = reader.option(key, str(value))
    df = reader.load()
    if config.get("block"):
        df = df.mapInArrow(_blocking_hook(config["block"]), df.schema)
    query = (
        df.writeStream.format("parquet")
        .option("path", config["out"])
        .option("checkpointLocation", config["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = query.recentProgress
    print(
        json.dumps(
            {
                "batches": len({p["batchId"] for p in progress}),
                "rows": sum(p["numInputRows"] for p in progress),
            }
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()
