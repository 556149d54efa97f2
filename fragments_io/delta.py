"""Exactly-once materialisation of DataFrames into Delta tables, keyed by Delta's app-id/version
transaction records (the `txn` action): a write of a version the table already holds writes nothing.

With delta-spark configured on the session, Delta's own `txnAppId`/`txnVersion` writer options do
it. Otherwise the `deltalake` package: every Spark partition writes one Parquet file into the table
directory from its executor (mapInArrow), the driver collects only the files' metadata and commits
them with the txn record in one Delta commit, so a version is in the table entirely or not at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from fragments_io.errors import FragmentsIOError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DeltaWriteError", "delta_foreach_batch", "to_delta", "uses_delta_spark"]

ENGINES = ("auto", "deltalake", "delta-spark")
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
FILES_SCHEMA = "path string, size long, modification_time long, stats string"


class DeltaWriteError(FragmentsIOError):
    """A Delta write was asked with bad arguments, or its commit failed."""


def uses_delta_spark(spark: SparkSession) -> bool:
    """Whether `spark` has Delta Lake configured (its SQL extension or catalog)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    return DELTA_EXTENSION in extensions or catalog == DELTA_CATALOG


def _check_args(app_id: Any, version: Any, engine: str) -> None:
    if not isinstance(app_id, str) or not app_id.strip():
        raise DeltaWriteError(f"app_id {app_id!r} is not a non-empty string (it names the writing application)")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise DeltaWriteError(f"version {version!r} of app_id {app_id!r} is not an integer >= 0")
    if engine not in ENGINES:
        raise DeltaWriteError(f"engine {engine!r} is not one of {list(ENGINES)}")


def _table(path: str, storage_options: dict[str, str] | None) -> Any:
    """The deltalake DeltaTable at `path`, or None if there is no table there yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path, storage_options=storage_options)
    except TableNotFoundError:
        return None


def to_delta(
    df: DataFrame,
    path: str,
    *,
    app_id: str,
    version: int,
    storage_options: dict[str, str] | None = None,
    engine: str = "auto",
) -> bool:
    """Appends `df` to the Delta table at `path` (created if missing) once per (app_id, version).

    Returns False, writing nothing, when the table's transaction record for `app_id` is already at
    `version` or above (a re-run, or a batch replayed after a failure); True when this call
    committed. Versions of one app_id must increase: streams use the micro-batch id, batch jobs an
    explicit counter. `engine` "auto" uses delta-spark when the session has Delta configured, else
    the `deltalake` package; `storage_options` go to deltalake (object store credentials).
    """
    _check_args(app_id, version, engine)
    table = _table(path, storage_options)
    if table is not None:
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return False
    use_spark = engine == "delta-spark" or (engine == "auto" and uses_delta_spark(df.sparkSession))
    if use_spark:
        write_with_delta_spark(df, path, app_id, version)
        return True
    return _write_with_deltalake(df, path, app_id, version, table, storage_options)


def write_with_delta_spark(df: DataFrame, path: str, app_id: str, version: int) -> None:
    """Delta's idempotent writes: the writer skips a (txnAppId, txnVersion) the table already holds."""
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(version))
        .save(path)
    )


def delta_foreach_batch(
    path: str, *, app_id: str, storage_options: dict[str, str] | None = None, engine: str = "auto"
) -> DeltaBatchWriter:
    """A `foreachBatch` function writing each micro-batch with version = its batch id:
    `stream.writeStream.foreachBatch(delta_foreach_batch(path, app_id="q1")).start()`. A batch Spark
    replays after a failure finds its version in the table and writes nothing."""
    _check_args(app_id, 0, engine)
    return DeltaBatchWriter(path, app_id, storage_options, engine)


@dataclasses.dataclass(frozen=True)
class DeltaBatchWriter:
    path: str
    app_id: str
    storage_options: dict[str, str] | None = None
    engine: str = "auto"

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        to_delta(
            df,
            self.path,
            app_id=self.app_id,
            version=int(batch_id),
            storage_options=self.storage_options,
            engine=self.engine,
        )


# -- deltalake: files from the executors, one commit from the driver --------------------------------


def target_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema the table's files get: Spark's types, timestamps in UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema, timezone="UTC")


def _check_schema(table: Any, schema: pa.Schema, path: str) -> None:
    from deltalake import Schema

    have = {f.name: f.type for f in table.schema().fields}
    want = {f.name: f.type for f in Schema.from_arrow(schema).fields}
    missing = [n for n in have if n not in want]
    extra = [n for n in want if n not in have]
    differ = [n for n in want if n in have and str(have[n]) != str(want[n])]
    if missing or extra or differ:
        detail = [
            f"column {n!r} is {_type_name(want[n])} in the DataFrame but {_type_name(have[n])} in the table"
            for n in differ
        ]
        if missing:
            detail.append(f"the DataFrame lacks column(s) {missing}")
        if extra:
            detail.append(f"the table lacks column(s) {extra}")
        raise SchemaMismatchError(f"Delta table {path} does not fit the DataFrame: " + "; ".join(detail))


def _type_name(t: Any) -> str:
    """`long`, `string`, ... for Delta's primitive types; the type's repr otherwise."""
    name = getattr(t, "type", None)
    return name if isinstance(name, str) else str(t)


class PartitionWriter:
    """mapInArrow function: writes its partition's batches into one Parquet file under the table
    root (none for an empty partition) and yields that file's (path, size, mtime, stats) row."""

    def __init__(self, root: str, schema: pa.Schema) -> None:
        self.root = root
        self.schema_ipc = schema.serialize().to_pybytes()  # pyarrow schemas pickle by value

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        fs, base = pafs.FileSystem.from_uri(self.root)
        name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        full = f"{base.rstrip('/')}/{name}"
        writer = None
        stats = _Stats(schema)
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                table = pa.Table.from_batches([batch]).cast(schema)
                if writer is None:
                    writer = pq.ParquetWriter(full, schema, filesystem=fs, compression="snappy")
                writer.write_table(table)
                stats.add(table)
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            return
        info = fs.get_file_info(full)
        mtime_ms = int(info.mtime.timestamp() * 1000) if info.mtime is not None else int(time.time() * 1000)
        yield pa.RecordBatch.from_pydict(
            {
                "path": [name],
                "size": pa.array([info.size], pa.int64()),
                "modification_time": pa.array([mtime_ms], pa.int64()),
                "stats": [stats.to_json()],
            }
        )


class _Stats:
    """Delta file statistics: record and null counts, min/max of integer columns (exact values, so
    readers may skip files by them; other types are left out rather than truncated)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.rows = 0
        self.nulls = {f.name: 0 for f in schema}
        self.ints = [f.name for f in schema if pa.types.is_integer(f.type)]
        self.lo: dict[str, int] = {}
        self.hi: dict[str, int] = {}

    def add(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for name in self.nulls:
            self.nulls[name] += table.column(name).null_count
        for name in self.ints:
            mm = pc.min_max(table.column(name)).as_py()
            if mm["min"] is not None:
                self.lo[name] = min(self.lo.get(name, mm["min"]), mm["min"])
                self.hi[name] = max(self.hi.get(name, mm["max"]), mm["max"])

    def to_json(self) -> str:
        return json.dumps(
            {"numRecords": self.rows, "minValues": self.lo, "maxValues": self.hi, "nullCount": self.nulls}
        )


def write_files(df: DataFrame, path: str, schema: pa.Schema) -> list[Any]:
    """Runs the Spark job writing `df`'s partitions as Parquet files under `path`; their add actions."""
    from deltalake.transaction import AddAction

    root = path if "://" in path else os.path.abspath(path)
    if "://" not in root:
        os.makedirs(root, exist_ok=True)
    rows = df.mapInArrow(PartitionWriter(root, schema), FILES_SCHEMA).collect()
    return [AddAction(r.path, r.size, {}, r.modification_time, True, r.stats) for r in rows]


def _write_with_deltalake(
    df: DataFrame, path: str, app_id: str, version: int, table: Any, storage_options: dict[str, str] | None
) -> bool:
    from deltalake import CommitProperties, Schema, Transaction
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import create_table_with_add_actions

    schema = target_schema(df)
    if table is not None:
        _check_schema(table, schema, path)
    adds = write_files(df, path, schema)
    props = CommitProperties(app_transactions=[Transaction(app_id, version)])
    try:
        if table is None:
            create_table_with_add_actions(
                path, Schema.from_arrow(schema), adds, mode="append", storage_options=storage_options,
                commit_properties=props,
            )  # fmt: skip
        else:
            table.create_write_transaction(adds, "append", schema, commit_properties=props)
    except CommitFailedError as e:
        # A concurrent commit with this app_id won; if it recorded our version, ours is a duplicate
        # (its files stay unreferenced, for VACUUM).
        now = _table(path, storage_options)
        done = None if now is None else now.transaction_version(app_id)
        if done is not None and done >= version:
            return False
        raise DeltaWriteError(f"commit of version {version} of app_id {app_id!r} to Delta table {path} failed: {e}") from e
    return True
