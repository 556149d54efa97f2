"""Spool (reference 2.2) and SpoolFile: commit, rollback, roll forward, mismatch, maybe_roll.

A model check drives random content/commit/rollback/roll sequences against plain bytes and SHA1.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.fragment.fragment import ZERO_SUM, Codec, Fragment
from gazette.fragment.spool import CompletedSpool, Spool, SpoolError
from gazette.fragment.spool_file import SpoolFile
from gazette.protocol.errors import GazetteError
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status

J = "a/journal"
R1 = LabelSet({"author": "one"})
R2 = LabelSet({"author": "two"})


class Recorder:
    def __init__(self) -> None:
        self.commits: list[tuple[Fragment, SpoolFile]] = []
        self.completed: list[CompletedSpool] = []

    def on_commit(self, fragment: Fragment, file: SpoolFile) -> None:
        self.commits.append((fragment, file))

    def on_complete(self, completed: CompletedSpool) -> None:
        self.completed.append(completed)


def sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).digest()


def append(
    spool: Spool, *chunks: bytes, registers: LabelSet | None = None
) -> tuple[Status, Fragment, LabelSet]:
    for chunk in chunks:
        spool.apply_content(chunk, spool.delta)
    return spool.apply_proposal(spool.next(), spool.registers if registers is None else registers)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def spool(rec: Recorder, tmp_path) -> Spool:
    return Spool(J, rec, directory=str(tmp_path))


# --- SpoolFile ------------------------------------------------------------------------------------


def test_spool_file_uses_journal_offsets_and_is_unlinked(tmp_path):
    f = SpoolFile(100, directory=str(tmp_path))
    assert os.listdir(tmp_path) == []  # unlinked at once
    f.pwrite(100, b"hello ")
    f.pwrite(106, b"world")
    assert f.pread(100, 5) == b"hello"
    assert f.pread(106, 100) == b"world"  # short only where the file ends
    assert b"".join(f.reader(100, 111, chunk=4)) == b"hello world"
    assert [len(c) for c in f.reader(100, 111, chunk=4)] == [4, 4, 3]
    assert list(f.reader(105, 105)) == []


def test_spool_file_errors(tmp_path):
    f = SpoolFile(100, directory=str(tmp_path))
    f.pwrite(100, b"abc")
    with pytest.raises(SpoolError, match="before the spool file's begin 100"):
        f.pread(99, 1)
    with pytest.raises(SpoolError, match="ends at 103"):
        list(f.reader(100, 110))
    f.close()
    f.close()  # idempotent
    assert f.closed
    with pytest.raises(SpoolError, match="closed"):
        f.pread(100, 1)
    assert isinstance(SpoolError("x"), GazetteError)


# --- commits and the running SHA1 -----------------------------------------------------------------


def test_new_spool_is_empty_at_zero_with_codec_none(spool: Spool):
    assert spool.fragment == Fragment(J, 0, 0, ZERO_SUM, Codec.NONE)
    assert spool.registers == LabelSet()
    assert spool.delta == 0 and spool.file is None and spool.first_append_time is None
    assert spool.next() == spool.fragment


def test_commit_extends_fragment_with_running_sha1(spool: Spool, rec: Recorder):
    spool.apply_content(b"hello", 0)
    spool.apply_content(b" world", 5)
    assert spool.delta == 11
    proposal = spool.next()
    assert proposal == Fragment(J, 0, 11, sha1(b"hello world"), Codec.NONE)
    assert spool.read(0, 100) == b""  # nothing committed yet

    status, frag, regs = spool.apply_proposal(proposal, R1)
    assert (status, frag, regs) == (Status.OK, proposal, R1)
    assert spool.fragment == proposal and spool.registers == R1 and spool.delta == 0
    assert spool.first_append_time is not None
    assert rec.commits == [(proposal, spool.file)]

    first_time = spool.first_append_time
    append(spool, b"!!")
    assert spool.fragment == Fragment(J, 0, 13, sha1(b"hello world!!"))  # sum over the whole fragment
    assert spool.first_append_time == first_time  # set only once
    assert spool.read(0, 100) == b"hello world!!"
    assert spool.read(6, 5) == b"world"
    assert spool.read(13, 5) == b""
    with pytest.raises(SpoolError, match="outside"):
        spool.read(14, 1)


def test_large_appends_hash_matches(spool: Spool):
    chunk = os.urandom(1 << 20)
    for i in range(4):
        spool.apply_content(chunk, i << 20)
    append(spool)
    assert spool.fragment.sum == sha1(chunk * 4)
    assert spool.file is not None
    assert b"".join(spool.file.reader(0, 4 << 20)) == chunk * 4


def test_content_delta_mismatch_names_both_values(spool: Spool):
    spool.apply_content(b"abc", 0)
    with pytest.raises(SpoolError, match=r"^content_delta 7 of journal .* expected the spool's delta 3$"):
        spool.apply_content(b"x", 7)
    assert spool.delta == 3  # unchanged


def test_rollback_discards_delta_and_restores_hash(spool: Spool):
    append(spool, b"abc", registers=R1)
    spool.apply_content(b"xyz", 0)
    spool.rollback()
    assert spool.delta == 0 and spool.fragment.end == 3
    append(spool, b"def", registers=R1)
    assert spool.fragment == Fragment(J, 0, 6, sha1(b"abcdef"))
    assert spool.read(0, 10) == b"abcdef"


def test_rollback_of_an_empty_fragment_with_pending_content(spool: Spool, rec: Recorder):
    spool.apply_content(b"junk", 0)
    status, frag, _ = spool.apply_proposal(spool.fragment, spool.registers)
    assert status == Status.OK and frag == Fragment(J, 0, 0)
    assert spool.delta == 0 and rec.completed == []
    append(spool, b"ok")
    assert spool.fragment == Fragment(J, 0, 2, sha1(b"ok"))
    assert spool.read(0, 10) == b"ok"


def test_proposal_of_current_fragment_with_other_registers_mismatches(spool: Spool):
    append(spool, b"abc", registers=R1)
    spool.apply_content(b"de", 0)
    status, frag, regs = spool.apply_proposal(spool.fragment, R2)
    assert status == Status.PROPOSAL_MISMATCH
    assert frag == Fragment(J, 0, 3, sha1(b"abc")) and regs == R1
    assert spool.delta == 2  # nothing changed


def test_commit_with_wrong_sum_or_end_mismatches(spool: Spool):
    spool.apply_content(b"abc", 0)
    good = spool.next()
    for bad in (
        Fragment(J, 0, 3, sha1(b"abd")),
        Fragment(J, 0, 2, sha1(b"ab")),
        Fragment(J, 0, 3, good.sum, Codec.GZIP),
    ):
        status, frag, _ = spool.apply_proposal(bad, R1)
        assert status == Status.PROPOSAL_MISMATCH and frag == Fragment(J, 0, 0)
    assert spool.apply_proposal(good, R1)[0] == Status.OK


def test_commit_adopts_registers(spool: Spool):
    append(spool, b"a", registers=R1)
    append(spool, b"b", registers=R2)
    assert spool.registers == R2


def test_empty_proposal_with_no_delta_is_a_rollback_not_a_commit(spool: Spool, rec: Recorder):
    append(spool, b"abc", registers=R1)
    assert spool.apply_proposal(spool.next(), R1)[0] == Status.OK  # delta 0: rule 2
    assert len(rec.commits) == 1


# --- roll forward ---------------------------------------------------------------------------------


def test_roll_forward_completes_non_empty_spool(spool: Spool, rec: Recorder):
    append(spool, b"hello ", registers=R1)
    append(spool, b"world", registers=R1)
    done = spool.fragment
    file = spool.file
    first = spool.first_append_time

    proposal = Fragment(J, 20, 20, ZERO_SUM, Codec.GZIP)
    status, frag, regs = spool.apply_proposal(proposal, R2)
    assert (status, frag, regs) == (Status.OK, proposal, R2)  # end > End: registers adopted

    [completed] = rec.completed
    assert completed.fragment == done and completed.file is file
    assert completed.first_append_time == first and completed.registers == R1
    assert b"".join(completed.file.reader(0, 11, chunk=3)) == b"hello world"

    assert spool.fragment == proposal and spool.file is None and spool.delta == 0
    assert spool.first_append_time is None
    append(spool, b"xy", registers=R2)  # new file, begins at 20
    assert spool.fragment == Fragment(J, 20, 22, sha1(b"xy"), Codec.GZIP)
    assert spool.file is not None and spool.file is not file and spool.file.begin == 20
    assert spool.read(20, 10) == b"xy"
    assert completed.file.pread(0, 11) == b"hello world"  # the completed file is untouched


def test_empty_roll_at_end_keeps_registers(spool: Spool, rec: Recorder):
    append(spool, b"abc", registers=R1)
    spool.apply_content(b"pending", 0)
    proposal = spool.roll_to(3, Codec.SNAPPY)
    assert proposal == Fragment(J, 3, 3, ZERO_SUM, Codec.SNAPPY)
    status, frag, regs = spool.apply_proposal(proposal, R1)
    assert (status, frag, regs) == (Status.OK, proposal, R1)
    assert spool.delta == 0 and len(rec.completed) == 1
    assert rec.completed[0].fragment == Fragment(J, 0, 3, sha1(b"abc"))

    # Rolling with other registers: the roll happens (rule 1), but rule 2 then fails on registers.
    append(spool, b"d", registers=R1)
    status, frag, regs = spool.apply_proposal(spool.roll_to(4, Codec.NONE), R2)
    assert status == Status.PROPOSAL_MISMATCH
    assert frag == Fragment(J, 4, 4, ZERO_SUM, Codec.NONE) and regs == R1
    assert len(rec.completed) == 2


def test_roll_forward_past_end_with_non_empty_proposal(spool: Spool, rec: Recorder):
    # A new peer catching up: the primary's fragment is beyond anything we know.
    primary = Fragment(J, 0, 50, sha1(b"x" * 50), Codec.ZSTANDARD)
    status, frag, regs = spool.apply_proposal(primary, R1)
    assert status == Status.PROPOSAL_MISMATCH
    assert frag == Fragment(J, 50, 50, ZERO_SUM, Codec.ZSTANDARD) and regs == R1
    assert rec.completed == []  # we were empty: nothing to hand off
    # The primary then rolls everyone to its end.
    assert spool.apply_proposal(Fragment(J, 50, 50, ZERO_SUM, Codec.ZSTANDARD), R1)[0] == Status.OK


def test_proposal_below_our_end_mismatches(spool: Spool):
    append(spool, b"abcdef", registers=R1)
    status, frag, _ = spool.apply_proposal(Fragment(J, 3, 3), R1)
    assert status == Status.PROPOSAL_MISMATCH and frag.end == 6


def test_a_spool_ahead_of_a_syncing_primary_is_completed_for_prompt_persistence(spool: Spool, rec: Recorder):
    """A replica holding commits a syncing primary lacks refuses its proposal; the primary then rolls
    everyone to this end, and the completed spool, maybe the only copy of the range, is marked."""
    append(spool, b"abc", registers=R1)
    append(spool, b"def", registers=R1)  # an append the new primary never got
    status, frag, _ = spool.apply_proposal(Fragment(J, 0, 3, sha1(b"abc")), R1)  # the primary's sync
    assert status == Status.PROPOSAL_MISMATCH and frag.end == 6
    assert spool.apply_proposal(Fragment(J, 6, 6), R1)[0] == Status.OK  # rolled to our end
    [completed] = rec.completed
    assert completed.fragment == Fragment(J, 0, 6, sha1(b"abcdef")) and completed.ahead_of_primary
    # The mark is the completed spool's alone: an ordinary roll later is not marked.
    append(spool, b"gh", registers=R1)
    assert spool.apply_proposal(Fragment(J, 8, 8), R1)[0] == Status.OK
    assert [c.ahead_of_primary for c in rec.completed] == [True, False]
    # A primary that is ahead of us (we are the one behind) marks nothing.
    append(spool, b"ij", registers=R1)
    status, frag, _ = spool.apply_proposal(Fragment(J, 8, 20, sha1(b"x" * 12)), R1)  # rolls forward to 20
    assert status == Status.PROPOSAL_MISMATCH and frag == Fragment(J, 20, 20)
    assert [c.ahead_of_primary for c in rec.completed] == [True, False, False]


def test_close_completes_and_is_idempotent(spool: Spool, rec: Recorder):
    append(spool, b"abc", registers=R1)
    spool.apply_content(b"uncommitted", 0)
    spool.close()
    assert [c.fragment for c in rec.completed] == [Fragment(J, 0, 3, sha1(b"abc"))]
    assert spool.fragment == Fragment(J, 3, 3) and spool.delta == 0 and spool.file is None
    spool.close()
    assert len(rec.completed) == 1


def test_close_of_empty_spool_hands_off_nothing(spool: Spool, rec: Recorder):
    spool.close()
    assert rec.completed == []


# --- maybe_roll (reference 4.1) -------------------------------------------------------------------


def test_maybe_roll_empty_spool_takes_spec_codec(spool: Spool):
    assert spool.maybe_roll(1000, Codec.GZIP, 0) == Fragment(J, 0, 0, ZERO_SUM, Codec.GZIP)
    assert spool.maybe_roll(1000, Codec.NONE, 0) == spool.fragment  # same codec: nothing changes
    assert spool.maybe_roll(1000, Codec.NONE, 0, roll_to_offset=100) == Fragment(J, 100, 100)


def test_maybe_roll_length_and_roll_to(spool: Spool):
    append(spool, b"x" * 10, registers=R1)
    cur = spool.fragment
    t = spool.first_append_time
    assert spool.maybe_roll(10, Codec.GZIP, 0, now=t) == cur  # length == spec length: keep
    assert spool.maybe_roll(9, Codec.GZIP, 0, now=t) == Fragment(J, 10, 10, ZERO_SUM, Codec.GZIP)
    assert spool.maybe_roll(100, Codec.GZIP, 0, roll_to_offset=50, now=t) == Fragment(
        J, 50, 50, ZERO_SUM, Codec.GZIP
    )
    assert spool.maybe_roll(100, Codec.GZIP, 0, roll_to_offset=10, now=t) == Fragment(
        J, 10, 10, ZERO_SUM, Codec.GZIP
    )
    assert spool.maybe_roll(100, Codec.GZIP, 0, roll_to_offset=0, now=t) == cur
    assert spool.maybe_roll(100, Codec.GZIP, 0, roll_to_offset=cur.begin, now=t) == cur  # == begin: not asked


def test_maybe_roll_flush_interval_buckets(spool: Spool):
    append(spool, b"x" * 10, registers=R1)
    spool.first_append_time = 1000.5  # bucket 1000 // 60 == 16 covers [960, 1020)
    cur = spool.fragment
    assert spool.maybe_roll(100, Codec.NONE, 60, now=1019.9) == cur
    assert spool.maybe_roll(100, Codec.NONE, 60, now=1020.0) == Fragment(J, 10, 10)
    assert spool.maybe_roll(100, Codec.NONE, 0, now=99999.0) == cur  # no interval: no bucket rule
    assert spool.maybe_roll(100, Codec.NONE, 3600, now=3599.0) == cur
    assert spool.maybe_roll(100, Codec.NONE, 3600, now=3600.0) == Fragment(J, 10, 10)


def test_maybe_roll_result_applies_as_a_roll(spool: Spool, rec: Recorder):
    append(spool, b"x" * 10, registers=R1)
    roll = spool.maybe_roll(5, Codec.SNAPPY, 0)
    assert spool.apply_proposal(roll, spool.registers)[0] == Status.OK
    assert spool.fragment == Fragment(J, 10, 10, ZERO_SUM, Codec.SNAPPY)
    assert len(rec.completed) == 1


# --- a model check --------------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("content"), st.binary(min_size=0, max_size=40)),
        st.tuples(st.just("commit"), st.sampled_from([R1, R2])),
        st.tuples(st.just("rollback"), st.none()),
        st.tuples(st.just("roll"), st.integers(min_value=0, max_value=30)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_ops)
def test_spool_matches_a_simple_model(tmp_path_factory, ops):
    rec = Recorder()
    spool = Spool(J, rec, directory=str(tmp_path_factory.mktemp("spool")))
    begin, committed, pending, regs = 0, b"", b"", LabelSet()
    expect_completed: list[bytes] = []
    for op, arg in ops:
        if op == "content":
            spool.apply_content(arg, len(pending))
            pending += arg
        elif op == "commit":
            status = spool.apply_proposal(spool.next(), arg)[0]
            if pending:
                assert status == Status.OK
                committed, pending, regs = committed + pending, b"", arg
            else:  # nothing to commit: a rollback, which needs equal registers
                assert status == (Status.OK if arg == regs else Status.PROPOSAL_MISMATCH)
        elif op == "rollback":
            spool.rollback()
            pending = b""
        else:
            to = begin + len(committed) + arg
            status = spool.apply_proposal(spool.roll_to(to, Codec.NONE), regs)[0]
            if to > begin + len(committed) + len(pending) or to == begin + len(committed):
                assert status == Status.OK
                if committed:
                    expect_completed.append(committed)
                begin, committed, pending = to, b"", b""
            else:
                assert status == Status.PROPOSAL_MISMATCH
        frag = spool.fragment
        assert (frag.begin, frag.end, spool.delta) == (begin, begin + len(committed), len(pending))
        assert frag.sum == (sha1(committed) if committed else ZERO_SUM)
        assert spool.registers == regs
        assert spool.read(begin, 1 << 20) == committed
    assert [
        b"".join(c.file.reader(c.fragment.begin, c.fragment.end)) for c in rec.completed
    ] == expect_completed
