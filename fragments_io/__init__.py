"""fragments_io: the PySpark data source over persisted fragments, committed-only by default.

`register(spark)` adds the `gazette` format (batch and streaming); `read_committed` is the
fragment-parallel committed read; `sql_view` creates a temporary view; `to_delta` and
`delta_foreach_batch` write DataFrames into Delta tables exactly once; `df.write.format("gazette")`
and `df.writeStream.format("gazette")` publish rows into journals exactly once (fragments_io.sink).
Depends on gazette.protocol, keyspace (read-only), fragment and message; on running brokers (through
gazette.client) only for the sink, which appends through one, and for live reads, option `broker` or
`live=true` (fragments_io.live).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fragments_io.errors import (
    CorruptObjectError,
    DataLossError,
    FragmentsIOError,
    FramingMismatchError,
    JavaNotFoundError,
    OptionError,
    SchemaMismatchError,
    WorkerPythonError,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CorruptObjectError",
    "DataLossError",
    "FragmentsIOError",
    "FramingMismatchError",
    "JavaNotFoundError",
    "OptionError",
    "SchemaMismatchError",
    "WorkerPythonError",
    "check_java",
    "delta_foreach_batch",
    "delta_spark_session",
    "read_committed",
    "register",
    "spark_session",
    "sql_view",
    "to_delta",
]
_DELTA_NAMES = ("to_delta", "delta_foreach_batch", "delta_spark_session")


def __getattr__(name: str) -> Any:
    """`to_delta`, `delta_foreach_batch` and `delta_spark_session` from fragments_io.delta, imported on
    first use."""
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


# What the source's Python workers import, besides pyspark (which Spark puts on their path).
WORKER_MODULES = (
    "pyarrow",
    "pandas",
    "numpy",
    "gazette",
    "fragments_io.decode",
    "fragments_io.decide",
    "fragments_io.committed",
    "fragments_io.discovery",
    "fragments_io.planning",
)
WORKER_CHECK_TIMEOUT_S = 60.0
# Prints the interpreter's version, then one line per module it cannot import (Python 2 syntax too).
_WORKER_PROBE = """\
import sys
print("%d.%d" % sys.version_info[:2])
for name in sys.argv[1:]:
    try:
        __import__(name)
    except Exception as err:
        print("%s\t%s: %s" % (name, type(err).__name__, err))
"""
_workers_checked: set[tuple[str, str, str]] = set()  # (executable, PYTHONPATH, cwd) that passed


def _worker_python(spark: SparkSession) -> tuple[str, str] | None:
    """The Python that Spark's workers run for this session and where that choice came from; None
    when it cannot be checked from here (a master whose workers run on other machines)."""
    try:
        sc = spark.sparkContext  # a classic session: its context fixed the workers' Python at start
    except Exception:  # Spark Connect has no SparkContext
        sc = None
    python = getattr(sc, "pythonExec", None) if sc is not None else None
    if python is not None:
        master = str(sc.master)  # type: ignore[union-attr]
        origin = "PYSPARK_PYTHON when the session started" if python != "python3" else "Spark's default"
    else:
        master = str(spark.conf.get("spark.master", "local[*]"))
        configured = spark.conf.get("spark.pyspark.python", None)
        if configured:
            python, origin = str(configured), "the session's spark.pyspark.python"
        elif os.environ.get("PYSPARK_PYTHON"):
            python, origin = os.environ["PYSPARK_PYTHON"], "PYSPARK_PYTHON"
        else:
            python, origin = "python3", "Spark's default"
    if not master.startswith("local"):
        return None
    return str(python), origin


def _check_worker_python(spark: SparkSession) -> None:
    """Fails with the fix when the Python that Spark's workers run cannot import the source (a
    virtualenv that is not activated: workers run `python3` from PATH, not this interpreter).
    A quick subprocess, run once per interpreter; skipped for non-local masters."""
    found = _worker_python(spark)
    if found is None:
        return
    python, origin = found
    key = (python, os.environ.get("PYTHONPATH", ""), os.getcwd())
    if key in _workers_checked:
        return
    fix = (
        f"set PYSPARK_PYTHON={sys.executable} before Spark starts (in the shell, or "
        'os.environ["PYSPARK_PYTHON"] = sys.executable before the first SparkSession; spark.stop() '
        "a running one first), or make the session with fragments_io.spark_session()"
    )
    path = shutil.which(python)
    resolved = f", that is {path}" if path is not None and path != python else ""
    what = f"Spark's Python workers for this session run {python} ({origin}{resolved})"
    if path is None:
        raise WorkerPythonError(f"{what}, which is not an executable file or on PATH: {fix}")
    try:
        proc = subprocess.run(
            [path, "-c", _WORKER_PROBE, *WORKER_MODULES],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=WORKER_CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        warnings.warn(
            f"{what}; could not check within {WORKER_CHECK_TIMEOUT_S:.0f} s that it imports the "
            "gazette source's modules",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    except OSError as err:
        raise WorkerPythonError(f"{what}, which does not start ({err}): {fix}") from None
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise WorkerPythonError(f"{what}, which fails to run a check ({last}): {fix}")
    version, failures = lines[0], lines[1:]
    if failures:
        names = ", ".join(line.split("\t", 1)[0] for line in failures)
        first = failures[0].split("\t", 1)[-1]
        raise WorkerPythonError(f"{what}, which cannot import {names} ({first}): {fix}")
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if version != driver:
        raise WorkerPythonError(f"{what}, which is Python {version}; this driver is Python {driver}: {fix}")
    _workers_checked.add(key)


def register(spark: SparkSession) -> None:
    """Registers the `gazette` data source with this session (registration is per session) and
    turns on Python filter pushdown, without which Spark refuses a reader that has pushFilters.

    First checks that the Python Spark's workers run (the session's PYSPARK_PYTHON, `python3` from
    PATH by default) imports what the source needs, and raises WorkerPythonError naming that
    interpreter and the fix otherwise (instead of `No module named 'pyarrow'` at the first query)."""
    _check_worker_python(spark)
    from fragments_io.source import GazetteDataSource

    spark.dataSource.register(GazetteDataSource)
    spark.conf.set(PUSHDOWN_CONF, "true")


def _options(options: dict[str, Any]) -> dict[str, str]:
    from fragments_io.options import parse_options

    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items() if v is not None}
    parse_options(out)  # fail here, in the caller's process, with the option named
    return out


# read_committed's fragment-parallel plan decodes every byte twice (once for the decision's metadata),
# shuffles the metadata and joins: 2 to 4 times the CPU of the in-source committed read (bench.spark's
# messages, one journal, both schema shapes), so it pays only with cores idle for longer than that.
FRAGMENT_PLAN_COST = 2.5
DECISION_INPUT_DDL = "journal STRING, begin BIGINT, producer STRING, clock BIGINT, flags INT"


def read_committed(
    spark: SparkSession, schema: Any = None, by_fragment: bool | None = None, **options: Any
) -> DataFrame:
    """The committed messages of the selected journals, decided in parallel within each journal
    when that pays.

    Two plans give the same rows. By journal: the source's own committed read (each journal decoded
    and decided whole in one task, journals in parallel). By fragment: a fragment-parallel,
    metadata-only `uncommitted` scan whose rows are decided per (journal, producer) under
    groupBy().applyInPandas (fragments_io.decide, in bulk), and a semi-join on (journal, begin) with
    a second, full scan keeps the committed rows. `by_fragment` None (the default) picks by the
    journals' sizes: by fragment only when whole journals would leave the cores idle long enough to
    repay decoding twice (FRAGMENT_PLAN_COST), as with fewer large journals than cores.

    Same options and columns as `spark.read.format("gazette")` with isolation=committed;
    beginOffset/endOffset and startingOffsets/endingOffsets apply to rows after the decision. Mod-time
    bounds are not supported here. Live reads always take the journal plan (one scan, one set of
    write heads).
    """
    from pyspark.sql import functions as F

    from fragments_io.committed import DECISION_SCHEMA, decide_group
    from fragments_io.options import check_batch, parse_options

    opts = _options(options)
    lowered = {k.lower(): k for k in opts}
    for bad in ("isolation", "isolation.level", "kafka.isolation.level", "beginmodtime", "endmodtime"):
        if bad in lowered:
            raise OptionError(
                f"read_committed does not take option {lowered[bad]} (it reads isolation=committed)"
            )
    parsed = parse_options(opts)
    check_batch(parsed)
    register(spark)
    if parsed.live:
        # The fragment plan's two scans are planned apart, each up to the write heads of its own
        # moment: the decisions could cover a transaction's ACK that the row scan stops short of.
        if by_fragment:
            raise OptionError(
                "read_committed(by_fragment=True) plans two scans, which live reads (option broker or "
                "live) would end at different write heads; use by_fragment=False or None"
            )
        by_fragment = False
    if by_fragment is None:
        by_fragment = _fragment_plan_pays(spark, parsed)
    if not by_fragment:
        reader = spark.read.format("gazette").options(**opts).option("isolation", "committed")
        return (reader.schema(schema) if schema is not None else reader).load()
    bounds = {b: int(opts.pop(lowered[b])) for b in _BOUND_OPTIONS if b in lowered}
    reader = spark.read.format("gazette").options(**opts).option("isolation", "uncommitted")
    if schema is not None:
        reader = reader.schema(schema)
    scan = reader.load()
    # The decisions read their own, metadata-only scan (no message fields, no values: a schema of
    # just those columns): a second load() is a separate relation, so row bounds pushed into
    # `scan` (after the semi-join) can never reach the commit decision.
    unbounded = ("schema", "inferschema", "startingoffsets", "endingoffsets")
    meta_opts = {k: v for k, v in opts.items() if k.lower() not in unbounded}
    meta = spark.read.format("gazette").options(**meta_opts).option("isolation", "uncommitted")
    decisions = (
        meta.schema(DECISION_INPUT_DDL)
        .load()
        .groupBy("journal", "producer")
        .applyInPandas(decide_group, DECISION_SCHEMA)
    )
    out = scan.join(decisions, on=["journal", "begin"], how="left_semi")
    if "beginoffset" in bounds:
        out = out.where(F.col("begin") >= bounds["beginoffset"])
    if "endoffset" in bounds:
        out = out.where(F.col("begin") < bounds["endoffset"])
    return out


def _fragment_plan_pays(spark: SparkSession, opts: Any) -> bool:
    """Whether read_committed's fragment-parallel plan should beat whole journals per task: the
    largest partition of the journal plan takes longer than the fragment plan's work spread
    evenly over the cores."""
    from fragments_io.discovery import discover
    from fragments_io.planning import RowBounds, plan_partitions

    try:
        cores = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        cores = os.cpu_count() or 1
    cores = opts.min_partitions or cores
    journals = discover(opts).journals
    parts = plan_partitions(journals, "committed", RowBounds(), opts.max_partition_bytes, cores)
    sizes = [sum(t.size for t in part) for part in parts]
    # The journal plan takes about max(largest partition, total / cores); the fragment plan about
    # FRAGMENT_PLAN_COST * total / cores.
    return max(sizes) * cores > FRAGMENT_PLAN_COST * sum(sizes)


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
