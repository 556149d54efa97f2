"""Spool: a replica's transactional state for one journal (docs/semantics.md#spool-proposals,
#when-a-spool-rolls).

Holds the committed Fragment, its local SpoolFile, the registers, `delta` pending bytes and a running
SHA1 (with a copy saved at the last commit). Not thread-safe: one owner at a time (the broker's lock).
Invariant: the proposal rules are exact equality of Fragment and registers
(docs/semantics.md#spool-proposals).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Protocol

from gazette.fragment.fragment import ZERO_SUM, Codec, Fragment
from gazette.fragment.spool_file import SpoolError, SpoolFile
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status

__all__ = ["CompletedSpool", "Spool", "SpoolError", "SpoolObserver"]


@dataclasses.dataclass
class CompletedSpool:
    """A non-empty spool that rolled: its final fragment and file, handed to the persister.
    `ahead_of_primary`: this spool held content past a primary's proposal (see Spool), so it may be
    the only copy of that range, which the journal has moved past: persist it without delay."""

    fragment: Fragment
    file: SpoolFile
    first_append_time: float | None
    registers: LabelSet
    ahead_of_primary: bool = False


class SpoolObserver(Protocol):
    def on_commit(self, fragment: Fragment, file: SpoolFile) -> None: ...

    def on_complete(self, completed: CompletedSpool) -> None: ...


class Spool:
    """The replica's spool; driven by content and proposals (`apply_content`, `apply_proposal`)."""

    def __init__(self, journal: str, observer: SpoolObserver, directory: str | None = None) -> None:
        self.journal = journal
        self.fragment = Fragment(journal=journal, begin=0, end=0, sum=ZERO_SUM, codec=Codec.NONE)
        self.registers = LabelSet()
        self.delta = 0
        self.first_append_time: float | None = None
        self.file: SpoolFile | None = None
        self._observer = observer
        self._directory = directory
        self._summer = hashlib.sha1()  # over [begin, end + delta)
        self._saved = self._summer.copy()  # over [begin, end): the state at the last commit
        # Set when a proposal was refused because this fragment ends past it: a syncing primary
        # lacked commits this replica has (an append that failed after reaching some replicas). The
        # primary then rolls every member to this end, and this spool, completed by that roll, may be
        # the only copy of [proposal end, end): it is handed on for prompt persistence, not after the
        # replica delay (a replica killed within that delay would leave the journal a hole).
        self._ahead_of_primary = False

    # --- content and proposals --------------------------------------------------------------------

    def apply_content(self, content: bytes | memoryview, content_delta: int) -> None:
        """Spools `content` after the pending bytes; `content_delta` must equal `delta`."""
        if content_delta != self.delta:
            raise SpoolError(
                f"content_delta {content_delta} of journal {self.journal} does not match: "
                f"expected the spool's delta {self.delta}"
            )
        if not content:
            return
        file = self.file
        if file is None:
            if self.fragment.length:
                raise SpoolError(
                    f"spool of {self.journal} at {self.fragment.begin} is not empty but has no file"
                )
            file = self.file = SpoolFile(self.fragment.begin, self._directory)
        file.pwrite(self.fragment.end + self.delta, content)
        # Hash only after the write landed, so a failed write leaves the spool unchanged.
        self._summer.update(content)
        self.delta += len(content)

    def apply_proposal(self, proposal: Fragment, registers: LabelSet) -> tuple[Status, Fragment, LabelSet]:
        """Applies the four proposal rules (docs/semantics.md#spool-proposals) in order; returns (status,
        fragment, registers)."""
        frag = self.fragment
        # 1. Roll forward: beyond anything we know, or an empty fragment at exactly our end.
        if proposal.end > frag.end + self.delta or (
            proposal.end == frag.end and proposal.begin == proposal.end
        ):
            self._roll_forward(proposal, registers)
            frag = self.fragment
        # 2. Rollback: our exact fragment and registers.
        if proposal == frag and registers == self.registers:
            self.delta = 0
            self._summer = self._saved.copy()
            return Status.OK, frag, self.registers
        # 3. Commit: our fragment extended by delta with the running SHA1.
        if self.delta != 0 and proposal == self.next():
            self.fragment = proposal
            self.delta = 0
            self._saved = self._summer.copy()
            if self.first_append_time is None:
                self.first_append_time = time.time()
            self.registers = registers
            assert self.file is not None  # delta != 0 means content was written
            self._observer.on_commit(proposal, self.file)
            return Status.OK, proposal, self.registers
        # 4. Neither: tell the primary what we have.
        if frag.end > proposal.end:
            self._ahead_of_primary = True
        return Status.PROPOSAL_MISMATCH, frag, self.registers

    def _roll_forward(self, proposal: Fragment, registers: LabelSet) -> None:
        frag = self.fragment
        if frag.length:
            assert self.file is not None
            self._observer.on_complete(
                CompletedSpool(
                    fragment=frag,
                    file=self.file,
                    first_append_time=self.first_append_time,
                    registers=self.registers,
                    ahead_of_primary=self._ahead_of_primary,
                )
            )
        elif self.file is not None:
            # Only rolled-back bytes of an empty fragment: nobody else was handed this file.
            self.file.close()
        if proposal.end > frag.end:
            self.registers = registers
        self.fragment = Fragment(
            journal=self.journal, begin=proposal.end, end=proposal.end, sum=ZERO_SUM, codec=proposal.codec
        )
        self.file = None  # created lazily by the next content
        self.delta = 0
        self.first_append_time = None
        self._ahead_of_primary = False
        self._summer = hashlib.sha1()
        self._saved = self._summer.copy()

    def next(self) -> Fragment:
        """The current fragment extended by `delta` with the running SHA1: what a commit proposes."""
        frag = self.fragment
        if self.delta == 0:
            return frag
        return dataclasses.replace(frag, end=frag.end + self.delta, sum=self._summer.digest())

    def rollback(self) -> None:
        """Discards pending content: proposes the current fragment and registers."""
        self.apply_proposal(self.fragment, self.registers)

    def roll_to(self, offset: int, codec: Codec) -> Fragment:
        """The empty-fragment proposal at `offset` with `codec`."""
        return Fragment(journal=self.journal, begin=offset, end=offset, sum=ZERO_SUM, codec=codec)

    def maybe_roll(
        self,
        spec_length: int,
        spec_codec: Codec,
        flush_interval_s: float,
        roll_to_offset: int = 0,
        now: float | None = None,
    ) -> Fragment:
        """maybeRoll (docs/semantics.md#when-a-spool-rolls): an empty fragment at end (or `roll_to_offset`)
        with the spec's codec when the spool is empty, longer than `spec_length`, asked to roll to an offset
        other than its begin (0 = not asked), or its first append is in an earlier flush-interval bucket; else
        `fragment`."""
        frag = self.fragment
        roll_requested = roll_to_offset != 0 and roll_to_offset != frag.begin
        do_roll = frag.length == 0 or frag.length > spec_length or roll_requested
        interval_s = int(flush_interval_s)
        if not do_roll and interval_s > 0 and self.first_append_time is not None:
            now_s = time.time() if now is None else now
            do_roll = int(self.first_append_time) // interval_s != int(now_s) // interval_s
        if not do_roll:
            return frag
        offset = max(frag.end, roll_to_offset) if roll_requested else frag.end
        return dataclasses.replace(frag, begin=offset, end=offset, sum=ZERO_SUM, codec=spec_codec)

    # --- reads and shutdown -----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` committed bytes at `offset` in [begin, end]; b"" at end."""
        frag = self.fragment
        if offset < frag.begin or offset > frag.end:
            raise SpoolError(
                f"read offset {offset} of journal {self.journal} is outside the spool's committed "
                f"[{frag.begin}, {frag.end}]"
            )
        n = min(max_bytes, frag.end - offset)
        if n <= 0 or self.file is None:
            return b""
        return self.file.pread(offset, n)

    def close(self) -> None:
        """Shutdown: rolls to an empty fragment at end, completing (handing off) a non-empty spool."""
        self.apply_proposal(self.roll_to(self.fragment.end, self.fragment.codec), self.registers)

    def discard(self) -> None:
        """Drops the current fragment and any pending content without handing them to the
        persister (a former primary's spool after lease loss may hold unacknowledged commits)."""
        if self.file is not None:
            self.file.close()
        self.file = None
        self.fragment = self.roll_to(self.fragment.end, self.fragment.codec)
        self.delta = 0
        self.first_append_time = None
        self._summer = hashlib.sha1()
        self._saved = self._summer.copy()

    def __repr__(self) -> str:
        f = self.fragment
        return f"Spool({self.journal}, [{f.begin}, {f.end}) {f.codec.name}, delta={self.delta}, {self.registers})"
