"""Exactly-once materialisation of DataFrames into Delta tables, keyed by Delta's app-id/version
transaction records (the `txn` action): a write of a version the table already holds writes nothing.
Appends, or upserts by key (MERGE) for streams that keep one row per key.

With delta-spark configured on the session (`fragments_io.delta_spark_session()`, Delta's jars
fetched once by `make delta-jars`), Delta does it itself: the `txnAppId`/`txnVersion` writer options
for appends, the `spark.databricks.delta.write.txnAppId`/`txnVersion` settings for MERGE. Otherwise
the `deltalake` package: every Spark partition writes one Parquet file into the table directory from
its executor (mapInArrow, through deltalake's object store with the caller's `storage_options`), the
driver collects only the files' metadata and commits them with the txn record in one Delta commit, so
a version is in the table entirely or not at all; its MERGE runs in the driver on the batch's rows.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from fragments_io.errors import FragmentsIOError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DeltaJarsNotFoundError",
    "DeltaWriteError",
    "delta_conf",
    "delta_foreach_batch",
    "delta_jars",
    "delta_spark_session",
    "to_delta",
    "uses_delta_spark",
]

ENGINES = ("auto", "deltalake", "delta-spark")
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
FILES_SCHEMA = "path string, size long, modification_time long, stats string"
# Where `make delta-jars` copies Delta's jars (this checkout's build/); the variable overrides it.
DELTA_JARS_ENV = "FRAGMENTS_IO_DELTA_JARS"
DELTA_JARS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "delta", "jars"
)
FETCH_COMMAND = "make delta-jars"
# Delta's idempotent DML (MERGE): the session settings that carry the txn record of the next command.
DML_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
DML_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_RANK = "__fragments_io_rank"


class DeltaWriteError(FragmentsIOError):
    """A Delta write was asked with bad arguments, or its commit failed."""


class DeltaJarsNotFoundError(FragmentsIOError):
    """Delta's jars are not where `make delta-jars` puts them (or FRAGMENTS_IO_DELTA_JARS says)."""


def uses_delta_spark(spark: SparkSession) -> bool:
    """Whether `spark` has Delta Lake configured (its SQL extension or catalog)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    return DELTA_EXTENSION in extensions or catalog == DELTA_CATALOG


def _artifact(jar: str) -> str:
    """`delta-spark_4.2_2.13` of `.../delta-spark_4.2_2.13-4.4.0.jar`: the name before `-<digit>`."""
    name = os.path.basename(jar)
    m = re.match(r"^(.*?)-\d", name)
    return m.group(1) if m else name


def delta_jars(directory: str | None = None) -> list[str]:
    """The jars a session needs for Delta: those of `directory` (FRAGMENTS_IO_DELTA_JARS, else this
    checkout's build/delta/jars) whose artifact Spark does not ship itself (Spark's own scala, jackson,
    hadoop and parquet stay the ones loaded). DeltaJarsNotFoundError, with the command, if absent."""
    import pyspark

    where = directory or os.environ.get(DELTA_JARS_ENV) or DELTA_JARS_DIR
    found = sorted(glob.glob(os.path.join(where, "*.jar")))
    if not any(_artifact(j).startswith("delta-spark_") for j in found):
        raise DeltaJarsNotFoundError(
            f"no Delta Lake jars in {where}: fetch them once with `{FETCH_COMMAND}` (Maven Central, "
            f"cached under build/), or set {DELTA_JARS_ENV} to a directory holding delta-spark's jars"
        )
    spark_jars = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars", "*.jar")
    shipped = {_artifact(j) for j in glob.glob(spark_jars)}
    return [j for j in found if _artifact(j) not in shipped]


def delta_conf(directory: str | None = None) -> dict[str, str]:
    """Session settings for delta-spark from the cached jars: `spark.jars`, Delta's SQL extension and
    catalog, and 2 partitions (not 50) for rebuilding a table's snapshot on a small local session."""
    return {
        "spark.jars": ",".join(delta_jars(directory)),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.databricks.delta.snapshotPartitions": "2",
    }


def delta_spark_session(
    master: str = "local[2]", app_name: str = "fragments_io", **conf: str
) -> SparkSession:
    """`fragments_io.spark_session` with Delta Lake (delta-spark) from the jars `make delta-jars`
    cached (`delta_conf`): `to_delta` then writes through Delta itself. The caller's settings win;
    jars given in `spark.jars` are added to Delta's."""
    from fragments_io import spark_session

    settings = delta_conf()
    if conf.get("spark.jars"):
        settings["spark.jars"] += "," + conf["spark.jars"]
    settings.update((k, v) for k, v in conf.items() if k != "spark.jars")
    return spark_session(master, app_name, **settings)


def _check_args(app_id: Any, version: Any, engine: str) -> None:
    if not isinstance(app_id, str) or not app_id.strip():
        raise DeltaWriteError(
            f"app_id {app_id!r} is not a non-empty string (it names the writing application)"
        )
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise DeltaWriteError(f"version {version!r} of app_id {app_id!r} is not an integer >= 0")
    if engine not in ENGINES:
        raise DeltaWriteError(f"engine {engine!r} is not one of {list(ENGINES)}")


def _columns(what: str, names: str | Sequence[str] | None) -> list[str]:
    if names is None:
        return []
    out = [names] if isinstance(names, str) else list(names)
    if not out or not all(isinstance(n, str) and n for n in out):
        raise DeltaWriteError(f"{what} {names!r} is not a column name or a non-empty list of them")
    return out


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
    merge_on: str | Sequence[str] | None = None,
    order_by: str | Sequence[str] | None = None,
    storage_options: dict[str, str] | None = None,
    engine: str = "auto",
) -> bool:
    """Writes `df` into the Delta table at `path` (created if missing) once per (app_id, version).

    Appends by default. With `merge_on` (a column or columns) it upserts instead: a row whose key the
    table holds replaces that row, others are inserted; of `df`'s rows with one key the one greatest
    by `order_by` wins (any one of them without it). Returns False, writing nothing, when the table's
    transaction record for `app_id` is already at `version` or above (a re-run, or a batch replayed
    after a failure); True when this call wrote. Versions of one app_id must increase: streams use the
    micro-batch id, batch jobs an explicit counter. `engine` "auto" uses delta-spark when the session
    has Delta configured, else the `deltalake` package; `storage_options` (object store credentials
    and endpoint, deltalake's keys) reach deltalake in the driver and on the executors.
    """
    _check_args(app_id, version, engine)
    keys = _columns("merge_on", merge_on)
    order = _columns("order_by", order_by)
    missing = [c for c in keys + order if c not in df.columns]
    if missing:
        raise DeltaWriteError(
            f"column(s) {missing} of merge_on/order_by are not in the DataFrame {df.columns}"
        )
    if order and not keys:
        raise DeltaWriteError("order_by is only meaningful with merge_on (it picks one row per key)")
    spark = df.sparkSession
    if engine == "delta-spark" and not uses_delta_spark(spark):
        raise DeltaWriteError(
            "engine 'delta-spark' but this session has no Delta Lake configured: start it with "
            f"fragments_io.delta_spark_session() (jars fetched once by `{FETCH_COMMAND}`)"
        )
    table = _table(path, storage_options)
    if table is not None:
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return False
    if keys:
        df = latest_per_key(df, keys, order)
    if engine == "delta-spark" or (engine == "auto" and uses_delta_spark(spark)):
        if keys and table is not None:
            merge_with_delta_spark(df, path, keys, app_id, version)
        else:  # an upsert into no table yet is an append of the batch's rows
            write_with_delta_spark(df, path, app_id, version)
        return True
    if keys and table is not None:
        return _merge_with_deltalake(df, path, keys, app_id, version, table)
    return _write_with_deltalake(df, path, app_id, version, table, storage_options)


def latest_per_key(df: DataFrame, keys: list[str], order_by: list[str]) -> DataFrame:
    """One row per key: the greatest by `order_by` (descending, nulls last), any one without it."""
    if not order_by:
        return df.dropDuplicates(keys)
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(
        *[F.col(c).desc_nulls_last() for c in order_by]
    )
    return df.withColumn(_RANK, F.row_number().over(window)).where(F.col(_RANK) == 1).drop(_RANK)


def write_with_delta_spark(df: DataFrame, path: str, app_id: str, version: int) -> None:
    """Delta's idempotent writes: the writer skips a (txnAppId, txnVersion) the table already holds."""
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(version))
        .save(path)
    )


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def merge_with_delta_spark(df: DataFrame, path: str, keys: list[str], app_id: str, version: int) -> None:
    """MERGE INTO the table by `keys` (null-safe equality) under Delta's idempotent-DML settings: Delta
    skips the command when the table's txn record for `app_id` is at `version` or above."""
    spark = df.sparkSession
    view = f"fragments_io_merge_{uuid.uuid4().hex}"
    target = path if "://" in path else os.path.abspath(path)
    on = " AND ".join(f"t.{_quote(k)} <=> s.{_quote(k)}" for k in keys)
    df.createOrReplaceTempView(view)
    spark.conf.set(DML_TXN_APP_ID, app_id)
    spark.conf.set(DML_TXN_VERSION, str(version))
    try:
        spark.sql(
            f"MERGE INTO delta.{_quote(target)} AS t USING {view} AS s ON {on} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.conf.unset(DML_TXN_APP_ID)
        spark.conf.unset(DML_TXN_VERSION)
        spark.catalog.dropTempView(view)


def delta_foreach_batch(
    path: str,
    *,
    app_id: str,
    merge_on: str | Sequence[str] | None = None,
    order_by: str | Sequence[str] | None = None,
    storage_options: dict[str, str] | None = None,
    engine: str = "auto",
) -> DeltaBatchWriter:
    """A `foreachBatch` function writing each micro-batch with version = its batch id:
    `stream.writeStream.foreachBatch(delta_foreach_batch(path, app_id="q1")).start()`. A batch Spark
    replays after a failure (a killed driver restarted from its checkpoint) finds its version in the
    table and writes nothing, so each batch lands exactly once. `merge_on`/`order_by` upsert by key
    as in `to_delta`."""
    _check_args(app_id, 0, engine)
    keys = _columns("merge_on", merge_on)
    order = _columns("order_by", order_by)
    if order and not keys:
        raise DeltaWriteError("order_by is only meaningful with merge_on (it picks one row per key)")
    return DeltaBatchWriter(path, app_id, storage_options, engine, tuple(keys), tuple(order))


@dataclasses.dataclass(frozen=True)
class DeltaBatchWriter:
    """The callable `delta_foreach_batch` returns (picklable: plain fields only)."""

    path: str
    app_id: str
    storage_options: dict[str, str] | None = None
    engine: str = "auto"
    merge_on: tuple[str, ...] = ()
    order_by: tuple[str, ...] = ()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        to_delta(
            df,
            self.path,
            app_id=self.app_id,
            version=int(batch_id),
            merge_on=list(self.merge_on) or None,
            order_by=list(self.order_by) or None,
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
    root (none for an empty partition) and yields that file's (path, size, mtime, stats) row. The
    file goes through deltalake's object store with the caller's `storage_options`, the store the
    driver then commits to (an S3 endpoint or credentials given only there reach the executors)."""

    def __init__(self, root: str, schema: pa.Schema, storage_options: dict[str, str] | None = None) -> None:
        self.root = root
        self.schema_ipc = schema.serialize().to_pybytes()  # pyarrow schemas pickle by value
        self.storage_options = dict(storage_options) if storage_options else None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq
        from deltalake.fs import DeltaStorageHandler

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        fs = pafs.PyFileSystem(DeltaStorageHandler(self.root, self.storage_options))
        name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        writer = None
        stats = _Stats(schema)
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                table = pa.Table.from_batches([batch]).cast(schema)
                if writer is None:
                    writer = pq.ParquetWriter(name, schema, filesystem=fs, compression="snappy")
                writer.write_table(table)
                stats.add(table)
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            return
        info = fs.get_file_info(name)
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


def write_files(
    df: DataFrame, path: str, schema: pa.Schema, storage_options: dict[str, str] | None = None
) -> list[Any]:
    """Runs the Spark job writing `df`'s partitions as Parquet files under `path`; their add actions."""
    from deltalake.transaction import AddAction

    root = path if "://" in path else os.path.abspath(path)
    if "://" not in root:
        os.makedirs(root, exist_ok=True)
    rows = df.mapInArrow(PartitionWriter(root, schema, storage_options), FILES_SCHEMA).collect()
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
    adds = write_files(df, path, schema, storage_options)
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
        raise DeltaWriteError(
            f"commit of version {version} of app_id {app_id!r} to Delta table {path} failed: {e}"
        ) from e
    return True


def _merge_with_deltalake(
    df: DataFrame, path: str, keys: list[str], app_id: str, version: int, table: Any
) -> bool:
    """deltalake's MERGE of the batch's rows (collected to the driver as Arrow) by `keys`, committed
    with the txn record; an existing table only (the first batch is an append)."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError

    schema = target_schema(df)
    _check_schema(table, schema, path)
    source = df.toArrow().cast(schema)
    on = " AND ".join(f't."{k}" IS NOT DISTINCT FROM s."{k}"' for k in keys)
    props = CommitProperties(app_transactions=[Transaction(app_id, version)])
    try:
        (
            table.merge(source, on, source_alias="s", target_alias="t", commit_properties=props)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    except CommitFailedError as e:
        raise DeltaWriteError(
            f"MERGE of version {version} of app_id {app_id!r} into Delta table {path} failed: {e}"
        ) from e
    return True
