"""JSONFileStore: a JSON document kept as a file of a shard's recorded directory (reference 7.6).

`state` is any JSON-serializable value the application mutates while consuming. Each commit writes
`{"state": ..., "checkpoint": ...}` to `next.json` and renames it to `state.json`, and records those
operations in one recovery-log append made after the commit's dependencies succeeded: state and
checkpoint commit together. The fence is the recovery log's author register: a deposed primary's
commit fails with FencingError. Restoring reads `state.json` of the directory the Player rebuilt.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Iterable
from typing import Any

import orjson

from gazette.consumer.recoverylog.recorder import Recorder
from gazette.consumer.store import ConsumerCheckpoint, Store
from gazette.protocol.errors import GazetteError, ValidationError

STATE_FILE = "state.json"
NEXT_FILE = "next.json"


class JSONFileStore(Store):
    """Store of a shard with a recovery log: `state` (a dict unless given) persisted as JSON.

    Build it in `Application.new_store(shard, recorder)` as `JSONFileStore(recorder)`; the
    ShardSpec needs `recovery_log_prefix` and `hint_prefix` (otherwise `recorder` is None).
    """

    def __init__(self, recorder: Recorder | None, state: Any = None) -> None:
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

    @property
    def path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    def restore_checkpoint(self, shard: Any) -> ConsumerCheckpoint:
        """Loads `state` and the checkpoint from `state.json` (none yet: the initial state, an empty
        checkpoint). The fence was installed by the recovery log's hand-off."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return ConsumerCheckpoint()
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValidationError(
                f"{self.path} of recovery log {self.recorder.log} is not JSON: {exc}"
            ) from None
        if not isinstance(doc, dict) or set(doc) != {"state", "checkpoint"}:
            raise ValidationError(
                f"{self.path} of recovery log {self.recorder.log} is not an object with exactly the keys "
                "state, checkpoint"
            )
        self.state = doc["state"]
        return ConsumerCheckpoint.from_dict(doc["checkpoint"])

    def start_commit(
        self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]
    ) -> concurrent.futures.Future:
        """Writes and records the state with `checkpoint`; the future resolves once the recovery log
        holds them (FencingError if a newer primary took the log, or the failure of a `wait_for`)."""
        try:
            data = orjson.dumps({"state": self.state, "checkpoint": checkpoint.to_dict()})
        except TypeError as exc:
            return _failed(
                ValidationError(f"JSONFileStore state of {self.recorder.log} is not JSON-serializable: {exc}")
            )
        try:
            next_path = os.path.join(self.directory, NEXT_FILE)
            with open(next_path, "wb") as f:
                f.write(data)
            os.replace(next_path, self.path)
            with self.recorder.transaction(wait_for) as txn:
                txn.write_at(txn.create(NEXT_FILE), data, 0)
                txn.rename(NEXT_FILE, STATE_FILE)
        except GazetteError as exc:
            return _failed(exc)
        return self.recorder.outcome(txn.future, checkpoint)

    def destroy(self) -> None:
        """Nothing to release: the shard removes the recorded directory."""


def _failed(exc: BaseException) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(exc)
    return future
