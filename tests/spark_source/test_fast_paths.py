"""fragments_io's vectorised paths without Spark: the bulk UUID split against gazette's UUID
functions, the Arrow-column commit decision against the Sequencer, and partition planning that
spreads small reads over the cores while keeping every fragment (and committed journal) whole."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from fio_journals import envelopes_of, random_journal
from hypothesis import given, settings
from hypothesis import strategies as st

from fragments_io.committed import CommitTracker, committed_reference
from fragments_io.decode import JournalDecoder, _lines, split_uuids
from fragments_io.discovery import JournalSource
from fragments_io.errors import OptionError
from fragments_io.options import parse_options
from fragments_io.planning import OPEN_COST_BYTES, RowBounds, plan_partitions
from fragments_io.source import commit_filter
from gazette.fragment.fragment import Fragment
from gazette.message.uuid import build_uuid, get_clock, get_flags

J = "ex/fast/part-000"
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


_uuids = st.builds(
    build_uuid,
    st.binary(min_size=6, max_size=6),
    st.integers(1, (1 << 63) - 1),  # a clock Spark's BIGINT holds
    st.integers(0, 0x3FF),
)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(_uuids.map(str), _uuids.map(lambda u: str(u).upper()), st.none(), st.just("")), max_size=40
    ),
    sliced=st.integers(0, 3),
)
def test_split_uuids_agrees_with_the_uuid_functions(values, sliced):
    import uuid as uuid_module

    arr = pa.array(["pad"] * sliced + values, pa.string()).slice(sliced)  # a non-zero array offset
    split = split_uuids(arr)
    assert split is not None
    present = [bool(v) for v in values]
    assert split.present.tolist() == present
    parsed = [uuid_module.UUID(v) if v else None for v in values]
    assert split.clock.tolist() == [get_clock(u) if u else 0 for u in parsed]
    assert split.flags.tolist() == [get_flags(u) if u else 0 for u in parsed]
    assert [bytes(row).decode() for row in split.text] == [v.lower() for v in values if v]


@pytest.mark.parametrize(
    "bad",
    [
        "0f7e2a3c-1d2e-1a2b-8c3d-0123456789a",  # 35 characters
        "0f7e2a3c-1d2e-1a2b-8c3d-0123456789abc",  # 37
        "0f7e2a3c-1d2e-4a2b-8c3d-0123456789ab",  # version 4
        "0f7e2a3c-1d2e-1a2b-cc3d-0123456789ab",  # not the RFC 4122 variant
        "0f7e2a3c-1d2e-1a2b-8c3d-0123456789ag",  # not hex
        "0f7e2a3c-1d2e-1a2b-8c3d_0123456789ab",  # a dash missing
        "0f7e2a3c-1d2e-1a2b-8c3d-0123456789\u00e9",  # 36 code points, 37 bytes
    ],
)
def test_split_uuids_refuses_what_is_not_a_v1_uuid(bad):
    good = str(build_uuid(b"\x01" * 6, 12345 << 4, 2))
    assert split_uuids(pa.array([good, None, good], pa.string())) is not None
    assert split_uuids(pa.array([good, bad, good], pa.string())) is None


def test_uuid_columns_of_the_fast_path_equal_the_decoders():
    """The json fast path (uuid and producer built from the split bytes) and the Decoder path
    (from envelopes) give the same metadata columns for the same frames."""
    frames = random_journal(11, 200, 3)
    data = b"".join(frames)
    dec = JournalDecoder(J, "json", "uncommitted", "/_meta/uuid", None, strict=False)
    fast = dec._json_fast(data, 0, *_lines(data))
    assert fast is not None  # these frames take the fast path
    slow = dec._decode_slow(data, 0)
    assert fast.num_rows == slow.num_rows == len(list(envelopes_of(J, frames)))
    for name in ("begin", "end", "uuid", "producer", "clock", "flags", "value"):
        assert fast.column(name).equals(slow.column(name)), name
    assert fast.column("uuid").null_count > 0  # frames without a UUID are in there


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10**9),
    events=st.integers(1, 250),
    producers=st.integers(1, 4),
    per_fragment=st.integers(1, 40),
    ring_size=st.sampled_from([2, 5, 64, 8192]),
)
def test_commit_filter_on_arrow_columns_equals_the_sequencer(
    seed, events, producers, per_fragment, ring_size
):
    """The data source's committed path as read() runs it: Arrow tables in, numpy and Arrow
    columns handed to CommitTracker.add, committed rows out."""
    frames = random_journal(seed, events, producers)
    expected = [e.begin for e in committed_reference(envelopes_of(J, frames))]
    dec = JournalDecoder(J, "json", "committed", "/_meta/uuid", None, strict=False)
    tables, offset = [], 0
    for i in range(0, len(frames), per_fragment):
        content = b"".join(frames[i : i + per_fragment])
        tables.append((dec.feed(Fragment(J, offset, offset + len(content)), content), 0))
        offset += len(content)
    tables.append((dec.finish(), 0))
    out = [
        b
        for t, _ in commit_filter(CommitTracker(J, ring_size=ring_size), tables)
        for b in t.column("begin").to_pylist()
    ]
    assert out == sorted(expected)


def _journal(name: str, sizes: list[int]) -> JournalSource:
    fragments, offset = [], 0
    for size in sizes:
        fragments.append(Fragment(name, offset, offset + size))
        offset += size
    return JournalSource(name, "json", tuple(fragments))


def _check_cover(parts, journals):
    """Every fragment of every journal once, each journal's in offset order."""
    seen: dict[str, list[tuple[int, int]]] = {}
    for part in parts:
        for task in part:
            seen.setdefault(task.journal, []).extend((f.begin, f.end) for f in task.fragments)
    assert seen == {j.name: [(f.begin, f.end) for f in j.fragments] for j in journals}


def _size(part) -> int:
    return sum(t.size for t in part)


def test_uncommitted_reads_spread_over_min_partitions_balanced():
    journals = [_journal(f"ex/j{i}", [4 * MIB] * 3) for i in range(4)]  # 48 MiB in 12 fragments
    one = plan_partitions(journals, "uncommitted", RowBounds(), 128 * MIB)
    assert len(one) == 1
    two = plan_partitions(journals, "uncommitted", RowBounds(), 128 * MIB, min_partitions=2)
    assert [_size(p) for p in two] == [24 * MIB, 24 * MIB]
    _check_cover(two, journals)
    # maxPartitionBytes still caps every partition, and more cores than content leave none empty.
    capped = plan_partitions(journals, "uncommitted", RowBounds(), 10 * MIB, min_partitions=2)
    assert all(_size(p) <= 10 * MIB for p in capped) and len(capped) >= 5
    _check_cover(capped, journals)
    many = plan_partitions(journals, "uncommitted", RowBounds(), 128 * MIB, min_partitions=64)
    assert len(many) == 12 and all(p for p in many)
    # Too little content to be worth a task per core: one partition.
    small = [_journal("ex/s", [OPEN_COST_BYTES // 4] * 3)]
    assert len(plan_partitions(small, "uncommitted", RowBounds(), 128 * MIB, min_partitions=8)) == 1


def test_committed_reads_spread_whole_journals_over_min_partitions():
    sizes = {"ex/a": [8 * MIB] * 4, "ex/b": [8 * MIB] * 3, "ex/c": [8 * MIB] * 2, "ex/d": [8 * MIB]}
    journals = [_journal(name, s) for name, s in sizes.items()]
    assert len(plan_partitions(journals, "committed", RowBounds(), 128 * MIB)) == 1
    parts = plan_partitions(journals, "committed", RowBounds(), 128 * MIB, min_partitions=2)
    assert sorted(_size(p) for p in parts) == [40 * MIB, 40 * MIB]  # a+d and b+c
    assert all(t.whole_journal for p in parts for t in p)
    _check_cover(parts, journals)
    assert len(plan_partitions(journals, "committed", RowBounds(), 128 * MIB, min_partitions=16)) == 4


def test_min_partitions_option():
    assert parse_options({"store": "file:///x/"}).min_partitions is None
    assert parse_options({"store": "file:///x/", "minPartitions": "3"}).min_partitions == 3
    with pytest.raises(OptionError, match="minPartitions='0'"):
        parse_options({"store": "file:///x/", "minPartitions": "0"})


def test_producer_ids_from_an_arrow_column_or_a_list_agree():
    tracker = CommitTracker(J)
    values = ["0123456789ab", None, "0123456789ab", "ba9876543210", None]
    from_list = tracker._producer_ids(values)
    from_arrow = tracker._producer_ids(pa.chunked_array([pa.array(values[:2]), pa.array(values[2:])]))
    assert from_list == from_arrow == [bytes.fromhex("0123456789ab"), b"", bytes.fromhex("0123456789ab"),
                                       bytes.fromhex("ba9876543210"), b""]  # fmt: skip
    assert tracker._producer_ids(pa.nulls(3, pa.string())) == [b""] * 3
    assert tracker._producer_ids(pa.array([], pa.string())) == []
