"""fragments_io end to end through one SparkSession: both committed shapes, uncommitted and raw
against a Sequencer over the same bytes; S3 (moto); SQL views and pushdown; errors through Spark;
and journals written by a real broker, read in etcd mode and compared with ReadCommitted."""

from __future__ import annotations

import logging
import os

import pytest
from fio_journals import FRAMING, envelopes_of, persist_fragment, persist_journal, random_journal

import fragments_io
from fragments_io.committed import committed_reference
from fragments_io.options import parse_options
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, new_producer_id
from gazette.protocol.codec import Codec

CODECS = (Codec.NONE, Codec.GZIP, Codec.ZSTANDARD, Codec.SNAPPY)


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


def _write(store, journals, events=150):
    """Persists random journals (every codec, a path postfix, an overlapping duplicate fragment and
    a foreign object); returns {journal: (committed begins, uncommitted envelopes)}."""
    expected = {}
    for k, journal in enumerate(journals):
        frames = random_journal(k + 11, events, 3)
        frags = persist_journal(store, journal, frames, CODECS, frames_per_fragment=20, postfix="day=1")
        content = b"".join(frames)
        first = frags[0]
        # The first fragment again, persisted by "another broker" under another postfix.
        persist_fragment(store, journal, 0, content[: first.end], Codec.GZIP, postfix="day=1/broker=b")
        envs = list(envelopes_of(journal, frames))
        expected[journal] = (sorted(e.begin for e in committed_reference(envs)), envs)
    return expected


@pytest.fixture(scope="module")
def file_journals(tmp_path_factory):
    root = tmp_path_factory.mktemp("fio-store")
    store = f"file://{root}/"
    expected = _write(store, ["ex/words/a", "ex/words/b", "ex/other/c"])
    (root / "ex" / "words" / "a" / "_SUCCESS").write_text("foreign")
    return store, expected


def _load(spark, **options):
    """A fresh reader per load: DataFrameReader.option mutates the reader it is called on."""
    return spark.read.format("gazette").options(**{k: str(v) for k, v in options.items()}).load()


def _by_journal(rows):
    out = {}
    for r in rows:
        out.setdefault(r.journal, []).append(r.begin)
    return {j: sorted(v) for j, v in out.items()}


def test_committed_uncommitted_raw_equal_the_reference(spark, file_journals):
    store, expected = file_journals
    words = {j: v for j, v in expected.items() if j.startswith("ex/words/")}
    fragments_io.register(spark)
    committed = _load(spark, store=store, journals="ex/words/")
    assert committed.columns[:9] == [
        "journal",
        "begin",
        "end",
        "uuid",
        "producer",
        "clock",
        "published_at",
        "flags",
        "value",
    ]
    assert {"word", "n", "p", "_meta"} <= set(committed.columns)
    assert _by_journal(committed.select("journal", "begin").collect()) == {j: v[0] for j, v in words.items()}

    unc = _load(spark, store=store, journals="ex/words/", isolation="uncommitted", maxPartitionBytes=4000)
    rows = unc.select("journal", "begin", "end", "uuid", "producer", "clock", "flags").collect()
    got = sorted((r.journal, r.begin, r.end, r.uuid, r.producer, r.clock, r.flags) for r in rows)
    want = sorted(
        (j, e.begin, e.end, str(e.uuid) if e.uuid else None, e.producer.hex() or None, e.clock, e.flags)
        for j, (_, envs) in words.items()
        for e in envs
    )
    assert got == want
    assert unc.rdd.getNumPartitions() >= 4

    raw = _load(spark, store=store, journals="ex/words/", isolation="raw")
    assert raw.columns == ["journal", "begin", "end", "value"]
    assert raw.count() == len(want)
    ts = committed.where("clock > 0").select("published_at").first().published_at
    assert ts.year == 2023  # the clocks of fio_journals start at 1.7e9 s


def test_read_committed_spans_partitions_within_a_journal(spark, file_journals):
    store, expected = file_journals
    journal = "ex/other/c"
    opts = {"store": store, "journals": journal, "maxPartitionBytes": 3000}
    assert _load(spark, isolation="uncommitted", **opts).rdd.getNumPartitions() >= 3
    # The in-source shape keeps the journal whole: one partition.
    assert _load(spark, **opts).rdd.getNumPartitions() == 1
    for by_fragment in (True, False, None):  # the fragment plan, the journal plan, and the pick
        df = fragments_io.read_committed(spark, by_fragment=by_fragment, **opts)
        assert _by_journal(df.select("journal", "begin").collect()) == {journal: expected[journal][0]}
        bounded = fragments_io.read_committed(
            spark, beginOffset=1000, endOffset=5000, by_fragment=by_fragment, **opts
        )
        assert sorted(r.begin for r in bounded.select("begin").collect()) == [
            b for b in expected[journal][0] if 1000 <= b < 5000
        ]
        columns = fragments_io.read_committed(
            spark, "journal STRING, begin BIGINT, n BIGINT", by_fragment, **opts
        )
        assert columns.columns == ["journal", "begin", "n"]
        assert sorted(r.begin for r in columns.collect()) == expected[journal][0]
    # One journal on two cores: decoding it twice does not pay, whole journals do.
    assert not fragments_io._fragment_plan_pays(spark, parse_options({"store": store, "journals": journal}))
    assert fragments_io._fragment_plan_pays(
        spark, parse_options({"store": store, "journals": journal, "minPartitions": "8"})
    )


def test_sql_view_and_pushdown_prune(spark, file_journals):
    store, expected = file_journals
    fragments_io.sql_view(spark, "words", store=store, journals="ex/", isolation="uncommitted")
    q = spark.sql(
        "SELECT journal, begin FROM words WHERE journal = 'ex/words/b' AND begin >= 2000 AND begin < 6000"
    )
    want = sorted(e.begin for e in expected["ex/words/b"][1] if 2000 <= e.begin < 6000)
    assert sorted(r.begin for r in q.collect()) == want
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert "2000" not in plan  # claimed by the source, not re-checked by Spark
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW committed_words USING gazette OPTIONS (store '{store}', journals 'ex/words/')"
    )
    n = spark.sql("SELECT count(*) AS n FROM committed_words WHERE published_at >= '2000-01-01'").first().n
    assert n == sum(
        1 for j in ("ex/words/a", "ex/words/b") for b in expected[j][0]
        if next(e for e in expected[j][1] if e.begin == b).clock
    )  # fmt: skip


def test_errors_through_spark(spark, tmp_path):
    store = f"file://{tmp_path}/"
    frames = random_journal(3, 40)
    frags = persist_journal(store, "ex/bad", frames, (Codec.GZIP,), frames_per_fragment=20)
    with pytest.raises(Exception, match="word"):
        _load(spark, store=store, schema="word BIGINT").collect()
    with open(f"{tmp_path}/{frags[0].content_path}", "r+b") as f:
        f.seek(15)
        f.write(b"\x00\xff\x00\xff")
    with pytest.raises(Exception, match=frags[0].content_name):
        _load(spark, store=store, isolation="uncommitted", inferSchema="false").collect()
    skipped = _load(spark, store=store, isolation="uncommitted", ignoreCorruptFragments="true")
    assert skipped.count() == len(list(envelopes_of("ex/bad", frames))) - 20
    with pytest.raises(Exception, match="unknown option"):
        _load(spark, store=store, bogus=1)
    empty = _load(spark, store=store, journals="ex/none/")
    assert empty.count() == 0


def test_s3_store(spark, s3_store_url):
    expected = _write(s3_store_url, ["s3/j"], events=60)
    df = _load(spark, store=s3_store_url)
    assert _by_journal(df.select("journal", "begin").collect()) == {"s3/j": expected["s3/j"][0]}


def test_broker_written_journals_in_etcd_mode(spark, etcd, etcd_root, tmp_path):
    """Messages appended through a real broker (duplicates, a rollback, no-UUID messages), flushed
    to a file store; read in etcd mode and compared with ReadCommitted over the broker."""
    from gazette.local.cluster import LocalCluster
    from gazette.message.reader import ReadCommitted, ReadUncommitted

    store = f"file://{tmp_path}/store/"
    with LocalCluster(
        brokers=1, store=store, etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "d")
    ) as c:
        client = c.client()
        names = ["brk/j1", "brk/j2"]
        client.apply_journals(
            [
                c.journal_spec(
                    n, labels={"content-type": "application/x-ndjson", "app": "fio"}, compression=codec
                )
                for n, codec in zip(names, ("zstandard", "gzip"), strict=True)
            ]
        )
        c.wait_for_routes(names)
        pid = new_producer_id()
        clock = 1 << 62
        for n in names:
            for batch in range(4):
                frames = []
                for i in range(5):
                    clock += CLOCK_TICK
                    flag = Flags.CONTINUE_TXN if batch % 2 else Flags.OUTSIDE_TXN
                    frames.append(FRAMING.encode({"n": n, "b": batch, "i": i}, build_uuid(pid, clock, flag)))
                frames.append(frames[-1])  # an at-least-once duplicate
                frames.append(b'{"plain": true}\n')  # no UUID
                if batch == 1:
                    frames.append(FRAMING.encode_ack(build_uuid(pid, clock - 3 * CLOCK_TICK, Flags.ACK_TXN)))
                if batch == 3:
                    clock += CLOCK_TICK
                    frames.append(FRAMING.encode_ack(build_uuid(pid, clock, Flags.ACK_TXN)))
                client.append(n, b"".join(frames))
                client.flush(n)
        want = {n: sorted(e.begin for e in ReadCommitted(client, n, skip_acks=True)) for n in names}
        want_unc = {n: len(list(ReadUncommitted(client, n))) for n in names}
        etcd_opts = {"etcd": etcd.endpoint, "etcdRoot": etcd_root}
        got = _by_journal(_load(spark, journals="app=fio", **etcd_opts).select("journal", "begin").collect())
        assert got == want and all(want.values())
        unc = _load(spark, journals="app=fio", isolation="uncommitted", **etcd_opts)
        assert unc.count() == sum(want_unc.values())
        assert _load(spark, journals="brk/", **etcd_opts).count() == sum(len(v) for v in want.values())
        # Store-only mode over the same store reads the same committed rows.
        assert _by_journal(_load(spark, store=store).select("journal", "begin").collect()) == want


def test_the_jvm_was_started_in_its_own_session_without_a_preexec_fn(spark):
    """spark_session launches the JVM with setsid instead of PySpark's preexec_fn: no Python runs in
    the forked child, which gRPC threads busy in this process could otherwise kill before exec."""
    proc = spark.sparkContext._gateway.proc
    assert os.getsid(proc.pid) == proc.pid != os.getsid(0)
