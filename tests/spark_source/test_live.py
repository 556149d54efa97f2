"""Live reads (option broker, or live=true with etcd): journals appended through a real broker and
never flushed are read up to their write heads, batch and streaming, with the same committed answer
as ReadCommitted; a micro-batch planned before a flush reads the same rows after it; a broker down
fails the read instead of returning part of it; failOnDataLoss keeps its meaning."""

from __future__ import annotations

import logging
import time

import pytest
from fio_journals import FRAMING, random_journal

from fragments_io.errors import DataLossError, FragmentsIOError, OptionError
from fragments_io.options import parse_options
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, new_producer_id

SCHEMA = "p INT, i INT, word STRING, n INT"
NDJSON = {"content-type": "application/x-ndjson"}
WAIT_S = 300.0  # bounds each wait; a loaded 2-core machine runs a micro-batch in seconds


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


def _committed(client, names):
    from gazette.message.reader import ReadCommitted

    return sorted((n, e.begin) for n in names for e in ReadCommitted(client, n, skip_acks=True))


def _rows(df):
    return sorted((r.journal, r.begin) for r in df.select("journal", "begin").collect())


def _load(spark, **options):
    reader = spark.read.format("gazette").option("schema", SCHEMA)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def _cluster(make_local_cluster, names, **options):
    c = make_local_cluster(1, **options)
    client = c.client()
    client.apply_journals([c.journal_spec(n, labels=NDJSON, compression="zstandard") for n in names])
    c.wait_for_routes(names)
    return c, client


def _unpersisted(tmp_path, client, names):
    """The journals whose write head is past their last persisted fragment (nothing flushed them; a
    broker persists only a new journal's first fragment on its own)."""
    ends = {n: 0 for n in names}
    for path in (tmp_path / "store").rglob("*.zst"):
        journal = str(path.parent.relative_to(tmp_path / "store"))
        ends[journal] = max(ends.get(journal, 0), int(path.name.split("-")[1], 16))
    return {n for n in names if client.read_head(n) > ends[n]}


def _append(client, journal, frames, per_append=10):
    for k in range(0, len(frames), per_append):
        client.append(journal, b"".join(frames[k : k + per_append]))


def test_live_options_are_checked():
    assert not parse_options({"store": "file:///s/"}).live  # store-only stays the default
    opts = parse_options(
        {"store": "file:///s/", "broker": " http://a:1, http://b:2 ", "brokerTimeout": "2.5"}
    )
    assert (opts.live, opts.broker, opts.broker_timeout_s) == (True, "http://a:1,http://b:2", 2.5)
    assert parse_options({"etcd": "http://e:2379", "live": "true"}).live
    with pytest.raises(OptionError, match="live=true reads through brokers: give option broker"):
        parse_options({"store": "file:///s/", "live": "true"})
    with pytest.raises(OptionError, match="which option live=false turns off"):
        parse_options({"store": "file:///s/", "broker": "http://a:1", "live": "false"})
    with pytest.raises(OptionError, match="option broker: no broker endpoint"):
        parse_options({"store": "file:///s/", "broker": " , "})
    with pytest.raises(OptionError, match=r"brokerTimeout='soon' is not a number"):
        parse_options({"store": "file:///s/", "broker": "http://a:1", "brokerTimeout": "soon"})
    with pytest.raises(OptionError, match="brokerTimeout applies to live reads only"):
        parse_options({"store": "file:///s/", "brokerTimeout": "3"})


def test_read_committed_takes_the_journal_plan_for_live_reads(spark):
    import fragments_io

    with pytest.raises(OptionError, match=r"by_fragment=True\) plans two scans"):
        fragments_io.read_committed(
            spark, by_fragment=True, store="file:///nowhere/", broker="http://127.0.0.1:1"
        )


def test_batch_reads_unflushed_committed_messages(spark, make_local_cluster, tmp_path):
    """A journal flushed half-way and one never flushed: with the broker the read equals
    ReadCommitted (rollbacks, duplicates and open transactions left out), read_committed too;
    store-only sees only the persisted part; etcd mode finds the brokers in etcd; uncommitted sees
    every message."""
    import fragments_io
    from gazette.message.reader import ReadUncommitted

    store = f"file://{tmp_path}/store/"
    names = ["live/a", "live/b"]
    c, client = _cluster(make_local_cluster, names, store=store)
    a, b = random_journal(11, 120, 3), random_journal(12, 60, 2)
    _append(client, "live/a", a[:60])
    client.flush("live/a")
    _append(client, "live/a", a[60:])
    _append(client, "live/b", b)
    want = _committed(client, names)
    broker = ",".join(c.broker_endpoints)

    got = _rows(_load(spark, store=store, broker=broker))
    assert got == want
    whole = f"journal STRING, begin BIGINT, end BIGINT, uuid STRING, producer STRING, clock BIGINT, published_at TIMESTAMP, flags INT, value STRING, {SCHEMA}"
    assert _rows(fragments_io.read_committed(spark, whole, store=store, broker=broker)) == want
    stored = _rows(_load(spark, store=store))
    assert set(stored) < set(got)  # store-only: what was persisted only
    assert _unpersisted(tmp_path, client, names)
    etcd_mode = _load(spark, etcd=c.etcd_endpoint, etcdRoot=c.root, journals="live/", live="true")
    assert _rows(etcd_mode) == want
    unc = _load(spark, store=store, broker=broker, isolation="uncommitted").count()
    assert unc == sum(len(list(ReadUncommitted(client, n))) for n in names)


def _await_rows(spark, out, want, query):
    """Polls the parquet sink until it holds exactly `want` (bounded; fails on the query's error)."""
    deadline = time.monotonic() + WAIT_S
    got = None
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        try:
            got = _rows(spark.read.schema(f"journal STRING, begin BIGINT, {SCHEMA}").parquet(str(out)))
        except Exception:  # no file committed yet
            got = None
        if got == want:
            return
        time.sleep(1.0)
    raise AssertionError(
        f"the sink holds {None if got is None else len(got)} rows, not the {len(want)} wanted"
    )


def test_stream_sees_appends_without_flush_and_restarts_exactly_once(spark, make_local_cluster, tmp_path):
    """A processingTime query sees messages appended after it started, never flushed, rounds of a
    transaction included; stopped and restarted from its checkpoint (availableNow), the sink holds
    the committed set exactly once."""
    store = f"file://{tmp_path}/store/"
    out, ck = tmp_path / "out", tmp_path / "ck"
    names = ["ls/a", "ls/b"]
    c, client = _cluster(make_local_cluster, names, store=store)
    broker = ",".join(c.broker_endpoints)
    _append(client, "ls/a", random_journal(21, 40, 2))

    def stream(trigger):
        reader = spark.readStream.format("gazette").option("store", store).option("broker", broker)
        df = reader.option("schema", SCHEMA).load()
        writer = (
            df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck))
        )
        return writer.trigger(**trigger).start()

    query = stream({"processingTime": "0.5 seconds"})
    try:
        _await_rows(spark, out, _committed(client, names), query)
        pid, clock = new_producer_id(), 1 << 61
        frames = []
        for i in range(3):  # a transaction: invisible until its ACK arrives in a later append
            clock += CLOCK_TICK
            frames.append(
                FRAMING.encode(
                    {"p": 9, "i": i, "word": "t", "n": i}, build_uuid(pid, clock, Flags.CONTINUE_TXN)
                )
            )
        client.append("ls/b", b"".join(frames))
        _append(client, "ls/a", random_journal(22, 30, 2))
        _await_rows(spark, out, _committed(client, names), query)
        assert not [r for r in spark.read.parquet(str(out)).where("word = 't'").collect()]
        clock += CLOCK_TICK
        client.append("ls/b", FRAMING.encode_ack(build_uuid(pid, clock, Flags.ACK_TXN)))
        _await_rows(spark, out, _committed(client, names), query)
        assert len(spark.read.parquet(str(out)).where("word = 't'").collect()) == 3
    finally:
        query.stop()
    _append(client, "ls/b", random_journal(23, 30, 2))
    again = stream({"availableNow": True})
    assert again.awaitTermination(WAIT_S), "the availableNow run did not finish"
    assert again.exception() is None
    got = _rows(spark.read.parquet(str(out)))
    assert len(got) == len(set(got)), "a message was written twice"
    assert got == _committed(client, names)
    assert _unpersisted(tmp_path, client, names) == set(names)


def _stream_reader(options):
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    from fragments_io.source import metadata_fields
    from fragments_io.streaming import GazetteStreamReader

    opts = parse_options({"schema": SCHEMA, **options})
    fields = [
        StructField(n, t)
        for n, t in (("p", IntegerType()), ("i", IntegerType()), ("word", StringType()), ("n", IntegerType()))
    ]
    return GazetteStreamReader(opts, StructType(metadata_fields(opts) + fields))


def _read_all(reader, parts):
    return sorted(
        (j, b)
        for p in parts
        for batch in reader.read(p)
        for j, b in zip(batch.column("journal").to_pylist(), batch.column("begin").to_pylist(), strict=True)
    )


def test_a_micro_batch_planned_live_reads_the_same_rows_once_persisted(make_local_cluster, tmp_path):
    """The driver's and executors' code without Spark: a batch planned over unflushed bytes (read
    through the broker), then the journal flushed: the same batch planned again reads the bytes from
    the store, and both plans read the same rows; a transaction begun in an earlier batch commits in
    this one through the replayed history."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from fragments_io.live import LiveRange

    store = f"file://{tmp_path}/store/"
    c, client = _cluster(make_local_cluster, ["lp/a"], store=store)
    frames = random_journal(31, 80, 3)
    _append(client, "lp/a", frames[:40])
    client.flush("lp/a")
    _append(client, "lp/a", frames[40:])
    reader = _stream_reader({"store": store, "broker": ",".join(c.broker_endpoints)})
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    live_plan = reader.partitions(start, end)
    assert any(isinstance(p.fragment, LiveRange) for part in live_plan for t in part.tasks for p in t.pieces)
    before = _read_all(reader, live_plan)
    client.flush("lp/a")
    stored_plan = reader.partitions(start, end)
    assert not any(
        isinstance(p.fragment, LiveRange) for part in stored_plan for t in part.tasks for p in t.pieces
    )
    assert _read_all(reader, stored_plan) == before == _committed(client, ["lp/a"])
    assert _read_all(reader, live_plan) == before  # planned live, read after the flush: the same bytes


def test_store_mode_lists_journals_the_store_lacks_through_the_brokers(make_local_cluster, tmp_path):
    """A live read in store mode finds a journal with nothing persisted through the brokers' List
    (option journals as a name or a prefix), and plans it whole as one LiveRange up to its head."""
    from fragments_io.discovery import discover
    from fragments_io.live import LiveRange

    store = f"file://{tmp_path}/store/"
    c, client = _cluster(make_local_cluster, ["ld/a", "ld/b", "le/c"], store=store)
    (tmp_path / "store").mkdir(exist_ok=True)
    broker = ",".join(c.broker_endpoints)

    def found(journals):
        return {
            j.name: j
            for j in discover(
                parse_options({"store": store, "broker": broker, "journals": journals})
            ).journals
        }

    assert set(found("ld/")) == {"ld/a", "ld/b"} and set(found("")) == {"ld/a", "ld/b", "le/c"}
    assert found("ld/b")["ld/b"].live == ()  # nothing appended: nothing to read
    assert set(discover(parse_options({"store": store, "journals": "ld/"})).journals) == set()  # store-only
    client.append("ld/b", b"".join(random_journal(61, 20, 1)))
    head = client.read_head("ld/b")
    j = found("ld/b")["ld/b"]
    reach = max((f.end for f in j.fragments), default=0)  # a broker may persist a first fragment itself
    assert [(r.begin, r.end) for r in j.live] == ([(reach, head)] if reach < head else [])
    assert all(isinstance(r, LiveRange) for r in j.live) and all(r.end <= head for r in j.live)


def test_a_broker_down_fails_the_read(spark, make_local_cluster, tmp_path):
    """A read planned with the broker up and run after it was killed raises (after brokerTimeout)
    instead of returning the persisted part alone; through Spark the query fails."""
    store = f"file://{tmp_path}/store/"
    c, client = _cluster(make_local_cluster, ["kb/a"], store=store, mode="subprocess")
    frames = random_journal(41, 60, 2)
    _append(client, "kb/a", frames[:30])
    client.flush("kb/a")
    _append(client, "kb/a", frames[30:])
    options = {"store": store, "broker": ",".join(c.broker_endpoints), "brokerTimeout": "2"}
    reader = _stream_reader(options)
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    start = reader.initialOffset()
    plan = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    c.kill_broker(0)
    with pytest.raises(FragmentsIOError, match=r"journal kb/a: reading offsets \[\d+, \d+\) through broker"):
        _read_all(reader, plan)
    with pytest.raises(
        Exception, match=r"asking broker\(s\) http://\S+ for the journals' write heads failed"
    ):
        _load(spark, **options).count()


def test_fail_on_data_loss_is_unchanged(spark, make_local_cluster, tmp_path):
    """The first persisted fragment removed (as retention would): a live read asked to start at 0
    fails naming the lost range, or with failOnDataLoss=false reads on from the next fragment
    through the unflushed rest."""
    store = f"file://{tmp_path}/store/"
    c, client = _cluster(make_local_cluster, ["dl/a"], store=store)
    frames = random_journal(51, 60, 2)
    for k in (0, 20):
        _append(client, "dl/a", frames[k : k + 20])
        client.flush("dl/a")
    _append(client, "dl/a", frames[40:])
    last = max(b for _, b in _committed(client, ["dl/a"]))
    first = min((tmp_path / "store").rglob("*.zst"), key=lambda p: p.name)
    lost = int(first.name.split("-")[0], 16)
    first_end = int(first.name.split("-")[1], 16)
    assert lost == 0
    first.unlink()
    options = {"store": store, "broker": ",".join(c.broker_endpoints), "startingOffsets": '{"dl/a": 0}'}
    with pytest.raises(Exception, match=rf"offsets \[0, {first_end}\) that startingOffsets asks for"):
        _load(spark, **options).count()
    kept = _rows(_load(spark, **options, failOnDataLoss="false"))
    assert kept and min(b for _, b in kept) >= first_end
    assert max(b for _, b in kept) == last
    with pytest.raises(DataLossError):
        reader = _stream_reader({k: v for k, v in options.items() if k != "startingOffsets"})
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        reader.latestOffset({"offsets": {"dl/a": 0}, "producers": []}, ReadAllAvailable())
