"""Sequencer: turns read-uncommitted envelopes into read-committed ones, exactly once
(docs/semantics.md#sequencer).

Per (journal, producer) it tracks the last acknowledged clock and the open CONTINUE span; a fixed
ring of recent envelopes usually holds a span when its ACK arrives, else the caller replays it.
Invariant: read-through offsets step past an ACK only once its whole sequence has been dequeued.
Imports only envelopes, UUID flags, checkpoints and protocol errors; not thread-safe.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, cast

from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.message.envelope import Envelope
from gazette.message.uuid import Flags
from gazette.protocol.errors import StateError, ValidationError

__all__ = [
    "Checkpoint",
    "ProducerState",
    "QueueOutcome",
    "Sequencer",
    "SequencerError",
    "prune_horizon_clock",
]

log = logging.getLogger(__name__)

RING_SIZE_DEFAULT = 8192  # envelopes; consumers' default ring (docs/semantics.md#read-iterators)
PRUNE_HORIZON_24H_S = 24 * 3600  # the consumer's producer-pruning horizon


def prune_horizon_clock(seconds: float) -> int:
    """A pruning horizon in clock units (100 ns << 4), as `Sequencer.checkpoint` takes it."""
    return int(seconds * 10_000_000) << 4


class SequencerError(StateError):
    """The Sequencer was driven against its rules, or a replay did not match the requested range."""


class QueueOutcome(enum.IntEnum):
    """What `Sequencer.queue` decided for one envelope (Gazette's `QueueOutcome`, names in brackets).

    OUTSIDE_ALREADY_ACKED [QueueOutsideAlreadyAcked]: OUTSIDE_TXN duplicate; dropped.
    OUTSIDE_COMMIT [QueueOutsideCommit]: OUTSIDE_TXN committed; dequeue it with `step()`.
    CONTINUE_ALREADY_ACKED [QueueContinueAlreadyAcked]: CONTINUE_TXN at or below the last ACK; dropped.
    CONTINUE_TXN_CLOCK_LARGER [QueueContinueTxnClockLarger]: CONTINUE_TXN at or below the open
        span's largest clock (a duplicate); dropped.
    CONTINUE_BEGIN_SPAN [QueueContinueBeginSpan]: CONTINUE_TXN opening a span; held.
    CONTINUE_EXTEND_SPAN [QueueContinueExtendSpan]: CONTINUE_TXN extending the open span; held.
    ACK_ROLLBACK [QueueAckRollback]: ACK_TXN at or below the last ACK; the open span is discarded.
    ACK_EMPTY [QueueAckEmpty]: ACK_TXN with no open span; dequeue (just the ACK) with `step()`.
    ACK_COMMIT_RING [QueueAckCommitRing]: ACK_TXN whose span is all in the ring; dequeue with `step()`.
    ACK_COMMIT_REPLAY [QueueAckCommitReplay]: ACK_TXN whose span is partly outside the ring; call
        `replay_range()`, `start_replay(...)`, then dequeue with `step()`.
    """

    OUTSIDE_ALREADY_ACKED = 0
    OUTSIDE_COMMIT = 1
    CONTINUE_ALREADY_ACKED = 2
    CONTINUE_TXN_CLOCK_LARGER = 3
    CONTINUE_BEGIN_SPAN = 4
    CONTINUE_EXTEND_SPAN = 5
    ACK_ROLLBACK = 6
    ACK_EMPTY = 7
    ACK_COMMIT_RING = 8
    ACK_COMMIT_REPLAY = 9


_OUTCOMES = tuple(QueueOutcome)
_N_OUTCOMES = len(_OUTCOMES)
# Statistics slots: flag row * _N_OUTCOMES + outcome. Unknown flags count in their own row.
_FLAG_NAMES = ("OUTSIDE_TXN", "CONTINUE_TXN", "ACK_TXN", "UNKNOWN")
_ROW_OUTSIDE, _ROW_CONTINUE, _ROW_ACK, _ROW_UNKNOWN = (i * _N_OUTCOMES for i in range(4))

_OUTSIDE = int(Flags.OUTSIDE_TXN)
_CONTINUE = int(Flags.CONTINUE_TXN)
_ACK = int(Flags.ACK_TXN)

# Module-level aliases keep the hot path to plain global lookups.
_O_OUTSIDE_ACKED = QueueOutcome.OUTSIDE_ALREADY_ACKED
_O_OUTSIDE_COMMIT = QueueOutcome.OUTSIDE_COMMIT
_O_CONTINUE_ACKED = QueueOutcome.CONTINUE_ALREADY_ACKED
_O_CONTINUE_LARGER = QueueOutcome.CONTINUE_TXN_CLOCK_LARGER
_O_BEGIN = QueueOutcome.CONTINUE_BEGIN_SPAN
_O_EXTEND = QueueOutcome.CONTINUE_EXTEND_SPAN
_O_ROLLBACK = QueueOutcome.ACK_ROLLBACK
_O_EMPTY = QueueOutcome.ACK_EMPTY
_O_RING = QueueOutcome.ACK_COMMIT_RING
_O_REPLAY = QueueOutcome.ACK_COMMIT_REPLAY


class _Partial:
    """Gazette's partialSeq: one producer's state in one journal (docs/semantics.md#sequencer)."""

    __slots__ = (
        "journal",
        "producer",
        "min_clock",
        "max_clock",
        "begin",
        "ring_start",
        "ring_stop",
        "counts",
    )

    def __init__(self, journal: str, producer: bytes, clock: int, begin: int, counts: list[int]) -> None:
        self.journal = journal
        self.producer = producer
        self.min_clock = clock  # exclusive lower bound: the last ACKed clock
        self.max_clock = clock  # inclusive upper bound of the open span
        self.begin = begin  # offset of the open span's first message, or -1
        self.ring_start = -1  # first and last ring slots of the span's list, or -1
        self.ring_stop = -1
        self.counts = counts  # the journal's statistics row block


class _Span(NamedTuple):
    """What `Sequencer.step_all()` handed out and what `rewind()` restores: the committing partial's
    min clock before the span, its commit clock, its journal's offset and sequence end before the
    span finished, and whether it was pending."""

    envelopes: list[Envelope]
    partial: _Partial
    min_clock: int
    max_clock: int
    offset: int | None
    emit_end: int
    pending: bool


class Sequencer:
    """Sequences read-uncommitted envelopes of any number of journals into committed ones.

    Feed every envelope, in journal order, to `queue()`. After a commit outcome call `step()` until
    it returns None; each call returns the next committed envelope, ending with the committing
    message itself (the ACK, which applications ignore). The envelope returned by `step()` counts as
    processed once `step()` is called again: a checkpoint taken in between resumes at it.
    """

    def __init__(
        self,
        offsets: Mapping[str, int] | None = None,
        states: Iterable[ProducerState] = (),
        ring_size: int = RING_SIZE_DEFAULT,
    ) -> None:
        if isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size < 1:
            raise ValidationError(f"sequencer ring_size {ring_size!r} is not a positive integer")
        self._offsets: dict[str, int] = dict(offsets or {})
        self._counts_by_journal: dict[str, list[int]] = {}
        self._partials: dict[tuple[str, bytes], _Partial] = {}
        for state in states:
            if not isinstance(state, ProducerState):
                raise ValidationError(f"sequencer state {state!r} is not a ProducerState")
            key = (state.journal, state.producer)
            if key in self._partials:
                raise ValidationError(
                    f"sequencer states list producer {state.producer.hex()} of journal {state.journal!r} twice"
                )
            self._partials[key] = _Partial(
                state.journal,
                state.producer,
                state.last_ack,
                state.begin,
                self._journal_counts(state.journal),
            )
        self._pending: set[_Partial] = set()
        self._ring_size = ring_size
        self._ring_env: list[Envelope | None] = [None] * ring_size
        self._ring_next: list[int] = [-1] * ring_size
        self._ring_owner: list[_Partial | None] = [None] * ring_size
        self._head = 0
        self._emit: _Partial | None = None
        self._emit_end = 0  # end offset of the message that committed `_emit`
        self._dequeued: Envelope | None = None
        self._dequeued_clock = 0
        self._replay: Iterator[Envelope] | None = None
        # step_all(): the span it handed out and what rewind() restores (see _Span); then rewind()'s
        # envelopes not yet handed out again, which step() serves before anything else.
        self._span: _Span | None = None
        self._leftover: Iterator[Envelope] | None = None
        self._replayed: collections.Counter[str] = collections.Counter()
        self._warned_flags: set[tuple[str, bytes]] = set()

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, ring_size: int = RING_SIZE_DEFAULT) -> Sequencer:
        """A Sequencer resuming where `checkpoint` was taken: read each journal from `offsets`."""
        return cls(checkpoint.offsets, checkpoint.producers, ring_size)

    def _journal_counts(self, journal: str) -> list[int]:
        counts = self._counts_by_journal.get(journal)
        if counts is None:
            counts = self._counts_by_journal[journal] = [0] * (len(_FLAG_NAMES) * _N_OUTCOMES)
        return counts

    # -- queue ------------------------------------------------------------------------------------

    def queue(self, env: Envelope) -> QueueOutcome:
        """Applies the next read-uncommitted envelope (of any journal, in that journal's order).

        Classifies it by its clock and flags against its producer's state and applies that outcome
        (one method each, below): a duplicate is dropped, a CONTINUE_TXN joins the open span, an
        ACK_TXN rolls the span back or commits it, and any other message commits on its own."""
        if self._emit is not None:
            raise SequencerError(
                f"queue({env.journal}@{env.begin}) called while a committed sequence of journal "
                f"{self._emit.journal!r} remains to dequeue: call step() until it returns None first"
            )
        self._span = None  # a span step_all() handed out is processed once the caller queues on
        head = self._head  # evict the ring slot at head (step 0 in docs/semantics.md#sequencer)
        owner = self._ring_owner[head]
        if owner is not None:
            self._evict(owner, head)
        clock = env.clock
        if clock == 0:
            return self._commit_clockless(env)
        key = (env.journal, env.producer)
        partial = self._partials.get(key)
        if partial is None:
            partial = _Partial(env.journal, env.producer, clock - 1, -1, self._journal_counts(env.journal))
            self._partials[key] = partial
        flags = env.flags
        if flags == _CONTINUE:
            if clock <= partial.min_clock:
                return self._drop(env, partial, _ROW_CONTINUE, _O_CONTINUE_ACKED)
            if clock <= partial.max_clock:
                return self._drop(env, partial, _ROW_CONTINUE, _O_CONTINUE_LARGER)
            return self._hold(env, partial)
        if flags == _ACK:
            if clock <= partial.min_clock:
                return self._rollback(env, partial)
            if partial.begin == -1:
                return self._commit_ack_empty(env, partial)
            return self._commit_span(env, partial)
        row = _ROW_OUTSIDE if flags == _OUTSIDE else self._unknown_flags(env, partial, key)
        if clock <= partial.min_clock:
            return self._drop(env, partial, row, _O_OUTSIDE_ACKED)
        return self._commit_outside(env, partial, row)

    def _evict(self, owner: _Partial, head: int) -> None:
        """Frees the ring slot at head, held by `owner`, for the next envelope."""
        if owner.ring_start == head:
            nxt = self._ring_next[head]
            if nxt == -1:
                owner.ring_start = owner.ring_stop = -1
            else:
                owner.ring_start = nxt
        self._ring_owner[head] = None
        self._ring_env[head] = None

    # The outcomes of queue(), one method each. Only a commit leaves a sequence for step() to dequeue;
    # the others advance the journal's read-through offset past `env` at once.

    def _drop(self, env: Envelope, partial: _Partial, row: int, outcome: QueueOutcome) -> QueueOutcome:
        """A duplicate (OUTSIDE_ALREADY_ACKED, CONTINUE_ALREADY_ACKED, CONTINUE_TXN_CLOCK_LARGER):
        at or below what was acknowledged, or already in the open span."""
        self._offsets[env.journal] = env.end
        partial.counts[row + outcome] += 1
        return outcome

    def _hold(self, env: Envelope, partial: _Partial) -> QueueOutcome:
        """CONTINUE_TXN above the open span (CONTINUE_BEGIN_SPAN, CONTINUE_EXTEND_SPAN): pending in
        the ring until its ACK."""
        if partial.begin == -1:
            outcome = _O_BEGIN
            partial.begin = env.begin
            self._pending.add(partial)
        else:
            outcome = _O_EXTEND
        self._add(env, partial)
        partial.max_clock = env.clock
        self._offsets[env.journal] = env.end
        partial.counts[_ROW_CONTINUE + outcome] += 1
        return outcome

    def _rollback(self, env: Envelope, partial: _Partial) -> QueueOutcome:
        """ACK_ROLLBACK: an ACK_TXN at or below the last ACK discards the open span."""
        clock = env.clock
        if clock < partial.min_clock:
            log.error(
                "ACK_TXN of producer %s in journal %s at offset %d has clock %d below the last "
                "ACK %d (an upstream shard restored an older checkpoint): loss of exactly-once "
                "semantics, falling back to at-least-once",
                partial.producer.hex(),
                env.journal,
                env.begin,
                clock,
                partial.min_clock,
            )
        partial.min_clock = partial.max_clock = clock
        partial.begin = partial.ring_start = partial.ring_stop = -1
        self._pending.discard(partial)
        self._offsets[env.journal] = env.end
        partial.counts[_ROW_ACK + _O_ROLLBACK] += 1
        return _O_ROLLBACK

    def _commit_ack_empty(self, env: Envelope, partial: _Partial) -> QueueOutcome:
        """ACK_EMPTY: an ACK_TXN above the last ACK with no open span commits just itself."""
        self._commit(env, partial, env.clock)
        partial.begin = env.begin
        partial.counts[_ROW_ACK + _O_EMPTY] += 1
        return _O_EMPTY

    def _commit_span(self, env: Envelope, partial: _Partial) -> QueueOutcome:
        """ACK_COMMIT_RING, or ACK_COMMIT_REPLAY when the span's head is no longer in the ring (the
        caller then replays `replay_range()`): an ACK_TXN above the last ACK commits the open span."""
        start = partial.ring_start
        if start != -1 and partial.begin == self._ring_env[start].begin:  # type: ignore[union-attr]
            outcome = _O_RING
        else:
            outcome = _O_REPLAY  # no part of the span is in the ring, or its head was evicted
        self._commit(env, partial, env.clock)
        partial.counts[_ROW_ACK + outcome] += 1
        return outcome

    def _unknown_flags(self, env: Envelope, partial: _Partial, key: tuple[str, bytes]) -> int:
        """The statistics row of a message with unknown UUID flags, which is treated as OUTSIDE_TXN
        (logged once per producer)."""
        if key not in self._warned_flags:
            self._warned_flags.add(key)
            log.warning(
                "message of producer %s in journal %s at offset %d has unknown UUID flags %#x; "
                "treating it (and this producer's later ones) as OUTSIDE_TXN",
                partial.producer.hex(),
                env.journal,
                env.begin,
                env.flags,
            )
        return _ROW_UNKNOWN

    def _commit_outside(self, env: Envelope, partial: _Partial, row: int) -> QueueOutcome:
        """OUTSIDE_COMMIT: an OUTSIDE_TXN message above the last ACK commits alone; an open span of
        its producer is discarded."""
        if partial.begin != -1 and partial.begin != env.begin:  # (equal: re-read after a restore)
            log.warning(
                "OUTSIDE_TXN message of producer %s in journal %s at offset %d follows its open "
                "CONTINUE_TXN span begun at %d, which is discarded (mixed committed and uncommitted "
                "publishing to one journal?)",
                partial.producer.hex(),
                env.journal,
                env.begin,
                partial.begin,
            )
        # _commit, inlined: this is the per-message hot path.
        head = self._head
        self._ring_env[head] = env
        self._ring_next[head] = -1
        self._ring_owner[head] = partial
        if partial.ring_stop != -1:
            self._ring_next[partial.ring_stop] = head
        partial.ring_start = partial.ring_stop = head  # the span is this message alone (clobbering)
        head += 1
        self._head = 0 if head == self._ring_size else head
        partial.begin = env.begin
        partial.max_clock = env.clock
        self._emit = partial
        self._emit_end = env.end
        partial.counts[row + _O_OUTSIDE_COMMIT] += 1
        return _O_OUTSIDE_COMMIT

    def _commit_clockless(self, env: Envelope) -> QueueOutcome:
        """OUTSIDE_COMMIT of a message without UUID (clock 0): a throwaway partial, committed as
        OUTSIDE_TXN with clock 1, never deduplicated."""
        throwaway = _Partial(env.journal, env.producer, 0, -1, self._journal_counts(env.journal))
        throwaway.counts[_ROW_OUTSIDE + _O_OUTSIDE_COMMIT] += 1
        self._commit(env, throwaway, 1)
        throwaway.begin = env.begin
        return _O_OUTSIDE_COMMIT

    def _add(self, env: Envelope, partial: _Partial) -> None:
        head = self._head
        self._ring_env[head] = env
        self._ring_next[head] = -1
        self._ring_owner[head] = partial
        if partial.ring_stop == -1:
            partial.ring_start = head
        else:
            self._ring_next[partial.ring_stop] = head
        partial.ring_stop = head
        head += 1
        self._head = 0 if head == self._ring_size else head

    def _commit(self, env: Envelope, partial: _Partial, clock: int) -> None:
        # Offsets are NOT advanced here: only once the whole sequence has been dequeued.
        self._add(env, partial)
        partial.max_clock = clock  # commit through clock; larger-clock CONTINUEs are rolled back
        self._emit = partial
        self._emit_end = env.end

    # -- dequeue ----------------------------------------------------------------------------------

    def replay_range(self) -> tuple[str, int, int]:
        """(journal, begin, end) that `start_replay` must cover after ACK_COMMIT_REPLAY: from the
        span's begin to the first of its messages still in the ring (at least the ACK itself)."""
        emit = self._emit
        if emit is None:
            raise SequencerError("replay_range() called with no committed sequence to dequeue")
        first = self._ring_env[emit.ring_start]
        assert first is not None  # the committing message was just added
        return emit.journal, emit.begin, first.begin

    def start_replay(self, envelopes: Iterable[Envelope]) -> None:
        """Supplies the read-uncommitted envelopes of `replay_range()`, in journal order."""
        if self._emit is None:
            raise SequencerError("start_replay() called with no committed sequence to dequeue")
        self._replay = iter(envelopes)

    def step(self) -> Envelope | None:
        """The next committed envelope of the current sequence, or None once it is exhausted (or
        when nothing is to be dequeued). Raises SequencerError on a replay outside `replay_range()`."""
        emit = self._emit
        if emit is None:
            return None
        ring_env = self._ring_env
        if self._dequeued is not None:
            emit.min_clock = self._dequeued_clock  # the previous envelope is processed: durable progress
        if self._leftover is not None:  # what rewind() gave back, already sequenced: hand it out again
            env = next(self._leftover, None)
            if env is not None:
                emit.begin = env.begin
                self._dequeued = env
                self._dequeued_clock = env.clock
                return env
            self._leftover = None  # the ring holds nothing more of this sequence: finish it below
        elif (
            self._dequeued is None
            and self._replay is None
            and emit.begin != cast(Envelope, ring_env[emit.ring_start]).begin
        ):
            j, begin, end = self.replay_range()
            raise SequencerError(
                f"ACK_COMMIT_REPLAY of journal {j!r} requires start_replay() over offsets [{begin}, {end}) "
                "before step()"
            )
        while emit.ring_start != -1:
            replay = self._replay
            if replay is None:
                slot = emit.ring_start
                env = ring_env[slot]
                emit.ring_start = self._ring_next[slot]
                ring_env[slot] = self._ring_owner[slot] = None  # release it, as Gazette does
                assert env is not None
            else:
                env = next(replay, None)
                if env is None:
                    self._replay = None  # replay finished: continue from the ring
                    continue
                self._check_replayed(env, emit)
                if env.producer != emit.producer:
                    continue  # other producers' messages interleave in the replayed range
            clock = env.clock
            if clock != 0 and clock <= emit.min_clock:
                continue  # a duplicate: seen in both replay and ring, or straddling a checkpoint
            if clock > emit.max_clock:
                continue  # rolled back by an ACK with a smaller clock
            emit.begin = env.begin  # so a checkpoint taken now resumes at this envelope
            self._dequeued = env
            self._dequeued_clock = clock
            return env

        self._offsets[emit.journal] = self._emit_end
        emit.max_clock = emit.min_clock
        emit.begin = emit.ring_start = emit.ring_stop = -1
        if self._pending:
            self._pending.discard(emit)
        self._emit = None
        self._dequeued = None
        self._dequeued_clock = 0
        return None

    def step_all(self) -> list[Envelope]:
        """Every envelope `step()` would still hand out of the current sequence, as one list (the
        committing ACK last), after which the sequence is done, as when `step()` returns None: they
        all count as processed. A caller that processed only some of them calls `rewind(n)` before
        anything else; one that processed them all simply goes on (queue, step_all, checkpoint).
        An empty list when nothing is to be dequeued. Raises as `step()` does."""
        emit = self._emit
        if emit is None:
            self._span = None
            return []
        before = self._dequeued_clock if self._dequeued is not None else emit.min_clock
        span = _Span(
            [],
            emit,
            before,
            emit.max_clock,
            self._offsets.get(emit.journal),
            self._emit_end,
            emit in self._pending,
        )
        envs, step = span.envelopes, self.step
        while (env := step()) is not None:
            envs.append(env)
        self._span = span
        return envs

    def rewind(self, processed: int) -> None:
        """After `step_all()`, of whose list the caller processed only the first `processed`: makes
        the rest the current sequence again, as if `step()` had handed out just those and they had
        been processed. `step()` or `step_all()` then hands out the rest, and a checkpoint taken now
        resumes at the first of them. SequencerError if nothing can be rewound."""
        span = self._span
        if span is None or self._emit is not None:
            raise SequencerError("rewind() called without a span just handed out by step_all()")
        envs = span.envelopes
        if isinstance(processed, bool) or not isinstance(processed, int) or not 0 <= processed < len(envs):
            raise SequencerError(
                f"rewind({processed!r}): the span holds {len(envs)} envelopes, of which 0 to {len(envs) - 1} "
                "can have been processed"
            )
        emit = span.partial
        emit.min_clock = envs[processed - 1].clock if processed else span.min_clock
        emit.max_clock = span.max_clock
        emit.begin = envs[processed].begin
        if span.offset is None:
            self._offsets.pop(emit.journal, None)
        else:
            self._offsets[emit.journal] = span.offset
        if span.pending:
            self._pending.add(emit)
        self._emit, self._emit_end = emit, span.emit_end
        self._leftover = iter(envs[processed:])
        self._span = None

    def _check_replayed(self, env: Envelope, emit: _Partial) -> None:
        self._replayed[emit.journal] += 1
        first = self._ring_env[emit.ring_start]
        assert first is not None
        if env.journal != emit.journal:
            raise SequencerError(
                f"replayed envelope of journal {env.journal!r} at offset {env.begin}, "
                f"expected journal {emit.journal!r}"
            )
        if env.begin < emit.begin or env.end > first.begin:
            raise SequencerError(
                f"replayed envelope [{env.begin}, {env.end}) of journal {env.journal!r} lies outside "
                f"the replay range [{emit.begin}, {first.begin})"
            )

    @property
    def dequeued(self) -> Envelope | None:
        """The envelope last returned by `step()`, while its sequence is being dequeued."""
        return self._dequeued

    @property
    def dequeuing(self) -> bool:
        """True from a commit outcome of `queue()` until `step()` returns None."""
        return self._emit is not None

    # -- checkpoints and introspection ------------------------------------------------------------

    @property
    def offsets(self) -> dict[str, int]:
        """Read-through offsets per journal (a copy): where to resume reading after a restore."""
        return dict(self._offsets)

    def has_pending(self) -> bool:
        """True if a CONTINUE span was begun since the last checkpoint and is still open (extending
        an older span does not count): a consumer may hold its transaction open for the ACK."""
        return bool(self._pending)

    def checkpoint(self, prune_horizon: int | None = None) -> Checkpoint:
        """Offsets and producer states to restore from; clears `has_pending()`.

        With a positive `prune_horizon` (clock units, see `prune_horizon_clock`), producers whose
        max clock is older than the newest last-ACK of their journal minus the horizon are dropped.
        The producer of a sequence being dequeued is never pruned.
        """
        if prune_horizon is not None and (
            isinstance(prune_horizon, bool) or not isinstance(prune_horizon, int) or prune_horizon < 0
        ):
            raise ValidationError(f"prune_horizon {prune_horizon!r} is not None or a clock interval >= 0")
        if prune_horizon:
            newest: dict[str, int] = {}
            for (journal, _), partial in self._partials.items():
                if partial.min_clock > newest.get(journal, 0):
                    newest[journal] = partial.min_clock
            for key, partial in list(self._partials.items()):
                if partial.max_clock < newest.get(key[0], 0) - prune_horizon and partial is not self._emit:
                    del self._partials[key]
        states = [
            ProducerState(journal, producer, p.min_clock, p.begin)
            for (journal, producer), p in sorted(self._partials.items(), key=lambda kv: kv[0])
        ]
        self._pending.clear()
        return Checkpoint(dict(self._offsets), states)

    @property
    def queued(self) -> collections.Counter[tuple[str, QueueOutcome]]:
        """Envelopes queued so far, by (flag name, outcome), all journals summed."""
        total: collections.Counter[tuple[str, QueueOutcome]] = collections.Counter()
        for counts in self._counts_by_journal.values():
            total.update(_counter(counts))
        return total

    def queued_by_journal(self) -> dict[str, collections.Counter[tuple[str, QueueOutcome]]]:
        """As `queued`, per journal (Gazette's gazette_sequencer_queued{journal,flag,outcome})."""
        return {journal: _counter(counts) for journal, counts in self._counts_by_journal.items()}

    @property
    def replayed(self) -> int:
        """Envelopes read from replay iterators, all journals (gazette_sequencer_replay)."""
        return sum(self._replayed.values())

    def describe(self) -> dict[str, Any]:
        """A plain-data snapshot for notebooks and metrics (cost grows with producers and ring)."""
        producers = []
        for (journal, producer), p in sorted(self._partials.items(), key=lambda kv: kv[0]):
            producers.append(
                {
                    "journal": journal,
                    "producer": producer.hex(),
                    "min_clock": p.min_clock,
                    "max_clock": p.max_clock,
                    "begin": p.begin,
                    "ring_entries": self._list_length(p),
                    "pending": p in self._pending,
                }
            )
        return {
            "offsets": dict(self._offsets),
            "producers": producers,
            "ring": {
                "size": self._ring_size,
                "occupied": sum(owner is not None for owner in self._ring_owner),
                "head": self._head,
            },
            "dequeuing": None if self._emit is None else self._emit.journal,
            "replaying": self._replay is not None,
            "pending": len(self._pending),
            "queued": {f"{flag}/{outcome.name}": n for (flag, outcome), n in sorted(self.queued.items())},
            "replayed": dict(self._replayed),
        }

    def _list_length(self, partial: _Partial) -> int:
        n, slot = 0, partial.ring_start
        while slot != -1:
            n += 1
            slot = -1 if slot == partial.ring_stop else self._ring_next[slot]
        return n

    def __repr__(self) -> str:
        return (
            f"Sequencer(journals={len(self._offsets)}, producers={len(self._partials)}, "
            f"ring_size={self._ring_size}, dequeuing={self._emit is not None})"
        )


def _counter(counts: list[int]) -> collections.Counter[tuple[str, QueueOutcome]]:
    return collections.Counter(
        {(_FLAG_NAMES[i // _N_OUTCOMES], _OUTCOMES[i % _N_OUTCOMES]): n for i, n in enumerate(counts) if n}
    )
