"""Model check of the Sequencer: random producers write OUTSIDE, CONTINUE and ACK messages (with
at-least-once copies, rollbacks, ACKs below pending CONTINUEs and messages without UUID) to two
in-memory journals, while a reader queues, replays, dequeues and restarts from checkpoints.

The oracle is `Reference`, a per-(journal, producer) statement of reference 6.4's rules with no ring
and no replay; every delivered envelope must be one it committed, each once, in journal order.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from gazette.message.checkpoint import Checkpoint
from gazette.message.envelope import Envelope
from gazette.message.sequencer import QueueOutcome, Sequencer
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid

JOURNALS = ("model/one", "model/two")
PRODUCERS = tuple(bytes.fromhex(f"01000000aa{i:02x}") for i in range(3))
RING_SIZES = st.sampled_from([1, 2, 3, 4, 8, 64])
OUT, CONT, ACK = int(Flags.OUTSIDE_TXN), int(Flags.CONTINUE_TXN), int(Flags.ACK_TXN)
UNKNOWN_FLAGS = 0x4
COMMITS = {
    QueueOutcome.OUTSIDE_COMMIT,
    QueueOutcome.ACK_EMPTY,
    QueueOutcome.ACK_COMMIT_RING,
    QueueOutcome.ACK_COMMIT_REPLAY,
}
Key = tuple[str, bytes]  # (journal, producer); producer b"" collects messages without UUID
Where = tuple[str, int]  # (journal, begin offset) names one appended copy of a message

SEEN: set[str] = set()  # outcome names and "replay", reached by any run in this process


def _seen(label: str) -> None:
    event(label)
    SEEN.add(label)


@dataclasses.dataclass
class _ProducerModel:
    last_ack: int  # messages at or below this clock are acknowledged (or rolled back)
    largest: int  # largest clock of the open span, or last_ack when none is open
    open_span: list[Envelope] = dataclasses.field(default_factory=list)


class Reference:
    """Reference 6.4 stated per (journal, producer), message by message in journal order:

    * no UUID (clock 0): committed, always;
    * first message of a producer in a journal: as if its last ACK were clock - 1;
    * OUTSIDE (and unknown flags): committed iff clock > last ACK; it then becomes the last ACK and
      any open CONTINUE span is discarded;
    * CONTINUE: joins the open span iff clock > last ACK and > every clock already in the span;
    * ACK with clock <= last ACK: a rollback; the span is discarded and the last ACK becomes clock;
    * ACK above the last ACK: commits the span's messages with clock <= its own, then itself; the
      rest of the span is discarded; it becomes the last ACK.
    """

    def __init__(self) -> None:
        self.producers: dict[Key, _ProducerModel] = {}
        self.committed: dict[Key, list[Where]] = {}

    def _commit(self, key: Key, env: Envelope) -> None:
        self.committed.setdefault(key, []).append((env.journal, env.begin))

    def observe(self, env: Envelope) -> None:
        if env.clock == 0:
            self._commit((env.journal, b""), env)
            return
        key = (env.journal, env.producer)
        model = self.producers.setdefault(key, _ProducerModel(env.clock - 1, env.clock - 1))
        if env.flags == CONT:
            if env.clock > max(model.last_ack, model.largest):
                model.open_span.append(env)
                model.largest = env.clock
        elif env.flags == ACK:
            if env.clock > model.last_ack:
                for member in model.open_span:
                    if member.clock <= env.clock:
                        self._commit(key, member)
                self._commit(key, env)
            model.last_ack = model.largest = env.clock
            model.open_span = []
        elif env.clock > model.last_ack:
            self._commit(key, env)
            model.last_ack = model.largest = env.clock
            model.open_span = []

    def replays_differently(self, env: Envelope) -> bool:
        """Whether a copy of CONTINUE `env` appended now is delivered by a replay but not the ring.

        A replay (after a restore, or once the ring evicted the span's head) re-reads the span from
        its begin and de-duplicates by clock order alone (reference 6.4, Step), as Gazette does.
        Copies of the open span's own messages, or above its clocks, come out the same either way;
        a copy of a rolled-back CONTINUE whose clock lies inside the open span does not, so the
        scripts do not write those (test_sequencer.py pins that behaviour).
        """
        model = self.producers.get((env.journal, env.producer))
        if env.flags != CONT or env.clock == 0 or model is None:
            return False
        inside = model.last_ack < env.clock <= model.largest
        return inside and all(member.clock != env.clock for member in model.open_span)


class SequencerMachine(RuleBasedStateMachine):
    """Writers append to `self.journals`; a reader drives `self.seq` like ReadCommitted would."""

    @initialize(n_producers=st.integers(2, 3), ring_size=RING_SIZES)
    def setup(self, n_producers: int, ring_size: int) -> None:
        self.producers = PRODUCERS[:n_producers]
        self.clocks = {p: (1_000_000 + i) * CLOCK_TICK for i, p in enumerate(self.producers)}
        self.journals: dict[str, list[Envelope]] = {j: [] for j in JOURNALS}
        self.order: dict[Where, int] = {}  # global append order of every copy
        self.reference = Reference()
        self.seq = Sequencer(ring_size=ring_size)
        self.read_at = dict.fromkeys(JOURNALS, 0)  # next offset the reader queues, per journal
        self.dequeuing = False
        self.handed_out: Envelope | None = None  # returned by step(), processed at the next step()
        self.delivered: dict[Key, list[Where]] = {}

    # -- writers ----------------------------------------------------------------------------------

    def _append(self, journal: str, producer: bytes, clock: int, flags: int, message: Any) -> None:
        log = self.journals[journal]
        begin = log[-1].end if log else 0
        uuid = build_uuid(producer, clock, flags) if clock else None
        env = Envelope(journal, begin, begin + 7 + clock % 5, message, uuid, producer, clock, flags)
        log.append(env)
        self.order[(journal, begin)] = len(self.order)
        self.reference.observe(env)

    def _publish(self, p: int, j: int, flags: int) -> None:
        producer = self.producers[p % len(self.producers)]
        self.clocks[producer] += CLOCK_TICK
        clock = self.clocks[producer]
        self._append(JOURNALS[j], producer, clock, flags, f"{producer.hex()}@{clock}")

    @rule(p=st.integers(0, 2), j=st.integers(0, 1), unknown_flags=st.booleans())
    def publish_outside(self, p: int, j: int, unknown_flags: bool) -> None:
        self._publish(p, j, UNKNOWN_FLAGS if unknown_flags else OUT)

    @rule(p=st.integers(0, 2), j=st.integers(0, 1))
    def publish_continue(self, p: int, j: int) -> None:
        self._publish(p, j, CONT)

    @rule(p=st.integers(0, 2), j=st.integers(0, 1))
    def publish_ack(self, p: int, j: int) -> None:
        self._publish(p, j, ACK)

    @rule(j=st.integers(0, 1))
    def publish_without_uuid(self, j: int) -> None:
        self._append(JOURNALS[j], b"", 0, OUT, "no-uuid")

    @rule(pick=st.integers(0, 1 << 16))
    def append_again(self, pick: int) -> None:
        """An at-least-once retry: an already written message is appended once more."""
        copies = [
            env
            for log in self.journals.values()
            for env in log
            if not self.reference.replays_differently(env)
        ]
        if copies:
            env = copies[pick % len(copies)]
            self._append(env.journal, env.producer, env.clock, env.flags, env.message)

    @rule(p=st.integers(0, 2), j=st.integers(0, 1), pick=st.integers(0, 1 << 16))
    def resend_older_ack(self, p: int, j: int, pick: int) -> None:
        """A producer restored from an older checkpoint re-sends one of its ACK intents."""
        producer = self.producers[p % len(self.producers)]
        acks = [e for e in self.journals[JOURNALS[j]] if e.producer == producer and e.flags == ACK]
        if acks:
            env = acks[pick % len(acks)]
            self._append(env.journal, producer, env.clock, ACK, env.message)

    @rule(p=st.integers(0, 2), j=st.integers(0, 1), pick=st.integers(0, 1 << 16))
    def ack_below_pending(self, p: int, j: int, pick: int) -> None:
        """An ACK whose clock is just below one of the producer's pending CONTINUE messages."""
        producer = self.producers[p % len(self.producers)]
        model = self.reference.producers.get((JOURNALS[j], producer))
        if model is not None and model.open_span:
            below = model.open_span[pick % len(model.open_span)].clock - 1
            self._append(JOURNALS[j], producer, below, ACK, f"{producer.hex()}@{below}")

    # -- reader -----------------------------------------------------------------------------------

    def _next_unread(self) -> Envelope | None:
        heads = [
            log[self._index(j, self.read_at[j])]
            for j, log in self.journals.items()
            if self.read_at[j] < (log[-1].end if log else 0)
        ]
        return min(heads, key=lambda e: self.order[(e.journal, e.begin)], default=None)

    def _index(self, journal: str, offset: int) -> int:
        log = self.journals[journal]
        lo, hi = 0, len(log)
        while lo < hi:
            mid = (lo + hi) // 2
            if log[mid].begin < offset:
                lo = mid + 1
            else:
                hi = mid
        assert log[lo].begin == offset, f"offset {offset} of {journal} is not a message boundary"
        return lo

    def _reader_step(self) -> bool:
        """One reader action; False when there is nothing left to do."""
        if self.dequeuing:
            env = self.seq.step()  # the envelope handed out before is processed now
            if self.handed_out is not None:
                key = (self.handed_out.journal, self.handed_out.producer if self.handed_out.clock else b"")
                self.delivered.setdefault(key, []).append((self.handed_out.journal, self.handed_out.begin))
            self.handed_out = env
            self.dequeuing = env is not None
            return True
        env = self._next_unread()
        if env is None:
            return False
        outcome = self.seq.queue(env)
        self.read_at[env.journal] = env.end
        _seen(outcome.name)
        if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
            journal, begin, end = self.seq.replay_range()
            assert journal == env.journal and begin <= end <= env.begin
            log = self.journals[journal]
            replay = [e for e in log if begin <= e.begin and e.end <= end]
            assert sum(e.end - e.begin for e in replay) == end - begin  # the range is whole messages
            self.seq.start_replay(replay)
            _seen("replay")
        self.dequeuing = outcome in COMMITS
        return True

    @rule(actions=st.integers(1, 12))
    def read(self, actions: int) -> None:
        for _ in range(actions):
            if not self._reader_step():
                break

    @rule(ring_size=RING_SIZES, through_json=st.booleans())
    def restart(self, ring_size: int, through_json: bool) -> None:
        """The reader's process dies: a new Sequencer resumes from a checkpoint taken now."""
        mid_sequence = self.dequeuing
        cp = self.seq.checkpoint()
        if through_json:
            cp = Checkpoint.from_dict(json.loads(json.dumps(cp.to_dict())))
        for journal, offset in cp.offsets.items():
            assert offset <= self.read_at[journal]
        if self.handed_out is not None and self.handed_out.clock:
            # Mid-sequence: the checkpoint resumes exactly at the envelope not yet processed.
            env = self.handed_out
            (state,) = (s for s in cp.producers if (s.journal, s.producer) == (env.journal, env.producer))
            assert state.begin == env.begin and state.last_ack < env.clock
        self.seq = Sequencer.from_checkpoint(cp, ring_size=ring_size)
        self.read_at = {j: cp.offsets.get(j, 0) for j in JOURNALS}
        self.dequeuing = False
        self.handed_out = None  # handed out but not processed: it is delivered again
        event("restart mid-sequence" if mid_sequence else "restart")

    # -- checks -----------------------------------------------------------------------------------

    @invariant()
    def delivered_is_a_prefix_of_committed(self) -> None:
        if not hasattr(self, "seq"):
            return
        for key, where in self.delivered.items():
            committed = self.reference.committed.get(key, [])
            assert where == committed[: len(where)], f"{key}: delivered {where}, committed {committed}"
        for journal, offset in self.seq.offsets.items():
            assert offset <= self.read_at[journal]

    def teardown(self) -> None:
        if not hasattr(self, "seq"):
            return
        while self._reader_step():
            pass
        assert self.delivered == {k: v for k, v in self.reference.committed.items() if v}
        assert not self.seq.dequeuing
        assert self.seq.offsets == {j: log[-1].end for j, log in self.journals.items() if log}


MODEL_SETTINGS = settings(
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TestSequencerModel = SequencerMachine.TestCase
TestSequencerModel.settings = MODEL_SETTINGS


def test_every_outcome_and_replay_is_reached() -> None:
    SEEN.clear()
    run_state_machine_as_test(
        SequencerMachine,
        settings=settings(MODEL_SETTINGS, max_examples=150, derandomize=True, database=None),
    )
    assert SEEN >= {outcome.name for outcome in QueueOutcome} | {"replay"}, sorted(SEEN)


@pytest.mark.soak
@pytest.mark.timeout(1800)  # the soak profile's 5000 scripts of up to 200 steps: a few minutes
def test_sequencer_model_soak() -> None:
    """Under `make soak` (profile "soak") many more and longer scripts."""
    run_state_machine_as_test(SequencerMachine, settings=settings(MODEL_SETTINGS, stateful_step_count=200))
