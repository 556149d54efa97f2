"""What a query does not ask for is not built: the decoder's optional columns, the reader's rows for a
narrow schema against the same rows read whole, and a read in a fresh process that never imports
pandas (pyarrow's conversions import it on first use, a fixed cost for every new Spark worker)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from fio_journals import persist_journal, random_journal
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from fragments_io.decode import JournalDecoder, from_numpy, to_numpy
from fragments_io.options import parse_options
from fragments_io.source import GazetteDataSource, metadata_fields
from gazette.fragment.fragment import Fragment

J = "ex/prune/part-000"


def _decoded(columns):
    frames = random_journal(5, 150, 3)
    dec = JournalDecoder(
        J, "json", "committed", "/_meta/uuid", pa.schema([("n", pa.int64())]), False, columns
    )
    tables, offset = [], 0
    for i in range(0, len(frames), 40):
        content = b"".join(frames[i : i + 40])
        tables.append(dec.feed(Fragment(J, offset, offset + len(content)), content))
        offset += len(content)
    return pa.concat_tables([*tables, dec.finish()])


def test_the_decoder_builds_only_the_columns_asked_for():
    full = _decoded(None)
    assert full.column_names == ["begin", "end", "uuid", "producer", "clock", "flags", "value", "n"]
    narrow = _decoded(frozenset())
    assert narrow.column_names == ["begin", "end", "clock", "flags", "n"]
    assert narrow.equals(full.select(narrow.column_names))
    with_producer = _decoded(frozenset({"producer"}))
    assert with_producer.column_names == ["begin", "end", "uuid", "producer", "clock", "flags", "n"]


def _read(store, isolation, fields, **options):
    opts = {"store": store, "journals": "ex/", "isolation": isolation, **options}
    reader = GazetteDataSource(opts).reader(StructType(fields))
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    return reader, pa.Table.from_batches(batches, schema=reader.target)


@pytest.mark.parametrize("isolation", ["uncommitted", "committed"])
def test_a_narrow_schema_reads_the_same_rows(tmp_path, isolation):
    store = f"file://{tmp_path}/"
    for k in range(2):
        persist_journal(store, f"ex/j{k}", random_journal(40 + k, 200, 3), frames_per_fragment=30)
    every = metadata_fields(parse_options({"store": store})) + [StructField("n", LongType())]
    whole_reader, whole = _read(store, isolation, every, beginOffset=500)
    assert whole_reader.columns == ({"uuid", "producer", "value"})
    narrow = [
        StructField("journal", StringType()),
        StructField("begin", LongType()),
        StructField("published_at", TimestampType()),
        StructField("n", LongType()),
    ]
    reader, got = _read(store, isolation, narrow, beginOffset=500)
    assert reader.columns == ({"producer"} if isolation == "committed" else set())
    assert got.num_rows > 0
    assert got.equals(whole.select([f.name for f in narrow]))


def test_a_read_in_a_fresh_process_does_not_import_pandas(tmp_path):
    store = f"file://{tmp_path}/"
    persist_journal(store, "ex/j", random_journal(7, 120, 3), frames_per_fragment=30)
    script = textwrap.dedent(
        f"""
        import sys
        from pyspark.sql.types import LongType, StringType, StructField, StructType
        from fragments_io.source import GazetteDataSource
        for isolation in ("uncommitted", "committed"):
            schema = StructType([StructField("journal", StringType()), StructField("begin", LongType()),
                                 StructField("value", StringType()), StructField("n", LongType())])
            reader = GazetteDataSource({{"store": {store!r}, "isolation": isolation}}).reader(schema)
            rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))
            assert rows > 0, rows
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=9), max_size=4),
    wide=st.booleans(),
    skip=st.integers(0, 3),
)
def test_to_numpy_and_from_numpy(chunks, wide, skip):
    t = pa.int64() if wide else pa.int32()
    lo, hi = (-(2**63), 2**63 - 1) if wide else (-(2**31), 2**31 - 1)
    chunks = [[v if v is None else min(max(v, lo), hi) for v in c] for c in chunks]
    arrays = [pa.array([0] * skip + c, t).slice(skip) for c in chunks]  # non-zero array offsets
    column = pa.chunked_array(arrays, t)
    want = [-7 if v is None else v for c in chunks for v in c]
    assert to_numpy(column, null=-7).tolist() == want
    if len(arrays) == 1:
        assert to_numpy(arrays[0], null=-7).tolist() == want
    if None not in [v for c in chunks for v in c]:
        assert from_numpy(to_numpy(column), t).to_pylist() == want
    mask = [v is None for v in want]
    assert from_numpy(__import__("numpy").array(mask, bool), pa.bool_()).to_pylist() == mask


@pytest.mark.parametrize("isolation", ["uncommitted", "committed"])
def test_publish_time_bounds_keep_rows_with_a_time_inside(tmp_path, isolation):
    store = f"file://{tmp_path}/"
    persist_journal(store, "ex/j", random_journal(9, 200, 3), frames_per_fragment=30)
    fields = [StructField("begin", LongType()), StructField("published_at", TimestampType())]
    _, whole = _read(store, isolation, fields)
    micros = sorted(v for v in whole.column("published_at").cast(pa.int64()).to_pylist() if v is not None)
    lo, hi = micros[len(micros) // 4], micros[3 * len(micros) // 4]
    opts = {"store": store, "journals": "ex/", "isolation": isolation}
    reader = GazetteDataSource(opts).reader(StructType(fields))
    reader.bounds = reader.bounds.and_(published_lo_us=lo, published_hi_us=hi)
    got = pa.Table.from_batches(
        [b for p in reader.partitions() for b in reader.read(p)], schema=reader.target
    )
    times = whole.column("published_at").cast(pa.int64()).to_pylist()
    want = [
        b
        for b, t in zip(whole.column("begin").to_pylist(), times, strict=True)
        if t is not None and lo <= t < hi
    ]
    assert got.column("begin").to_pylist() == want and want
