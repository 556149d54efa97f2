"""The sequencing driver (gazette.message.sequencing) against the loops it replaced, written out here.

Histories are generated as the Sequencer's property tests generate them (small clocks, so duplicates,
clock regressions, rollbacks, ACKs at or below pending CONTINUEs, unknown flags and messages without
UUID are frequent), over two journals, with rings small enough that replays happen. Each reference
is a straightforward queue/replay/step loop over its own Sequencer, as ReadCommitted, CommitTracker,
committed_reference and the consumer's transaction loop wrote it; the driver, over another Sequencer
fed the same envelopes, must hand out the same envelopes in the same order, ask for the same replay
ranges, and leave the same checkpoint wherever the caller can take one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gazette.message.envelope import Envelope
from gazette.message.sequencer import QueueOutcome, Sequencer
from gazette.message.sequencing import COMMITS, Replay, adrive, drive, drive_spans

JOURNALS = ("seq/one", "seq/two")
PRODUCERS = [bytes.fromhex(f"0{i}00000000b{i}") for i in range(3)]
ACK = 2
RING_SIZES = st.sampled_from([1, 2, 3, 4, 8, 64])
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Checked = tuple[object, ...]  # what a run recorded: envelopes handed out, replays, checkpoints
SEEN: set[str] = set()  # situations the driven transaction loop reached (see the last test)


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


@st.composite
def histories(draw: st.DrawFn) -> list[Envelope]:
    """Envelopes of two journals, interleaved. Each step one producer publishes its next clock (any
    flags, unknown ones included), re-sends one of its messages, ACKs at (or next to) the clock of
    one, publishes near its own clock, or a message without clock or UUID is written."""
    clocks = [1000 + 7 * p for p in range(len(PRODUCERS))]
    sent: list[list[Envelope]] = [[] for _ in PRODUCERS]
    offsets = dict.fromkeys(JOURNALS, 0)
    envs: list[Envelope] = []
    for _ in range(draw(st.integers(0, 60))):
        p = draw(st.integers(0, len(PRODUCERS) - 1))
        journal = JOURNALS[draw(st.integers(0, 1))]
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
            acked = draw(st.sampled_from(sent[p][-8:]))
            clock, flags = acked.clock + draw(st.sampled_from([0, 0, -1, 1])), ACK
        elif kind == "near":
            clock = max(1, clocks[p] + draw(st.integers(-40, 20)))
        elif kind == "clockless":
            clock = 0
        else:
            producer, clock = b"", 0
        begin = offsets[journal]
        offsets[journal] = begin + 3 + draw(st.integers(0, 2))
        env = Envelope(journal, begin, offsets[journal], len(envs), None, producer, clock, flags)
        envs.append(env)
        if producer and clock:
            sent[p].append(env)
    return envs


def replayer(envs: list[Envelope], log: list[object]):  # type: ignore[no-untyped-def]
    """A replay function serving a range from `envs`, recording the request in `log`."""

    def replay(journal: str, begin: int, end: int) -> list[Envelope]:
        log.append(("replay", journal, begin, end))
        return [e for e in envs if e.journal == journal and begin <= e.begin and e.end <= end]

    return replay


def cp(seq: Sequencer) -> object:
    """A checkpoint of `seq` (it clears has_pending: taken on both sides alike)."""
    return ("checkpoint", seq.checkpoint().to_dict())


# -- the loops the driver replaced ------------------------------------------------------------------


def reference_read_committed(
    envs: list[Envelope], ring_size: int, skip_acks: bool, checkpoints: bool
) -> tuple[Checked, Sequencer]:
    """ReadCommitted's loop: each envelope yielded after the following step(); a checkpoint may be
    taken on receiving each (`checkpoints`)."""
    seq, log = Sequencer(ring_size=ring_size), []
    replay = replayer(envs, log)
    for env in envs:
        outcome = seq.queue(env)
        if outcome not in COMMITS:
            continue
        if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
            seq.start_replay(iter(replay(*seq.replay_range())))
        cur = seq.step()
        while cur is not None:
            nxt = seq.step()
            if not skip_acks or cur.flags != ACK:
                log.append(cur)
                if checkpoints:
                    log.append(cp(seq))
            cur = nxt
    return tuple(log), seq


def reference_committed(envs: list[Envelope], ring_size: int) -> tuple[Checked, Sequencer]:
    """CommitTracker's and committed_reference's loop: every committed envelope but the ACKs."""
    seq, log = Sequencer(ring_size=ring_size), []
    replay = replayer(envs, log)
    for env in envs:
        outcome = seq.queue(env)
        if outcome not in COMMITS:
            continue
        if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
            seq.start_replay(replay(*seq.replay_range()))
        while (done := seq.step()) is not None:
            if done.flags != ACK:
                log.append(done)
    return tuple(log), seq


class ReferenceTransactions:
    """The consumer transaction loop's former chunk loop (a `next` index and a `stepping` flag per
    chunk): an envelope whose delivery is deferred stops stepping, a checkpoint is taken there (the
    transaction commits), and the next call delivers it first, then steps on."""

    def __init__(self, ring_size: int, envs: list[Envelope], defer: set[int]) -> None:
        self.seq = Sequencer(ring_size=ring_size)
        self.log: list[object] = []
        self.replay = replayer(envs, self.log)
        self.defer = set(defer)  # indices of deliveries deferred (once each)
        self.deliveries = 0
        self.deferred: Envelope | None = None

    def _deliver(self, env: Envelope) -> bool:
        self.deliveries += 1
        if self.deliveries in self.defer:
            self.deferred = env
            self.log.append(cp(self.seq))
            return False
        self.log.append(env)
        return True

    def _step(self, chunk: dict[str, int]) -> bool:
        while (committed := self.seq.step()) is not None:
            if not self._deliver(committed):
                return False
        chunk["stepping"] = 0
        return True

    def run_chunk(self, envs: list[Envelope]) -> str:
        chunk = {"next": 0, "stepping": 0}
        while True:
            stop = self._sequence(chunk, envs)
            if stop == "replay":
                self.seq.start_replay(self.replay(*self.seq.replay_range()))
            elif stop == "done":
                return stop

    def _sequence(self, chunk: dict[str, int], envs: list[Envelope]) -> str:
        if self.deferred is not None:
            deferred, self.deferred = self.deferred, None
            self._deliver(deferred)  # a second deferral of one envelope is not generated
        if chunk["stepping"] and not self._step(chunk):
            return "defer"
        while chunk["next"] < len(envs):
            outcome = self.seq.queue(envs[chunk["next"]])
            chunk["next"] += 1
            if outcome not in COMMITS:
                continue
            chunk["stepping"] = 1
            if outcome is QueueOutcome.ACK_COMMIT_REPLAY:
                return "replay"
            if not self._step(chunk):
                return "defer"
        return "done"


def driven_transactions(ring_size: int, envs: list[Envelope], cuts: list[int], defer: set[int]) -> tuple:
    """The transaction loop's use of the driver: one suspended driver per chunk, a Replay request
    served by the caller (start_replay), a deferral leaving the driver unresumed."""
    seq, log = Sequencer(ring_size=ring_size), []
    replay = replayer(envs, log)
    deliveries = 0
    deferred: Envelope | None = None

    def deliver(env: Envelope) -> bool:
        nonlocal deliveries, deferred
        deliveries += 1
        if deliveries in defer:
            SEEN.add("deferred ACK" if env.flags == ACK else "deferred before the ACK")
            deferred = env
            log.append(cp(seq))
            return False
        log.append(env)
        return True

    for chunk in chunks(envs, cuts):
        steps = drive(seq, chunk)
        while True:
            if deferred is not None:
                env, deferred = deferred, None
                deliver(env)
            stop = "done"
            for item in steps:
                if isinstance(item, Replay):
                    stop = "replay"
                    break
                if not deliver(item):
                    stop = "defer"
                    break
            if stop == "replay":
                SEEN.add("replay")
                seq.start_replay(replay(*item))
            elif stop == "done":
                break
    return tuple(log), seq


def span_transactions(ring_size: int, envs: list[Envelope], cuts: list[int], defer: set[int]) -> tuple:
    """The transaction loop's use of drive_spans: each committed span delivered as one list, a
    deferral inside it rewinding the sequencer to the deferred envelope (the checkpoint is taken
    there) and the resumed driver handing out the rest first."""
    seq, log = Sequencer(ring_size=ring_size), []
    replay = replayer(envs, log)
    deliveries = 0

    def deliver(span: list[Envelope]) -> int:
        """Delivers the span's envelopes in order up to a deferral; how many were delivered."""
        nonlocal deliveries
        for i, env in enumerate(span):
            deliveries += 1
            if deliveries in defer:
                SEEN.add("span deferred at its start" if i == 0 else "span deferred inside")
                return i
            log.append(env)
        return len(span)

    for chunk in chunks(envs, cuts):
        spans = drive_spans(seq, chunk)
        for item in spans:
            if isinstance(item, Replay):
                seq.start_replay(replay(*item))
                continue
            n = deliver(item)
            if n < len(item):
                seq.rewind(n)
                log.append(cp(seq))
                # The next transaction: the resumed driver hands out the rest of the span first.
    return tuple(log), seq


def chunks(envs: list[Envelope], cuts: Iterable[int]) -> list[list[Envelope]]:
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(envs)}), len(envs)]
    return [envs[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def same_end(a: Sequencer, b: Sequencer) -> None:
    assert a.checkpoint().to_dict() == b.checkpoint().to_dict()
    assert a.queued == b.queued
    assert a.replayed == b.replayed
    assert not a.dequeuing and not b.dequeuing


# -- the driver against them ------------------------------------------------------------------------


@SETTINGS
@given(histories(), RING_SIZES, st.booleans(), st.booleans())
def test_drive_with_hold_is_read_committed(
    envs: list[Envelope], ring_size: int, skip_acks: bool, checkpoints: bool
) -> None:
    want, ref = reference_read_committed(envs, ring_size, skip_acks, checkpoints)
    seq, log = Sequencer(ring_size=ring_size), []
    replay = replayer(envs, log)
    for env in drive(seq, iter(envs), lambda *r: iter(replay(*r)), skip_acks=skip_acks, hold=True):
        log.append(env)
        if checkpoints:
            log.append(cp(seq))
    assert tuple(log) == want
    same_end(seq, ref)


@SETTINGS
@given(histories(), RING_SIZES)
def test_drive_skipping_acks_is_the_committed_filter(envs: list[Envelope], ring_size: int) -> None:
    want, ref = reference_committed(envs, ring_size)
    seq, log = Sequencer(ring_size=ring_size), []
    log.extend(drive(seq, envs, replayer(envs, log), skip_acks=True))
    assert tuple(log) == want
    same_end(seq, ref)


@SETTINGS
@given(histories(), RING_SIZES, st.lists(st.integers(0, 60), max_size=6))
def test_adrive_over_batches_is_the_async_reader(
    envs: list[Envelope], ring_size: int, cuts: list[int]
) -> None:
    want, ref = reference_read_committed(envs, ring_size, skip_acks=False, checkpoints=True)
    seq, log = Sequencer(ring_size=ring_size), []
    replay = replayer(envs, log)

    async def batches() -> AsyncIterator[list[Envelope]]:
        for chunk in chunks(envs, cuts):
            await asyncio.sleep(0)
            yield chunk

    async def areplay(journal: str, begin: int, end: int) -> list[Envelope]:
        await asyncio.sleep(0)
        return replay(journal, begin, end)

    async def run() -> None:
        async for env in adrive(seq, batches(), areplay, hold=True):
            log.append(env)
            log.append(cp(seq))

    asyncio.run(run())
    assert tuple(log) == want
    same_end(seq, ref)


TRANSACTIONS = (
    histories(),
    RING_SIZES,
    st.lists(st.integers(0, 60), max_size=6),
    st.sets(st.integers(2, 80), max_size=8),
)


def check_transactions(envs: list[Envelope], ring_size: int, cuts: list[int], defer: set[int]) -> None:
    reference = ReferenceTransactions(ring_size, envs, defer)
    for chunk in chunks(envs, cuts):
        reference.run_chunk(chunk)
    got, seq = driven_transactions(ring_size, envs, cuts, defer)
    assert got == tuple(reference.log)
    same_end(seq, reference.seq)
    if any(d - 1 in defer for d in defer):
        return  # a deferred envelope deferred again: a transaction's first delivery, which the loop refuses
    spans, span_seq = span_transactions(ring_size, envs, cuts, defer)
    assert spans == tuple(reference.log)
    same_end(span_seq, reference.seq)


@SETTINGS
@given(*TRANSACTIONS)
def test_suspended_driver_is_the_transaction_loop(
    envs: list[Envelope], ring_size: int, cuts: list[int], defer: set[int]
) -> None:
    """Replays requested and served by the caller; deferrals (never of a transaction's first
    delivery, here the first of all) suspend the driver, and the checkpoint taken then resumes at
    the deferred envelope, as before."""
    check_transactions(envs, ring_size, cuts, defer)


def test_the_transaction_comparison_reaches_replays_and_deferrals() -> None:
    SEEN.clear()
    derandomized = settings(SETTINGS, max_examples=200, derandomize=True, database=None)
    derandomized(given(*TRANSACTIONS)(check_transactions))()
    assert SEEN >= {
        "replay",
        "deferred ACK",
        "deferred before the ACK",
        "span deferred at its start",
        "span deferred inside",
    }, sorted(SEEN)


def test_a_replay_request_must_be_served_before_resuming() -> None:
    """Without a replay function the driver yields the request; resuming without start_replay is the
    Sequencer's error, as calling step() was."""
    from gazette.message.sequencer import SequencerError

    p = PRODUCERS[0]
    envs = [
        Envelope(JOURNALS[0], 0, 5, "c1", None, p, 100, 1),
        Envelope(JOURNALS[0], 5, 10, "x", None, PRODUCERS[1], 100, 0),
        Envelope(JOURNALS[0], 10, 15, "ack", None, p, 101, ACK),
    ]
    steps = drive(Sequencer(ring_size=1), envs)
    assert next(steps) == envs[1]  # OUTSIDE_TXN, evicting c1 from the ring of one
    assert next(steps) == Replay(JOURNALS[0], 0, 10)
    with pytest.raises(SequencerError, match="requires start_replay"):
        next(steps)

    seq = Sequencer(ring_size=1)
    steps = drive(seq, envs)
    assert next(steps) == envs[1]
    request = next(steps)
    assert request == Replay(JOURNALS[0], 0, 10)
    seq.start_replay(e for e in envs if request.begin <= e.begin and e.end <= request.end)
    assert [e.message for e in steps] == ["c1", "ack"]  # type: ignore[union-attr]


def test_rewind_takes_back_only_the_span_just_handed_out() -> None:
    """rewind() refuses without a span from step_all(), once the caller queued on, and a count that
    leaves nothing to give back; a valid one gives the rest back to step()."""
    from gazette.message.sequencer import SequencerError

    p = PRODUCERS[0]
    envs = [Envelope(JOURNALS[0], i * 5, i * 5 + 5, f"c{i}", None, p, 100 + i, 1) for i in range(3)]
    envs.append(Envelope(JOURNALS[0], 15, 20, "ack", None, p, 103, ACK))
    seq = Sequencer()
    with pytest.raises(SequencerError, match="without a span"):
        seq.rewind(0)
    for env in envs:
        seq.queue(env)
    span = seq.step_all()
    assert [e.message for e in span] == ["c0", "c1", "c2", "ack"]
    for bad in (4, -1, True):
        with pytest.raises(SequencerError, match="holds 4 envelopes, of which 0 to 3"):
            seq.rewind(bad)
    seq.rewind(1)
    assert seq.checkpoint().producers[0].begin == 5  # resumes at c1
    assert [e.message for e in seq.step_all()] == ["c1", "c2", "ack"]
    assert seq.step_all() == []
    assert seq.offsets == {JOURNALS[0]: 20}
    seq.queue(Envelope(JOURNALS[0], 20, 25, "x", None, PRODUCERS[1], 100, 0))
    with pytest.raises(SequencerError, match="without a span"):
        seq.rewind(0)  # the span of "x" was not handed out by step_all(); the earlier one is done
