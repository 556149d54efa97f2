"""fragments_io without Spark: options, discovery, planning, decoding and the commit decision on
Arrow tables, compared with gazette's own Decoder and a Sequencer over the same bytes."""

from __future__ import annotations

import hashlib
import logging

import pytest
from fio_journals import envelopes_of, persist_fragment, persist_journal, random_journal
from hypothesis import given, settings
from hypothesis import strategies as st

import fragments_io
from fragments_io.committed import CommitTracker, committed_reference, decide_group
from fragments_io.decode import JournalDecoder, read_content
from fragments_io.discovery import discover, split_object_path
from fragments_io.errors import (
    CorruptObjectError,
    FramingMismatchError,
    JavaNotFoundError,
    OptionError,
    SchemaMismatchError,
)
from fragments_io.options import parse_options
from fragments_io.planning import RowBounds, cover, plan_partitions
from gazette.fragment.fragment import Fragment
from gazette.protocol.codec import Codec

J = "ex/words/part-000"
CODECS = (Codec.NONE, Codec.GZIP, Codec.ZSTANDARD, Codec.SNAPPY)


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


def _decode_all(journal, frames, per_fragment, isolation="uncommitted", fields=None):
    """JournalDecoder over in-memory fragments of `per_fragment` frames: the internal tables."""
    dec = JournalDecoder(journal, "json", isolation, "/_meta/uuid", fields, strict=False)
    tables, offset = [], 0
    for i in range(0, len(frames), per_fragment):
        content = b"".join(frames[i : i + per_fragment])
        tables.append(dec.feed(Fragment(journal, offset, offset + len(content)), content))
        offset += len(content)
    tables.append(dec.finish())
    return tables


def _rows(tables):
    return [r for t in tables for r in t.to_pylist()]


def test_options_errors_name_the_option():
    with pytest.raises(OptionError, match="needs option store"):
        parse_options({})
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['stroe'\]"):
        parse_options({"stroe": "file:///x/"})
    with pytest.raises(OptionError, match="isolation='dirty'"):
        parse_options({"store": "file:///x/", "isolation": "dirty"})
    with pytest.raises(OptionError, match="option store"):
        parse_options({"store": "file://relative/"})
    with pytest.raises(OptionError, match="maxPartitionBytes='0'"):
        parse_options({"store": "file:///x/", "maxPartitionBytes": "0"})
    with pytest.raises(OptionError, match="beginModTime"):
        parse_options({"store": "file:///x/", "beginModTime": "yesterday"})
    opts = parse_options({"STORE": "file:///x/", "beginmodtime": "2024-01-01T00:00:00Z", "endOffset": "9"})
    assert (opts.store, opts.begin_mod_time, opts.end_offset) == ("file:///x/", 1704067200, 9)


def test_journal_of_an_object_path_drops_postfix_components():
    assert split_object_path("a/b/date=2024/hour=3/x.raw") == ("a/b", "date=2024/hour=3", "x.raw")
    assert split_object_path("a/b/x.raw") == ("a/b", "", "x.raw")
    assert split_object_path("x.raw") is None


def test_discovery_in_store_only_mode(file_store_url):
    frames = random_journal(1, 30)
    persist_journal(file_store_url, "ex/a", frames, frames_per_fragment=10, postfix="date=2024-01-01")
    persist_journal(file_store_url, "ex/b", frames, frames_per_fragment=40)
    persist_journal(file_store_url, "other/c", frames, frames_per_fragment=40)
    root = file_store_url[len("file://") :]
    with open(root + "ex/a/README.txt", "w") as f:
        f.write("not a fragment")
    found = discover(parse_options({"store": file_store_url, "journals": "ex/"}))
    assert [j.name for j in found.journals] == ["ex/a", "ex/b"]
    assert found.foreign == (file_store_url + "ex/a/README.txt",)
    a = found.journals[0]
    assert len(a.fragments) == -(-len(frames) // 10) and {f.path_postfix for f in a.fragments} == {
        "date=2024-01-01"
    }
    one = discover(parse_options({"store": file_store_url, "journals": "ex/b"}))
    assert [j.name for j in one.journals] == ["ex/b"]


def test_overlapping_fragments_are_read_once(file_store_url):
    frames = random_journal(2, 60)
    content = b"".join(frames)
    cut1 = sum(map(len, frames[:20]))
    cut2 = sum(map(len, frames[:40]))
    # Small fragments persisted by one broker, the same first range again by another broker (postfix),
    # and a large fragment covering the first two.
    persist_fragment(file_store_url, J, 0, content[:cut1], Codec.GZIP)
    persist_fragment(file_store_url, J, cut1, content[cut1:cut2], Codec.NONE)
    persist_fragment(file_store_url, J, 0, content[:cut1], Codec.SNAPPY, postfix="broker=b")
    persist_fragment(file_store_url, J, 0, content[:cut2], Codec.ZSTANDARD)
    persist_fragment(file_store_url, J, cut2, content[cut2:], Codec.NONE)
    journal = discover(parse_options({"store": file_store_url})).journals[0]
    assert len(journal.fragments) == 5
    covered = cover(journal.fragments)
    assert [(f.begin, f.end) for f in covered] == [(0, cut2), (cut2, len(content))]
    (task,) = plan_partitions([journal], "uncommitted", RowBounds(), 1 << 20)[0]
    dec = JournalDecoder(J, "json", "uncommitted", "/_meta/uuid", None, strict=True)
    rows = []
    for f in task.fragments:
        rows += dec.feed(f, read_content(f, False)).to_pylist()
    assert [(r["begin"], r["end"]) for r in rows] == [(e.begin, e.end) for e in envelopes_of(J, frames)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_every_codec_decodes_like_the_decoder(file_store_url, codec):
    frames = random_journal(3, 80)
    frags = persist_journal(file_store_url, J, frames, (codec,), frames_per_fragment=30)
    dec = JournalDecoder(J, "json", "uncommitted", "/_meta/uuid", None, strict=True)
    rows = []
    for f in frags:
        rows += dec.feed(f, read_content(f, False)).to_pylist()
    expected = list(envelopes_of(J, frames))
    assert len(rows) == len(expected)
    for row, env in zip(rows, expected, strict=True):
        assert (row["begin"], row["end"], row["clock"], row["flags"]) == (
            env.begin,
            env.end,
            env.clock,
            env.flags,
        )
        assert row["uuid"] == (str(env.uuid) if env.uuid else None)
        assert row["producer"] == (env.producer.hex() if env.producer else None)
        assert row["value"].encode() + b"\n" == b"".join(frames)[env.begin : env.end]


def test_frames_cut_by_fragment_boundaries_and_gaps():
    frames = random_journal(4, 40)
    content = b"".join(frames)
    cut = sum(map(len, frames[:10])) + 7  # inside the 11th frame
    dec = JournalDecoder(J, "json", "uncommitted", "/_meta/uuid", None, strict=False)
    rows = dec.feed(Fragment(J, 0, cut), content[:cut]).to_pylist()
    rows += dec.feed(Fragment(J, cut, len(content)), content[cut:]).to_pylist()
    assert [r["begin"] for r in rows] == [e.begin for e in envelopes_of(J, frames)]
    # A gap: the cut-off frame before it is skipped, decoding restarts at the next fragment.
    dec = JournalDecoder(J, "json", "uncommitted", "/_meta/uuid", None, strict=False)
    first = dec.feed(Fragment(J, 0, cut), content[:cut]).num_rows
    start = sum(map(len, frames[:20]))
    later = dec.feed(Fragment(J, start, len(content)), content[start:]).num_rows
    assert (first, later) == (10, len(frames) - 20)


def test_blank_and_garbage_lines_are_skipped_like_read_uncommitted():
    frames = random_journal(5, 20)
    bad = frames[:5] + [b"\n", b"not json\n", b'{"_meta": {"uuid": "nope"}}\n'] + frames[5:]
    rows = _rows(_decode_all(J, bad, 100))
    assert len(rows) == len(frames)
    assert [(r["begin"], r["clock"]) for r in rows] == [(e.begin, e.clock) for e in envelopes_of(J, bad)]
    # A guessed framing (store-only, no framing option) is strict: a clear error instead.
    dec = JournalDecoder(J, "json", "uncommitted", "/_meta/uuid", None, strict=True)
    with pytest.raises(FramingMismatchError, match="set it to one of json, csv, fixed, lines"):
        dec.feed(Fragment(J, 0, 20), b"a,b,c\n1,2,3\nx,y,z\n\n")


def test_schema_mismatch_names_the_field():
    import pyarrow as pa

    frames = random_journal(6, 20)
    with pytest.raises(SchemaMismatchError, match="/word"):
        _decode_all(J, frames, 100, fields=pa.schema([("word", pa.int64())]))
    tables = _decode_all(J, frames, 100, fields=pa.schema([("word", pa.string()), ("n", pa.int64())]))
    rows = [r for r in _rows(tables) if r["flags"] != 2 and r["word"] is not None]
    assert rows and all(r["word"] in ("alpha", "beta", "gamma") and 0 <= r["n"] < 100 for r in rows)


def test_corrupt_objects_name_the_object(file_store_url):
    frames = random_journal(7, 20)
    content = b"".join(frames)
    root = file_store_url[len("file://") :]
    good = persist_fragment(file_store_url, J, 0, content, Codec.GZIP)
    with open(root + good.content_path, "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(CorruptObjectError, match=good.content_name) as exc:
        read_content(good, False)
    assert "ignoreCorruptFragments" in str(exc.value)
    assert read_content(good, True) is None
    # Right codec, wrong content: SHA1 mismatch, and a length mismatch.
    wrong = Fragment(J, 0, len(content), hashlib.sha1(b"other").digest(), Codec.NONE, file_store_url, 1)
    persist_fragment(file_store_url, "tmp/x", 0, content)  # make sure the directory layout exists
    with open(root + wrong.content_path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptObjectError, match="SHA1"):
        read_content(wrong, False)
    short = Fragment(J, 0, len(content) + 5, hashlib.sha1(content).digest(), Codec.NONE, file_store_url, 1)
    with open(root + short.content_path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptObjectError, match="expected end - begin"):
        read_content(short, False)


def _in_source(journal, frames, per_fragment, ring_size):
    """The data source's committed path on in-memory fragments: the committed begins."""
    tracker = CommitTracker(journal, ring_size=ring_size)
    held, out, next_id = [], [], 0
    for table in _decode_all(journal, frames, per_fragment, "committed"):
        n = table.num_rows
        tracker.add(
            next_id,
            table.column("begin").to_pylist(),
            table.column("end").to_pylist(),
            table.column("producer").to_pylist(),
            table.column("clock").to_pylist(),
            table.column("flags").to_pylist(),
        )
        held.append((table, next_id))
        next_id += n
        horizon = tracker.open_horizon()
        while held and (
            horizon is None or (held[0][0].num_rows == 0 or held[0][0].column("end")[-1].as_py() <= horizon)
        ):
            t, first = held.pop(0)
            out += [
                b
                for b, keep in zip(
                    t.column("begin").to_pylist(), tracker.take_committed(first, t.num_rows), strict=True
                )
                if keep
            ]
    for t, first in held:
        out += [
            b
            for b, keep in zip(
                t.column("begin").to_pylist(), tracker.take_committed(first, t.num_rows), strict=True
            )
            if keep
        ]
    return out


def _per_producer(journal, frames, per_fragment):
    """read_committed's decision: groupBy(journal, producer) + decide_group, on pandas frames."""
    import pandas as pd

    tables = _decode_all(journal, frames, per_fragment, "committed")
    pdf = pd.concat([t.select(["begin", "end", "producer", "clock", "flags"]).to_pandas() for t in tables])
    pdf.insert(0, "journal", journal)
    out = []
    for _, group in pdf.groupby(pdf["producer"].fillna("<none>"), sort=False):
        out += decide_group(group)["begin"].tolist()
    return out


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**9),
    events=st.integers(1, 250),
    producers=st.integers(1, 4),
    per_fragment=st.integers(1, 40),
    ring_size=st.sampled_from([2, 5, 64, 8192]),
)
def test_committed_decision_equals_the_sequencer(seed, events, producers, per_fragment, ring_size):
    frames = random_journal(seed, events, producers)
    expected = [e.begin for e in committed_reference(envelopes_of(J, frames))]
    assert len(set(expected)) == len(expected)
    assert sorted(_in_source(J, frames, per_fragment, ring_size)) == sorted(expected)
    assert sorted(_per_producer(J, frames, per_fragment)) == sorted(expected)


def test_java_missing_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaNotFoundError) as exc:
        fragments_io.check_java()
    assert "\n" not in str(exc.value) and "openjdk" in str(exc.value)
    with pytest.raises(JavaNotFoundError):
        fragments_io.spark_session()


def test_pushed_filters_narrow_bounds_and_leave_others():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual, StringStartsWith

    from fragments_io.source import GazetteReader, inferred_schema

    opts = parse_options({"store": "file:///nowhere/", "inferSchema": "false", "beginOffset": "10"})
    reader = GazetteReader(opts, inferred_schema(opts))
    filters = [
        EqualTo(("journal",), "a/b"),
        GreaterThan(("begin",), 99),
        LessThanOrEqual(("begin",), 500),
        EqualTo(("value",), "x"),
        In(("journal",), ("a/b", "a/c")),
        StringStartsWith(("journal",), "a/"),
    ]
    left = list(reader.pushFilters(filters))
    assert left == [filters[3]]
    b = reader.bounds
    assert (b.journal_in, b.journal_prefixes, b.begin_lo, b.begin_hi) == (
        frozenset({"a/b"}),
        ("a/",),
        100,
        501,
    )
    assert b.journal_ok("a/b") and not b.journal_ok("a/c")
