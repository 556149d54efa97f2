"""The commit decision for a whole table of rows at once: what the Sequencer delivers, in numpy.

`Decider` takes one journal's rows table by table (in offset order) and decides each row as a
Sequencer (gazette.message.sequencer) fed the same envelopes, and drained after every commit, would:
the same rows delivered, the same producer states after. Per (journal, producer) the Sequencer's
state is its last ACK (`min_clock`) and the largest clock of the open span (`max_clock`); every
decision compares a clock with one of them, and both are running maxima that restart at known rows:

* min_clock restarts at every ACK (commit or rollback: it becomes the ACK's clock) and otherwise
  grows with OUTSIDE clocks (an OUTSIDE at or below it is dropped and leaves it alone). An OUTSIDE
  (or unknown flags) commits iff its clock is above it; an ACK commits iff above, else rolls back.
* max_clock restarts at every ACK and every committed OUTSIDE (at their clock) and otherwise grows
  with CONTINUE clocks; a CONTINUE joins the open span iff its clock is above it.

With rows grouped by producer (a stable sort) both are segmented cumulative maxima. A committing ACK
delivers its span's members at or below its clock, from the Sequencer's ring (a FIFO of ring_size
messages) if the span's head is still there, else by replaying the producer's rows from the span's
begin: a replay delivers a row iff its clock lies above the last one delivered and at or below the
ACK's, so a CONTINUE dropped as a clock regression inside the span can come out of a replay and not
of the ring. A row's ring position is a running count of the rows the ring takes, so the test is
vectorised too; only ACKs that need a replay (spans longer than the ring, or begun before a
checkpoint) are decided one at a time, each over its span's rows with numpy.

A span still open at a table's end carries its producer's rows since its begin to the next table
(replays across fragment boundaries); every row goes through the vectorised pass once. Ids of
delivered rows (ACKs excluded, as the data source outputs them) collect for `take_committed`.

This is the one implementation of the vectorised decision: fragments_io's data source
(fragments_io/decide.py re-exports it) and the consumer's columnar path (gazette.message.columnar)
both decide with it. It sits in the message layer, beside the Sequencer it equals, so the consumer
layer can use it without importing fragments_io.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.message.envelope import Envelope
from gazette.message.sequencer import RING_SIZE_DEFAULT
from gazette.protocol.errors import ValidationError

History = Callable[[int, int], list[Envelope]]

_OUTSIDE, _CONTINUE, _ACK = 0, 1, 2  # row kinds (flags); unknown flags are OUTSIDE, as for the Sequencer
_BEFORE_CHECKPOINT = -(1 << 62)  # ring position of a span's head read before a checkpoint: never in the ring
_OFFSET_LIMIT = 1 << 62
_EMPTY = np.zeros(0, np.int64)


_INDEX_DTYPES: dict[int, np.dtype] = {
    8: np.dtype(np.int8),
    16: np.dtype(np.int16),
    32: np.dtype(np.int32),
    64: np.dtype(np.int64),
}


def _indices(column: pa.Array) -> np.ndarray:
    """A dictionary's integer indices as int64 numpy (-1 where null), read from its buffers: pyarrow's
    to_numpy() imports pandas on first use, which costs a fresh Spark worker about 150 ms."""
    dtype = _INDEX_DTYPES[column.type.bit_width]
    n = len(column)
    if not n:
        return _EMPTY
    data = column.buffers()[1]
    values = np.frombuffer(data, dtype, count=n, offset=column.offset * dtype.itemsize).astype(np.int64)
    validity = column.buffers()[0]
    if column.null_count and validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        values[~bits[column.offset : column.offset + n].astype(bool)] = -1
    return values


def seg_cummax(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Running maximum of int64 `values` restarting at each True of `start` (start[0] must be
    True). One pass with an offset per segment when the values' range allows it, else by ranks."""
    g = np.cumsum(start, dtype=np.int64)
    lo = int(values.min())
    width = int(values.max()) - lo + 1
    if width * (int(g[-1]) + 1) < _OFFSET_LIMIT:
        offset = g * np.int64(width) - np.int64(lo)
        out = np.maximum.accumulate(values + offset)
        out -= offset
        return out
    uniq, rank = np.unique(values, return_inverse=True)
    offset = g * np.int64(len(uniq))
    return uniq[np.maximum.accumulate(rank.reshape(-1).astype(np.int64) + offset) - offset]


def replay_deliveries(clocks: np.ndarray, floor: int, ceiling: int) -> np.ndarray:
    """Which rows of a replay (then the ring), in order, the Sequencer's step() delivers: a row
    whose clock lies in (last delivered, ceiling], the last delivered starting at `floor`; a
    clockless row always (its clock 0 then is the last delivered)."""
    if not len(clocks):
        return np.zeros(0, bool)
    if (clocks != 0).all():
        x = np.where(clocks <= ceiling, clocks, floor)
        before = np.empty(len(x), np.int64)
        before[0] = floor
        np.maximum.accumulate(np.maximum(x[:-1], floor), out=before[1:])
        return (clocks <= ceiling) & (clocks > before)
    out = np.zeros(len(clocks), bool)
    last = floor
    for i, c in enumerate(clocks.tolist()):
        if c == 0 or last < c <= ceiling:
            out[i] = True
            last = c
    return out


@dataclasses.dataclass
class _Span:
    """A producer's open span: its begin, the ring position of its first member, and every row of
    the producer since its begin (ids, clocks, begins, flags; ring position, -1 for non-members)."""

    begin: int
    head: int
    parts: list[tuple[np.ndarray, ...]] = dataclasses.field(default_factory=list)

    def extend(self, *cols: np.ndarray) -> None:
        if len(cols[0]):
            self.parts.append(cols)

    def rows(self) -> tuple[np.ndarray, ...]:
        if len(self.parts) > 1:  # joined once, so a long open span is not re-joined at every use
            self.parts = [tuple(np.concatenate(c) for c in zip(*self.parts, strict=True))]
        if not self.parts:
            return _EMPTY, _EMPTY, _EMPTY, np.zeros(0, np.int32), _EMPTY
        return self.parts[0]


class Decider:
    """The Sequencer's decision over one journal's rows, one table at a time (see the module).

    With `checkpoint`, it resumes from the checkpoint's producer states of `journal` (rows then
    start at its read-through offset); a replay reaching below that offset takes those rows from
    `history(lo, hi)` (envelopes whose `message` is the row id), as CommitTracker does. With
    `collect` false no row ids are kept (for the producer states alone).
    """

    def __init__(
        self,
        journal: str,
        ring_size: int = RING_SIZE_DEFAULT,
        checkpoint: Checkpoint | None = None,
        history: History | None = None,
        collect: bool = True,
    ) -> None:
        if isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size < 1:
            raise ValidationError(f"sequencer ring_size {ring_size!r} is not a positive integer")
        self.journal = journal
        self.ring_size = ring_size
        self._history = history
        self._base = 0
        self._adds = 0  # rows the Sequencer's ring took so far: the ring position of the next
        self._codes: dict[str, int] = {}  # producer hex ("" for none) -> code
        self._names: list[str] = []
        self._known = np.zeros(8, bool)
        self._mn = np.zeros(8, np.int64)  # min_clock per code
        self._mx = np.zeros(8, np.int64)  # max_clock per code
        self._spans: dict[int, _Span] = {}
        self._collect = collect  # False: only the producer states are wanted
        self.committed: list[np.ndarray] = []
        if checkpoint is not None:
            self._base = checkpoint.offsets.get(journal, 0)
            for s in checkpoint.producers:
                if s.journal == journal:
                    code = self._code(s.producer.hex())
                    self._known[code] = True
                    self._mn[code] = self._mx[code] = s.last_ack
                    if s.begin >= 0:
                        self._spans[code] = _Span(s.begin, _BEFORE_CHECKPOINT)

    # -- producers -------------------------------------------------------------------------------

    def _code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self._names)
            self._names.append(name)
            if code >= len(self._known):
                grow = len(self._known)
                self._known = np.concatenate([self._known, np.zeros(grow, bool)])
                self._mn = np.concatenate([self._mn, np.zeros(grow, np.int64)])
                self._mx = np.concatenate([self._mx, np.zeros(grow, np.int64)])
        return code

    def producer_codes(self, producers: Iterable[str | None] | pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Each row's producer code (None and "" share one: messages without UUID)."""
        if isinstance(producers, pa.Array | pa.ChunkedArray):
            encoded = pc.dictionary_encode(producers)
            if isinstance(encoded, pa.ChunkedArray):
                encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
            names = encoded.dictionary.to_pylist() + [""]
            lut = np.array([self._code(p or "") for p in names], np.int32)
            idx = _indices(encoded.indices)
            return lut[np.where(idx < 0, len(names) - 1, idx)]
        return np.fromiter((self._code(p or "") for p in producers), np.int32)

    # -- deciding --------------------------------------------------------------------------------

    def add(
        self,
        first_id: int,
        begins: Sequence[int] | np.ndarray,
        ends: Sequence[int] | np.ndarray | None,
        producers: Iterable[str | None] | pa.Array | pa.ChunkedArray,
        clocks: Sequence[int] | np.ndarray,
        flags: Sequence[int] | np.ndarray,
    ) -> None:
        """Decides rows with ids first_id, first_id + 1, ..., which follow every row added before in
        the journal (producer: 12 hex characters or None). `ends` is unused (CommitTracker's API)."""
        del ends
        begin = np.asarray(begins, np.int64)
        n = len(begin)
        if not n:
            return
        t = _Table(self, first_id, begin, self.producer_codes(producers), clocks, flags)
        decided = t.decide()
        if self._collect:
            self.committed.extend(c for c in decided if len(c))

    # -- CommitTracker's interface ---------------------------------------------------------------

    def open_horizon(self) -> int | None:
        """Offset of the first message of the oldest open span (None: none is open): rows before it
        are decided for good."""
        return min((s.begin for s in self._spans.values()), default=None)

    def take_committed(self, first_id: int, count: int) -> np.ndarray:
        """A boolean mask of rows [first_id, first_id + count) committed so far; they are removed."""
        mask = np.zeros(count, dtype=bool)
        if not self.committed:
            return mask
        ids = np.concatenate(self.committed) if len(self.committed) > 1 else self.committed[0]
        inside = (ids >= first_id) & (ids < first_id + count)
        mask[ids[inside] - first_id] = True
        rest = ids[~inside]
        self.committed = [rest] if len(rest) else []
        return mask

    def forget_older_than(self, horizon: int) -> None:
        """Forgets producers whose max clock lies more than `horizon` below the newest last ACK of
        the journal, as a Sequencer's checkpoint with that prune horizon drops their states."""
        known = np.flatnonzero(self._known[: len(self._names)])
        if not len(known):
            return
        newest = int(self._mn[known].max())
        for code in known[self._mx[known] < newest - horizon].tolist():
            self._known[code] = False
            self._spans.pop(code, None)

    def states(self) -> list[ProducerState]:
        """The producer states of a Sequencer checkpoint taken now (sorted by producer)."""
        out = []
        for code, name in enumerate(self._names):
            if self._known[code]:
                span = self._spans.get(code)
                begin = span.begin if span is not None else -1
                out.append(ProducerState(self.journal, bytes.fromhex(name), int(self._mn[code]), begin))
        return sorted(out, key=lambda s: s.producer)


class _Table:
    """One add() call: the vectorised pass over a table's rows, then the replays it needs."""

    def __init__(
        self,
        d: Decider,
        first_id: int,
        begin: np.ndarray,
        code: np.ndarray,
        clocks: Sequence[int] | np.ndarray,
        flags: Sequence[int] | np.ndarray,
    ) -> None:
        self.d = d
        n = len(begin)
        self.n = n
        self.begin = begin
        self.code = code
        self.clock = np.asarray(clocks).astype(np.int64, copy=False)
        self.flag = np.asarray(flags).astype(np.int32, copy=False)
        if len(code) != n or len(self.clock) != n or len(self.flag) != n:
            raise ValueError("begins, producers, clocks and flags differ in length")
        self.ids = np.arange(first_id, first_id + n, dtype=np.int64)
        self.nz = self.clock != 0
        self.zero = np.flatnonzero(~self.nz)  # clockless rows: committed as throwaway OUTSIDEs
        self.member = np.zeros(n, bool)  # CONTINUEs that join their producer's span
        self.add_pos = np.zeros(n, np.int64)  # ring position of each row the ring takes
        self.idx = self.firsts = self.fp = _EMPTY  # clocked rows by producer, where each one's begin

    def decide(self) -> list[np.ndarray]:
        d = self.d
        n, clock, flag, ids = self.n, self.clock, self.flag, self.ids
        zero = self.zero
        out = [ids[zero[flag[zero] != _ACK]]] if len(zero) else []
        sel = np.flatnonzero(self.nz)
        if not len(sel):
            d._adds += n
            self._carry_clockless(set())
            return out

        # Clocked rows grouped by producer, in journal order within each.
        small = np.int8 if len(d._names) <= 127 else np.int16 if len(d._names) <= 32767 else np.int32
        idx = sel[np.argsort(self.code[sel].astype(small), kind="stable")]
        P, C = self.code[idx], clock[idx]
        f = flag[idx]
        K = np.where(f == _CONTINUE, _CONTINUE, np.where(f == _ACK, _ACK, _OUTSIDE)).astype(np.int8)
        m = len(idx)
        fst = np.ones(m, bool)
        fst[1:] = P[1:] != P[:-1]
        firsts = np.flatnonzero(fst)
        fp = P[firsts]
        self.idx, self.firsts, self.fp = idx, firsts, fp
        known = d._known[fp]
        prev_k = np.empty(m, np.int8)
        prev_k[0] = -1
        prev_k[1:] = K[:-1]
        prev_c = np.zeros(m, np.int64)
        prev_c[1:] = C[:-1]

        # min_clock before each row: from the producer's state (a new one: its first clock - 1),
        # restarting after each ACK at its clock, growing with OUTSIDE clocks.
        start1 = fst | (prev_k == _ACK)
        u = prev_c.copy()
        u[firsts] = np.where(known, d._mn[fp], C[firsts] - 1)
        u[~start1 & (prev_k != _OUTSIDE)] = u[start1].min()  # no contribution
        minb = seg_cummax(u, start1)
        ocommit = (K == _OUTSIDE) & (C > minb)
        acommit = (K == _ACK) & (C > minb)
        reset = (K == _ACK) | ocommit

        # max_clock before each row: restarting after each reset at its clock, growing with CONTINUEs.
        start2 = fst.copy()
        start2[1:] |= reset[:-1]
        u2 = prev_c.copy()
        u2[firsts] = np.where(known, d._mx[fp], C[firsts] - 1)
        u2[~start2 & (prev_k != _CONTINUE)] = u2[start2].min()
        maxb = seg_cummax(u2, start2)
        member = (K == _CONTINUE) & (C > maxb)
        self.member[idx] = member

        # Ring positions: the ring takes members, commits, and clockless rows.
        held = ~self.nz
        held[idx] = member | ocommit | acommit
        held64 = held.astype(np.int64)
        add_pos = np.cumsum(held64)
        total = int(add_pos[-1])
        add_pos -= held64
        add_pos += d._adds
        d._adds += total
        self.add_pos = add_pos
        A = add_pos[idx]

        out.append(ids[idx[ocommit]])

        # Segments: a producer's rows between restarts of max_clock; the span of a segment is its
        # members (and, for the producer's first segment, a span carried from earlier rows).
        seg_first = np.flatnonzero(start2)
        nseg = len(seg_first)
        g2 = np.cumsum(start2) - 1
        seg_last = np.empty(nseg, np.int64)
        seg_last[:-1] = seg_first[1:] - 1
        seg_last[-1] = m - 1
        mem_rows = np.flatnonzero(member)
        first_mem = np.full(nseg, -1, np.int64)
        if len(mem_rows):
            segs, at = np.unique(g2[mem_rows], return_index=True)
            first_mem[segs] = mem_rows[at]
        has_mem = first_mem >= 0
        carried = np.zeros(nseg, bool)
        if d._spans:
            opens_seg = fst[seg_first]
            carried[opens_seg] = [int(p) in d._spans for p in P[seg_first[opens_seg]]]
        head = np.where(has_mem, A[np.maximum(first_mem, 0)], 0)
        for s in np.flatnonzero(carried):
            head[s] = d._spans[int(P[seg_first[s]])].head
        commits = acommit[seg_last] & (has_mem | carried)
        replay = commits & (head <= A[seg_last] - d.ring_size)  # the span's head left the ring
        ring = commits & ~replay
        ack_clock = C[seg_last]
        # From the ring: members at or below the ACK's clock (members' clocks rise: a prefix).
        out.append(ids[idx[member & ring[g2] & (C <= ack_clock[g2])]])
        for s in np.flatnonzero(ring & carried):
            s_ids, s_clock, _, s_flag, s_add = d._spans[int(P[seg_first[s]])].rows()
            out.append(s_ids[(s_add >= 0) & (s_clock <= ack_clock[s]) & (s_flag != _ACK)])
        for s in np.flatnonzero(replay):
            ack = int(seg_last[s])
            lo_pos = 0 if carried[s] else int(idx[first_mem[s]])
            out.append(
                self._replay(
                    int(P[ack]),
                    int(idx[ack]),
                    lo_pos,
                    bool(carried[s]),
                    int(C[ack]),
                    int(minb[ack]),
                    int(A[ack]),
                )
            )

        # Producer states after the table, and the spans left open.
        lst = np.ones(m, bool)
        lst[:-1] = fst[1:]
        last = np.flatnonzero(lst)
        lp, lk, lc = P[last], K[last], C[last]
        d._known[lp] = True
        d._mn[lp] = np.where(lk == _ACK, lc, np.maximum(minb[last], np.where(lk == _OUTSIDE, lc, 0)))
        d._mx[lp] = np.where(reset[last], lc, np.maximum(maxb[last], np.where(lk == _CONTINUE, lc, 0)))
        open_seg = g2[last]
        still = ~reset[last] & (has_mem[open_seg] | carried[open_seg])
        spans: dict[int, _Span] = {}
        for j in np.flatnonzero(still):
            p, seg = int(lp[j]), int(open_seg[j])
            if carried[seg]:
                span = d._spans[p]
                lo_pos = 0
            else:
                lo_pos = int(idx[first_mem[seg]])
                span = _Span(int(self.begin[lo_pos]), int(add_pos[lo_pos]))
            span.extend(*self._rows_of(p, lo_pos, n))
            spans[p] = span
        present = set(fp.tolist())
        for p, span in d._spans.items():
            if p not in present:
                spans[p] = span  # no clocked row of its producer here: still open
        d._spans = spans
        self._carry_clockless(present)
        return out

    def _rows_of(self, p: int, lo: int, hi: int) -> tuple[np.ndarray, ...]:
        """Producer p's rows at table positions [lo, hi), clockless ones included: ids, clocks,
        begins, flags, ring positions (-1 but for span members)."""
        g = int(np.searchsorted(self.fp, p))
        pos = _EMPTY
        if g < len(self.fp) and self.fp[g] == p:
            group = self.idx[
                self.firsts[g] : self.firsts[g + 1] if g + 1 < len(self.firsts) else len(self.idx)
            ]
            pos = group[np.searchsorted(group, lo) : np.searchsorted(group, hi)]
        if len(self.zero):
            z = self.zero[(self.code[self.zero] == p) & (self.zero >= lo) & (self.zero < hi)]
            if len(z):
                pos = np.sort(np.concatenate([pos, z]))
        add = np.where(self.member[pos], self.add_pos[pos], -1)
        return self.ids[pos], self.clock[pos], self.begin[pos], self.flag[pos], add

    def _carry_clockless(self, present: set[int]) -> None:
        """Clockless rows of producers whose spans stay open without a clocked row in this table:
        a replay re-reads them too."""
        d = self.d
        if not len(self.zero) or not d._spans:
            return
        for p, span in d._spans.items():
            if p not in present:
                z = self.zero[self.code[self.zero] == p]
                if len(z):
                    span.extend(
                        self.ids[z], self.clock[z], self.begin[z], self.flag[z], np.full(len(z), -1, np.int64)
                    )

    def _replay(
        self, p: int, ack_pos: int, lo_pos: int, carried: bool, c: int, floor: int, k: int
    ) -> np.ndarray:
        """Rows delivered by the committing ACK at table position `ack_pos` (producer p, clock c,
        min_clock `floor`, ring position k) whose span's head left the ring: the Sequencer replays
        p's rows from the span's begin up to its first member still in the ring, then takes the
        rest of the span from the ring."""
        d = self.d
        cols = self._rows_of(p, lo_pos, ack_pos)
        if carried:
            span = d._spans[p]
            cols = tuple(np.concatenate([a, b]) for a, b in zip(span.rows(), cols, strict=True))
            lo = span.begin
        else:
            lo = int(self.begin[lo_pos])
        r_ids, r_clock, r_begin, r_flag, r_add = cols
        in_ring = np.flatnonzero((r_add >= 0) & (r_add > k - d.ring_size))  # members still in the ring
        hi = int(r_begin[in_ring[0]]) if len(in_ring) else int(self.begin[ack_pos])
        replayed = (r_begin >= lo) & (r_begin < hi)
        q_ids, q_clock, q_flag = [r_ids[replayed]], [r_clock[replayed]], [r_flag[replayed]]
        if lo < d._base and d._history is not None:
            name = bytes.fromhex(d._names[p])
            hist = [e for e in d._history(lo, min(hi, d._base)) if e.producer == name]
            q_ids.insert(0, np.array([e.message for e in hist], np.int64))
            q_clock.insert(0, np.array([e.clock for e in hist], np.int64))
            q_flag.insert(0, np.array([e.flags for e in hist], np.int32))
        q_ids.append(r_ids[in_ring])
        q_clock.append(r_clock[in_ring])
        q_flag.append(r_flag[in_ring])
        ids, clocks, flags = (np.concatenate(x) for x in (q_ids, q_clock, q_flag))
        return ids[replay_deliveries(clocks, floor, c) & (flags != _ACK)]
