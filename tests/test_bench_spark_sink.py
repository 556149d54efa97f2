"""bench/spark_sink.py: the part's rows in the suite (the sink paired with Kafka's sink and its ≥ 1× target
on the same run's ratio, the live read's ratio to the store read, the part's place and settings in
`python -m bench`), and one tiny run of the standalone command (a smoke test of the code paths: every
figure measured once, each read checked against the rows written; not a measurement).

The run skips when Java, the jars (`make kafka-jars`), confluent-kafka or pyspark are missing, except
under CI, where that is a failure (tests/needs.py).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from needs import KAFKA_JARS_STEP, VENV_STEP, import_or_missing, missing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import kafka_peer, runner, spark_sink  # noqa: E402
from bench.report import rows_of  # noqa: E402

RUN_TIMEOUT_S = 300  # a bound on a hung run, not a measure: it takes under a minute


def _suite_args(*flags: str) -> argparse.Namespace:
    args = dict(quick=False, spark=False, runs=None, no_spark=False, no_gazette=False, no_kafka=False)
    args |= {flag.lstrip("-").replace("-", "_"): True for flag in flags}
    return argparse.Namespace(no_allocator=True, **args)


def test_the_sink_row_is_paired_with_kafkas_sink_and_the_live_read_with_the_store_read() -> None:
    figures = spark_sink.sink_figures()
    samples = {
        "spark_kafka_sink_rows_s": [40.0, 50.0, 20.0],
        "spark_sink_rows_s": [60.0, 40.0, 30.0],  # per run 1.5, 0.8, 1.5: median 1.5
        "spark_read_store_rows_s": [100.0, 100.0, 100.0],
        "spark_read_live_rows_s": [80.0, 90.0, 70.0],
    }
    for key, values in samples.items():
        figures[key].samples.extend(values)
    rows = {
        r.figure.key: r for r in rows_of(figures, spark_sink.PEER_OF, {}, list(spark_sink.PEER_OF.values()))
    }

    sink, kafka = rows["spark_sink_rows_s"], rows["spark_kafka_sink_rows_s"]
    assert sink.role == "ours" and kafka.role == "peer"
    assert sink.ratio == pytest.approx(1.5)  # the target's ratio: per run, to the same run's Kafka
    assert sink.peer_ratio == pytest.approx(40.0 / 40.0)  # the medians'
    assert sink.met is True and sink.cells()[7].startswith(spark_sink.SINK_TARGET.text)
    live, store = rows["spark_read_live_rows_s"], rows["spark_read_store_rows_s"]
    assert store.role == "limit" and live.role == "ours"
    assert live.ratio == pytest.approx(0.8) and live.figure.target is None  # reported, no goal

    figures["spark_sink_rows_s"].samples[:] = [30.0, 40.0, 10.0]
    assert rows_of(figures, spark_sink.PEER_OF)[1].met is False


def test_the_suite_runs_the_part_with_spark_and_kafka_only() -> None:
    suite_module = importlib.import_module("bench.__main__")

    def part(*flags: str):
        (found,) = [
            p for p in suite_module.parts(_suite_args(*flags), runner.QUICK, {}) if p.name == "spark sink"
        ]
        return found

    assert part().skip_note is None and part().settings == spark_sink.FULL
    assert part("--quick").skip_note == suite_module.SPARK_SKIPPED_QUICK
    quick = part("--quick", "--spark")
    assert quick.skip_note is None and quick.settings == spark_sink.QUICK
    assert spark_sink.QUICK.rows < spark_sink.FULL.rows
    assert part("--no-kafka").skip_note == suite_module.KAFKA_SKIPPED
    assert part("--no-spark").skip_note == suite_module.SPARK_SKIPPED
    assert list(part().unmeasured()) == list(spark_sink.sink_figures())


def test_a_tiny_run_measures_every_figure(tmp_path: Path) -> None:
    """`python -m bench.spark_sink` in its own process (a Spark session takes its jars when its JVM
    starts; this process may have one without Spark's Kafka sink): one run of 2,000 rows."""
    import_or_missing("pyspark", VENV_STEP)
    try:
        kafka_peer.check()
        kafka_peer.spark_jars()
    except kafka_peer.KafkaUnavailable as exc:
        missing(str(exc), VENV_STEP if str(exc).startswith(kafka_peer.NO_CLIENT) else KAFKA_JARS_STEP)
    argv = [sys.executable, "-m", "bench.spark_sink", "--rows", "2000", "--runs", "1", "--json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    samples = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(samples) == list(spark_sink.sink_figures())
    assert all(len(v) == 1 and v[0] > 0 for v in samples.values()), samples
