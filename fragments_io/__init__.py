"""fragments_io: the PySpark data source over persisted fragments, committed-only by default.

`register(spark)` adds the `gazette` format (batch and streaming); `read_committed` is the
fragment-parallel committed read; `sql_view` creates a temporary view; `to_delta` and
`delta_foreach_batch` write DataFrames into Delta tables exactly once. Depends on gazette.protocol,
keyspace (read-only), fragment and message; never on a running broker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fragments_io.errors import (
    CorruptObjectError,
    FragmentsIOError,
    FramingMismatchError,
    JavaNotFoundError,
    OptionError,
    SchemaMismatchError,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CorruptObjectError",
    "FragmentsIOError",
    "FramingMismatchError",
    "JavaNotFoundError",
    "OptionError",
    "SchemaMismatchError",
    "check_java",
    "delta_foreach_batch",
    "read_committed",
    "register",
    "spark_session",
    "sql_view",
    "to_delta",
]
_DELTA_NAMES = ("to_delta", "delta_foreach_batch")


def __getattr__(name: str) -> Any:
    """`to_delta` and `delta_foreach_batch` from fragments_io.delta, imported on first use."""
    if name in _DELTA_NAMES:
        from fragments_io import delta

        return getattr(delta, name)
    raise AttributeError(f"module 'fragments_io' has no attribute {name!r}")

JAVA_HINT = (
    "fragments_io needs a Java 17+ runtime for PySpark and found no `java` on PATH or under JAVA_HOME: "
    "install one (apt-get install openjdk-17-jre-headless, or conda install -c conda-forge openjdk=17) "
    "and put its bin/ on PATH or set JAVA_HOME"
)
_BOUND_OPTIONS = ("beginoffset", "endoffset")


def check_java() -> str:
    """The java executable PySpark will use; JavaNotFoundError (one line, with the fix) if none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java")
    if not found:
        raise JavaNotFoundError(JAVA_HINT)
    return found


def spark_session(master: str = "local[2]", app_name: str = "fragments_io", **conf: str) -> SparkSession:
    """A SparkSession with the `gazette` source registered (checks for Java first)."""
    check_java()
    # Python workers must run this interpreter (it has pyarrow and this package), not `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _gateway_launched_without_python_in_the_child():
        spark = builder.getOrCreate()
    register(spark)
    return spark


@contextlib.contextmanager
def _gateway_launched_without_python_in_the_child() -> Iterator[None]:
    """PySpark starts its JVM with a `preexec_fn` (to ignore Ctrl-C), which runs Python in the forked
    child; with gRPC threads busy in this process (a client, an in-process cluster) that child can
    die before exec ("Java gateway process exited before sending its port number"). A new session
    (setsid, done without Python) keeps terminal Ctrl-C away from the JVM just as well."""
    from pyspark import java_gateway

    original = java_gateway.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:
        if kwargs.pop("preexec_fn", None) is not None:
            kwargs["start_new_session"] = True
        return original(*args, **kwargs)

    java_gateway.Popen = popen  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        java_gateway.Popen = original  # type: ignore[misc]


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Registers the `gazette` data source with this session (registration is per session) and
    turns on Python filter pushdown, without which Spark refuses a reader that has pushFilters."""
    from fragments_io.source import GazetteDataSource

    spark.dataSource.register(GazetteDataSource)
    spark.conf.set(PUSHDOWN_CONF, "true")


def _options(options: dict[str, Any]) -> dict[str, str]:
    from fragments_io.options import parse_options

    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items() if v is not None}
    parse_options(out)  # fail here, in the caller's process, with the option named
    return out


def read_committed(spark: SparkSession, schema: Any = None, **options: Any) -> DataFrame:
    """The committed messages of the selected journals, decided in parallel within each journal.

    A fragment-parallel `uncommitted` scan of metadata; each (journal, producer)'s rows run through
    the Sequencer under groupBy().applyInPandas; a semi-join on (journal, begin) with a second,
    full scan keeps the committed rows. Same options and columns as `spark.read.format("gazette")` with isolation=committed;
    beginOffset/endOffset apply to rows after the decision. Mod-time bounds are not supported here.
    """
    from pyspark.sql import functions as F

    from fragments_io.committed import DECISION_SCHEMA, decide_group

    opts = _options(options)
    lowered = {k.lower(): k for k in opts}
    for bad in ("isolation", "beginmodtime", "endmodtime"):
        if bad in lowered:
            raise OptionError(f"read_committed does not take option {lowered[bad]} (it reads isolation=committed)")
    bounds = {b: int(opts.pop(lowered[b])) for b in _BOUND_OPTIONS if b in lowered}
    register(spark)
    reader = spark.read.format("gazette").options(**opts).option("isolation", "uncommitted")
    if schema is not None:
        reader = reader.schema(schema)
    scan = reader.load()
    # The decisions read their own, metadata-only scan: a second load() is a separate relation, so
    # row bounds pushed into `scan` (after the semi-join) can never reach the commit decision.
    meta_opts = {k: v for k, v in opts.items() if k.lower() not in ("schema", "inferschema")}
    meta = (
        spark.read.format("gazette")
        .options(**meta_opts)
        .option("isolation", "uncommitted")
        .option("inferSchema", "false")
        .load()
    )
    decisions = (
        meta.select("journal", "begin", "end", "producer", "clock", "flags")
        .groupBy("journal", "producer")
        .applyInPandas(decide_group, DECISION_SCHEMA)
    )
    out = scan.join(decisions, on=["journal", "begin"], how="left_semi")
    if "beginoffset" in bounds:
        out = out.where(F.col("begin") >= bounds["beginoffset"])
    if "endoffset" in bounds:
        out = out.where(F.col("begin") < bounds["endoffset"])
    return out


def _sql_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_view(spark: SparkSession, name: str, **options: Any) -> None:
    """CREATE OR REPLACE TEMPORARY VIEW `name` USING gazette OPTIONS (...)."""
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise OptionError(f"view name {name!r} is not a plain SQL identifier")
    opts = _options(options)
    register(spark)
    body = ", ".join(f"`{k}` {_sql_literal(v)}" for k, v in opts.items())
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{name}` USING gazette OPTIONS ({body})")
