"""The one loop that drives a Sequencer (docs/semantics.md#sequencer): queue each envelope, read back
what an ACK_COMMIT_REPLAY needs, and hand out what each commit releases, in `step()` order.

`drive` is that loop for every caller: ReadCommitted (sync and, through `adrive`, async), the
consumer's transaction loop, and fragments_io's CommitTracker and `committed_reference`. Given a
`replay(journal, begin, end)` function it serves replays itself; without one it yields a `Replay`
request, and the caller passes the range's envelopes to `sequencer.start_replay` before resuming
it (how the async reader and the transaction loop read a replay on the event loop).

A handed-out envelope counts as processed once the driver is resumed (its next `step()`): a
consumer that defers an envelope simply stops resuming. With `hold=True` each envelope is handed
out only after that next `step()`, so a checkpoint taken on receiving it already counts it (what
ReadCommitted promises). Imports only the Sequencer, envelopes and UUID flags; not thread-safe.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import NamedTuple, overload

from gazette.message.envelope import Envelope
from gazette.message.sequencer import QueueOutcome, Sequencer
from gazette.message.uuid import Flags

__all__ = ["COMMITS", "Replay", "adrive", "drive", "drive_spans"]

# Outcomes that leave a committed sequence to dequeue with step(); the others drop or hold.
COMMITS = frozenset(
    {
        QueueOutcome.OUTSIDE_COMMIT,
        QueueOutcome.ACK_EMPTY,
        QueueOutcome.ACK_COMMIT_RING,
        QueueOutcome.ACK_COMMIT_REPLAY,
    }
)
_REPLAY = QueueOutcome.ACK_COMMIT_REPLAY
_ACK = int(Flags.ACK_TXN)


class Replay(NamedTuple):
    """A request to read `journal`'s [begin, end) (the sequencer's `replay_range()`) and pass those
    envelopes to `sequencer.start_replay` before resuming the driver."""

    journal: str
    begin: int
    end: int


ReplayFn = Callable[[str, int, int], Iterable[Envelope]]


@overload
def drive(
    sequencer: Sequencer,
    envelopes: Iterable[Envelope],
    replay: ReplayFn,
    *,
    skip_acks: bool = False,
    hold: bool = False,
) -> Iterator[Envelope]: ...


@overload
def drive(
    sequencer: Sequencer,
    envelopes: Iterable[Envelope],
    replay: None = None,
    *,
    skip_acks: bool = False,
    hold: bool = False,
) -> Iterator[Envelope | Replay]: ...


def drive(
    sequencer: Sequencer,
    envelopes: Iterable[Envelope],
    replay: ReplayFn | None = None,
    *,
    skip_acks: bool = False,
    hold: bool = False,
) -> Iterator[Envelope | Replay]:
    """Queues `envelopes` (each journal's in order) and yields every committed one, each commit's
    ACK last (left out with `skip_acks`). An ACK_COMMIT_REPLAY is served by `replay(journal,
    begin, end)`, or, without `replay`, yielded as a `Replay` request (see the module)."""
    queue, step = sequencer.queue, sequencer.step
    for env in envelopes:
        outcome = queue(env)
        if outcome not in COMMITS:
            continue
        if outcome is _REPLAY:
            request = Replay(*sequencer.replay_range())
            if replay is None:
                yield request  # the caller calls start_replay() before resuming
            else:
                sequencer.start_replay(replay(*request))
        if hold:
            cur = step()
            while cur is not None:
                nxt = step()  # marks `cur` processed before it is handed out
                if not skip_acks or cur.flags != _ACK:
                    yield cur
                cur = nxt
        else:
            while (cur := step()) is not None:
                if not skip_acks or cur.flags != _ACK:
                    yield cur


def drive_spans(sequencer: Sequencer, envelopes: Iterable[Envelope]) -> Iterator[list[Envelope] | Replay]:
    """`drive` handing out each commit's envelopes together: one list per committed sequence (its
    ACK last, `Sequencer.step_all`), and a `Replay` request as `drive` without `replay` yields it.

    Resuming the driver counts the whole list processed. A caller that processed only the first n
    calls `sequencer.rewind(n)` and stops resuming (as a deferral stops `drive`): a checkpoint then
    resumes at the first unprocessed envelope, and the resumed driver hands out the rest first. The
    consumer's transaction loop uses it to consume whole spans without a generator step per message.
    """
    queue, step_all = sequencer.queue, sequencer.step_all
    for env in envelopes:
        outcome = queue(env)
        if outcome not in COMMITS:
            continue
        if outcome is _REPLAY:
            yield Replay(*sequencer.replay_range())  # the caller calls start_replay() before resuming
        while span := step_all():  # after a rewind(), the rest of the span
            yield span


async def adrive(
    sequencer: Sequencer,
    batches: AsyncIterable[Iterable[Envelope]],
    replay: Callable[[str, int, int], Awaitable[Iterable[Envelope]]],
    *,
    skip_acks: bool = False,
    hold: bool = False,
) -> AsyncIterator[Envelope]:
    """`drive` over batches of envelopes read asynchronously, with an async `replay`."""
    async for batch in batches:
        for item in drive(sequencer, batch, skip_acks=skip_acks, hold=hold):
            if isinstance(item, Replay):
                sequencer.start_replay(await replay(*item))
            else:
                yield item
