"""Envelope: one decoded message with where it sits in its journal and what its UUID says.

Framings build envelopes with the UUID's fields already split out (producer, clock, flags), so the
Sequencer and the iterators never re-parse a UUID. `uuid` is derived from those fields on access
(they determine all 128 bits), which keeps a UUID object off the decode hot path. An envelope
whose message carries no UUID has producer b"" (uuid None) and clock 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import UUID

from gazette.message.uuid import Flags, build_uuid, get_clock, get_flags, get_producer_id

_ACK_TXN = int(Flags.ACK_TXN)  # a plain int: comparing with the IntEnum member costs more per message


@dataclasses.dataclass(slots=True, init=False)
class Envelope:
    journal: str
    begin: int  # offset of the message's first byte
    end: int  # offset just past its last byte
    message: Any
    producer: bytes = b""
    clock: int = 0
    flags: int = Flags.OUTSIDE_TXN

    def __init__(
        self,
        journal: str,
        begin: int,
        end: int,
        message: Any,
        uuid: UUID | None = None,
        producer: bytes = b"",
        clock: int = 0,
        flags: int = Flags.OUTSIDE_TXN,
    ) -> None:
        """Either pass `uuid` (its fields are split here) or the split fields, not conflicting ones."""
        self.journal = journal
        self.begin = begin
        self.end = end
        self.message = message
        if uuid is not None:
            split = (get_producer_id(uuid), get_clock(uuid), get_flags(uuid))
            if (producer, clock, flags) not in ((b"", 0, Flags.OUTSIDE_TXN), split):
                raise ValueError(
                    f"envelope uuid {uuid} says (producer, clock, flags) = {split!r}, "
                    f"not the given {(producer, clock, flags)!r}"
                )
            producer, clock, flags = split
        self.producer = producer
        self.clock = clock
        self.flags = flags

    @property
    def uuid(self) -> UUID | None:
        """The message's UUID, rebuilt from (producer, clock, flags); None without a producer."""
        if not self.producer:
            return None
        return build_uuid(self.producer, self.clock, self.flags)

    @property
    def is_ack(self) -> bool:
        """ACK messages are control records: iterators deliver them, applications ignore them."""
        return self.flags == _ACK_TXN
