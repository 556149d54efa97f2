"""The vectorised commit decision (fragments_io.decide) against the Sequencer, message by message.

Histories are generated raw (small clocks, so duplicates, clock regressions, rollbacks below the last
ACK, ACKs of producers never seen, unknown flags and clockless rows are all frequent) and as the
data source's other tests write journals (fio_journals.random_journal); rows are cut into tables at
random points (fragment boundaries) and the ring is small enough that replays happen, across
tables and from a checkpoint's history. Every comparison is exact: the rows delivered, the producer
states and the open horizon after each table.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from fio_journals import envelopes_of, random_journal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fragments_io.committed import CommitTracker, committed_reference
from fragments_io.decide import Decider, replay_deliveries, seg_cummax
from fragments_io.decode import JournalDecoder
from fragments_io.source import commit_filter
from gazette.fragment.fragment import Fragment
from gazette.message.checkpoint import Checkpoint
from gazette.message.envelope import Envelope
from gazette.message.sequencer import QueueOutcome, Sequencer

J = "ex/decide/part-000"
PRODUCERS = [bytes.fromhex(f"0{i}00000000a{i}") for i in range(4)]
COMMITS = {
    QueueOutcome.OUTSIDE_COMMIT,
    QueueOutcome.ACK_EMPTY,
    QueueOutcome.ACK_COMMIT_RING,
    QueueOutcome.ACK_COMMIT_REPLAY,
}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


# -- histories -------------------------------------------------------------------------------------


@st.composite
def histories(draw) -> list[Envelope]:
    """Envelopes of one journal. Each step, one of 2-4 producers: publishes its next clock (OUTSIDE,
    CONTINUE, ACK or unknown flags), re-sends one of its messages (a duplicate, or a restarted
    producer's regression), ACKs at the clock of one of its messages (a commit through it, or a
    rollback at or below its last ACK), publishes at a random clock near its own, or writes a
    clockless message (with its producer id, or without a UUID)."""
    n_producers = draw(st.integers(1, 4))
    clocks = [1000 + 7 * p for p in range(n_producers)]
    sent: list[list[Envelope]] = [[] for _ in range(n_producers)]
    envs: list[Envelope] = []
    offset = 0
    for _ in range(draw(st.integers(0, 70))):
        p = draw(st.integers(0, n_producers - 1))
        producer = PRODUCERS[p]
        kind = draw(st.sampled_from(["next"] * 6 + ["resend", "ack_at", "near", "clockless", "no_uuid"]))
        flags = draw(st.sampled_from([0, 1, 1, 1, 1, 2, 2, 4]))
        if kind in ("resend", "ack_at") and not sent[p]:
            kind = "next"
        if kind == "next":
            clocks[p] += 10
            clock = clocks[p]
        elif kind == "resend":
            old = draw(st.sampled_from(sent[p][-8:]))
            clock, flags = old.clock, old.flags
        elif kind == "ack_at":
            clock, flags = draw(st.sampled_from(sent[p][-8:])).clock + draw(st.sampled_from([0, 0, -1, 1])), 2
        elif kind == "near":
            clock = max(1, clocks[p] + draw(st.integers(-40, 20)))
        elif kind == "clockless":
            clock = 0
        else:
            producer, clock, flags = b"", 0, draw(st.sampled_from([0, 2]))
        size = 3 + draw(st.integers(0, 2))
        env = Envelope(J, offset, offset + size, len(envs), None, producer, clock, flags)
        envs.append(env)
        if producer and clock:
            sent[p].append(env)
        offset += size
    return envs


# -- the reference: a Sequencer fed message by message -----------------------------------------------


def sequencer_decision(
    envs: list[Envelope], cuts: list[int], ring_size: int, seq: Sequencer | None = None, history=()
):
    """Row ids delivered (ACKs excluded), and (states, horizon) after each cut, by a Sequencer; a
    replay gets every envelope of its range (from `history` below the first envelope)."""
    seq = seq or Sequencer(ring_size=ring_size)
    everything = list(history) + envs
    out: list[int] = []
    after = []
    for k, e in enumerate(envs):
        outcome = seq.queue(e)
        if outcome in COMMITS:
            if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
                _, lo, hi = seq.replay_range()
                seq.start_replay([r for r in everything if lo <= r.begin and r.end <= hi])
            while (done := seq.step()) is not None:
                if done.flags != 2:
                    out.append(done.message)
        if k + 1 in cuts:
            states = [s for s in seq.checkpoint().producers if s.journal == J]
            opens = [s.begin for s in states if s.begin >= 0]
            after.append((states, min(opens) if opens else None))
    return out, after


def _columns(envs: list[Envelope]):
    return (
        [e.begin for e in envs],
        [e.end for e in envs],
        [e.producer.hex() or None for e in envs],
        [e.clock for e in envs],
        [e.flags for e in envs],
    )


def decider_decision(envs: list[Envelope], cuts: list[int], decider: Decider):
    after = []
    bounds = [0, *cuts]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        chunk = envs[lo:hi]
        if chunk:
            first = chunk[0].message
            decider.add(first, *_columns(chunk))
        after.append((decider.states(), decider.open_horizon()))
    ids = np.concatenate(decider.committed) if decider.committed else np.zeros(0, np.int64)
    return sorted(set(ids.tolist())), after


def _cuts(draw, n: int) -> list[int]:
    cuts = sorted(set(draw(st.lists(st.integers(1, max(n, 1)), max_size=6))) | {n})
    return [c for c in cuts if c > 0] or [n]


# -- properties ------------------------------------------------------------------------------------


@SETTINGS
@given(envs=histories(), data=st.data(), ring_size=st.sampled_from([1, 2, 3, 5, 8, 64, 8192]))
def test_decider_equals_the_sequencer(envs, data, ring_size):
    cuts = _cuts(data.draw, len(envs))
    want, want_after = sequencer_decision(envs, cuts, ring_size)
    got, got_after = decider_decision(envs, cuts, Decider(J, ring_size=ring_size))
    assert got == sorted(set(want))
    if envs:
        assert got_after == want_after


@SETTINGS
@given(envs=histories(), data=st.data(), ring_size=st.sampled_from([1, 2, 3, 5, 64]))
def test_decider_resumes_from_a_checkpoint_with_history(envs, data, ring_size):
    """A Sequencer checkpointed part-way (every commit dequeued), then both resume from it; replays
    of spans begun before the checkpoint read the rows before it through `history`."""
    split = data.draw(st.integers(0, len(envs)))
    before, after = envs[:split], envs[split:]
    seq = Sequencer(ring_size=ring_size)
    sequencer_decision(before, [], ring_size, seq)
    cp = seq.checkpoint()
    calls = []

    def history(lo, hi):
        calls.append((lo, hi))
        return [e for e in before if lo <= e.begin and e.end <= hi]

    cuts = _cuts(data.draw, len(after))
    want, want_after = sequencer_decision(
        after, cuts, ring_size, Sequencer.from_checkpoint(cp, ring_size), before
    )
    from gazette.message.checkpoint import Checkpoint

    restored = Checkpoint({J: after[0].begin if after else 0}, cp.producers)
    got, got_after = decider_decision(after, cuts, Decider(J, ring_size, restored, history))
    assert got == sorted(set(want))
    if after:
        assert got_after == want_after
    assert all(hi <= (after[0].begin if after else 0) for _, hi in calls)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**9),
    events=st.integers(1, 300),
    producers=st.integers(1, 4),
    per_fragment=st.integers(1, 40),
    ring_size=st.sampled_from([2, 5, 64, 8192]),
)
def test_commit_filter_with_the_decider_equals_the_sequencer(
    seed, events, producers, per_fragment, ring_size
):
    """The data source's committed path (decoded Arrow tables, commit_filter) with the Decider gives
    what CommitTracker (the Sequencer) gives, and ReadCommitted for the default ring."""
    frames = random_journal(seed, events, producers)
    dec = JournalDecoder(J, "json", "committed", "/_meta/uuid", None, strict=False)
    tables, offset = [], 0
    for i in range(0, len(frames), per_fragment):
        content = b"".join(frames[i : i + per_fragment])
        tables.append((dec.feed(Fragment(J, offset, offset + len(content)), content), 0))
        offset += len(content)
    tables.append((dec.finish(), 0))

    def begins(tracker):
        return [b for t, _ in commit_filter(tracker, tables) for b in t.column("begin").to_pylist()]

    want = begins(CommitTracker(J, ring_size=ring_size))
    assert begins(Decider(J, ring_size=ring_size)) == want
    if ring_size == 8192:
        assert want == sorted(e.begin for e in committed_reference(envelopes_of(J, frames)))


# -- helpers ---------------------------------------------------------------------------------------


@given(
    values=st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 50), min_size=1, max_size=40),
    starts=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_seg_cummax(values, starts):
    start = np.array([True] + starts[1 : len(values)], bool)
    want, run = [], 0
    for v, s in zip(values, start, strict=True):
        run = v if s else max(run, v)
        want.append(run)
    assert seg_cummax(np.array(values, np.int64), start).tolist() == want


@given(clocks=st.lists(st.integers(0, 30), max_size=30), floor=st.integers(0, 30), ceiling=st.integers(0, 30))
def test_replay_deliveries(clocks, floor, ceiling):
    want, last = [], floor
    for c in clocks:
        ok = c == 0 or last < c <= ceiling
        want.append(ok)
        if ok:
            last = c
    assert replay_deliveries(np.array(clocks, np.int64), floor, ceiling).tolist() == want


def test_a_span_restored_from_a_checkpoint_replays_from_history_then_its_members():
    """Found by a longer run of the property above: a span begun before the checkpoint commits a few
    rows after it, with clockless rows and a dropped OUTSIDE between; the replay reads the span's
    head from history, then only the span's members still in the ring."""
    rows = [(1010 + 10 * i, 0) for i in range(21)] + [(1220, 1)]
    rows += [(1230, 1), (0, 0), (1160, 0), (0, 0), (1240, 1), (1250, 2)] + [
        (1260 + 10 * i, 0) for i in range(3)
    ]
    envs = [Envelope(J, 3 * i, 3 * i + 3, i, None, PRODUCERS[0], c, f) for i, (c, f) in enumerate(rows)]
    before, after = envs[:22], envs[22:]
    seq = Sequencer(ring_size=64)
    sequencer_decision(before, [], 64, seq)
    cp = seq.checkpoint()
    assert [s.begin for s in cp.producers] == [63]  # the span begun by row 21 is open

    def history(lo, hi):
        return [e for e in before if lo <= e.begin and e.end <= hi]

    want, want_after = sequencer_decision(after, [len(after)], 64, Sequencer.from_checkpoint(cp, 64), before)
    restored = Checkpoint({J: after[0].begin}, cp.producers)
    got, got_after = decider_decision(after, [len(after)], Decider(J, 64, restored, history))
    assert got == sorted(set(want)) == [21, 22, 23, 25, 26, 28, 29, 30]
    assert got_after == want_after
