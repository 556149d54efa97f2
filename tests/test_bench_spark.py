"""bench/spark.py's figures (the Python Data Source API floor is a limit row of the all-columns shape)
and its CPU accounting of the Spark JVM and its Python workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import spark
from bench.report import rows_of


def _results(readers: dict[str, list[float]]) -> dict[str, object]:
    return {
        "data": {"bytes": 8_000_000},
        "readers": [{"shape": "all columns", "reader": k, "samples": v} for k, v in readers.items()],
        "kafka": None,
    }


def test_the_floor_is_a_limit_row_after_our_readers() -> None:
    readers = {"json": [2.0], "uncommitted": [1.0], "committed": [1.0], "read_committed": [2.0]}
    figures = spark.figures_of(_results({**readers, spark.FLOOR: [0.5]}))
    assert list(figures)[-1] == "spark_api_floor_all"
    assert figures["spark_api_floor_all"].samples == [16.0]  # MB/s of the same bytes
    rows = {r.figure.key: r for r in rows_of(figures)}
    assert rows["spark_api_floor_all"].role == "limit"
    assert rows["spark_uncommitted_all"].ratio == 2.0  # still against spark.read.json
    assert "spark_api_floor_all" not in spark.figures_of(_results(readers))


def test_the_floor_counts_every_message() -> None:
    data = spark.Dataset(None, "", None, [], 0, messages=10, committed=7, fragments=0)  # type: ignore[arg-type]
    counts = {"json": 10, "uncommitted": 10, "committed": 7, "read_committed": 7}
    spark._check_counts({**counts, spark.FLOOR: 10}, data)
    with pytest.raises(RuntimeError, match="pre-decoded"):
        spark._check_counts({**counts, spark.FLOOR: 9}, data)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_cpu_seconds_count_the_cpu_of_children_that_exited() -> None:
    """A child that burned 0.2 s of CPU and was reaped shows in the descendants' figure, not the root's."""
    burn = "import time\nwhile time.process_time() < 0.2: pass"
    before = spark._cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=60)
    after = spark._cpu_seconds(os.getpid())
    assert before is not None and after is not None
    assert after[1] - before[1] >= 0.19
    assert spark._cpu_seconds(-1) is None  # no such process
