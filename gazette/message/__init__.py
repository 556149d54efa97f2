"""Exactly-once messages: UUIDs, framings, Publisher, mappings, Sequencer, read iterators.

The names of API.md's "Messages" section; the submodules hold the rest (framing classes,
checkpoints, QueueOutcome, AppendService options). `decide` (the vectorised commit decision) and
`columnar` (Arrow tables of committed messages) need numpy and pyarrow and are imported on use.
"""

from gazette.message.envelope import Envelope
from gazette.message.framing import framing_for
from gazette.message.mapping import ModuloMapping, RandomMapping, RendezvousMapping
from gazette.message.publisher import Publisher
from gazette.message.reader import ReadCommitted, ReadUncommitted
from gazette.message.sequencer import Sequencer
from gazette.message.uuid import UUID, Flags, build_uuid, get_clock, get_flags, get_producer_id

__all__ = [
    "UUID",
    "Envelope",
    "Flags",
    "ModuloMapping",
    "Publisher",
    "RandomMapping",
    "ReadCommitted",
    "ReadUncommitted",
    "RendezvousMapping",
    "Sequencer",
    "build_uuid",
    "framing_for",
    "get_clock",
    "get_flags",
    "get_producer_id",
]
