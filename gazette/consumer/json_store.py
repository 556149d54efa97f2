"""JSONFileStore: state and checkpoint as a JSON file of a shard's recorded directory
(docs/semantics.md#consumer-stores).

`state` is any JSON-serializable value the application mutates while consuming. Each commit writes
`next.json` and renames it to `state.json`, and records those operations in one recovery-log append
made after the commit's dependencies succeeded: state and checkpoint commit together. The fence is
the recovery log's author register: a deposed primary's commit fails with FencingError. Restoring
reads `state.json` of the directory the Player rebuilt.

The file is laid out as Gazette's JSONFileStore (consumer/store_json_file.go) writes it: three JSON
values, each on a line of its own (Go's json.Encoder)::

    {"<journal>":<read-through offset>,...}
    <state>
    {"sources":{"<journal>":{"read_through":<offset>,"producers":[{"id":"<base64 producer id>",
     "state":{"last_ack":<clock>,"begin":<offset>}},...]},...},"ack_intents":{"<journal>":"<base64>"}}

The first is the checkpoint's read-through offset of every source; the third the whole checkpoint,
Gazette's `consumer.Checkpoint` as Go's encoding/json renders that struct (its field names; a zero
read_through, last_ack or begin, an empty id and empty ack_intents are left out, and a source without
producers has "producers":null). On restore, as in Gazette, the first line's offsets override the
checkpoint's read_through, and a file of only the first two values is a checkpoint of offsets alone.
A file of gazette-py's earlier format (one object, `{"state": ..., "checkpoint":
ConsumerCheckpoint.to_dict()}`) is read too, and the next commit rewrites it in Gazette's layout;
anything else is refused with a ValidationError.

With `side_effects=` (a SideEffects), the registrations of the last committed transaction are a
second file of the directory, `side_effects.json` (`{"side_effects": [SideEffectRecord.to_dict(),
...]}`), recorded in the same recovery-log append as `state.json` (so they commit together) whenever
they change; `state.json` stays exactly Gazette's. The attempt number of the side effects is the
recorder's first sequence number, which grows with every hand-off as SQLStore's fence does.
"""

from __future__ import annotations

import base64
import binascii
import concurrent.futures
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from gazette.consumer.recoverylog.recorder import Recorder
from gazette.consumer.side_effects import SideEffectRecord, SideEffects
from gazette.consumer.store import ConsumerCheckpoint, Store
from gazette.protocol import shard_pb2
from gazette.protocol.errors import GazetteError, ValidationError

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
NEXT_FILE = "next.json"
SIDE_EFFECTS_FILE = "side_effects.json"
NEXT_SIDE_EFFECTS_FILE = "next_side_effects.json"
_INT64 = (-(1 << 63), 1 << 63)
_OFFSET = (0, 1 << 63)
_UINT64 = (0, 1 << 64)
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


class StateFile(NamedTuple):
    """A decoded `state.json`: the application state, the checkpoint, and whether the file was in
    gazette-py's earlier one-object format (rewritten in Gazette's layout by the next commit)."""

    state: Any
    checkpoint: ConsumerCheckpoint
    legacy: bool = False


def encode_state_file(state: Any, checkpoint: ConsumerCheckpoint) -> bytes:
    """`state.json` as Gazette's JSONFileStore writes it: offsets, state, checkpoint, one per line.
    Raises TypeError (orjson's JSONEncodeError) if `state` is not JSON-serializable."""
    msg = checkpoint.to_proto()
    journals = sorted(msg.sources)  # Go's encoding/json writes map keys sorted
    offsets = {j: msg.sources[j].read_through for j in journals}
    sources = {}
    for journal in journals:
        source = msg.sources[journal]
        rendered: dict[str, Any] = {}
        if source.read_through:
            rendered["read_through"] = source.read_through
        rendered["producers"] = [_render_entry(entry) for entry in source.producers] or None
        sources[journal] = rendered
    doc: dict[str, Any] = {"sources": sources}
    if msg.ack_intents:
        doc["ack_intents"] = {
            j: base64.b64encode(msg.ack_intents[j]).decode() for j in sorted(msg.ack_intents)
        }
    return b"".join(orjson.dumps(value) + b"\n" for value in (offsets, state, doc))


def _render_entry(entry: shard_pb2.Checkpoint.Source.ProducerEntry) -> dict[str, Any]:
    rendered: dict[str, Any] = {}
    if entry.id:
        rendered["id"] = base64.b64encode(entry.id).decode()
    state: dict[str, int] = {}
    if entry.state.last_ack:
        state["last_ack"] = entry.state.last_ack
    if entry.state.begin:
        state["begin"] = entry.state.begin
    rendered["state"] = state
    return rendered


def decode_state_file(raw: bytes, where: str = STATE_FILE) -> StateFile:
    """Reads a `state.json` of either layout (see the module docstring). Raises ValidationError
    naming `where` and the offending value or field for anything else."""
    values = _json_values(raw, where)
    if len(values) == 1 and isinstance(values[0], dict) and set(values[0]) == {"state", "checkpoint"}:
        try:
            checkpoint = ConsumerCheckpoint.from_dict(values[0]["checkpoint"])
        except ValidationError as exc:
            raise ValidationError(f"{where} (gazette-py's earlier state file format): {exc}") from None
        return StateFile(values[0]["state"], checkpoint, legacy=True)
    if len(values) not in (2, 3):
        raise ValidationError(
            f"{where} holds {len(values)} JSON value(s): expected Gazette's JSONFileStore layout (offsets, "
            'state and checkpoint, one per line) or gazette-py\'s earlier {"state": ..., "checkpoint": ...}'
        )
    offsets = _object(values[0], f"{where}: offsets")
    msg = _checkpoint_from_go_json(values[2] if len(values) == 3 else None, f"{where}: checkpoint")
    for journal, offset in offsets.items():  # as Gazette: the offsets line overrides read_through
        msg.sources[journal].read_through = _integer(offset, _OFFSET, f"{where}: offsets[{journal!r}]")
    return StateFile(values[1], ConsumerCheckpoint.from_proto(msg, f"{where}: checkpoint"))


def _json_values(raw: bytes, where: str) -> list[Any]:
    """The JSON values of `raw`, in order (Go's json.Decoder reads them so, whitespace between)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{where} is not UTF-8 text: {exc}") from None
    decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    values: list[Any] = []
    at = _JSON_SPACE.match(text, 0).end()  # type: ignore[union-attr]
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except (json.JSONDecodeError, ValueError) as exc:
            raise ValidationError(f"{where} is not JSON: {exc}") from None
        values.append(value)
        at = _JSON_SPACE.match(text, at).end()  # type: ignore[union-attr]
    return values


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _object(value: Any, where: str, keys: tuple[str, ...] = ()) -> Mapping[str, Any]:
    """`value` as an object (null is an empty one, as Go decodes it); with `keys`, only those."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(f"{where} is {json.dumps(value)[:60]}, expected an object")
    unknown = sorted(k for k in value if k not in keys) if keys else []
    if unknown:
        raise ValidationError(f"{where} has unknown key(s) {unknown} (expected some of {list(keys)})")
    return value


def _integer(value: Any, limits: tuple[int, int], where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not limits[0] <= value < limits[1]:
        raise ValidationError(
            f"{where} is {json.dumps(value)[:60]}, expected an integer in [{limits[0]}, {limits[1]})"
        )
    return value


def _bytes(value: Any, where: str) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise ValidationError(f"{where} is {json.dumps(value)[:60]}, expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"{where} {value[:60]!r} is not base64") from None


def _checkpoint_from_go_json(value: Any, where: str) -> shard_pb2.Checkpoint:
    """Gazette's `consumer.Checkpoint` from Go's encoding/json rendering of it (null or absent
    fields are zero, as Go decodes them; keys Go's struct lacks are refused)."""
    doc = _object(value, where, ("sources", "ack_intents"))
    msg = shard_pb2.Checkpoint()
    for journal, source in _object(doc.get("sources"), f"{where}.sources").items():
        at = f"{where}.sources[{journal!r}]"
        source = _object(source, at, ("read_through", "producers"))
        target = msg.sources[journal]
        target.read_through = _integer(source.get("read_through"), _INT64, f"{at}.read_through")
        producers = source.get("producers")
        if producers is not None and not isinstance(producers, list):
            raise ValidationError(f"{at}.producers is {json.dumps(producers)[:60]}, expected a list or null")
        for i, entry in enumerate(producers or ()):
            entry_at = f"{at}.producers[{i}]"
            entry = _object(entry, entry_at, ("id", "state"))
            state = _object(entry.get("state"), f"{entry_at}.state", ("last_ack", "begin"))
            added = target.producers.add(id=_bytes(entry.get("id"), f"{entry_at}.id"))
            added.state.SetInParent()
            added.state.last_ack = _integer(state.get("last_ack"), _UINT64, f"{entry_at}.state.last_ack")
            added.state.begin = _integer(state.get("begin"), _INT64, f"{entry_at}.state.begin")
    for journal, intent in _object(doc.get("ack_intents"), f"{where}.ack_intents").items():
        msg.ack_intents[journal] = _bytes(intent, f"{where}.ack_intents[{journal!r}]")
    return msg


class JSONFileStore(Store):
    """Store of a shard with a recovery log: `state` (a dict unless given) persisted as JSON.

    Build it in `Application.new_store(shard, recorder)` as `JSONFileStore(recorder)`; the
    ShardSpec needs `recovery_log_prefix` and `hint_prefix` (otherwise `recorder` is None).
    `side_effects` (a SideEffects) keeps the shard's side-effect registrations in `side_effects.json`.
    """

    def __init__(
        self, recorder: Recorder | None, state: Any = None, *, side_effects: SideEffects | None = None
    ) -> None:
        if recorder is None:
            raise ValidationError(
                "JSONFileStore needs a recovery log: give the ShardSpec a recovery_log_prefix and a "
                "hint_prefix, and pass new_store's recorder"
            )
        if not isinstance(recorder, Recorder):
            raise TypeError(f"{recorder!r} is not a gazette recovery-log Recorder")
        self.recorder = recorder
        self.directory = recorder.directory
        self.state: Any = {} if state is None else state
        self.side_effects = side_effects
        self._stored_side_effects: tuple[SideEffectRecord, ...] = ()  # what side_effects.json holds

    @property
    def path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    def restore_checkpoint(self, shard: Any) -> ConsumerCheckpoint:
        """Loads `state` and the checkpoint from `state.json` (none yet: the initial state, an empty
        checkpoint). The fence was installed by the recovery log's hand-off. A file in gazette-py's
        earlier format is read, and the next commit rewrites it in Gazette's layout."""
        if self.side_effects is not None:
            self._stored_side_effects = self._read_side_effects()
            self.side_effects.bind(shard.id, shard.fqn, self.recorder.first_seq_no, self._stored_side_effects)
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return ConsumerCheckpoint()
        decoded = decode_state_file(raw, f"{self.path} of recovery log {self.recorder.log}")
        if decoded.legacy:
            log.info(
                "%s of recovery log %s is in gazette-py's earlier format: the next commit rewrites it in "
                "Gazette's JSONFileStore layout",
                self.path,
                self.recorder.log,
            )
        self.state = decoded.state
        return decoded.checkpoint

    def start_commit(
        self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]
    ) -> concurrent.futures.Future:
        """Writes and records the state with `checkpoint`; the future resolves once the recovery log
        holds them (FencingError if a newer primary took the log, or the failure of a `wait_for`)."""
        try:
            data = encode_state_file(self.state, checkpoint)
        except TypeError as exc:
            return _failed(
                ValidationError(f"JSONFileStore state of {self.recorder.log} is not JSON-serializable: {exc}")
            )
        effects = self.side_effects
        committing = effects.committing if effects is not None else ()
        effects_data = None
        if committing != self._stored_side_effects:
            effects_data = orjson.dumps({"side_effects": [r.to_dict() for r in committing]})
        try:
            writes = [(NEXT_FILE, STATE_FILE, data)]
            if effects_data is not None:
                writes.append((NEXT_SIDE_EFFECTS_FILE, SIDE_EFFECTS_FILE, effects_data))
            for name, final, content in writes:
                next_path = os.path.join(self.directory, name)
                with open(next_path, "wb") as f:
                    f.write(content)
                os.replace(next_path, os.path.join(self.directory, final))
            with self.recorder.transaction(wait_for) as txn:
                for name, final, content in writes:
                    txn.write_at(txn.create(name), content, 0)
                    txn.rename(name, final)
        except GazetteError as exc:
            return _failed(exc)
        future = self.recorder.outcome(txn.future, checkpoint)
        if effects_data is not None:
            future.add_done_callback(lambda f: self._stored(f, committing))
        return future

    def _stored(self, future: concurrent.futures.Future, committing: tuple[SideEffectRecord, ...]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._stored_side_effects = committing

    def _read_side_effects(self) -> tuple[SideEffectRecord, ...]:
        path = os.path.join(self.directory, SIDE_EFFECTS_FILE)
        where = f"{path} of recovery log {self.recorder.log}"
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return ()
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValidationError(f"{where} is not JSON: {exc}") from None
        records = _object(doc, where, ("side_effects",)).get("side_effects")
        if not isinstance(records, list):
            raise ValidationError(f"{where}: side_effects is {json.dumps(records)[:60]}, expected a list")
        return tuple(
            SideEffectRecord.from_dict(r, f"{where}: side_effects[{i}]") for i, r in enumerate(records)
        )

    def destroy(self) -> None:
        """Closes the side effects; the shard removes the recorded directory."""
        if self.side_effects is not None:
            self.side_effects.close()


def _failed(exc: BaseException) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(exc)
    return future
