"""Delta materialisation through the deltalake package, the path of sessions without Delta's jars:
batch writes keyed by an explicit version, a stream's foreachBatch keyed by batch id, re-runs and
replays writing nothing, MERGE upserts by key, files written by the executors (one per partition,
through the caller's storage_options, S3 included) and committed once. Real delta-spark runs in
test_delta_spark.py; here only its writer options are checked, against a recording stand-in.
"""

from __future__ import annotations

import logging

import pytest
from deltalake import DeltaTable
from fio_journals import envelopes_of, persist_journal, random_journal

import fragments_io
from fragments_io.committed import committed_reference
from fragments_io.delta import (
    DeltaJarsNotFoundError,
    DeltaWriteError,
    delta_jars,
    target_schema,
    uses_delta_spark,
    write_files,
    write_with_delta_spark,
)
from fragments_io.errors import SchemaMismatchError
from gazette.protocol.codec import Codec

SCHEMA = "p INT, i INT, word STRING, n INT"


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    root = tmp_path_factory.mktemp("delta-store")
    store = f"file://{root}/"
    frames = random_journal(77, 160, 3)
    persist_journal(store, "dl/a", frames, (Codec.ZSTANDARD,), frames_per_fragment=20)
    committed = sorted(e.begin for e in committed_reference(envelopes_of("dl/a", frames)))
    return store, frames, committed


def _read(spark, store, **options):
    return (
        spark.read.format("gazette").option("store", store).option("schema", SCHEMA).options(**options).load()
    )


def _begins(path):
    return sorted(DeltaTable(path).to_pyarrow_table(columns=["begin"]).column("begin").to_pylist())


def test_batch_versions_write_once(spark, journal, tmp_path):
    store, _, committed = journal
    fragments_io.register(spark)
    opts = {"isolation": "uncommitted", "maxPartitionBytes": "2000"}
    df = _read(spark, store, **opts)
    parts = df.rdd.getNumPartitions()
    assert parts >= 3
    path = str(tmp_path / "table")
    # Separate load()s: a filter pushed into one scan of a DataFrame can reach its other scans.
    first = _read(spark, store, **opts).where("begin < 3000")
    assert fragments_io.to_delta(first, path, app_id="load", version=0)
    table = DeltaTable(path)
    assert table.transaction_version("load") == 0 and table.version() == 0
    assert 1 < len(table.file_uris()) <= parts  # one file per non-empty partition, from the executors
    want_first = sorted(r.begin for r in first.select("begin").collect())
    assert _begins(path) == want_first
    # A re-run of the same version, and an older one, write nothing.
    assert not fragments_io.to_delta(first, path, app_id="load", version=0)
    rest = _read(spark, store, **opts).where("begin >= 3000")
    assert fragments_io.to_delta(rest, path, app_id="load", version=1)
    assert not fragments_io.to_delta(rest, path, app_id="load", version=1)
    assert not fragments_io.to_delta(first, path, app_id="load", version=0)
    table = DeltaTable(path)
    assert table.version() == 1 and table.transaction_version("load") == 1
    assert _begins(path) == sorted(r.begin for r in _read(spark, store, **opts).select("begin").collect())
    # Another application keeps its own versions in the same table; an empty DataFrame still
    # records its version.
    assert fragments_io.to_delta(_read(spark, store).where("begin < 0"), path, app_id="other", version=7)
    assert DeltaTable(path).transaction_version("other") == 7
    assert len(_begins(path)) == _read(spark, store, **opts).count()
    committed_df = _read(spark, store)
    committed_path = str(tmp_path / "committed")
    assert fragments_io.to_delta(committed_df, committed_path, app_id="c", version=3)
    assert _begins(committed_path) == committed
    row = DeltaTable(committed_path).to_pyarrow_table().slice(0, 1).to_pylist()[0]
    assert set(row) == set(committed_df.columns) and row["published_at"].tzinfo is not None


def test_crash_between_files_and_commit_leaves_no_rows(spark, journal, tmp_path):
    """Files written by a run that died before its commit stay unreferenced; the re-run commits."""
    store, _, committed = journal
    fragments_io.register(spark)
    df = _read(spark, store, maxPartitionBytes="2000")
    path = str(tmp_path / "table")
    head = _read(spark, store, maxPartitionBytes="2000").where("begin < 1000")
    assert fragments_io.to_delta(head, path, app_id="job", version=0)
    orphans = write_files(df, path, target_schema(df))  # a version-1 run that died here
    assert orphans
    assert fragments_io.to_delta(df, path, app_id="job", version=1)
    assert _begins(path) == sorted([b for b in committed if b < 1000] + committed)
    referenced = {u.rsplit("/", 1)[1] for u in DeltaTable(path).file_uris()}
    assert not referenced & {a.path for a in orphans}


def test_stream_foreach_batch_writes_each_batch_once(spark, journal, tmp_path):
    store, _, committed = journal
    fragments_io.register(spark)
    path = str(tmp_path / "table")
    writer = fragments_io.delta_foreach_batch(path, app_id="stream-1")
    stream = spark.readStream.format("gazette").option("store", store).option("schema", SCHEMA)
    query = (
        stream.option("maxBytesPerTrigger", "3000")
        .load()
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    last = max(p.batchId for p in query.recentProgress)
    assert last >= 2
    assert DeltaTable(path).transaction_version("stream-1") == last
    assert _begins(path) == committed
    # Spark replays a batch after a failure with the same id: nothing is written again.
    before = DeltaTable(path).version()
    writer(_read(spark, store), last)
    assert DeltaTable(path).version() == before and _begins(path) == committed


def test_bad_arguments_and_schema_mismatch(spark, journal, tmp_path):
    store, _, _ = journal
    fragments_io.register(spark)
    df = _read(spark, store, inferSchema="false").select("journal", "begin")
    path = str(tmp_path / "table")
    with pytest.raises(DeltaWriteError, match="app_id '' is not a non-empty string"):
        fragments_io.to_delta(df, path, app_id="", version=0)
    with pytest.raises(DeltaWriteError, match="version -1 of app_id 'a'"):
        fragments_io.to_delta(df, path, app_id="a", version=-1)
    with pytest.raises(DeltaWriteError, match="engine 'jvm'"):
        fragments_io.delta_foreach_batch(path, app_id="a", engine="jvm")
    assert fragments_io.to_delta(df, path, app_id="a", version=0)
    with pytest.raises(SchemaMismatchError, match="column 'begin' is string in the DataFrame but long"):
        fragments_io.to_delta(df.selectExpr("journal", "string(begin) as begin"), path, app_id="a", version=1)
    with pytest.raises(SchemaMismatchError, match=r"the table lacks column\(s\) \['x'\]"):
        fragments_io.to_delta(df.selectExpr("journal", "begin", "1 as x"), path, app_id="a", version=1)
    assert DeltaTable(path).version() == 0


class _Recorder:
    """Stands in for DataFrame.write (this session has no Delta jars)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, *args))
            return self

        return call


def test_delta_spark_path_uses_txn_options(spark):
    assert not uses_delta_spark(spark)

    class _Frame:
        write = _Recorder()

    frame = _Frame()
    write_with_delta_spark(frame, "/t", "app", 4)  # type: ignore[arg-type]
    assert frame.write.calls == [
        ("format", "delta"),
        ("mode", "append"),
        ("option", "txnAppId", "app"),
        ("option", "txnVersion", "4"),
        ("save", "/t"),
    ]


def test_merge_upserts_by_key_and_skips_a_replay(spark, tmp_path):
    path = str(tmp_path / "table")
    cols = "k LONG, v STRING, seq INT"
    rows0 = [(k, "v0", 0) for k in range(5)]
    rows1 = [(3, "v1", 1), (4, "v1", 1), (5, "old", 1), (5, "v1", 2), (6, "v1", 1)]
    up = {"app_id": "up", "merge_on": "k", "order_by": "seq"}
    assert fragments_io.to_delta(spark.createDataFrame(rows0, cols), path, version=0, **up)
    assert fragments_io.to_delta(spark.createDataFrame(rows1, cols), path, version=1, **up)
    replay = spark.createDataFrame([(0, "replayed", 9)], cols)
    assert not fragments_io.to_delta(replay, path, version=1, **up)
    table = DeltaTable(path)
    got = sorted((r["k"], r["v"]) for r in table.to_pyarrow_table().to_pylist())
    assert got == [(0, "v0"), (1, "v0"), (2, "v0"), (3, "v1"), (4, "v1"), (5, "v1"), (6, "v1")]
    assert table.transaction_version("up") == 1 and table.version() == 1
    assert [h["operation"] for h in table.history()][0] == "MERGE"
    with pytest.raises(DeltaWriteError, match=r"column\(s\) \['nope'\]"):
        fragments_io.to_delta(replay, path, app_id="up", version=2, merge_on="nope")
    with pytest.raises(DeltaWriteError, match="order_by is only meaningful with merge_on"):
        fragments_io.delta_foreach_batch(path, app_id="up", order_by="seq")


def test_storage_options_reach_the_executors(spark, moto_server, s3_bucket):
    """The S3 endpoint is only in storage_options: the executors' Parquet files and the driver's
    commit both go to moto through it."""
    path = f"s3://{s3_bucket}/tables/t"
    options = {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    df = spark.range(0, 100, 1, 2).selectExpr("id AS k", "id * 2 AS v")
    assert fragments_io.to_delta(df, path, app_id="s3", version=0, storage_options=options)
    assert not fragments_io.to_delta(df, path, app_id="s3", version=0, storage_options=options)
    table = DeltaTable(path, storage_options=options)
    assert len(table.file_uris()) == 2 and table.transaction_version("s3") == 0
    assert sorted(table.to_pyarrow_table().column("k").to_pylist()) == list(range(100))


def test_delta_spark_needs_its_jars(spark, tmp_path):
    with pytest.raises(DeltaJarsNotFoundError, match="make delta-jars"):
        delta_jars(str(tmp_path))
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in (
        "delta-spark_4.2_2.13-4.4.0",
        "delta-storage-4.4.0",
        "scala-library-2.13.17",
        "zstd-jni-1.5.7-3",
    ):
        (jars / f"{name}.jar").touch()
    # Spark's own scala-library and zstd-jni stay the ones loaded.
    assert [p.rsplit("/", 1)[1] for p in delta_jars(str(jars))] == [
        "delta-spark_4.2_2.13-4.4.0.jar",
        "delta-storage-4.4.0.jar",
    ]
    df = spark.range(1)
    with pytest.raises(DeltaWriteError, match=r"fragments_io.delta_spark_session\(\)"):
        fragments_io.to_delta(df, str(tmp_path / "t"), app_id="a", version=0, engine="delta-spark")
