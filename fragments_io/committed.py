"""The commit decision message by message: which rows ReadCommitted would deliver, by the real Sequencer.

CommitTracker feeds one journal's (or one producer's) metadata rows, in offset order, to a
Sequencer and records the row ids it dequeues (ACKs excluded). Replays are served from the rows
retained since the oldest open transaction, so no fragment is read twice. The data source decides
with fragments_io.decide.Decider (the same decision, a table at a time in numpy); CommitTracker and
`committed_reference` are what it is tested against. `decide_group` is read_committed's decision
under groupBy(journal, producer), by a Decider.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gazette.message.checkpoint import Checkpoint
from gazette.message.envelope import Envelope
from gazette.message.sequencer import RING_SIZE_DEFAULT, Sequencer
from gazette.message.sequencing import drive

DECISION_SCHEMA = "journal string, begin long"


History = Callable[[int, int], list[Envelope]]


def _ints(values: Iterable[int] | np.ndarray) -> list[int]:
    """Plain Python ints (numpy scalars make the per-row loop several times slower)."""
    return values.tolist() if isinstance(values, np.ndarray) else [int(v) for v in values]


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
        begins: Iterable[int] | np.ndarray,
        ends: Iterable[int] | np.ndarray,
        producers: Iterable[str | None] | pa.Array | pa.ChunkedArray,
        clocks: Iterable[int] | np.ndarray,
        flags: Iterable[int] | np.ndarray,
    ) -> None:
        """Queues rows with ids first_id, first_id + 1, ... (producer: 12 hex chars or None; an
        Arrow string column of them is converted in bulk)."""
        out = self.committed.append
        # One Python loop per row is the floor here (the Sequencer is per message): everything
        # else is converted to plain lists up front, which iterate far faster than numpy arrays.
        pids = self._producer_ids(producers)
        rows = zip(_ints(begins), _ints(ends), pids, _ints(clocks), _ints(flags), strict=True)
        for done in drive(self.sequencer, self._retain(first_id, rows), self._replay, skip_acks=True):
            out(done.message)

    def _retain(self, rid: int, rows: Iterator[tuple[int, int, bytes, int, int]]) -> Iterator[Envelope]:
        """Envelopes of `rows` (their ids from `rid` on), each retained as the Sequencer takes it."""
        journal = self.journal
        keep = self._retained.append
        keep_begin = self._retained_begins.append
        for begin, end, pid, clock, flag in rows:
            env = Envelope(journal, begin, end, rid, None, pid, clock, flag)
            keep(env)
            keep_begin(begin)
            rid += 1
            yield env

    def _replay(self, journal: str, lo: int, hi: int) -> list[Envelope]:
        """The retained rows of [lo, hi), after `history`'s below the checkpoint's offset."""
        retained_begins = self._retained_begins
        i = bisect.bisect_left(retained_begins, lo)
        j = bisect.bisect_left(retained_begins, hi)
        if self._history is not None and lo < self._base:
            return self._history(lo, min(hi, self._base)) + self._retained[i:j]
        return self._retained[i:j]

    def _producer_ids(self, producers: Iterable[str | None] | pa.Array | pa.ChunkedArray) -> list[bytes]:
        """Producer IDs as bytes (b"": none), each distinct hex string converted once."""
        cache = self._producers
        if isinstance(producers, pa.Array | pa.ChunkedArray):
            # A journal has few producers: decode the dictionary, then pick per row with numpy.
            encoded = pc.dictionary_encode(producers)
            if isinstance(encoded, pa.ChunkedArray):
                encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
            ids = [self._producer_id(p) for p in encoded.dictionary.to_pylist()]
            choices = np.empty(len(ids) + 1, dtype=object)
            choices[: len(ids)] = ids
            choices[len(ids)] = b""  # index -1: null, no UUID
            picks = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
            return list(choices[picks])
        out = []
        for producer in producers:
            pid = cache.get(producer) if producer else b""
            out.append(pid if pid is not None else self._producer_id(producer))
        return out

    def _producer_id(self, producer: str | None) -> bytes:
        if not producer:
            return b""
        pid = self._producers.get(producer)
        if pid is None:
            pid = self._producers[producer] = bytes.fromhex(producer)
        return pid

    def open_horizon(self) -> int | None:
        """Offset of the first message of the oldest open transaction (None: none is open). Rows
        before it are decided for good; retained rows before it are released."""
        begins = [s.begin for s in self.sequencer.checkpoint().producers if s.begin >= 0]
        horizon = min(begins) if begins else None
        cut = (
            len(self._retained_begins)
            if horizon is None
            else bisect.bisect_left(self._retained_begins, horizon)
        )
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
    """applyInPandas over groupBy(journal, producer): the (journal, begin) of committed rows,
    decided in bulk by a Decider (what a Sequencer over the group's rows delivers)."""
    from fragments_io.decide import Decider

    if pdf.empty:
        return pd.DataFrame({"journal": pd.Series([], dtype=object), "begin": pd.Series([], dtype="int64")})
    pdf = pdf.sort_values("begin", kind="stable")
    journal = str(pdf["journal"].iloc[0])
    decider = Decider(journal)
    begins = pdf["begin"].to_numpy(np.int64)
    decider.add(
        0,
        begins,
        None,
        pa.Array.from_pandas(pdf["producer"].astype(object), type=pa.string()),  # NaN: no UUID
        pdf["clock"].to_numpy(np.int64),
        pdf["flags"].to_numpy(np.int32),
    )
    keep = decider.take_committed(0, len(begins))
    return pd.DataFrame({"journal": journal, "begin": begins[keep]})


def committed_reference(envelopes: Iterable[Envelope]) -> Iterator[Envelope]:
    """ReadCommitted's decision over decoded envelopes (any journals, each in offset order), with
    replays served from the envelopes themselves: the oracle the tests compare against."""
    envs = list(envelopes)
    by_journal: dict[str, list[Envelope]] = {}
    for e in envs:
        by_journal.setdefault(e.journal, []).append(e)

    def replay(journal: str, lo: int, hi: int) -> list[Envelope]:
        return [r for r in by_journal[journal] if lo <= r.begin and r.end <= hi]

    yield from drive(Sequencer(), envs, replay, skip_acks=True)
