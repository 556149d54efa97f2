"""The `gazette` sink driver's durable ACK intents: what a commit will append, recorded before any of
it is (docs/sink.md#exactly-once).

One record per commit: `<dir>/<name>.intents.json` (name `write-<writeId>` for a batch write,
`batch-<batchId>` for a micro-batch, under `<checkpointLocation>/gazette-sink/`), written whole to a
temporary file, fsynced and renamed, so a record is either absent or complete. A record stays once
written: a driver restarted after it (however far its ACK appends got) appends the recorded ACKs
again, which readers treat as the duplicates they are, and the rows are never written a second
time. `<name>.done` notes that every ACK landed.

`fault(point)` is the hook of the sink's fault tests: when FRAGMENTS_IO_SINK_FAULT is
`<point>:<pid file>`, reaching `point` SIGKILLs the processes listed in the file (the test's driver
and its JVM) and this one, as a crash of the driver there would.
"""

from __future__ import annotations

import base64
import json
import os
import signal
from collections.abc import Iterable

from fragments_io.errors import SinkCommitError

FAULT_ENV = "FRAGMENTS_IO_SINK_FAULT"
FAULT_POINTS = ("before-record", "after-record", "after-first-ack", "after-acks")
SINK_SUBDIR = "gazette-sink"
RECORD_VERSION = 1
KEEP_STREAM_RECORDS = 100  # micro-batch records kept behind the newest (Spark's minBatchesToRetain)

Acks = list[tuple[str, bytes]]  # (journal, framed ACK messages)


def fault(point: str) -> None:
    """Test hook: dies at `point` as a SIGKILLed driver would (see the module docstring)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec or spec.split(":", 1)[0] != point:
        return
    pid_file = spec.split(":", 1)[1] if ":" in spec else ""
    if pid_file:
        with open(pid_file) as f:
            for word in f.read().split():
                try:
                    os.kill(int(word), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
    os.kill(os.getpid(), signal.SIGKILL)


class IntentLog:
    """Intent records of one sink's commits in a directory of the driver's filesystem."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @classmethod
    def for_stream(cls, checkpoint_location: str) -> IntentLog:
        return cls(os.path.join(checkpoint_location, SINK_SUBDIR))

    def _path(self, name: str, suffix: str) -> str:
        return os.path.join(self.directory, f"{name}.{suffix}")

    def recorded(self, name: str) -> Acks | None:
        """The ACKs recorded for commit `name`, or None if it has no record."""
        path = self._path(name, "intents.json")
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SinkCommitError(f"intent record {path} cannot be read: {exc}") from None
        if doc.get("version") != RECORD_VERSION or doc.get("name") != name:
            raise SinkCommitError(f"intent record {path} is not a version-{RECORD_VERSION} record of {name}")
        return [(j, base64.b64decode(a)) for j, a in doc["acks"]]

    def record(self, name: str, acks: Iterable[tuple[str, bytes]]) -> None:
        """Records commit `name`'s ACKs durably (write, fsync, rename, fsync the directory)."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            path = self._path(name, "intents.json")
            tmp = f"{path}.tmp-{os.getpid()}"
            doc = {
                "version": RECORD_VERSION,
                "name": name,
                "acks": [[j, base64.b64encode(a).decode()] for j, a in acks],
            }
            with open(tmp, "wb") as f:
                f.write(json.dumps(doc).encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            self._sync_dir()
        except OSError as exc:
            raise SinkCommitError(
                f"cannot record the ACK intents of {name} in {self.directory}: {exc}"
            ) from None

    def mark_done(self, name: str) -> None:
        """Notes that every ACK of `name` landed (informational: a record is completed either way)."""
        try:
            with open(self._path(name, "done"), "wb") as f:
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass

    def is_done(self, name: str) -> bool:
        return os.path.exists(self._path(name, "done"))

    def prune_batches_before(self, batch_id: int) -> None:
        """Drops the records of micro-batches older than `batch_id - KEEP_STREAM_RECORDS` (done ones only)."""
        limit = batch_id - KEEP_STREAM_RECORDS
        if limit <= 0:
            return
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for entry in names:
            if not entry.startswith("batch-") or not entry.endswith(".done"):
                continue
            try:
                n = int(entry[len("batch-") : -len(".done")])
            except ValueError:
                continue
            if n < limit:
                for suffix in ("intents.json", "done"):
                    try:
                        os.remove(self._path(f"batch-{n}", suffix))
                    except OSError:
                        pass

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
