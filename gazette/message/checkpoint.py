"""Sequencer checkpoints: read-through offsets plus one ProducerState per (journal, producer).

Two explicit forms, both validated on load. Stores persist Gazette's own encoding: `to_proto` /
`from_proto` convert to and from the `sources` of Gazette's `consumer.Checkpoint` protobuf
(gazette.protocol.shard_pb2), laid out as Gazette's BuildCheckpoint and FlattenReadThrough /
FlattenProducerStates do, so a Go consumer's stored checkpoint restores here and ours there. The
dict/JSON form (`to_dict`) is what the Spark reader accepts as an option and what user-facing views
show (docs/semantics.md#sequencer). Imports nothing above `gazette.protocol`; the Sequencer builds and
consumes these values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from gazette.message.uuid import PRODUCER_ID_BYTES
from gazette.protocol import shard_pb2
from gazette.protocol.errors import ValidationError

CLOCK_LIMIT = 1 << 64  # clocks are unsigned 64-bit values
OFFSET_LIMIT = 1 << 63  # offsets are Gazette's int64
PRODUCER_HEX_CHARS = 2 * PRODUCER_ID_BYTES
_STATE_KEYS = ("journal", "producer", "last_ack", "begin")
_CHECKPOINT_KEYS = ("offsets", "producers")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def refuse_unknown_fields(msg: Message, where: str) -> None:
    """Raises ValidationError if `msg` holds fields its message definition lacks: bytes that parse
    but were not written as this message (a different message, or corruption) are never half-read."""
    unknown = unknown_fields.UnknownFieldSet(msg)
    if len(unknown):
        numbers = sorted({unknown[i].field_number for i in range(len(unknown))})
        raise ValidationError(
            f"{where} holds field number(s) {numbers} that {msg.DESCRIPTOR.full_name} does not define "
            "(not a checkpoint of this protocol, or corrupt)"
        )


def _check_keys(where: str, value: object, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(
            f"{where} is a {type(value).__name__}, expected an object with keys {list(keys)}"
        )
    missing = [k for k in keys if k not in value]
    unknown = sorted(str(k) for k in value if k not in keys)
    if missing:
        raise ValidationError(f"{where} lacks key(s) {missing}")
    if unknown:
        raise ValidationError(f"{where} has unknown key(s) {unknown} (expected {list(keys)})")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    """What a Sequencer keeps of one producer of one journal across a checkpoint.

    `last_ack` is the clock through which the producer's messages are acknowledged (Gazette's
    LastAck: an exclusive lower bound for what is still to come). `begin` is the offset of the first
    message of the producer's open (uncommitted) span, or -1 when none is open; on restore its ACK
    replays the span from there.
    """

    journal: str
    producer: bytes
    last_ack: int
    begin: int

    def __post_init__(self) -> None:
        if not isinstance(self.journal, str) or not self.journal:
            raise ValidationError(f"producer state journal {self.journal!r} is not a non-empty string")
        if not isinstance(self.producer, bytes) or len(self.producer) != PRODUCER_ID_BYTES:
            raise ValidationError(
                f"producer state producer {self.producer!r} of journal {self.journal!r} "
                f"is not {PRODUCER_ID_BYTES} bytes"
            )
        if not _is_int(self.last_ack) or not 0 <= self.last_ack < CLOCK_LIMIT:
            raise ValidationError(
                f"producer state last_ack {self.last_ack!r} of journal {self.journal!r} "
                "is not an unsigned 64-bit clock"
            )
        if not _is_int(self.begin) or not -1 <= self.begin < OFFSET_LIMIT:
            raise ValidationError(
                f"producer state begin {self.begin!r} of journal {self.journal!r} is not an offset >= -1"
            )

    def to_dict(self) -> dict[str, Any]:
        """`{"journal": str, "producer": 12 lowercase hex chars, "last_ack": int, "begin": int}`."""
        return {
            "journal": self.journal,
            "producer": self.producer.hex(),
            "last_ack": self.last_ack,
            "begin": self.begin,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "producer state") -> ProducerState:
        """Parses `to_dict`'s form; raises ValidationError naming `where` and the bad field."""
        data = _check_keys(where, data, _STATE_KEYS)
        journal, producer, last_ack, begin = (data[k] for k in _STATE_KEYS)
        if not isinstance(journal, str) or not journal:
            raise ValidationError(f"{where}.journal {journal!r} is not a non-empty string")
        if not isinstance(producer, str) or len(producer) != PRODUCER_HEX_CHARS:
            raise ValidationError(f"{where}.producer {producer!r} is not {PRODUCER_HEX_CHARS} hex characters")
        try:
            raw = bytes.fromhex(producer)
        except ValueError:
            raise ValidationError(
                f"{where}.producer {producer!r} is not {PRODUCER_HEX_CHARS} hex characters"
            ) from None
        if not _is_int(last_ack) or not 0 <= last_ack < CLOCK_LIMIT:
            raise ValidationError(f"{where}.last_ack {last_ack!r} is not an unsigned 64-bit integer clock")
        if not _is_int(begin) or begin < -1:
            raise ValidationError(f"{where}.begin {begin!r} is not an integer offset >= -1")
        return cls(journal, raw, last_ack, begin)


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """A Sequencer snapshot: read-through `offsets` per journal and the `producers` to restore.

    Dict form (`to_dict`, JSON-safe; every key required, no others allowed)::

        {"offsets": {"<journal>": <int offset >= 0>, ...},
         "producers": [{"journal": "<journal>", "producer": "<12 hex chars>",
                        "last_ack": <int clock>, "begin": <int offset or -1>}, ...]}

    Gazette's form (`to_proto`): `consumer.Checkpoint.sources`, one Source per journal holding its
    read_through offset and its producers' entries. Gazette has no "no offset" apart from 0, so a
    journal with producers but no offset becomes a Source with read_through 0, which `from_proto`
    reads back as offset 0 (as Gazette's FlattenReadThrough does; a shard reads from
    max(offset, min_offset) either way). Otherwise the round trip is exact, producers being listed
    sorted by (journal, producer) as the Sequencer lists them.
    """

    offsets: dict[str, int]
    producers: list[ProducerState]

    def __post_init__(self) -> None:
        for journal, offset in self.offsets.items():
            if not isinstance(journal, str) or not journal:
                raise ValidationError(f"checkpoint offsets key {journal!r} is not a non-empty journal name")
            if not _is_int(offset) or not 0 <= offset < OFFSET_LIMIT:
                raise ValidationError(f"checkpoint offsets[{journal!r}] {offset!r} is not an offset >= 0")
        seen: set[tuple[str, bytes]] = set()
        for state in self.producers:
            if not isinstance(state, ProducerState):
                raise ValidationError(f"checkpoint producer {state!r} is not a ProducerState")
            key = (state.journal, state.producer)
            if key in seen:
                raise ValidationError(
                    f"checkpoint lists producer {state.producer.hex()} of journal {state.journal!r} twice"
                )
            seen.add(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "offsets": dict(self.offsets),
            "producers": [state.to_dict() for state in self.producers],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Checkpoint:
        """Parses `to_dict`'s form; raises ValidationError naming the bad field (e.g. producers[2].begin)."""
        data = _check_keys("checkpoint", data, _CHECKPOINT_KEYS)
        offsets, producers = data["offsets"], data["producers"]
        if not isinstance(offsets, Mapping):
            raise ValidationError(f"checkpoint.offsets is a {type(offsets).__name__}, expected an object")
        for journal, offset in offsets.items():
            if not isinstance(journal, str) or not journal:
                raise ValidationError(f"checkpoint.offsets key {journal!r} is not a non-empty journal name")
            if not _is_int(offset) or offset < 0:
                raise ValidationError(
                    f"checkpoint.offsets[{journal!r}] {offset!r} is not an integer offset >= 0"
                )
        if not isinstance(producers, list):
            raise ValidationError(f"checkpoint.producers is a {type(producers).__name__}, expected a list")
        states = [
            ProducerState.from_dict(item, where=f"checkpoint.producers[{i}]")
            for i, item in enumerate(producers)
        ]
        return cls(dict(offsets), states)

    def to_proto(self) -> shard_pb2.Checkpoint:
        """Gazette's `consumer.Checkpoint` of these offsets and producers (no ACK intents: see
        ConsumerCheckpoint), built as Gazette's BuildCheckpoint builds it: a Source per offset, then
        each producer's entry appended to its journal's Source in `producers` order."""
        msg = shard_pb2.Checkpoint()
        for journal, offset in self.offsets.items():
            msg.sources[journal].read_through = offset
        for state in self.producers:
            entry = msg.sources[state.journal].producers.add(id=state.producer)
            entry.state.SetInParent()  # Gazette always writes its (non-nullable) state, even a zero one
            entry.state.last_ack = state.last_ack
            entry.state.begin = state.begin
        return msg

    @classmethod
    def from_proto(cls, msg: shard_pb2.Checkpoint, where: str = "checkpoint") -> Checkpoint:
        """The offsets and producers of Gazette's `consumer.Checkpoint` (its `sources`; ack_intents
        are ConsumerCheckpoint's). Every Source gives an offset (its read_through, 0 included) and
        its producers; producers come out sorted by (journal, producer) as the Sequencer lists them.
        Raises ValidationError naming `where` and the field (e.g. `sources['a/b'].producers[1].id`)
        for a negative offset, a producer id that is not 6 bytes, a begin below -1, a producer listed
        twice, an empty journal name or fields the message does not define."""
        if not isinstance(msg, shard_pb2.Checkpoint):
            raise ValidationError(f"{where} is a {type(msg).__name__}, expected a consumer.Checkpoint")
        refuse_unknown_fields(msg, where)
        offsets: dict[str, int] = {}
        states: list[ProducerState] = []
        for journal, source in sorted(msg.sources.items()):
            at = f"{where}.sources[{journal!r}]"
            if not journal:
                raise ValidationError(f"{where}.sources has an empty journal name")
            refuse_unknown_fields(source, at)
            if source.read_through < 0:
                raise ValidationError(f"{at}.read_through {source.read_through} is not an offset >= 0")
            offsets[journal] = source.read_through
            seen: set[bytes] = set()
            for i, entry in enumerate(source.producers):
                entry_at = f"{at}.producers[{i}]"
                refuse_unknown_fields(entry, entry_at)
                refuse_unknown_fields(entry.state, f"{entry_at}.state")
                if len(entry.id) != PRODUCER_ID_BYTES:
                    raise ValidationError(
                        f"{entry_at}.id {entry.id.hex() or '(empty)'} is not a {PRODUCER_ID_BYTES}-byte producer id"
                    )
                if entry.state.begin < -1:
                    raise ValidationError(
                        f"{entry_at}.state.begin {entry.state.begin} is not an offset >= -1"
                    )
                if entry.id in seen:
                    raise ValidationError(f"{entry_at} lists producer {entry.id.hex()} of the journal again")
                seen.add(entry.id)
                states.append(
                    ProducerState(journal, bytes(entry.id), entry.state.last_ack, entry.state.begin)
                )
        states.sort(key=lambda state: (state.journal, state.producer))
        return cls(offsets, states)
