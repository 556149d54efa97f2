"""Sequencer (reference 6.4): every queue outcome with its effects on step() and offsets, replays,
checkpoints taken mid-sequence, duplicates straddling checkpoints, pruning, and the checkpoint format.

Envelopes are built directly (no framing); a `Journal` hands out contiguous offsets.
"""

from __future__ import annotations

import json
import logging

import pytest

from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.message.envelope import Envelope
from gazette.message.sequencer import QueueOutcome, Sequencer, SequencerError, prune_horizon_clock
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid
from gazette.protocol.errors import ValidationError

Q = QueueOutcome
J = "a/journal"
K = "b/journal"
P1 = bytes.fromhex("01a1a1a1a1a1")
P2 = bytes.fromhex("03b2b2b2b2b2")
OUT, CONT, ACK = Flags.OUTSIDE_TXN, Flags.CONTINUE_TXN, Flags.ACK_TXN
SIZE = 10  # bytes per test message


class Journal:
    """An in-memory journal: appends envelopes at increasing, contiguous offsets."""

    def __init__(self, name: str = J) -> None:
        self.name = name
        self.envs: list[Envelope] = []

    @property
    def end(self) -> int:
        return self.envs[-1].end if self.envs else 0

    def append(self, producer: bytes, tick: int, flags: int) -> Envelope:
        """Appends a message of `producer` at clock `tick * CLOCK_TICK` (0: a message without UUID)."""
        clock = tick * CLOCK_TICK
        uuid = build_uuid(producer, clock, flags) if clock else None
        env = Envelope(
            self.name,
            self.end,
            self.end + SIZE,
            f"{producer.hex()}:{tick}:{flags}",
            uuid,
            producer if clock else b"",
            clock,
            flags,
        )
        self.envs.append(env)
        return env

    def again(self, env: Envelope) -> Envelope:
        """Re-appends `env` (an at-least-once retry): same UUID and message, new offsets."""
        dup = Envelope(
            self.name, self.end, self.end + SIZE, env.message, env.uuid, env.producer, env.clock, env.flags
        )
        self.envs.append(dup)
        return dup

    def between(self, begin: int, end: int) -> list[Envelope]:
        return [e for e in self.envs if begin <= e.begin and e.end <= end]


def drain(seq: Sequencer) -> list[Envelope]:
    out = []
    while (env := seq.step()) is not None:
        out.append(env)
    return out


def test_outside_commit_then_duplicate_is_already_acked() -> None:
    j, seq = Journal(), Sequencer()
    m1 = j.append(P1, 1, OUT)
    assert seq.queue(m1) is Q.OUTSIDE_COMMIT
    assert seq.offsets == {}  # not advanced on a commit ...
    assert seq.step() is m1
    assert seq.offsets == {}  # ... nor while its sequence is being dequeued
    assert seq.step() is None
    assert seq.offsets == {J: m1.end}  # only once it is done
    assert seq.step() is None

    dup = j.again(m1)
    assert seq.queue(dup) is Q.OUTSIDE_ALREADY_ACKED
    assert seq.offsets == {J: dup.end}  # drop outcomes advance at once
    assert seq.step() is None
    m2 = j.append(P1, 2, OUT)
    assert seq.queue(m2) is Q.OUTSIDE_COMMIT
    assert drain(seq) == [m2]
    assert seq.offsets == {J: m2.end}


def test_continue_span_commits_from_the_ring_and_ack_is_dequeued_last() -> None:
    j, seq = Journal(), Sequencer()
    c1 = j.append(P1, 1, CONT)
    assert seq.queue(c1) is Q.CONTINUE_BEGIN_SPAN
    assert seq.offsets == {J: c1.end}  # read-through advances past CONTINUE messages
    assert seq.step() is None
    c2 = j.append(P1, 2, CONT)
    assert seq.queue(c2) is Q.CONTINUE_EXTEND_SPAN
    assert seq.queue(j.again(c1)) is Q.CONTINUE_TXN_CLOCK_LARGER  # duplicate within the open span
    assert seq.queue(j.again(c2)) is Q.CONTINUE_TXN_CLOCK_LARGER
    before_ack = seq.offsets
    a3 = j.append(P1, 3, ACK)
    assert seq.queue(a3) is Q.ACK_COMMIT_RING
    assert seq.step() is c1
    assert seq.step() is c2
    assert seq.offsets == before_ack == {J: a3.begin}
    assert seq.step() is a3  # the ACK itself is the last message of its sequence
    assert seq.offsets == {J: a3.begin}
    assert seq.step() is None
    assert seq.offsets == {J: a3.end}
    assert seq.queue(j.again(c2)) is Q.CONTINUE_ALREADY_ACKED
    assert seq.queue(j.again(a3)) is Q.ACK_ROLLBACK  # duplicate ACK: clock == last ACK
    assert seq.step() is None
    assert seq.offsets == {J: j.end}


def test_ack_empty_delivers_only_the_ack() -> None:
    j, seq = Journal(), Sequencer()
    a = j.append(P1, 5, ACK)
    assert seq.queue(a) is Q.ACK_EMPTY
    assert drain(seq) == [a]
    assert seq.offsets == {J: a.end}
    assert seq.checkpoint().producers == [ProducerState(J, P1, a.clock, -1)]


def test_ack_commits_only_continues_at_or_below_its_clock() -> None:
    j, seq = Journal(), Sequencer()
    c1 = j.append(P1, 10, CONT)
    c3 = j.append(P1, 30, CONT)
    for env in (c1, c3):
        seq.queue(env)
    a2 = j.append(P1, 20, ACK)  # e.g. a re-sent ACK intent of an earlier transaction
    assert seq.queue(a2) is Q.ACK_COMMIT_RING
    assert drain(seq) == [c1, a2]  # c3 is rolled back
    # c3's span is closed: a later ACK does not resurrect it.
    a4 = j.append(P1, 40, ACK)
    assert seq.queue(a4) is Q.ACK_EMPTY
    assert drain(seq) == [a4]


def test_ack_at_last_ack_rolls_back_the_open_span() -> None:
    j, seq = Journal(), Sequencer()
    a1 = j.append(P1, 1, ACK)
    seq.queue(a1)
    drain(seq)
    c2 = j.append(P1, 2, CONT)
    c3 = j.append(P1, 3, CONT)
    seq.queue(c2)
    seq.queue(c3)
    rollback = j.again(a1)  # a recovered upstream shard re-sends its last ACK intent
    assert seq.queue(rollback) is Q.ACK_ROLLBACK
    assert seq.step() is None
    assert seq.offsets == {J: rollback.end}
    assert not seq.has_pending()
    a4 = j.append(P1, 4, ACK)
    assert seq.queue(a4) is Q.ACK_EMPTY  # c2, c3 were discarded
    assert drain(seq) == [a4]


def test_ack_below_last_ack_resets_to_at_least_once(caplog: pytest.LogCaptureFixture) -> None:
    j, seq = Journal(), Sequencer()
    a1 = j.append(P1, 1, ACK)
    o2 = j.append(P1, 2, OUT)
    a3 = j.append(P1, 3, ACK)
    for env in (a1, o2, a3):
        seq.queue(env)
        drain(seq)
    with caplog.at_level(logging.ERROR, logger="gazette.message.sequencer"):
        assert seq.queue(j.again(a1)) is Q.ACK_ROLLBACK
    assert "loss of exactly-once" in caplog.text
    assert seq.checkpoint().producers == [ProducerState(J, P1, a1.clock, -1)]
    dup = j.again(o2)
    assert seq.queue(dup) is Q.OUTSIDE_COMMIT  # delivered again: at-least-once from here
    assert drain(seq) == [dup]


def test_outside_after_open_span_clobbers_it(caplog: pytest.LogCaptureFixture) -> None:
    j, seq = Journal(), Sequencer()
    c1 = j.append(P1, 1, CONT)
    seq.queue(c1)
    o2 = j.append(P1, 2, OUT)
    with caplog.at_level(logging.WARNING, logger="gazette.message.sequencer"):
        assert seq.queue(o2) is Q.OUTSIDE_COMMIT
    assert "open CONTINUE_TXN span begun at 0" in caplog.text
    assert drain(seq) == [o2]
    a3 = j.append(P1, 3, ACK)
    assert seq.queue(a3) is Q.ACK_EMPTY
    assert drain(seq) == [a3]  # c1 is never delivered


def test_clock_zero_is_always_delivered_and_not_tracked() -> None:
    j, seq = Journal(), Sequencer()
    m = j.append(b"", 0, OUT)
    assert m.uuid is None
    for env in (m, j.again(m), j.again(m)):
        assert seq.queue(env) is Q.OUTSIDE_COMMIT
        assert drain(seq) == [env]
    assert seq.offsets == {J: j.end}
    assert seq.checkpoint().producers == []
    assert seq.queued == {("OUTSIDE_TXN", Q.OUTSIDE_COMMIT): 3}


def test_unknown_flags_are_outside_and_logged_once_per_producer(caplog: pytest.LogCaptureFixture) -> None:
    j, seq = Journal(), Sequencer()
    weird = [j.append(P1, 1, 0x4), j.append(P1, 2, 0x8), j.append(P2, 1, 0x4)]
    with caplog.at_level(logging.WARNING, logger="gazette.message.sequencer"):
        for env in weird:
            assert seq.queue(env) is Q.OUTSIDE_COMMIT
            assert drain(seq) == [env]
        assert seq.queue(j.again(weird[0])) is Q.OUTSIDE_ALREADY_ACKED
    records = [r for r in caplog.records if "unknown UUID flags" in r.getMessage()]
    assert [r.getMessage().split()[3] for r in records] == [P1.hex(), P2.hex()]
    assert seq.queued == {("UNKNOWN", Q.OUTSIDE_COMMIT): 3, ("UNKNOWN", Q.OUTSIDE_ALREADY_ACKED): 1}


def test_queue_while_dequeuing_and_step_without_replay_are_errors() -> None:
    j, seq = Journal(), Sequencer(ring_size=1)
    m = j.append(P1, 1, OUT)
    seq.queue(m)
    with pytest.raises(SequencerError, match="remains to dequeue"):
        seq.queue(j.append(P1, 2, OUT))
    assert seq.step() is m  # the refused envelope changed nothing
    with pytest.raises(SequencerError, match="remains to dequeue"):
        seq.queue(j.envs[-1])
    assert seq.step() is None
    with pytest.raises(SequencerError, match="no committed sequence"):
        seq.replay_range()

    seq.queue(j.append(P2, 1, CONT))
    a = j.append(P2, 2, ACK)
    assert seq.queue(a) is Q.ACK_COMMIT_REPLAY  # ring of 1: the CONTINUE was evicted
    with pytest.raises(SequencerError, match=r"requires start_replay\(\) over offsets \[20, 30\)"):
        seq.step()


def test_ring_eviction_forces_replay_of_exactly_the_evicted_head() -> None:
    j, seq = Journal(), Sequencer(ring_size=3)
    c1 = j.append(P1, 1, CONT)  # evicted by c3
    o1 = j.append(P2, 1, OUT)  # other producer, interleaved
    c2 = j.append(P1, 2, CONT)  # evicted by the ACK itself
    c3 = j.append(P1, 3, CONT)
    c4 = j.append(P1, 4, CONT)
    a5 = j.append(P1, 5, ACK)
    for env in (c1, o1, c2, c3, c4):
        if seq.queue(env) is Q.OUTSIDE_COMMIT:
            assert drain(seq) == [env]
    assert seq.describe()["producers"][0]["ring_entries"] == 3  # c2, c3, c4
    assert seq.queue(a5) is Q.ACK_COMMIT_REPLAY
    assert seq.replay_range() == (J, c1.begin, c3.begin)
    assert seq.offsets == {J: a5.begin}
    seq.start_replay(j.between(c1.begin, c3.begin))
    assert drain(seq) == [c1, c2, c3, c4, a5]
    assert seq.replayed == 3  # c1, o1 (skipped: other producer), c2
    assert seq.offsets == {J: a5.end}
    assert seq.queued[("ACK_TXN", Q.ACK_COMMIT_REPLAY)] == 1


def test_replay_skips_duplicates_seen_in_replay_and_ring() -> None:
    j, seq = Journal(), Sequencer(ring_size=2)
    c1 = j.append(P1, 1, CONT)
    c2 = j.append(P1, 2, CONT)
    d1 = j.again(c1)  # dropped live, but present in the replayed range
    c3 = j.append(P1, 3, CONT)
    a4 = j.append(P1, 4, ACK)
    for env in (c1, c2, d1, c3):
        seq.queue(env)
    assert seq.queue(a4) is Q.ACK_COMMIT_REPLAY
    assert seq.replay_range() == (J, c1.begin, c3.begin)
    seq.start_replay(j.between(c1.begin, c3.begin))
    assert drain(seq) == [c1, c2, c3, a4]


@pytest.mark.parametrize(("ring_size", "expected"), [(8, "ack only"), (1, "copy and ack")])
def test_replay_dedupes_by_clock_order_only(ring_size: int, expected: str) -> None:
    """Reference behaviour, kept on purpose: a copy of a rolled-back CONTINUE whose clock lies inside
    a later open span is dropped while the span is in the ring, but a replay cannot tell it from
    the span's own messages and delivers it if the ACK covers its clock."""
    j, seq = Journal(), Sequencer(ring_size=ring_size)
    c1 = j.append(P1, 10, CONT)
    rollback = j.append(P1, 9, ACK)  # clock just below c1, which it rolls back
    c2 = j.append(P1, 20, CONT)
    late = j.again(c1)  # a late retry of the rolled-back c1
    ack = j.append(P1, 15, ACK)  # commits clocks <= 15: not c2
    outcomes = [seq.queue(env) for env in (c1, rollback, c2, late)]
    assert outcomes == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.ACK_ROLLBACK,
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_TXN_CLOCK_LARGER,
    ]
    outcome = seq.queue(ack)
    if outcome is Q.ACK_COMMIT_REPLAY:
        assert seq.replay_range() == (J, c2.begin, ack.begin)
        seq.start_replay(j.between(c2.begin, ack.begin))
    assert drain(seq) == ([ack] if expected == "ack only" else [late, ack])


def test_replay_that_strays_from_the_range_is_an_error() -> None:
    def committed_replay() -> tuple[Journal, Sequencer]:
        j, seq = Journal(), Sequencer(ring_size=1)
        seq.queue(j.append(P1, 1, CONT))
        seq.queue(j.append(P1, 2, CONT))
        assert seq.queue(j.append(P1, 3, ACK)) is Q.ACK_COMMIT_REPLAY
        assert seq.replay_range() == (J, 0, 20)
        return j, seq

    j, seq = committed_replay()
    other = Journal(K)
    other.append(P1, 1, CONT)
    seq.start_replay(other.envs)
    with pytest.raises(SequencerError, match=f"journal '{K}' at offset 0, expected journal '{J}'"):
        seq.step()

    j, seq = committed_replay()
    seq.start_replay(j.envs)  # runs past the range into the ACK
    assert seq.step() is j.envs[0]
    assert seq.step() is j.envs[1]
    with pytest.raises(
        SequencerError, match=r"\[20, 30\) of journal 'a/journal' lies outside the replay range \[10, 20\)"
    ):
        seq.step()


def test_restore_from_checkpoint_taken_mid_sequence_resumes_exactly() -> None:
    j, seq = Journal(), Sequencer()
    c1, c2, c3 = (j.append(P1, t, CONT) for t in (1, 2, 3))
    o = j.append(P2, 1, CONT)  # another producer's open span
    a4 = j.append(P1, 4, ACK)
    for env in (c1, c2, c3, o):
        seq.queue(env)
    assert seq.queue(a4) is Q.ACK_COMMIT_RING
    processed = [seq.step()]  # c1
    assert seq.step() is c2  # c1 is processed now; c2 is handed out but not yet processed
    cp = seq.checkpoint()
    assert cp.offsets == {J: a4.begin}
    assert cp.producers == [
        ProducerState(J, P1, c1.clock, c2.begin),
        ProducerState(J, P2, o.clock - 1, o.begin),
    ]

    restored = Sequencer.from_checkpoint(
        Checkpoint.from_dict(json.loads(json.dumps(cp.to_dict()))), ring_size=4
    )
    reread = [e for e in j.envs if e.begin >= cp.offsets[J]]
    assert reread == [a4]
    assert restored.queue(a4) is Q.ACK_COMMIT_REPLAY
    assert restored.replay_range() == (J, c2.begin, a4.begin)
    restored.start_replay(j.between(c2.begin, a4.begin))
    processed += drain(restored)
    assert processed == [c1, c2, c3, a4]  # each exactly once
    assert restored.offsets == {J: a4.end}

    # A checkpoint taken while the ACK itself is handed out re-reads the ACK and hands it out again.
    seq2 = Sequencer.from_checkpoint(cp)
    seq2.queue(a4)
    seq2.start_replay(j.between(c2.begin, a4.begin))
    assert [seq2.step(), seq2.step(), seq2.step()] == [c2, c3, a4]
    cp2 = seq2.checkpoint()
    assert cp2.offsets == {J: a4.begin}
    seq3 = Sequencer.from_checkpoint(cp2)
    assert seq3.queue(a4) is Q.ACK_COMMIT_REPLAY  # begin is set but the ring is empty ...
    assert seq3.replay_range() == (J, a4.begin, a4.begin)  # ... so the range is empty
    seq3.start_replay([])
    assert drain(seq3) == [a4]


def test_duplicates_straddling_a_checkpoint_are_delivered_once() -> None:
    j, seq = Journal(), Sequencer()
    o1 = j.append(P1, 1, OUT)
    seq.queue(o1)
    drain(seq)
    c2 = j.append(P1, 2, CONT)
    c3 = j.append(P1, 3, CONT)
    seq.queue(c2)
    seq.queue(c3)
    cp = seq.checkpoint()
    assert cp.producers == [ProducerState(J, P1, o1.clock, c2.begin)]

    restored = Sequencer.from_checkpoint(cp)
    assert restored.queue(j.again(o1)) is Q.OUTSIDE_ALREADY_ACKED
    # The checkpoint keeps only last ACK and begin, so retried copies of c2, c3 enter the ring ...
    assert restored.queue(j.again(c2)) is Q.CONTINUE_EXTEND_SPAN
    assert restored.queue(j.again(c3)) is Q.CONTINUE_EXTEND_SPAN
    c4 = j.append(P1, 4, CONT)
    a5 = j.append(P1, 5, ACK)
    restored.queue(c4)
    assert restored.queue(a5) is Q.ACK_COMMIT_REPLAY
    first_in_ring = j.envs[cp.offsets[J] // SIZE + 1]
    assert restored.replay_range() == (J, c2.begin, first_in_ring.begin)
    restored.start_replay(j.between(c2.begin, first_in_ring.begin))
    # ... and are skipped at dequeue, being at or below the replayed clocks.
    assert drain(restored) == [c2, c3, c4, a5]


def test_producers_older_than_the_horizon_are_pruned() -> None:
    horizon = prune_horizon_clock(60.0)
    assert horizon == 600_000_000 << 4
    j, k, seq = Journal(J), Journal(K), Sequencer()
    old = j.append(P1, 1, OUT)
    recent = j.append(P2, 1 + (horizon + CLOCK_TICK) // CLOCK_TICK, OUT)
    edge = k.append(P1, 1, OUT)  # alone in its journal: the newest there
    for env in (old, recent, edge):
        seq.queue(env)
        drain(seq)
    assert len(seq.checkpoint(None).producers) == 3
    assert len(seq.checkpoint(0).producers) == 3
    assert len(seq.checkpoint(recent.clock - old.clock).producers) == 3  # exactly at the horizon: kept
    cp = seq.checkpoint(horizon)
    assert cp.producers == [ProducerState(J, P2, recent.clock, -1), ProducerState(K, P1, edge.clock, -1)]
    assert cp.offsets == {J: recent.end, K: edge.end}
    # Pruned state is forgotten: a late copy of the old producer's message is first sight again.
    assert seq.queue(j.again(old)) is Q.OUTSIDE_COMMIT
    with pytest.raises(ValidationError, match="prune_horizon -1"):
        seq.checkpoint(-1)


def test_has_pending_counts_only_spans_begun_since_the_last_checkpoint() -> None:
    j, seq = Journal(), Sequencer()
    assert not seq.has_pending()
    seq.queue(j.append(P1, 1, CONT))
    assert seq.has_pending()
    seq.checkpoint()
    assert not seq.has_pending()
    seq.queue(j.append(P1, 2, CONT))  # extends the older span
    assert not seq.has_pending()
    seq.queue(j.append(P2, 1, CONT))
    assert seq.has_pending()
    seq.queue(j.append(P2, 2, ACK))
    assert seq.has_pending()  # until its sequence is dequeued
    drain(seq)
    assert not seq.has_pending()
    seq.queue(j.append(P2, 3, CONT))
    assert seq.has_pending()
    seq.queue(j.append(P2, 2, ACK))  # rollback
    assert not seq.has_pending()
    seq.queue(j.append(P2, 4, CONT))
    seq.queue(j.append(P2, 5, OUT))  # clobbers the span
    drain(seq)
    assert not seq.has_pending()
    assert Sequencer.from_checkpoint(seq.checkpoint()).has_pending() is False


def test_journals_and_producers_are_independent() -> None:
    j, k, seq = Journal(J), Journal(K), Sequencer()
    cj = j.append(P1, 5, CONT)
    ck = k.append(P1, 1, CONT)
    seq.queue(cj)
    seq.queue(ck)
    ak = k.append(P1, 2, ACK)
    assert seq.queue(ak) is Q.ACK_COMMIT_RING
    assert drain(seq) == [ck, ak]
    assert seq.offsets == {J: cj.end, K: ak.end}
    aj = j.append(P1, 6, ACK)
    assert seq.queue(aj) is Q.ACK_COMMIT_RING
    assert drain(seq) == [cj, aj]
    by_journal = seq.queued_by_journal()
    assert by_journal[J] == {("CONTINUE_TXN", Q.CONTINUE_BEGIN_SPAN): 1, ("ACK_TXN", Q.ACK_COMMIT_RING): 1}
    assert by_journal[K] == by_journal[J]


def test_describe_is_plain_data() -> None:
    j, seq = Journal(), Sequencer(ring_size=4)
    seq.queue(j.append(P1, 1, CONT))
    seq.queue(j.append(P2, 1, OUT))
    snapshot = seq.describe()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["dequeuing"] == J
    assert snapshot["ring"] == {"size": 4, "occupied": 2, "head": 2}
    assert snapshot["producers"][0] == {
        "journal": J,
        "producer": P1.hex(),
        "min_clock": CLOCK_TICK - 1,
        "max_clock": CLOCK_TICK,
        "begin": 0,
        "ring_entries": 1,
        "pending": True,
    }
    assert snapshot["queued"] == {"CONTINUE_TXN/CONTINUE_BEGIN_SPAN": 1, "OUTSIDE_TXN/OUTSIDE_COMMIT": 1}
    drain(seq)
    assert seq.describe()["ring"]["occupied"] == 1  # dequeued envelopes are released


def test_checkpoint_dict_round_trip() -> None:
    cp = Checkpoint(
        {J: 120, K: 0},
        [ProducerState(J, P1, 12345 << 4, 40), ProducerState(K, P2, (1 << 64) - 1, -1)],
    )
    data = cp.to_dict()
    assert data == {
        "offsets": {J: 120, K: 0},
        "producers": [
            {"journal": J, "producer": "01a1a1a1a1a1", "last_ack": 12345 << 4, "begin": 40},
            {"journal": K, "producer": "03b2b2b2b2b2", "last_ack": (1 << 64) - 1, "begin": -1},
        ],
    }
    assert Checkpoint.from_dict(json.loads(json.dumps(data))) == cp
    seq = Sequencer.from_checkpoint(cp, ring_size=2)
    assert seq.offsets == cp.offsets
    assert seq.checkpoint() == cp


def _good() -> dict:
    return {
        "offsets": {J: 10},
        "producers": [{"journal": J, "producer": P1.hex(), "last_ack": 5, "begin": -1}],
    }


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("offsets"), r"checkpoint lacks key\(s\) \['offsets'\]"),
        (lambda d: d.update(extra=1), r"checkpoint has unknown key\(s\) \['extra'\]"),
        (lambda d: d.update(offsets=[]), "checkpoint.offsets is a list"),
        (
            lambda d: d["offsets"].update({J: -1}),
            r"checkpoint.offsets\['a/journal'\] -1 is not an integer offset",
        ),
        (lambda d: d["offsets"].update({J: "10"}), r"checkpoint.offsets\['a/journal'\] '10'"),
        (lambda d: d["offsets"].update({"": 1}), "checkpoint.offsets key '' is not"),
        (lambda d: d.update(producers={}), "checkpoint.producers is a dict, expected a list"),
        (lambda d: d["producers"].append(7), r"checkpoint.producers\[1\] is a int"),
        (lambda d: d["producers"][0].pop("begin"), r"checkpoint.producers\[0\] lacks key\(s\) \['begin'\]"),
        (
            lambda d: d["producers"][0].update(producer="01a1"),
            r"checkpoint.producers\[0\].producer '01a1' is not 12 hex",
        ),
        (lambda d: d["producers"][0].update(producer="zz" * 6), r"checkpoint.producers\[0\].producer 'zzzz"),
        (lambda d: d["producers"][0].update(producer=7), r"checkpoint.producers\[0\].producer 7"),
        (lambda d: d["producers"][0].update(last_ack=-1), r"checkpoint.producers\[0\].last_ack -1"),
        (lambda d: d["producers"][0].update(last_ack=True), r"checkpoint.producers\[0\].last_ack True"),
        (lambda d: d["producers"][0].update(last_ack=1 << 64), r"checkpoint.producers\[0\].last_ack 1844"),
        (lambda d: d["producers"][0].update(begin=-2), r"checkpoint.producers\[0\].begin -2"),
        (lambda d: d["producers"][0].update(journal=""), r"checkpoint.producers\[0\].journal ''"),
        (
            lambda d: d["producers"].append(dict(d["producers"][0])),
            "lists producer 01a1a1a1a1a1 of journal 'a/journal' twice",
        ),
    ],
)
def test_checkpoint_from_dict_names_the_bad_field(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = _good()
    assert Checkpoint.from_dict(data).to_dict() == data
    mutate(data)
    with pytest.raises(ValidationError, match=message):
        Checkpoint.from_dict(data)


def test_constructors_reject_bad_values() -> None:
    with pytest.raises(ValidationError, match="producer b'ab' of journal 'a/journal' is not 6 bytes"):
        ProducerState(J, b"ab", 0, -1)
    with pytest.raises(ValidationError, match="begin -5"):
        ProducerState(J, P1, 0, -5)
    with pytest.raises(ValidationError, match="ring_size 0"):
        Sequencer(ring_size=0)
    with pytest.raises(ValidationError, match="twice"):
        Sequencer(states=[ProducerState(J, P1, 0, -1), ProducerState(J, P1, 9, -1)])
    with pytest.raises(ValidationError, match="is not a ProducerState"):
        Sequencer(states=[{"journal": J}])  # type: ignore[list-item]
