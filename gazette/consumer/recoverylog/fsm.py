"""FSM: the state machine of a recovery log's operations (docs/semantics.md#recovery-logs).

Operations apply strictly in sequence: one whose seq_no or checksum is not the next expected is a
dead branch (a duplicate, a lost hand-off race, a fenced writer) and changes nothing. The FSM tracks
live files (fnodes), their paths, the log segments holding each one's operations, and properties
(small files kept whole, set by property ops), from which it builds FSMHints. Built from hints, it
applies only the hinted authors' operations and skips files that the hints say are deleted later
(their operations still advance the sequence).
"""

from __future__ import annotations

import dataclasses
import enum

from gazette.consumer.recoverylog.hints import FnodeSegments, FSMHints, Property, Segment
from gazette.consumer.recoverylog.ops import RecordedOp, RecoveryLogError, crc32c


class Outcome(enum.Enum):
    APPLIED = "applied"
    NOT_TRACKED = "applied to a file the hints say is deleted later: no local effect"
    NOT_HINTED_AUTHOR = "not by the next hinted author: a dead branch"
    WRONG_SEQ_NO = "wrong sequence number"
    CHECKSUM_MISMATCH = "checksum mismatch"
    EXPECTED_HINTED_FNODE = "not the create of the next hinted fnode"
    LINK_EXISTS = "link exists"
    PROPERTY_EXISTS = "property exists"
    NO_SUCH_LINK = "fnode has no such link"

    @property
    def advanced(self) -> bool:
        """Whether the FSM moved to its next state (the op is part of the log's history)."""
        return self in (Outcome.APPLIED, Outcome.NOT_TRACKED)


@dataclasses.dataclass
class _Node:
    links: set[str]
    segments: list[Segment]


class FSM:
    """See the module docstring. `next_seq_no`/`next_checksum` are what the next op must carry."""

    def __init__(self, hints: FSMHints) -> None:
        if not hints.log:
            raise RecoveryLogError("FSM hints name no log")
        fnodes, segments = hints.live_log_segments()
        self.log = hints.log
        self.next_seq_no = 1
        self.next_checksum = 0
        self.live_nodes: dict[int, _Node] = {}
        self.links: dict[str, int] = {}
        self.properties: dict[str, str] = {p.path: p.content for p in hints.properties}
        self._hinted_fnodes = fnodes
        self._hinted_segments = segments
        if segments:
            self.next_seq_no, self.next_checksum = segments[0].first_seq_no, segments[0].first_checksum

    @property
    def hinted_segments(self) -> tuple[Segment, ...]:
        """Hinted segments not read yet (the first is being read)."""
        return tuple(self._hinted_segments)

    def has_remaining_hints(self) -> bool:
        return bool(self._hinted_segments or self._hinted_fnodes)

    def apply(self, op: RecordedOp, payload: bytes) -> Outcome:
        """Applies `op` (whose record payload is `payload`) if it is the next in sequence."""
        if self._hinted_segments and self._hinted_segments[0].author != op.author:
            return Outcome.NOT_HINTED_AUTHOR
        if op.seq_no != self.next_seq_no:
            return Outcome.WRONG_SEQ_NO
        if op.checksum != self.next_checksum:
            return Outcome.CHECKSUM_MISMATCH
        if op.kind == "create":
            outcome = self._create(op)
        elif self._hinted_fnodes and self._hinted_fnodes[0] == op.seq_no:
            outcome = Outcome.EXPECTED_HINTED_FNODE
        elif op.kind == "link":
            outcome = self._link(op)
        elif op.kind == "unlink":
            outcome = self._unlink(op)
        elif op.kind == "write":
            outcome = self._touch(op)
        elif op.kind == "property":
            outcome = self._property(op)
        else:
            outcome = Outcome.APPLIED
        if not outcome.advanced:
            return outcome
        self.next_seq_no += 1
        self.next_checksum = crc32c(payload, self.next_checksum)
        segments = self._hinted_segments
        if segments and segments[0].last_seq_no < self.next_seq_no:
            segments.pop(0)
            if segments:  # skip to the next hinted segment
                self.next_seq_no, self.next_checksum = segments[0].first_seq_no, segments[0].first_checksum
        return outcome

    def _create(self, op: RecordedOp) -> Outcome:
        if op.path in self.links:
            return Outcome.LINK_EXISTS
        if op.path in self.properties:
            return Outcome.PROPERTY_EXISTS
        fnode = op.seq_no
        if self._hinted_fnodes:
            if self._hinted_fnodes[0] != fnode:
                return Outcome.NOT_TRACKED
            self._hinted_fnodes.pop(0)
        self.live_nodes[fnode] = _Node({op.path}, self._extend([], op))
        self.links[op.path] = fnode
        return Outcome.APPLIED

    def _link(self, op: RecordedOp) -> Outcome:
        if op.path in self.links:
            return Outcome.LINK_EXISTS
        if op.path in self.properties:
            return Outcome.PROPERTY_EXISTS
        node = self.live_nodes.get(op.fnode)
        if node is None:
            return Outcome.NOT_TRACKED
        node.links.add(op.path)
        self.links[op.path] = op.fnode
        node.segments = self._extend(node.segments, op)
        return Outcome.APPLIED

    def _unlink(self, op: RecordedOp) -> Outcome:
        node = self.live_nodes.get(op.fnode)
        if node is None:
            return Outcome.NOT_TRACKED
        if op.path not in node.links:
            return Outcome.NO_SUCH_LINK
        del self.links[op.path]
        node.links.discard(op.path)
        node.segments = self._extend(node.segments, op)
        if not node.links:
            del self.live_nodes[op.fnode]
        return Outcome.APPLIED

    def _touch(self, op: RecordedOp) -> Outcome:
        node = self.live_nodes.get(op.fnode)
        if node is None:
            return Outcome.NOT_TRACKED
        node.segments = self._extend(node.segments, op)
        return Outcome.APPLIED

    def _property(self, op: RecordedOp) -> Outcome:
        if op.path in self.links:
            return Outcome.LINK_EXISTS
        self.properties[op.path] = op.content
        return Outcome.APPLIED

    @staticmethod
    def _extend(segments: list[Segment], op: RecordedOp) -> list[Segment]:
        if segments and segments[-1].author == op.author and segments[-1].log == op.log:
            segments[-1] = dataclasses.replace(
                segments[-1], last_seq_no=op.seq_no, last_offset=op.last_offset
            )
        else:
            segments.append(
                Segment(op.author, op.seq_no, op.first_offset, op.checksum, op.seq_no, op.last_offset, op.log)
            )
        return segments

    def build_hints(self) -> FSMHints:
        """Hints from which a new FSM rebuilds this one's live files."""
        nodes = []
        for fnode in sorted(self.live_nodes):
            segments = tuple(
                dataclasses.replace(s, log="") if s.log == self.log else s
                for s in self.live_nodes[fnode].segments
            )
            nodes.append(FnodeSegments(fnode, segments))
        properties = tuple(Property(path, self.properties[path]) for path in sorted(self.properties))
        return FSMHints(self.log, tuple(nodes), properties)
