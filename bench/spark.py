"""`python -m bench.spark [--quick] [--gb N]`: the gazette data source against `spark.read.json` on
the same decompressed bytes, in one Spark session (issue 6's benchmark; `python -m bench` puts its
figures in the suite's table and results.json).

Generates JSON messages of interleaved producers over 8+ journals as real fragments in a file://
store, and the same bytes as .json files; times one aggregate query per reader (as MB/s of those
bytes; ratio t(json) / t(ours), higher is better), and, for all columns, a source yielding our read's
batches decoded ahead (FLOOR: the Python Data Source API's own cost); then times the stages of our
read() in-process."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import kafka_peer
from bench.figures import Figure, PeerUnavailable, Target
from gazette.fragment.content import persist_blocking
from gazette.fragment.fragment import Fragment
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, clock_from_unix_ns, new_producer_id
from gazette.protocol.codec import Codec

GB = 10**9
FIELDS_DDL = (
    "id BIGINT, user STRING, kind STRING, amount DOUBLE, ts TIMESTAMP, tags ARRAY<STRING>, text STRING, "
    "_meta STRUCT<uuid: STRING>"
)
METADATA_DDL = (  # read_committed's schema argument is the whole schema, metadata columns first
    "journal STRING, begin BIGINT, end BIGINT, uuid STRING, producer STRING, clock BIGINT, "
    "published_at TIMESTAMP, flags INT, value STRING"
)
QUERY_DDL = "id BIGINT, kind STRING, amount DOUBLE, ts TIMESTAMP"  # the columns _query reads
PRUNED_DDL = "journal STRING, begin BIGINT, " + QUERY_DDL
TARGET_UNCOMMITTED = 1.5  # issue 16's targets (at 1 GB over 8 journals)
TARGET_COMMITTED = 1.2
TARGET_READ_COMMITTED = 1.0
TARGET_VS_KAFKA = 2.0  # our committed read over Kafka's Spark source (read_committed), same messages
PRODUCERS_PER_JOURNAL = 4
_KINDS = ("click", "view", "purchase", "signup", "refund", "search")
_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma omega".split()


READERS = ("json", "uncommitted", "committed", "read_committed")
KAFKA = "kafka"  # the Kafka peer's reader (bench/kafka_peer.py): Spark's Kafka source, read_committed
# The Python Data Source API's own cost, all columns: a source whose read() yields our uncommitted
# read's Arrow batches, decoded before the timed queries (memory-mapped IPC files). Nothing decodes:
# what is left is Spark's (tasks, the Arrow stream from the Python worker, the JVM copying every
# column into rows, the query), the ceiling of any Python source returning those columns.
FLOOR = "api_floor"
FLOOR_SOURCE = "gazette_predecoded"
SHAPES = ("all columns", "query columns")


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    gigabytes: float
    journals: int
    fragment_mib: int
    runs: int
    codec: str
    shapes: tuple[str, ...] = SHAPES
    profile: bool = True  # time the stages of read() in-process after the queries


# One shape unless asked (--all-shapes): on two cores a round of the four readers over 0.25 GB takes
# 20-60 s, and `make bench` must end within 10 minutes. Quick is a smoke test (little data, no profile).
QUICK = Settings("quick", 0.05, 8, 4, 1, "none", shapes=SHAPES[:1], profile=False)
FULL = Settings("full", 0.25, 8, 16, 3, "none", shapes=SHAPES[:1])


# -- data -----------------------------------------------------------------------------------------


def uuid_text(pid_hex: str, clock: int, flags: int) -> str:
    """str(build_uuid(...)) without building a UUID object (the generator's hot path)."""
    ts = clock >> 4
    return (
        f"{ts & 0xFFFFFFFF:08x}-{(ts >> 32) & 0xFFFF:04x}-{((ts >> 48) & 0x0FFF) | 0x1000:04x}-"
        f"{0x8000 | ((clock & 0xF) << 10) | flags:04x}-{pid_hex}"
    )


@dataclasses.dataclass
class Dataset:
    root: Path
    store: str
    json_dir: Path
    journals: list[str]
    bytes: int
    messages: int  # every line, ACKs included (what the uncommitted read and spark.read.json count)
    committed: int  # what ReadCommitted delivers, ACKs excluded
    fragments: int


class _Writer:
    """Buffers one journal's lines into fragments of about `fragment_bytes` (store) and .json files."""

    def __init__(self, data: Dataset, journal: str, fragment_bytes: int, codec: Codec) -> None:
        self.data, self.journal, self.fragment_bytes, self.codec = data, journal, fragment_bytes, codec
        self.parts: list[str] = []
        self.size = 0
        self.offset = 0

    def add(self, line: str) -> None:
        self.parts.append(line)
        self.size += len(line)
        if self.size >= self.fragment_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        content = "".join(self.parts).encode()
        frag = Fragment(
            self.journal, self.offset, self.offset + len(content), hashlib.sha1(content).digest(), self.codec
        )
        persist_blocking(frag, lambda: iter([content]), self.data.store, "")
        name = self.journal.replace("/", "_") + f"-{self.offset:016x}.json"
        (self.data.json_dir / name).write_bytes(content)
        self.offset += len(content)
        self.data.bytes += len(content)
        self.data.fragments += 1
        self.parts, self.size = [], 0


def generate(root: Path, settings: Settings, log: Callable[[str], None], seed: int = 6) -> Dataset:
    """Writes the dataset under `root`: per journal, producers interleave transactions of 1-20
    CONTINUE messages and an ACK (1 in 50 rolled back by an ACK at the last ACK's clock) with
    self-committed messages, and 1 message in 200 is re-sent (an at-least-once duplicate)."""
    rng = random.Random(seed)
    store_dir = root / "store"
    json_dir = root / "json"
    store_dir.mkdir(parents=True)
    json_dir.mkdir()
    data = Dataset(root, f"file://{store_dir}/", json_dir, [], 0, 0, 0, 0)
    codec = Codec[settings.codec.upper()] if settings.codec != "none" else Codec.NONE
    per_journal = int(settings.gigabytes * GB / settings.journals)
    texts = [" ".join(rng.choice(_WORDS) for _ in range(12)) for _ in range(256)]
    stamps = [f"2024-03-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(7 * i) % 60:02d}Z" for i in range(997)]
    pid = new_producer_id()
    assert uuid_text(pid.hex(), 12345678901, 2) == str(build_uuid(pid, 12345678901, 2))
    ack_tail = '"_meta":{"uuid":"%s"}}\n'
    for j in range(settings.journals):
        journal = f"bench/events/part-{j:03d}"
        data.journals.append(journal)
        w = _Writer(data, journal, settings.fragment_mib << 20, codec)
        pids = [new_producer_id().hex() for _ in range(PRODUCERS_PER_JOURNAL)]
        clocks = [clock_from_unix_ns(1_700_000_000 * 10**9) + k * 1000 for k in range(PRODUCERS_PER_JOURNAL)]
        acked = list(clocks)
        first_clocks = list(clocks)
        open_left = [0] * PRODUCERS_PER_JOURNAL  # CONTINUEs still to send in the open transaction
        open_sent = [0] * PRODUCERS_PER_JOURNAL
        rollback = [False] * PRODUCERS_PER_JOURNAL
        i = 0
        while w.offset + w.size < per_journal:
            p = rng.randrange(PRODUCERS_PER_JOURNAL)
            if open_left[p] == 0 and open_sent[p]:  # close the transaction
                if rollback[p]:
                    w.add("{" + ack_tail % uuid_text(pids[p], acked[p], Flags.ACK_TXN))
                else:
                    clocks[p] += CLOCK_TICK
                    acked[p] = clocks[p]
                    w.add("{" + ack_tail % uuid_text(pids[p], clocks[p], Flags.ACK_TXN))
                    data.committed += open_sent[p]
                data.messages += 1
                open_sent[p] = 0
                continue
            if open_left[p] == 0 and rng.random() < 0.7:
                open_left[p] = rng.randint(1, 20)
                rollback[p] = rng.random() < 0.02 and acked[p] != first_clocks[p]  # an ACK to roll back to
            if open_left[p]:
                flags = Flags.CONTINUE_TXN
                open_left[p] -= 1
                open_sent[p] += 1
            else:
                flags = Flags.OUTSIDE_TXN
                data.committed += 1
            clocks[p] += CLOCK_TICK
            if flags == Flags.OUTSIDE_TXN:
                acked[p] = clocks[p]
            i += 1
            line = (
                f'{{"id":{i},"user":"user-{rng.randrange(100000)}","kind":"{_KINDS[i % 6]}",'
                f'"amount":{rng.randrange(100000) / 100},"ts":"{stamps[i % 997]}",'
                f'"tags":["{_WORDS[i % 14]}","{_WORDS[(i * 7) % 14]}"],"text":"{texts[i % 256]}",'
                + ack_tail
                % uuid_text(pids[p], clocks[p], flags)
            )
            w.add(line)
            data.messages += 1
            if rng.random() < 0.005:
                w.add(line)  # an at-least-once duplicate, right behind: the Sequencer drops it
                data.messages += 1
        # Close every transaction so the committed count is exact.
        for p in range(PRODUCERS_PER_JOURNAL):
            if open_sent[p]:
                clocks[p] += CLOCK_TICK
                w.add("{" + ack_tail % uuid_text(pids[p], clocks[p], Flags.ACK_TXN))
                data.committed += open_sent[p]
                data.messages += 1
        w.flush()
        log(f"  {journal}: {w.offset / 1e6:,.0f} MB")
    return data


# -- measuring ------------------------------------------------------------------------------------


def _query(df: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return (
        df.groupBy("kind")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("amount"), F.max("id"), F.max("ts"))
        .collect()
    )


@dataclasses.dataclass(frozen=True)
class Predecoded:
    """Our uncommitted all-columns read, decoded ahead: one Arrow IPC file per partition."""

    directory: Path
    partitions: int
    ddl: str  # the source's schema (metadata columns, then the message fields)


def predecode(spark: Any, data: Dataset, directory: Path) -> Predecoded:
    """Runs our uncommitted read of every partition in this process (the partitions Spark gets)
    and writes each one's batches to `directory`/part-N.arrow."""
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from fragments_io import source

    del spark  # the DDL parse below needs the active session
    ds = source.GazetteDataSource(
        {"store": data.store, "journals": "bench/", "isolation": "uncommitted", "schema": FIELDS_DDL}
    )
    ddl = ds.schema()
    assert isinstance(ddl, str)
    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    reader = ds.reader(schema)
    directory.mkdir(parents=True)
    parts = reader.partitions()
    for i, p in enumerate(parts):
        batches = list(reader.read(p))
        with pa.OSFile(str(directory / f"part-{i}.arrow"), "wb") as f:
            with pa.ipc.new_file(f, batches[0].schema) as w:
                for b in batches:
                    w.write_batch(b)
    return Predecoded(directory, len(parts), ddl)


def predecoded_source() -> type:
    """The FLOOR reader's data source, defined here so that it is pickled by value (Spark's
    workers need not import bench)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class PredecodedReader(DataSourceReader):
        def __init__(self, directory: str, partitions: int) -> None:
            self.directory, self.count = directory, partitions

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.count)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            with pa.memory_map(f"{self.directory}/part-{partition.value}.arrow") as src:
                reader = pa.ipc.open_file(src)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    class PredecodedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FLOOR_SOURCE

        def schema(self) -> str:
            return str(self.options["ddl"])

        def reader(self, schema: Any) -> PredecodedReader:
            return PredecodedReader(str(self.options["directory"]), int(self.options["partitions"]))

    return PredecodedSource


def _contenders(
    spark: Any,
    data: Dataset,
    shape: str,
    kafka: kafka_peer.SparkSource | None = None,
    floor: Predecoded | None = None,
) -> dict[str, Callable[[], Any]]:
    """Fresh DataFrames per call (a load() per query: no planning cached between runs). "all
    columns": every reader gets the messages' whole schema (Spark's JSON reader then prunes to the
    query's columns by itself; a Python data source cannot). "query columns": every reader gets
    only the query's columns as its schema (ours: plus journal and begin). With `kafka`, Spark's
    Kafka source over the same messages too (from_json with the same schema); with `floor`, the
    pre-decoded batches of the all-columns shape (FLOOR)."""
    import fragments_io

    def ours(isolation: str) -> Callable[[], Any]:
        def make() -> Any:
            reader = spark.read.format("gazette").option("store", data.store).option("journals", "bench/")
            reader = reader.option("isolation", isolation)
            if shape == "all columns":
                return reader.option("schema", FIELDS_DDL).load()
            return reader.schema(PRUNED_DDL).load()

        return make

    rc_schema = METADATA_DDL + ", " + FIELDS_DDL if shape == "all columns" else PRUNED_DDL
    fields = FIELDS_DDL if shape == "all columns" else QUERY_DDL
    readers = {
        "json": lambda: spark.read.schema(fields).json(str(data.json_dir)),
        "uncommitted": ours("uncommitted"),
        "committed": ours("committed"),
        "read_committed": lambda: fragments_io.read_committed(
            spark, rc_schema, store=data.store, journals="bench/"
        ),
    }
    if kafka is not None:
        readers[KAFKA] = lambda: kafka.dataframe(spark, fields)
    if floor is not None and shape == "all columns":
        readers[FLOOR] = lambda: (
            spark.read.format(FLOOR_SOURCE)
            .option("directory", str(floor.directory))
            .option("partitions", str(floor.partitions))
            .option("ddl", floor.ddl)
            .load()
        )
    return readers


def _check_counts(counts: dict[str, int], data: Dataset) -> None:
    """Every reader counted what was generated (all messages; committed ones for committed reads)."""
    if counts["json"] != data.messages or counts["uncommitted"] != data.messages:
        raise RuntimeError(f"row counts {counts} differ from the {data.messages} messages generated")
    if counts["committed"] != data.committed or counts["read_committed"] != data.committed:
        raise RuntimeError(f"committed row counts {counts} differ from the {data.committed} generated")
    if counts.get(FLOOR, data.messages) != data.messages:
        raise RuntimeError(f"the pre-decoded batches count {counts[FLOOR]}, not the {data.messages} messages")
    if counts.get(KAFKA, data.committed) != data.committed:
        raise RuntimeError(
            f"Kafka's read_committed row count {counts[KAFKA]} differs from the {data.committed} generated"
        )


def _cpu_seconds(jvm_pid: int) -> tuple[float, float] | None:
    """CPU seconds (user + system) so far of Spark's JVM (`jvm_pid`) and of its descendants (the
    Python workers, and those that exited: the JVM's reaped children), from /proc; None without it."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    own: dict[int, float] = {}
    reaped: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(name)
        parents[pid] = int(fields[1])
        own[pid] = (int(fields[11]) + int(fields[12])) / tick
        reaped[pid] = (int(fields[13]) + int(fields[14])) / tick
    if jvm_pid not in own:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    python, stack = reaped[jvm_pid], list(children.get(jvm_pid, []))
    while stack:
        pid = stack.pop()
        python += own[pid] + reaped[pid]
        stack.extend(children.get(pid, []))
    return own[jvm_pid], python


def _jvm_pid(spark: Any) -> int | None:
    try:
        return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # not a local JVM (Spark Connect): no CPU figures
        return None


def measure(
    spark: Any,
    data: Dataset,
    runs: int,
    log: Callable[[str], None],
    shapes: tuple[str, ...] = SHAPES,
    kafka: kafka_peer.SparkSource | None = None,
    floor: Predecoded | None = None,
    cpu: dict[str, dict[str, list[list[float]]]] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Seconds per query for each shape and reader: one untimed warm-up query per reader (first
    shape), then `runs` rounds per shape, readers interleaved in each; every query's row count is
    checked. With `cpu`, it gets per shape and reader the [JVM, Python workers] CPU seconds of each
    timed query (where /proc shows them): on a shared machine CPU time says what wall time cannot."""
    out: dict[str, dict[str, list[float]]] = {}
    jvm = _jvm_pid(spark) if cpu is not None else None
    for i, shape in enumerate(shapes):
        contenders = _contenders(spark, data, shape, kafka, floor)
        if i == 0:
            log(f"{shape}: warm-up, one query per reader (untimed)")
            for make in contenders.values():
                _query(make())
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(runs):
            counts = {}
            for name, make in contenders.items():
                df = make()
                before = _cpu_seconds(jvm) if jvm is not None else None
                start = time.perf_counter()
                rows = _query(df)
                samples[name].append(time.perf_counter() - start)
                after = _cpu_seconds(jvm) if jvm is not None and before is not None else None
                if cpu is not None and before is not None and after is not None:
                    spent = [after[0] - before[0], after[1] - before[1]]
                    cpu.setdefault(shape, {}).setdefault(name, []).append(spent)
                counts[name] = sum(row.n for row in rows)
            _check_counts(counts, data)
            log(
                f"{shape}, run {r + 1}/{runs}: " + ", ".join(f"{n} {v[-1]:.2f} s" for n, v in samples.items())
            )
        out[shape] = samples
    return out


# Stages of read(): (name, where, function); timers around them (they do not nest).
STAGES = (
    ("fragment read, SHA1, decompress", "decode", "read_content"),
    ("newline scan", "decode", "_lines"),
    ("JSON parse (pyarrow)", "decode.JournalDecoder", "_read_json"),
    ("UUID split", "decode", "split_uuids"),
    ("metadata columns", "decode.JournalDecoder", "_assemble"),
    ("commit decision (vectorised)", "decide.Decider", "add"),
    ("commit decision: masks, horizon", "decide.Decider", "take_committed"),
    ("commit decision: masks, horizon", "decide.Decider", "open_horizon"),
    ("shape and cast to the Spark schema", "source.GazetteReader", "_shape"),
)


def _timed(stages: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            stages[name] = stages.get(name, 0.0) + time.perf_counter() - t0

    return wrapper


def profile(spark: Any, data: Dataset, isolation: str) -> dict[str, Any]:
    """Runs read() of every partition of one journal in this process, timing each stage (a timer
    around the function doing it: they do not nest); read() on one core, without Spark's JVM side.
    The caller discards a first pass (see `run`).
    A timer, not cProfile: cProfile inflates the per-message Python of the commit decision."""
    from pyspark.sql.types import StructType

    from fragments_io import decide, decode, source

    options = {
        "store": data.store,
        "journals": data.journals[0],
        "isolation": isolation,
        "schema": FIELDS_DDL,
    }
    ds = source.GazetteDataSource(options)
    ddl = ds.schema()
    schema = ddl if isinstance(ddl, StructType) else StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    reader = ds.reader(schema)
    parts = reader.partitions()
    stages: dict[str, float] = {}
    modules = {"decode": decode, "decide.Decider": decide.Decider}
    modules |= {"decode.JournalDecoder": decode.JournalDecoder, "source.GazetteReader": source.GazetteReader}
    saved = []
    for name, where, attr in STAGES:
        owner = modules[where]
        original = owner.__dict__[attr]
        saved.append((owner, attr, original))
        setattr(owner, attr, _timed(stages, name, original))
    try:
        start = time.perf_counter()
        rows = 0
        for p in parts:
            for batch in reader.read(p):
                rows += batch.num_rows
        wall = time.perf_counter() - start
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)
    stages["other (batches, Python glue)"] = max(0.0, wall - sum(stages.values()))
    size = sum(f.stat().st_size for f in (data.root / "store" / data.journals[0]).rglob("*") if f.is_file())
    return {
        "isolation": isolation,
        "journal_bytes": size,
        "rows": rows,
        "wall_s": wall,
        "mb_per_s_one_core": size / wall / 1e6,
        "stages_s": dict(sorted(stages.items(), key=lambda kv: -kv[1])),
    }


# -- report ---------------------------------------------------------------------------------------


def _ratio_rows(samples: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    rows = []
    for shape, by_reader in samples.items():
        json_s = by_reader["json"]
        for name in [r for r in (*READERS, FLOOR, KAFKA) if r in by_reader]:
            ours = by_reader[name]
            ratios = [j / o for j, o in zip(json_s, ours, strict=True)]
            target = {"uncommitted": TARGET_UNCOMMITTED, "committed": TARGET_COMMITTED}.get(
                name, TARGET_READ_COMMITTED
            )
            target = None if name in ("json", FLOOR, KAFKA) else target
            rows.append(
                {
                    "shape": shape,
                    "reader": name,
                    "seconds": statistics.median(ours),
                    "samples": ours,
                    "ratio": None if name == "json" else statistics.median(ratios),
                    "target": target,
                }
            )
    return rows


def run(
    settings: Settings,
    log: Callable[[str], None],
    data_dir: str | None = None,
    keep: bool = False,
    kafka: bool = False,
) -> dict[str, Any]:
    """Generates the data, measures, profiles (unless settings.profile is off); the results as a dict.
    With `kafka`, the same messages are replayed into a Kafka broker first (bench/kafka_peer.py) and
    Spark's Kafka source is one more reader; results["kafka"]["note"] says why not when it cannot run."""
    import fragments_io

    root = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=data_dir))
    kafka_results: dict[str, Any] | None = None
    try:
        log(
            f"bench.spark ({settings.name}): generating {settings.gigabytes:g} GB over {settings.journals} journals"
        )
        start = time.perf_counter()
        data = generate(root, settings, log)
        log(f"generated {data.bytes / 1e9:.2f} GB, {data.messages:,} messages, {data.fragments} fragments in "
            f"{time.perf_counter() - start:.0f} s")  # fmt: skip
        stack = contextlib.ExitStack()
        source: kafka_peer.SparkSource | None = None
        if kafka:
            kafka_results = {"note": None}
            try:
                source = stack.enter_context(kafka_peer.spark_source(data, log))
                kafka_results |= {"load_seconds": source.load_seconds, "transactions": source.transactions}
            except PeerUnavailable as exc:
                kafka_results["note"] = str(exc)
                log(f"no Kafka reader: {exc}")
            except Exception as exc:  # our readers still run; the Kafka rows say what failed
                kafka_results["note"] = f"failed: {type(exc).__name__}: {exc}"
                log(f"no Kafka reader:\n{traceback.format_exc()}")
        with stack:
            spark = fragments_io.spark_session(
                "local[2]",
                "bench-spark",
                **{
                    "spark.ui.enabled": "false",
                    "spark.sql.session.timeZone": "UTC",
                    "spark.sql.shuffle.partitions": "2",
                    "spark.driver.memory": "3g",
                    **(source.session_conf() if source else {}),
                },
            )
            try:
                floor = None
                cpu: dict[str, dict[str, list[list[float]]]] = {}
                if "all columns" in settings.shapes:
                    log("decoding the Python Data Source API floor's batches ahead (not timed)")
                    floor = predecode(spark, data, root / "predecoded")
                    spark.dataSource.register(predecoded_source())
                samples = measure(spark, data, settings.runs, log, settings.shapes, source, floor, cpu)
                profiles = []
                if settings.profile:
                    log("profiling read() in-process (one journal, one core)")
                    # Each profiled twice, the first untimed: a first read in this process pays
                    # one-off costs (a committed read's first filter took 0.18 s, then 0.03 s).
                    profiles = [
                        [profile(spark, data, iso) for _ in range(2)][-1]
                        for iso in ("uncommitted", "committed")
                    ]
            finally:
                spark.stop()
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    rows = _ratio_rows(samples)
    overhead = {}
    for shape in settings.shapes:
        by = {r["reader"]: r["seconds"] for r in rows if r["shape"] == shape}
        overhead[shape] = {
            "committed_vs_uncommitted": by["committed"] / by["uncommitted"],
            "read_committed_vs_uncommitted": by["read_committed"] / by["uncommitted"],
        }
    results = {
        "settings": dataclasses.asdict(settings),
        "data": {
            "bytes": data.bytes,
            "messages": data.messages,
            "committed": data.committed,
            "fragments": data.fragments,
        },
        "readers": rows,
        "committed_overhead": overhead,
        "cpu_seconds": cpu,  # per shape and reader, [JVM, Python workers] CPU seconds per timed query
        "profiles": profiles,
        "kafka": kafka_results,
    }
    return results


_SHAPE_KEYS = {"all columns": "all", "query columns": "query"}
_READER_NAMES = {
    "json": "Limit: spark.read.json",
    "uncommitted": "Spark source, uncommitted",
    "committed": "Spark source, committed",
    "read_committed": "read_committed()",
}
_TARGETS = {
    "uncommitted": Target("ratio", TARGET_UNCOMMITTED, f"≥ {TARGET_UNCOMMITTED} of json"),
    "committed": Target("ratio", TARGET_COMMITTED, f"≥ {TARGET_COMMITTED} of json"),
    "read_committed": Target("ratio", TARGET_READ_COMMITTED, f"≥ {TARGET_READ_COMMITTED} of json"),
}


def spark_figures(
    shapes: tuple[str, ...] = SHAPES, kafka: bool = False, floor: bool = True
) -> dict[str, Figure]:
    """The suite's figures of this benchmark, in table order: per shape, json (the limit) then ours,
    as MB/s of the same JSON bytes (so ours / json = t(json) / t(ours)); with `floor`, for all
    columns, the Python Data Source API's floor (FLOOR, a limit: the most any Python source returning
    those columns can reach); with `kafka`, then the Kafka peer's (the peer of our committed read:
    kafka_peer.PEER_OF)."""
    out = {}
    for shape in shapes:
        limit = f"spark_json_{_SHAPE_KEYS[shape]}"
        for reader in READERS:
            key = f"spark_{reader}_{_SHAPE_KEYS[shape]}"
            name = f"{_READER_NAMES[reader]}, {shape}"
            if reader == "json":
                out[key] = Figure(key, name, "MB/s", True)
            else:
                out[key] = Figure(key, name, "MB/s", True, limit, _TARGETS[reader])
        if floor and shape == "all columns":
            key = f"spark_{FLOOR}_{_SHAPE_KEYS[shape]}"
            name = f"Limit: Python Data Source API floor (pre-decoded batches), {shape}"
            out[key] = Figure(key, name, "MB/s", True)
        if kafka:
            key = f"spark_{KAFKA}_{_SHAPE_KEYS[shape]}"
            name = f"Peer: Kafka's Spark source, read_committed, {shape} (target: committed ≥ {TARGET_VS_KAFKA:g}×)"
            out[key] = Figure(key, name, "MB/s", True)
    return out


def figures_of(results: dict[str, Any]) -> dict[str, Figure]:
    """`run`'s results as the suite's figures, one MB/s sample per timed query."""
    shapes = tuple(dict.fromkeys(r["shape"] for r in results["readers"]))
    floor = any(r["reader"] == FLOOR for r in results["readers"])
    figures = spark_figures(shapes, kafka=results.get("kafka") is not None, floor=floor)
    size = results["data"]["bytes"]
    for r in results["readers"]:
        key = f"spark_{r['reader']}_{_SHAPE_KEYS[r['shape']]}"
        figures[key].samples.extend(size / s / 1e6 for s in r["samples"])
    return figures


def _seconds_by_reader(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per shape, each reader's median seconds, as t(reader) / t(other) ratios need them."""
    out: dict[str, dict[str, float]] = {}
    for r in results["readers"]:
        out.setdefault(r["shape"], {})[r["reader"]] = r["seconds"]
    return out


def print_results(results: dict[str, Any], console: Console) -> None:
    d = results["data"]
    table = Table(
        title=f"fragments_io vs spark.read.json: {d['bytes'] / 1e9:.2f} GB, {d['messages']:,} messages "
        f"({results['settings']['name']}, median of {results['settings']['runs']})"
    )
    for col in ("Schema", "Reader", "Seconds", "MB/s", "Ratio t(json)/t(ours)", "Target"):
        table.add_column(col, justify="left" if col in ("Schema", "Reader", "Target") else "right")
    for r in results["readers"]:
        target = ""
        if r["target"] is not None:
            target = f"≥ {r['target']:.1f} {'✓' if r['ratio'] >= r['target'] else '✗'}"
        ratio = "limit" if r["ratio"] is None else f"{r['ratio']:.2f}"
        table.add_row(
            r["shape"],
            r["reader"],
            f"{r['seconds']:.2f}",
            f"{d['bytes'] / r['seconds'] / 1e6:,.0f}",
            ratio,
            target,
        )
    console.print(table)
    kafka = results.get("kafka")
    if kafka is not None:
        console.print(
            f"Kafka: {kafka['note']}" if kafka["note"] else
            f"Kafka: the same messages in {kafka['transactions']:,} transactions, loaded in {kafka['load_seconds']:.0f} s; "
            + ", ".join(f"{shape}: committed {by[KAFKA] / by['committed']:.2f}× Kafka's source "
                        f"(target ≥ {TARGET_VS_KAFKA:g})" for shape, by in _seconds_by_reader(results).items())
        )  # fmt: skip
    for shape, o in results["committed_overhead"].items():
        console.print(
            f"committed overhead, {shape}: t(committed)/t(uncommitted) {o['committed_vs_uncommitted']:.2f}, "
            f"t(read_committed)/t(uncommitted) {o['read_committed_vs_uncommitted']:.2f}"
        )
    for shape, by_reader in results.get("cpu_seconds", {}).items():
        console.print(
            f"CPU seconds per query, {shape} (median; JVM + Python workers): "
            + ", ".join(
                f"{name} {statistics.median(j for j, _ in v):.2f} + {statistics.median(p for _, p in v):.2f}"
                for name, v in by_reader.items()
            )
        )
    for p in results["profiles"]:
        prof = Table(
            title=f"read() profile, isolation={p['isolation']}: {p['journal_bytes'] / 1e6:,.0f} MB in "
            f"{p['wall_s']:.2f} s on one core ({p['mb_per_s_one_core']:,.0f} MB/s)"
        )
        prof.add_column("Stage (cumulative time)")
        prof.add_column("Seconds", justify="right")
        prof.add_column("Share", justify="right")
        total = sum(p["stages_s"].values())
        for name, secs in p["stages_s"].items():
            prof.add_row(name, f"{secs:.2f}", f"{secs / total:.0%}")
        console.print(prof)


def main(argv: list[str] | None = None, console: Console | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK.gigabytes:g} GB, one run, one shape (a smoke test)"
    )
    parser.add_argument(
        "--gb",
        type=float,
        help=f"gigabytes of messages (default {FULL.gigabytes:g}, quick {QUICK.gigabytes:g})",
    )
    parser.add_argument("--runs", type=int, help="timed rounds (each figure is their median)")
    parser.add_argument("--journals", type=int, help="journals (default 8)")
    parser.add_argument("--codec", choices=("none", "gzip", "zstandard", "snappy"), help="fragment codec")
    parser.add_argument("--data-dir", help="where to write the generated data (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--all-shapes", action="store_true", help=f"measure every schema shape {SHAPES}")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--kafka", action="store_true", help="also Spark's Kafka source over the same messages"
    )
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    changes: dict[str, Any] = {k: v for k, v in (("gigabytes", args.gb), ("runs", args.runs),
                               ("journals", args.journals), ("codec", args.codec)) if v is not None}  # fmt: skip
    if changes.get("runs", 1) < 1 or changes.get("journals", 1) < 1 or changes.get("gigabytes", 1) <= 0:
        parser.error(f"--runs, --journals and --gb must be positive (got {changes})")
    if args.all_shapes:
        changes["shapes"] = SHAPES
    settings = dataclasses.replace(settings, **changes)
    if console is None:
        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 120)  # piped or captured: don't wrap the tables
    results = run(settings, console.log, args.data_dir, args.keep, kafka=args.kafka)
    print_results(results, console)
    if args.json:
        args.json.write_text(
            json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **results}, indent=2) + "\n"
        )
        console.log(f"wrote {args.json}")
    return results


if __name__ == "__main__":
    main()
