"""Spark's Kafka source options on the gazette source: startingOffsets, endingOffsets,
maxOffsetsPerTrigger, failOnDataLoss and isolation.level / read_committed. Option parsing and the
stream's offsets without a JVM; then batch and availableNow streaming reads through Spark, one
of them over a journal whose first fragments retention deleted between two runs."""

from __future__ import annotations

import json
import logging
import pickle

import pytest
from fio_journals import FRAMING, envelopes_of, persist_fragment, random_journal
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import StructType

import fragments_io
from fragments_io.committed import committed_reference
from fragments_io.errors import DataLossError, OptionError
from fragments_io.options import check_batch, parse_options
from fragments_io.source import GazetteDataSource, GazetteReader, inferred_schema
from fragments_io.streaming import GazetteStreamReader
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, new_producer_id
from gazette.protocol.codec import Codec

RUN_TIMEOUT_S = 240.0
SCHEMA = "p INT, i INT, word STRING, n INT"


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


def _self_committed(count, start=0):
    """Frames of one producer, each committed by itself (OUTSIDE_TXN)."""
    pid = new_producer_id()
    return [
        FRAMING.encode(
            {"p": 0, "i": start + k, "word": "w", "n": k},
            build_uuid(pid, (1 << 60) + k * CLOCK_TICK, Flags.OUTSIDE_TXN),
        )
        for k in range(count)
    ]


def _persist_parts(store, journal, parts):
    """Each part of frames as one fragment, offsets continuing; the fragments."""
    out, offset = [], 0
    for part in parts:
        content = b"".join(part)
        out.append(persist_fragment(store, journal, offset, content))
        offset += len(content)
    return out


def _stream(spark, store, out, checkpoint, **options):
    """One availableNow run into a parquet sink; the query (terminated, maybe with an exception)."""
    reader = spark.readStream.format("gazette").option("store", store).option("schema", SCHEMA)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(RUN_TIMEOUT_S)
    except Exception:
        pass  # query.exception() says what
    assert not query.isActive, "the availableNow run did not finish"
    return query


def _sink(spark, out):
    return sorted(
        (r.journal, r.begin) for r in spark.read.parquet(str(out)).select("journal", "begin").collect()
    )


def _parse(**options):
    return parse_options({"store": "file:///tmp/x/", **{k: str(v) for k, v in options.items()}})


# -- options (no JVM) ------------------------------------------------------------------------------


def test_kafka_offsets_options_parse_and_name_what_is_allowed():
    o = _parse()
    assert (o.starting_position, o.starting_offsets, o.ending_offsets, o.fail_on_data_loss) == (
        "earliest",
        (),
        (),
        True,
    )
    assert _parse(startingOffsets=" LATEST ").starting_position == "latest"
    o = _parse(
        journals="j/", startingOffsets='{"j/b": -2, "j/a": 1024}', endingOffsets='{"j/a": 2048, "j/c": -1}'
    )
    assert o.starting_offsets == (("j/a", 1024), ("j/b", -2)) and o.ending_offsets == (
        ("j/a", 2048),
        ("j/c", -1),
    )
    assert _parse(endingOffsets="latest").ending_offsets == ()
    # Keys come in any case (Spark lower-cases them).
    assert parse_options({"store": "file:///x/", "STARTINGOFFSETS": "latest"}).starting_position == "latest"
    allowed = r"is not one of earliest \| latest \| \{\"journal\": offset, \.\.\.\}"
    with pytest.raises(OptionError, match=r"option startingOffsets='soon' " + allowed):
        _parse(startingOffsets="soon")
    with pytest.raises(OptionError, match=r"option startingOffsets='\[1\]' " + allowed):
        _parse(startingOffsets="[1]")
    with pytest.raises(
        OptionError, match=r"offset -3 of journal 'a' is not a byte offset >= 0 or -2 = earliest, -1 = latest"
    ):
        _parse(startingOffsets='{"a": -3}')
    with pytest.raises(OptionError, match=r"offset True of journal 'a'"):
        _parse(startingOffsets='{"a": true}')
    with pytest.raises(
        OptionError, match=r"journals are the partitions .* not \{\"topic\": \{\"0\": 1024\}\}"
    ):
        _parse(startingOffsets='{"topic": {"0": 23}}')
    with pytest.raises(OptionError, match=r"option endingOffsets='earliest' is not one of latest \|"):
        _parse(endingOffsets="earliest")
    with pytest.raises(
        OptionError, match=r"offset -2 of journal 'a' is not a byte offset >= 0 or -1 = latest"
    ):
        _parse(endingOffsets='{"a": -2}')
    with pytest.raises(OptionError, match=r"journal a ends at 5, before its startingOffsets 9"):
        _parse(startingOffsets='{"a": 9}', endingOffsets='{"a": 5}')
    with pytest.raises(
        OptionError, match=r"startingOffsets names journal\(s\) \['k/a'\] that option journals='j/'"
    ):
        _parse(journals="j/", startingOffsets='{"j/a": 0, "k/a": 0}')
    # A label selector (etcd mode) is not checked here: the journals it selects are in etcd.
    sel = parse_options({"etcd": "http://127.0.0.1:1", "journals": "app=x", "startingOffsets": '{"k/a": 0}'})
    assert sel.starting_offsets == (("k/a", 0),)
    checkpoint = json.dumps({"offsets": {}, "producers": []})
    for given in (
        {"startingOffsets": "earliest", "beginOffset": 0},
        {"endingOffsets": "latest", "endOffset": 0},
        {"startingOffsets": "earliest", "checkpoint": checkpoint},
    ):
        a, b = given
        with pytest.raises(OptionError, match=f"options {a} and {b} both .*: give one"):
            _parse(**given)


def test_trigger_loss_and_isolation_aliases():
    assert _parse(maxOffsetsPerTrigger=500).max_bytes_per_trigger == 500
    assert _parse(maxOffsetsPerTrigger=500, maxBytesPerTrigger=500).max_bytes_per_trigger == 500
    with pytest.raises(OptionError, match="maxBytesPerTrigger=400 and maxOffsetsPerTrigger=500 disagree"):
        _parse(maxOffsetsPerTrigger=500, maxBytesPerTrigger=400)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger='0' must be >= 1"):
        _parse(maxOffsetsPerTrigger=0)
    assert _parse(failOnDataLoss="false").fail_on_data_loss is False
    with pytest.raises(OptionError, match="failOnDataLoss='maybe' is not true or false"):
        _parse(failOnDataLoss="maybe")
    assert _parse(isolation="read_committed").isolation == "committed"
    assert _parse(isolation="READ_UNCOMMITTED").isolation == "uncommitted"
    assert _parse(**{"isolation.level": "read_uncommitted"}).isolation == "uncommitted"
    assert _parse(**{"isolation.level": "raw", "isolation": "raw"}).isolation == "raw"
    with pytest.raises(
        OptionError, match="isolation='committed' and isolation.level='read_uncommitted' disagree"
    ):
        _parse(**{"isolation.level": "read_uncommitted", "isolation": "committed"})
    with pytest.raises(OptionError, match=r"isolation.level='serializable' is not one of \['committed', "
                       r"'uncommitted', 'raw', 'read_committed', 'read_uncommitted'\]"):  # fmt: skip
        _parse(**{"isolation.level": "serializable"})
    with pytest.raises(
        OptionError, match=r"unknown option\(s\) \['subscribe'\] .*; for subscribe use journals"
    ):
        _parse(**{"kafka.isolation.level": "read_committed", "subscribe": "t"})


def test_kafka_isolation_level_is_an_alias_of_isolation():
    """Spark's Kafka source reads the isolation from the key kafka.isolation.level: so does this one."""
    assert _parse(**{"kafka.isolation.level": "read_uncommitted"}).isolation == "uncommitted"
    assert _parse(**{"KAFKA.ISOLATION.LEVEL": "read_committed"}).isolation == "committed"  # any case
    assert (
        _parse(**{"kafka.isolation.level": "raw", "isolation": "raw", "isolation.level": "raw"}).isolation
        == "raw"
    )
    parsed = _parse(**{"kafka.isolation.level": "read_committed", "isolation": "committed"})
    assert parsed.isolation == "committed" and "kafka.isolation.level" in parsed.given
    with pytest.raises(
        OptionError, match="options isolation='raw' and kafka.isolation.level='read_committed' disagree"
    ):
        _parse(**{"kafka.isolation.level": "read_committed", "isolation": "raw"})
    with pytest.raises(OptionError, match=r"kafka.isolation.level='snapshot' is not one of \['committed', "):
        _parse(**{"kafka.isolation.level": "snapshot"})


def test_batch_and_stream_only_options_are_refused_where_they_do_not_apply(tmp_path):
    store = f"file://{tmp_path}/"
    schema = StructType([])
    for bad in ({"startingOffsets": "latest"}, {"startingOffsets": '{"a": -1}'}):
        with pytest.raises(OptionError, match="startingOffsets: latest .* applies to spark.readStream only"):
            GazetteDataSource({"store": store, **bad}).reader(schema)
    check_batch(_parse(startingOffsets='{"a": -2}'))
    opts = parse_options({"store": store, "endingOffsets": "latest"})
    with pytest.raises(OptionError, match=r"\['endingOffsets'\] apply to batch reads only"):
        GazetteStreamReader(opts, inferred_schema(opts))
    with pytest.raises(OptionError, match="read_committed does not take option isolation.level"):
        fragments_io.read_committed(None, store=store, **{"isolation.level": "read_committed"})
    with pytest.raises(OptionError, match="startingOffsets: latest"):
        fragments_io.read_committed(None, store=store, startingOffsets="latest")


# -- the stream's offsets (no JVM) -----------------------------------------------------------------


def _reader(**options):
    opts = parse_options({k: str(v) for k, v in options.items()})
    return GazetteStreamReader(opts, inferred_schema(opts))


def _batch(reader, start):
    """One micro-batch as Spark runs it (offsets through JSON, partitions and reader pickled): the
    end offset and the (journal, begin) of its rows, or None when nothing is new."""
    start = json.loads(json.dumps(start))
    end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
    if end == start:
        return None
    executor = pickle.loads(pickle.dumps(reader))
    rows = []
    for p in reader.partitions(start, end):
        for b in executor.read(pickle.loads(pickle.dumps(p))):
            rows.extend(zip(b.column("journal").to_pylist(), b.column("begin").to_pylist(), strict=True))
    return end, sorted(rows)


def _from(journal, frames, offset=0):
    """What a Sequencer started at `offset` with no producer states delivers of `journal`."""
    return sorted(
        (journal, e.begin)
        for e in committed_reference(e for e in envelopes_of(journal, frames) if e.begin >= offset)
    )


def test_stream_starting_offsets_latest_and_per_journal(tmp_path):
    store = f"file://{tmp_path}/"
    frames = {j: random_journal(60 + k, 80, 3) for k, j in enumerate(("so/a", "so/b", "so/c"))}
    half = {j: len(f) // 2 for j, f in frames.items()}
    ends = {}
    for j, f in frames.items():
        ends[j] = persist_fragment(store, j, 0, b"".join(f[: half[j]]), Codec.GZIP).end

    latest = _reader(store=store, journals="so/", inferSchema="false", startingOffsets="latest")
    start = latest.initialOffset()
    assert start == {"offsets": ends, "producers": []}
    assert _batch(latest, start) is None
    # A mid-message offset moves to the next message; -2 is the journal's first offset; so/c,
    # not named, starts at its first offset; so/new, named but not persisted yet, where it says.
    mid = len(b"".join(frames["so/a"][:10])) + 3
    named = {"so/a": mid, "so/b": -2, "so/new": 0}
    by_json = _reader(store=store, journals="so/", inferSchema="false", startingOffsets=json.dumps(named))
    aligned = len(b"".join(frames["so/a"][:11]))
    first = by_json.initialOffset()
    assert first["offsets"] == {"so/a": aligned, "so/b": 0, "so/c": 0, "so/new": 0}
    assert by_json.initialOffset() is first  # fixed for the run: Spark asks at every trigger

    for j, f in frames.items():
        persist_fragment(store, j, ends[j], b"".join(f[half[j] :]), Codec.ZSTANDARD)
    end, rows = _batch(latest, start)
    assert rows == sorted(r for j, f in frames.items() for r in _from(j, f, ends[j]))
    end, rows = _batch(by_json, first)
    assert rows == sorted(
        _from("so/a", frames["so/a"], aligned) + _from("so/b", frames["so/b"]) + _from("so/c", frames["so/c"])
    )


def _txn_frames():
    """Producer t's transaction (CONTINUEs, then ACK) and producer o's self-committed messages."""
    t, o = new_producer_id(), new_producer_id()
    clock = 1 << 60

    def msg(pid, k, flag):
        return FRAMING.encode(
            {"p": 0, "i": k, "word": "t" if pid == t else "o", "n": k},
            build_uuid(pid, clock + k * CLOCK_TICK, flag),
        )

    return {
        "t1": msg(t, 1, Flags.CONTINUE_TXN),
        "t2": msg(t, 2, Flags.CONTINUE_TXN),
        "t3": msg(t, 3, Flags.CONTINUE_TXN),
        "ack": FRAMING.encode_ack(build_uuid(t, clock + 4 * CLOCK_TICK, Flags.ACK_TXN)),
        "o1": msg(o, 1, Flags.OUTSIDE_TXN),
        "o2": msg(o, 2, Flags.OUTSIDE_TXN),
    }


def test_stream_next_offset_pruned_fails_or_skips_with_a_warning(tmp_path, caplog):
    """t's transaction opens in fragment 1 (read), continues in fragment 2 and commits in 3; then
    retention deletes fragments 1 and 2 before the stream reads on."""
    m = _txn_frames()
    parts = [[m["o1"], m["t1"]], [m["t2"]], [m["t3"], m["o2"], m["ack"]]]
    for fail in ("true", "false"):
        store_dir = tmp_path / fail
        store = f"file://{store_dir}/"
        frags = _persist_parts(store, "pl/a", parts[:1])
        reader = _reader(store=store, inferSchema="false", failOnDataLoss=fail)
        start, rows = _batch(reader, reader.initialOffset())
        assert rows == [("pl/a", 0)]
        assert [p["begin"] for p in start["producers"] if p["begin"] >= 0] == [len(m["o1"])]  # t is open
        begin = frags[0].end
        for part in parts[1:]:
            frags.append(persist_fragment(store, "pl/a", begin, b"".join(part)))
            begin += frags[-1].length
        for f in frags[:2]:
            (store_dir / f.content_path).unlink()
        if fail == "true":
            with pytest.raises(DataLossError, match=rf"journal pl/a: offsets \[{frags[0].end}, {frags[2].begin}\) "
                               r"the stream reads next are no longer in the store .* failOnDataLoss=false"):  # fmt: skip
                reader.latestOffset(start, ReadAllAvailable())
            continue
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fragments_io"):
            end, rows = _batch(reader, start)
        warned = [r.getMessage() for r in caplog.records if r.name == "fragments_io"]
        assert (
            f"journal pl/a: offsets [{frags[0].end}, {frags[2].begin}) the stream reads next are no longer in the store; skipped (failOnDataLoss=false)"
            in warned
        )
        # t's span was dropped with the pruned bytes: its ACK commits t3 alone (t1, t2 are gone).
        assert rows == [("pl/a", frags[2].begin), ("pl/a", frags[2].begin + len(m["t3"]))]
        assert end["offsets"] == {"pl/a": frags[2].end}


def test_a_replay_whose_first_bytes_were_pruned_fails_or_delivers_the_rest(tmp_path, caplog):
    """The stream's own offset is still persisted, but t's transaction began in a pruned fragment."""
    m = _txn_frames()
    for fail in ("true", "false"):
        store_dir = tmp_path / fail
        store = f"file://{store_dir}/"
        frags = _persist_parts(store, "rp/a", [[m["t1"]], [m["t2"], m["o1"]]])
        reader = _reader(store=store, inferSchema="false", failOnDataLoss=fail)
        start, rows = _batch(reader, reader.initialOffset())
        assert rows == [("rp/a", frags[1].begin + len(m["t2"]))]
        (store_dir / frags[0].content_path).unlink()
        persist_fragment(store, "rp/a", frags[1].end, m["ack"])
        if fail == "true":
            end = reader.latestOffset(start, ReadAllAvailable())
            (part,) = reader.partitions(start, end)
            with pytest.raises(DataLossError, match=r"transaction begun at offset 0 .* failOnDataLoss=false"):
                list(reader.read(part))
            continue
        with caplog.at_level(logging.WARNING, logger="fragments_io.streaming"):
            _, rows = _batch(reader, start)
        assert rows == [("rp/a", frags[1].begin)]  # t2; t1 was pruned
        assert any(
            "delivering the rest of it (failOnDataLoss=false)" in r.getMessage() for r in caplog.records
        )


def test_batch_starting_offsets_below_the_first_fragment(tmp_path, caplog):
    store_dir = tmp_path / "s"
    store = f"file://{store_dir}/"
    frags = _persist_parts(store, "bl/a", [_self_committed(3), _self_committed(3, 3)])
    (store_dir / frags[0].content_path).unlink()
    for fail in ("true", "false"):
        opts = parse_options(
            {"store": store, "startingOffsets": '{"bl/a": 0}', "failOnDataLoss": fail, "inferSchema": "false"}
        )
        reader = GazetteReader(opts, inferred_schema(opts))
        if fail == "true":
            with pytest.raises(
                DataLossError,
                match=rf"journal bl/a: offsets \[0, {frags[1].begin}\) that startingOffsets asks for",
            ):
                reader.partitions()
            continue
        with caplog.at_level(logging.WARNING, logger="fragments_io"):
            parts = reader.partitions()
        assert any(f"offsets [0, {frags[1].begin})" in r.getMessage() for r in caplog.records)
        rows = [b for p in parts for batch in reader.read(p) for b in batch.column("begin").to_pylist()]
        assert len(rows) == 3


# -- through Spark ---------------------------------------------------------------------------------


def _pruned_journal(spark, tmp_path, **options):
    """A stream reads fragment 1 of loss/a; fragments 2 and 3 are persisted, then retention deletes
    fragments 1 and 2; a second run starts where the first ended, now before the first fragment."""
    store = f"file://{tmp_path}/store/"
    parts = [_self_committed(6, 0), _self_committed(6, 6), _self_committed(6, 12)]
    f1 = _persist_parts(store, "loss/a", parts[:1])[0]
    out, ck = tmp_path / "out", tmp_path / "ck"
    first = _stream(spark, store, out, ck, **options)
    assert first.exception() is None
    assert len(_sink(spark, out)) == 6
    begin = f1.end
    frags = []
    for part in parts[1:]:
        content = b"".join(part)
        frags.append(persist_fragment(store, "loss/a", begin, content))
        begin += len(content)
    for f in (f1, frags[0]):
        (tmp_path / "store" / f.content_path).unlink()
    return store, out, ck, parts, f1, frags


def _begins(journal, base, frames):
    """(journal, begin) of `frames` laid out from offset `base`."""
    out = []
    for frame in frames:
        out.append((journal, base))
        base += len(frame)
    return out


def test_a_stream_whose_next_offset_was_pruned_fails_naming_the_range(spark, tmp_path):
    store, out, ck, _, f1, frags = _pruned_journal(spark, tmp_path)
    second = _stream(spark, store, out, ck)
    err = second.exception()
    assert err is not None, "the stream stalled silently at a pruned offset"
    assert f"journal loss/a: offsets [{f1.end}, {frags[1].begin})" in str(err)
    assert "failOnDataLoss" in str(err)
    assert len(_sink(spark, out)) == 6


def test_fail_on_data_loss_false_skips_the_pruned_range(spark, tmp_path):
    store, out, ck, parts, f1, frags = _pruned_journal(spark, tmp_path, failOnDataLoss="false")
    second = _stream(spark, store, out, ck, failOnDataLoss="false")
    assert second.exception() is None
    want = _begins("loss/a", f1.begin, parts[0]) + _begins("loss/a", frags[1].begin, parts[2])
    assert _sink(spark, out) == sorted(want)


def _memory_stream(spark, store, name, trigger, **options):
    reader = spark.readStream.format("gazette").option("store", store).option("schema", SCHEMA)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load().writeStream.format("memory").queryName(name).trigger(**trigger).start()


def _table(spark, name):
    return sorted((r.journal, r.begin) for r in spark.table(name).select("journal", "begin").collect())


def test_starting_offsets_latest_through_spark(spark, tmp_path):
    store = f"file://{tmp_path}/"
    frames = {j: random_journal(70 + k, 60, 3) for k, j in enumerate(("lt/a", "lt/b"))}
    ends = {j: persist_fragment(store, j, 0, b"".join(f[:30])).end for j, f in frames.items()}
    query = _memory_stream(
        spark, store, "kafka_latest", {"processingTime": "1 second"}, startingOffsets="latest"
    )
    try:
        query.processAllAvailable()  # returns after a trigger found nothing new: the start is fixed
        assert _table(spark, "kafka_latest") == []
        for j, f in frames.items():
            persist_fragment(store, j, ends[j], b"".join(f[30:]), Codec.GZIP)
        # A trigger that listed the store before the append may end the first wait; the second
        # begins after a trigger that listed it afterwards.
        query.processAllAvailable()
        query.processAllAvailable()
        assert query.exception() is None
        got = _table(spark, "kafka_latest")
    finally:
        query.stop()
    assert got == sorted(r for j, f in frames.items() for r in _from(j, f, ends[j]))


def test_starting_offsets_json_and_max_offsets_per_trigger_through_spark(spark, tmp_path):
    """jo/a starts at latest (-1), jo/b mid-message, jo/c (not named) at earliest; a restart reads
    what was appended since, in micro-batches of at most maxOffsetsPerTrigger bytes."""
    store = f"file://{tmp_path}/store/"
    frames = {j: random_journal(80 + k, 70, 3) for k, j in enumerate(("jo/a", "jo/b", "jo/c"))}
    ends = {
        j: persist_fragment(store, j, 0, b"".join(f[:40]), Codec.ZSTANDARD).end for j, f in frames.items()
    }
    mid = len(b"".join(frames["jo/b"][:12])) + 5
    aligned = len(b"".join(frames["jo/b"][:13]))
    out, ck = tmp_path / "out", tmp_path / "ck"
    starting = json.dumps({"jo/a": -1, "jo/b": mid})
    first = _stream(spark, store, out, ck, journals="jo/", startingOffsets=starting)
    assert first.exception() is None
    prefix = {j: f[:40] for j, f in frames.items()}
    assert _sink(spark, out) == sorted(_from("jo/b", prefix["jo/b"], aligned) + _from("jo/c", prefix["jo/c"]))
    for j, f in frames.items():
        persist_fragment(store, j, ends[j], b"".join(f[40:]))
    second = _stream(
        spark, store, out, ck, journals="jo/", startingOffsets=starting, maxOffsetsPerTrigger=1500
    )
    assert second.exception() is None
    assert len([p for p in second.recentProgress if p["numInputRows"]]) >= 2
    want = _from("jo/a", frames["jo/a"], ends["jo/a"]) + _from("jo/b", frames["jo/b"], aligned)
    assert _sink(spark, out) == sorted(want + _from("jo/c", frames["jo/c"]))


def test_batch_starting_and_ending_offsets_through_spark(spark, tmp_path):
    store = f"file://{tmp_path}/"
    frames = {j: random_journal(90 + k, 80, 3) for k, j in enumerate(("be/a", "be/b", "be/c"))}
    committed = {}
    for j, f in frames.items():
        _persist_parts(store, j, [f[:30], f[30:55], f[55:]])
        committed[j] = sorted(e.begin for e in committed_reference(envelopes_of(j, f)))
    a_lo, a_hi = len(b"".join(frames["be/a"][:20])) + 3, len(b"".join(frames["be/a"][:60]))
    c_hi = len(b"".join(frames["be/c"][:35]))
    options = {
        "journals": "be/",
        "startingOffsets": json.dumps({"be/a": a_lo, "be/b": -2}),
        "endingOffsets": json.dumps({"be/a": a_hi, "be/c": c_hi, "be/b": -1}),
    }
    # Committed as decided from each journal's start, then bounded: begin in [start, end).
    want = sorted(
        [("be/a", b) for b in committed["be/a"] if a_lo <= b < a_hi]
        + [("be/b", b) for b in committed["be/b"]]
        + [("be/c", b) for b in committed["be/c"] if b < c_hi]
    )
    for isolation in ("read_committed", "committed"):
        df = spark.read.format("gazette").option("store", store).option("isolation.level", isolation)
        rows = df.options(**options).load().select("journal", "begin").collect()
        assert sorted((r.journal, r.begin) for r in rows) == want
    parallel = fragments_io.read_committed(spark, store=store, **options).select("journal", "begin").collect()
    assert sorted((r.journal, r.begin) for r in parallel) == want
