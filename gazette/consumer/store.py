"""Stores and the consumer checkpoint they commit atomically with application state
(docs/semantics.md#checkpoints, #consumer-stores).

A `Store` restores its last checkpoint (installing a write fence), and `start_commit` commits the
current transaction together with a checkpoint once every `wait_for` append has succeeded, refusing
when a newer primary's fence has replaced its own. Store methods run on the shard's worker thread.
`MemoryStore` keeps state in this process only: it survives nothing, so a shard using it is
at-least-once at best (fine for examples, never for exactly-once).
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from google.protobuf.message import DecodeError

from gazette.consumer.side_effects import SideEffects
from gazette.message.checkpoint import Checkpoint
from gazette.protocol import shard_pb2
from gazette.protocol.errors import AppendError, FencedError, GazetteError, ValidationError


class FencingError(FencedError):
    """A commit was refused because a newer primary restored the store (its fence moved on)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerCheckpoint:
    """Read-through offsets and producer states of the shard's Sequencer, and the framed ACK intents
    to append once the transaction that produced them has committed.

    Stored form (every store): Gazette's `consumer.Checkpoint` protobuf, so stores are shared with
    Go consumers. `to_proto`/`from_proto` convert (the sequencer part as `Checkpoint.to_proto`
    does; ack_intents map journal to the intent's bytes as they are), `to_bytes`/`from_bytes`
    marshal it. JSON form, for views only (Inspect, `gazette shards inspect`) and gazette-py's
    stores before they adopted Gazette's encoding: `{"sequencer": Checkpoint.to_dict(),
    "ack_intents": {journal: base64 bytes}}`.
    """

    sequencer: Checkpoint = dataclasses.field(default_factory=lambda: Checkpoint({}, []))
    ack_intents: Mapping[str, bytes] = dataclasses.field(default_factory=dict)

    @property
    def read_through(self) -> dict[str, int]:
        return dict(self.sequencer.offsets)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sequencer": self.sequencer.to_dict(),
            "ack_intents": {j: base64.b64encode(b).decode() for j, b in self.ack_intents.items()},
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConsumerCheckpoint:
        if not isinstance(data, Mapping) or set(data) != {"sequencer", "ack_intents"}:
            raise ValidationError(
                f"consumer checkpoint {data!r:.200} is not an object with exactly the keys sequencer, ack_intents"
            )
        intents = data["ack_intents"]
        if not isinstance(intents, Mapping):
            raise ValidationError(f"consumer checkpoint ack_intents {intents!r:.200} is not an object")
        try:
            decoded = {str(j): base64.b64decode(v, validate=True) for j, v in intents.items()}
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"consumer checkpoint ack_intents hold a value that is not base64: {exc}"
            ) from None
        return cls(Checkpoint.from_dict(data["sequencer"]), decoded)

    @classmethod
    def from_json(cls, raw: bytes | str) -> ConsumerCheckpoint:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValidationError(f"stored consumer checkpoint is not JSON: {exc}") from None
        return cls.from_dict(data)

    def to_proto(self) -> shard_pb2.Checkpoint:
        """Gazette's `consumer.Checkpoint`: the sequencer's sources and these ack_intents."""
        msg = self.sequencer.to_proto()
        for journal, intent in self.ack_intents.items():
            msg.ack_intents[journal] = intent
        return msg

    def to_bytes(self) -> bytes:
        """The marshaled `consumer.Checkpoint`, deterministic (map entries sorted by journal; Gazette
        writes them in Go's map order, which decodes the same). An empty checkpoint is b""."""
        return self.to_proto().SerializeToString(deterministic=True)

    @classmethod
    def from_proto(cls, msg: shard_pb2.Checkpoint, where: str = "consumer checkpoint") -> ConsumerCheckpoint:
        """Reads Gazette's `consumer.Checkpoint`, validating it (see `Checkpoint.from_proto`); an
        ACK intent needs a non-empty journal name. Errors are ValidationErrors naming `where`."""
        sequencer = Checkpoint.from_proto(msg, where)
        intents: dict[str, bytes] = {}
        for journal, intent in sorted(msg.ack_intents.items()):
            if not journal:
                raise ValidationError(f"{where}.ack_intents has an empty journal name")
            intents[journal] = bytes(intent)
        return cls(sequencer, intents)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "consumer checkpoint") -> ConsumerCheckpoint:
        """Unmarshals and validates a `consumer.Checkpoint` (b"" is the empty checkpoint). Raises
        ValidationError naming `where` for bytes that are not one."""
        if not isinstance(raw, bytes | bytearray | memoryview):
            raise ValidationError(f"{where} is a {type(raw).__name__}, expected protobuf bytes")
        raw = bytes(raw)
        try:
            msg = shard_pb2.Checkpoint.FromString(raw)
        except DecodeError as exc:
            raise ValidationError(
                f"{where} ({len(raw)} bytes, beginning {raw[:16].hex() or '(empty)'}) is not a marshaled "
                f"consumer.Checkpoint protobuf: {exc}"
            ) from None
        return cls.from_proto(msg, where)


class Store:
    """What the transaction loop needs of a store; subclass it (see SQLStore, MemoryStore).

    `side_effects` is the shard's SideEffects when the store keeps side-effect registrations with
    its checkpoint (SQLStore and JSONFileStore, given `side_effects=`): its restore calls
    `side_effects.bind(...)`, its commit persists `side_effects.committing`, and `destroy` closes it.
    """

    side_effects: SideEffects | None = None

    def restore_checkpoint(self, shard: Any) -> ConsumerCheckpoint:
        """The last committed checkpoint (an empty one at first); installs this primary's fence."""
        raise NotImplementedError

    def start_commit(
        self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]
    ) -> concurrent.futures.Future:
        """Commits the transaction with `checkpoint` after every `wait_for` future succeeded (failing
        if one failed, or with FencingError if the fence moved). Returns the commit's future."""
        raise NotImplementedError

    def destroy(self) -> None:
        """Releases resources (connections, files); the store is not used afterwards."""


def wait_all(futures: Iterable[concurrent.futures.Future], what: str) -> None:
    """Blocks until every future is done; raises if one failed (naming `what` waited)."""
    futures = list(futures)
    concurrent.futures.wait(futures)
    for f in futures:
        if f.cancelled():
            raise AppendError(f"{what}: an append it depends on was cancelled")
        exc = f.exception()
        if exc is not None:
            raise AppendError(f"{what}: an append it depends on failed: {exc}") from exc


class MemoryStore(Store):
    """State in a plain dict (`state`), committed with a checkpoint in memory. At-least-once only:
    everything is lost with the process, and a new primary starts from the sources' min offsets."""

    def __init__(self) -> None:
        self.state: dict[Any, Any] = {}
        self.checkpoint = ConsumerCheckpoint()

    def restore_checkpoint(self, shard: Any) -> ConsumerCheckpoint:
        return self.checkpoint

    def start_commit(
        self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]
    ) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        pending = [f for f in wait_for if not f.done()]
        failed = [f for f in wait_for if f.done() and (f.cancelled() or f.exception() is not None)]

        def finish() -> None:
            try:
                wait_all(list(wait_for), "memory store commit")
            except GazetteError as exc:
                future.set_exception(exc)
                return
            self.checkpoint = checkpoint
            future.set_result(checkpoint)

        if not pending or failed:
            finish()
            return future
        remaining = [len(pending)]
        lock = threading.Lock()

        def one_done(_: concurrent.futures.Future) -> None:  # runs on whichever thread finished `_`
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                finish()

        for f in pending:
            f.add_done_callback(one_done)
        return future
