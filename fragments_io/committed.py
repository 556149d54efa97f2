"""The commit decision: which rows ReadCommitted would deliver, decided by the real Sequencer.

CommitTracker feeds one journal's (or one producer's) metadata rows, in offset order, to a
Sequencer and records the row ids it dequeues (ACKs excluded). Replays are served from the rows
retained since the oldest open transaction, so no fragment is read twice. It backs both shapes:
whole journals inside the data source, and `decide_group` under groupBy(journal, producer).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from gazette.message.checkpoint import Checkpoint
from gazette.message.envelope import Envelope
from gazette.message.sequencer import RING_SIZE_DEFAULT, QueueOutcome, Sequencer
from gazette.message.uuid import Flags

_ACK = int(Flags.ACK_TXN)
_REPLAY = QueueOutcome.ACK_COMMIT_REPLAY
_COMMITS = frozenset(
    {QueueOutcome.OUTSIDE_COMMIT, QueueOutcome.ACK_EMPTY, QueueOutcome.ACK_COMMIT_RING, _REPLAY}
)
DECISION_SCHEMA = "journal string, begin long"


History = Callable[[int, int], list[Envelope]]


class CommitTracker:
    """Runs a Sequencer over rows of one journal; `committed` collects the ids of delivered rows.

    With `checkpoint`, the Sequencer resumes from it and rows start at its read-through offset of
    the journal; a replay reaching below that offset gets those envelopes from `history(lo, hi)`.
    """

    def __init__(
        self,
        journal: str,
        ring_size: int = RING_SIZE_DEFAULT,
        checkpoint: Checkpoint | None = None,
        history: History | None = None,
    ) -> None:
        self.journal = journal
        if checkpoint is None:
            self.sequencer = Sequencer(ring_size=ring_size)
            self._base = 0
        else:
            self.sequencer = Sequencer.from_checkpoint(checkpoint, ring_size)
            self._base = checkpoint.offsets.get(journal, 0)
        self._history = history
        self._retained: list[Envelope] = []  # rows since the oldest open span (replay source)
        self._retained_begins: list[int] = []
        self._producers: dict[str, bytes] = {}
        self.committed: list[int] = []

    def add(
        self,
        first_id: int,
        begins: Iterable[int],
        ends: Iterable[int],
        producers: Iterable[str | None],
        clocks: Iterable[int],
        flags: Iterable[int],
    ) -> None:
        """Queues rows with ids first_id, first_id + 1, ... (producer: 12 hex chars or None)."""
        seq = self.sequencer
        journal = self.journal
        cache = self._producers
        retained = self._retained
        retained_begins = self._retained_begins
        out = self.committed
        rid = first_id
        for begin, end, producer, clock, flag in zip(begins, ends, producers, clocks, flags, strict=True):
            if producer:
                pid = cache.get(producer)
                if pid is None:
                    pid = cache[producer] = bytes.fromhex(producer)
            else:
                pid = b""
            env = Envelope(journal, int(begin), int(end), rid, None, pid, int(clock), int(flag))
            retained.append(env)
            retained_begins.append(env.begin)
            rid += 1
            outcome = seq.queue(env)
            if outcome not in _COMMITS:
                continue
            if outcome is _REPLAY:
                _, lo, hi = seq.replay_range()
                i = bisect.bisect_left(retained_begins, lo)
                j = bisect.bisect_left(retained_begins, hi)
                if self._history is not None and lo < self._base:
                    seq.start_replay(self._history(lo, min(hi, self._base)) + retained[i:j])
                else:
                    seq.start_replay(retained[i:j])
            while (done := seq.step()) is not None:
                if done.flags != _ACK:
                    out.append(done.message)

    def open_horizon(self) -> int | None:
        """Offset of the first message of the oldest open transaction (None: none is open). Rows
        before it are decided for good; retained rows before it are released."""
        begins = [s.begin for s in self.sequencer.checkpoint().producers if s.begin >= 0]
        horizon = min(begins) if begins else None
        cut = len(self._retained_begins) if horizon is None else bisect.bisect_left(self._retained_begins, horizon)
        if cut:
            del self._retained[:cut]
            del self._retained_begins[:cut]
        return horizon

    def take_committed(self, first_id: int, count: int) -> np.ndarray:
        """A boolean mask of rows [first_id, first_id + count) committed so far; they are removed."""
        mask = np.zeros(count, dtype=bool)
        if not self.committed:
            return mask
        ids = np.asarray(self.committed, dtype=np.int64)
        inside = (ids >= first_id) & (ids < first_id + count)
        mask[ids[inside] - first_id] = True
        self.committed = ids[~inside].tolist()
        return mask


def decide_group(pdf: pd.DataFrame) -> pd.DataFrame:
    """applyInPandas over groupBy(journal, producer): the (journal, begin) of committed rows."""
    if pdf.empty:
        return pd.DataFrame({"journal": pd.Series([], dtype=object), "begin": pd.Series([], dtype="int64")})
    pdf = pdf.sort_values("begin", kind="stable")
    journal = str(pdf["journal"].iloc[0])
    tracker = CommitTracker(journal)
    producers = [p if isinstance(p, str) else None for p in pdf["producer"].tolist()]  # NaN: no UUID
    tracker.add(
        0,
        pdf["begin"].tolist(),
        pdf["end"].tolist(),
        producers,
        pdf["clock"].tolist(),
        pdf["flags"].tolist(),
    )
    begins = pdf["begin"].to_numpy()
    keep = np.asarray(sorted(tracker.committed), dtype=np.int64)
    return pd.DataFrame({"journal": journal, "begin": begins[keep] if len(keep) else np.zeros(0, np.int64)})


def committed_reference(envelopes: Iterable[Envelope]) -> Iterator[Envelope]:
    """ReadCommitted's decision over decoded envelopes (any journals, each in offset order), with
    replays served from the envelopes themselves: the oracle the tests compare against."""
    envs = list(envelopes)
    by_journal: dict[str, list[Envelope]] = {}
    for e in envs:
        by_journal.setdefault(e.journal, []).append(e)
    seq = Sequencer()
    for e in envs:
        outcome = seq.queue(e)
        if outcome not in _COMMITS:
            continue
        if outcome is _REPLAY:
            journal, lo, hi = seq.replay_range()
            seq.start_replay([r for r in by_journal[journal] if lo <= r.begin and r.end <= hi])
        while (done := seq.step()) is not None:
            if done.flags != _ACK:
                yield done
