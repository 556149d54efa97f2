"""Envelope: one decoded message with where it sits in its journal and what its UUID says.

Framings build envelopes with the UUID's fields already split out (producer, clock, flags), so the
Sequencer and the iterators never re-parse a UUID. Clock 0 means the message carries no UUID.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import UUID

from gazette.message.uuid import Flags


@dataclasses.dataclass(slots=True)
class Envelope:
    journal: str
    begin: int  # offset of the message's first byte
    end: int  # offset just past its last byte
    message: Any
    uuid: UUID | None = None
    producer: bytes = b""
    clock: int = 0
    flags: int = Flags.OUTSIDE_TXN

    @property
    def is_ack(self) -> bool:
        """ACK messages are control records: iterators deliver them, applications ignore them."""
        return self.flags == Flags.ACK_TXN
