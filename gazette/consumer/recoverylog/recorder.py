"""Recorder: appends the file operations of a local directory to its recovery log, fenced
(docs/semantics.md#recovery-logs).

Every operation is sequenced by the recorder's FSM and appended through an AppendService with
`check_registers = {author: <author in base 32>}`. The Player's hand-off set that register to this
recorder's author, so once a newer player hands off to another author, the broker refuses this
recorder's appends with REGISTER_MISMATCH: that is terminal (never retried), and the recorder stops
for good with a FencingError. A `transaction()` appends its operations atomically (one append).

Operations are recorded as Gazette's Recorder records them (recorder.go; the record format is in
`ops`): paths as "/"-separated paths under the directory with a leading "/", a create of an existing
path (a truncation) as its unlink then a create, a rename as the unlink of what the target held, a
link of the target and the unlink of the source, and a rename onto a property path ("/IDENTITY") as a
property op holding the renamed file's content (property paths cannot be created, written, linked or
removed otherwise).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

from gazette.client.append_service import AppendFuture, AppendWriter, AsyncAppendService
from gazette.consumer.recoverylog.fsm import FSM, Outcome
from gazette.consumer.recoverylog.hints import FSMHints
from gazette.consumer.recoverylog.ops import (
    AUTHOR_REGISTER,
    RecordedOp,
    RecoveryLogError,
    author_fence,
    encode_op,
)
from gazette.consumer.store import FencingError
from gazette.protocol.errors import AppendError, GazetteError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import Status

T = TypeVar("T")

STAGING_DIR = ".fnodes"  # where a Player stages files under the directory; never recorded
PROPERTY_FILES = frozenset({"/IDENTITY"})  # recorded as properties, as Gazette's recorder does


class Recorder:
    """Records operations on files under `directory` into `fsm.log` as author `author`.

    Built from a completed Player (its FSM, its directory, the write head after its hand-off).
    Methods are thread-safe; each returns without waiting for the append. Once an append fails the
    recorder is stopped: `error` is set (a FencingError when fenced out) and every call raises it.
    """

    def __init__(
        self, service: AsyncAppendService, fsm: FSM, author: int, directory: str, write_head: int = 0
    ) -> None:
        self.service = service
        self.fsm = fsm
        self.log = fsm.log
        self.author = author
        self.directory = os.path.abspath(directory)
        self.fence = author_fence(author)
        self.check_registers = LabelSelector(include={AUTHOR_REGISTER: self.fence})
        self.write_head = write_head  # a lower bound of where the next op lands (for hints)
        # This author's first sequence number: every hand-off is sequenced after all it read, so it
        # is greater than any sequence number an earlier author recorded. It orders authors as
        # SQLStore's fence orders primaries (JSONFileStore's side-effect attempt number).
        self.first_seq_no = fsm.next_seq_no
        self._lock = threading.RLock()
        self._error: GazetteError | None = None
        self._error_callbacks: list[Callable[[GazetteError], None]] = []

    def __repr__(self) -> str:
        return f"Recorder({self.log!r}, author={self.fence}, next_seq_no={self.fsm.next_seq_no})"

    # ---- state

    @property
    def error(self) -> GazetteError | None:
        """Why the recorder stopped (FencingError: a newer author took the log), or None."""
        return self._error

    def add_error_callback(self, callback: Callable[[GazetteError], None]) -> None:
        """Calls `callback(error)` once the recorder stops (on whichever thread saw the failure)."""
        with self._lock:
            if self._error is None:
                self._error_callbacks.append(callback)
                return
        callback(self._error)

    def recorded_path(self, path: str | os.PathLike[str]) -> str:
        """`path` (absolute under the directory, or relative to it) as it is recorded: "/"-separated,
        with a leading "/" (Gazette's form: the path with the directory stripped)."""
        raw = os.fspath(path)
        full = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(self.directory, raw))
        rel = os.path.relpath(full, self.directory)
        parts = rel.split(os.sep)
        if rel == "." or parts[0] == ".." or parts[0] == STAGING_DIR:
            raise RecoveryLogError(
                f'path "{raw}" is not a file under the recorded directory "{self.directory}" '
                f'(nor may it be under its "{STAGING_DIR}" staging directory)'
            )
        return "/" + "/".join(parts)

    def fnode_of(self, path: str | os.PathLike[str]) -> int | None:
        """The fnode of the recorded file at `path`, or None."""
        return self.fsm.links.get(self.recorded_path(path))

    # ---- recording

    def transaction(self, dependencies: Iterable[concurrent.futures.Future] = ()) -> RecorderTxn:
        """`with recorder.transaction() as txn: txn.create(...); ...`: the operations are appended
        together in one append, after `dependencies` succeeded (and not at all if one failed)."""
        return RecorderTxn(self, dependencies)

    def record_create(self, path: str | os.PathLike[str]) -> int:
        """Records the creation (or truncation) of `path`; returns its fnode."""
        with self.transaction() as txn:
            return txn.create(path)

    def record_write_at(self, fnode: int, data: bytes, offset: int) -> AppendFuture:
        with self.transaction() as txn:
            txn.write_at(fnode, data, offset)
        return txn.future

    def record_remove(self, path: str | os.PathLike[str]) -> AppendFuture:
        with self.transaction() as txn:
            txn.remove(path)
        return txn.future

    def record_link(self, src: str | os.PathLike[str], target: str | os.PathLike[str]) -> AppendFuture:
        with self.transaction() as txn:
            txn.link(src, target)
        return txn.future

    def record_rename(self, src: str | os.PathLike[str], target: str | os.PathLike[str]) -> AppendFuture:
        with self.transaction() as txn:
            txn.rename(src, target)
        return txn.future

    def barrier(self, wait_for: Iterable[concurrent.futures.Future] = ()) -> AppendFuture:
        """A future resolved once every operation recorded so far is committed to the log, appended
        after `wait_for` succeeded (fenced like every append: it fails once fenced out)."""
        with self.transaction(wait_for) as txn:
            pass
        return txn.future

    def build_hints(self) -> concurrent.futures.Future[FSMHints]:
        """Hints of the current state, resolved once every operation they name is committed."""
        with self.transaction() as txn:
            hints = self.fsm.build_hints()
        return self.outcome(txn.future, hints)

    def outcome(self, future: concurrent.futures.Future, value: T) -> concurrent.futures.Future[T]:
        """A future of `value` once `future` (an append of this recorder) succeeded; else failed with
        the recorder's error (FencingError when fenced out)."""
        out: concurrent.futures.Future[T] = concurrent.futures.Future()

        def done(f: concurrent.futures.Future) -> None:
            exc: BaseException | None = (
                AppendError(f"append to {self.log} was cancelled") if f.cancelled() else f.exception()
            )
            if exc is None:
                out.set_result(value)
            else:
                out.set_exception(self._stop(exc))

        future.add_done_callback(done)
        return out

    # ---- internals

    def _stop(self, exc: BaseException) -> GazetteError:
        """Stops the recorder because of `exc` (first cause wins); returns the recorder's error."""
        with self._lock:
            if self._error is None:
                if isinstance(exc, GazetteError) and exc.status == Status.REGISTER_MISMATCH:
                    registers = getattr(exc, "registers", None)
                    self._error = FencingError(
                        f"recovery log {self.log}: the append was refused because the author register is no "
                        f"longer {AUTHOR_REGISTER}={self.fence} (registers now {registers!r}): a newer "
                        "primary took over the log, and this recorder stops"
                    )
                elif isinstance(exc, GazetteError) and not isinstance(exc, FencingError | RecoveryLogError):
                    self._error = RecoveryLogError(
                        f"an append to recovery log {self.log} failed ({exc}); the recorder stops, as its "
                        "state no longer matches the log"
                    )
                else:
                    self._error = exc if isinstance(exc, GazetteError) else RecoveryLogError(str(exc))
                callbacks, self._error_callbacks = self._error_callbacks, []
            else:
                callbacks = []
            error = self._error
        for cb in callbacks:
            cb(error)
        return error

    def _appended(self, future: concurrent.futures.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            self._stop(future.exception() or AppendError(f"append to {self.log} was cancelled"))
            return
        end = future.result().end
        with self._lock:
            self.write_head = max(self.write_head, end)


class RecorderTxn:
    """Operations appended together (see `Recorder.transaction`). Holds the recorder's lock and
    its append section from enter to exit: keep the block short and never await inside it."""

    def __init__(self, recorder: Recorder, dependencies: Iterable[concurrent.futures.Future]) -> None:
        self.recorder = recorder
        self._dependencies = list(dependencies)
        self._section: Any = None
        self._writer: AppendWriter | None = None
        self._applied = 0
        self._future: AppendFuture | None = None

    @property
    def future(self) -> AppendFuture:
        """The future of this transaction's append (of its batch), once entered."""
        if self._future is None:
            raise RecoveryLogError("a recorder transaction has no append before it is entered")
        return self._future

    def __enter__(self) -> RecorderTxn:
        r = self.recorder
        r._lock.acquire()
        try:
            if r._error is not None:
                raise r._error
            section = r.service.start_append(
                r.log, check_registers=r.check_registers, dependencies=self._dependencies
            )
            try:
                self._writer = section.__enter__()
            except GazetteError as exc:  # the log's appends latched an earlier failure
                raise r._stop(exc) from None
            self._section = section
            self._future = self._writer.future
        except BaseException:
            r._lock.release()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        r = self.recorder
        try:
            self._section.__exit__(exc_type, exc, tb)  # an exception discards this transaction's bytes
            if exc is not None and self._applied:
                r._stop(RecoveryLogError(
                    f"a recorder transaction on {r.log} failed after sequencing {self._applied} operation(s) "
                    f"({exc}); the recorder stops, as its state no longer matches the log"
                ))  # fmt: skip
        finally:
            r._lock.release()
        if exc is None and self._future is not None:
            self._future.add_done_callback(r._appended)

    # ---- operations (paths are relative to the directory, or absolute under it)

    def create(self, path: str | os.PathLike[str]) -> int:
        """Creates (or truncates) the file at `path`; returns its fnode."""
        rel = self._not_property(path, "create of")
        previous = self.recorder.fsm.links.get(rel)
        if previous is not None:
            self._process(RecordedOp(0, 0, 0, "unlink", rel, previous))  # truncation: a new fnode
        self._process(RecordedOp(0, 0, 0, "create", rel))
        return self.recorder.fsm.links[rel]

    def write_at(self, fnode: int, data: bytes, offset: int) -> None:
        """Writes `data` at byte `offset` of the file `fnode`."""
        if fnode not in self.recorder.fsm.live_nodes:
            raise RecoveryLogError(f"write to fnode {fnode}, which is not a live file of {self.recorder.log}")
        if offset < 0:
            raise RecoveryLogError(f"write at offset {offset} of fnode {fnode} (expected >= 0)")
        self._process(RecordedOp(0, 0, 0, "write", fnode=fnode, offset=offset, length=len(data)), data)

    def write(self, path: str | os.PathLike[str], data: bytes, offset: int = 0) -> None:
        """Writes `data` at `offset` of the existing file at `path`."""
        self.write_at(self._fnode(path, "write to"), data, offset)

    def remove(self, path: str | os.PathLike[str]) -> None:
        rel = self._not_property(path, "remove of")
        self._process(RecordedOp(0, 0, 0, "unlink", rel, self._fnode_at(rel, "remove of")))

    def link(self, src: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        """Links `target` to the file at `src` (a hard link); `target` must not exist."""
        fnode, rel = self._fnode(src, "link of"), self._not_property(target, "link to")
        if rel in self.recorder.fsm.links:
            raise RecoveryLogError(f'link target "{rel}" already exists in {self.recorder.log}')
        self._process(RecordedOp(0, 0, 0, "link", rel, fnode))

    def rename(self, src: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        """Renames `src` to `target`, replacing a file at `target`. Renamed onto a property path, the
        file (already renamed in the directory) becomes a property holding its content."""
        src_rel, rel = self.recorder.recorded_path(src), self.recorder.recorded_path(target)
        fnode = self._fnode_at(src_rel, "rename of")
        if src_rel == rel:
            return
        content = None
        if rel in PROPERTY_FILES:
            local = os.path.join(self.recorder.directory, *rel.split("/")[1:])
            try:
                with open(local, "rb") as f:
                    content = f.read().decode("utf-8", "surrogateescape")
            except OSError as exc:
                raise RecoveryLogError(f'rename onto property "{rel}": reading {local}: {exc}') from None
        previous = self.recorder.fsm.links.get(rel)
        if previous is not None:
            self._process(RecordedOp(0, 0, 0, "unlink", rel, previous))
        if content is not None:
            self._process(RecordedOp(0, 0, 0, "property", rel, content=content))
        else:
            self._process(RecordedOp(0, 0, 0, "link", rel, fnode))
        self._process(RecordedOp(0, 0, 0, "unlink", src_rel, fnode))

    def _fnode(self, path: str | os.PathLike[str], what: str) -> int:
        return self._fnode_at(self.recorder.recorded_path(path), what)

    def _fnode_at(self, rel: str, what: str) -> int:
        """The fnode at recorded path `rel`."""
        fnode = self.recorder.fsm.links.get(rel)
        if fnode is None:
            raise RecoveryLogError(f'{what} "{rel}", which is not a recorded file of {self.recorder.log}')
        return fnode

    def _not_property(self, path: str | os.PathLike[str], what: str) -> str:
        rel = self.recorder.recorded_path(path)
        if rel in PROPERTY_FILES:
            raise RecoveryLogError(
                f'{what} "{rel}" of {self.recorder.log}: it is a property path, which only a rename onto '
                "it records"
            )
        return rel

    def _process(self, template: RecordedOp, data: bytes = b"") -> None:
        r = self.recorder
        assert self._writer is not None
        fsm = r.fsm
        op = dataclasses.replace(
            template, seq_no=fsm.next_seq_no, checksum=fsm.next_checksum, author=r.author,
            first_offset=r.write_head, last_offset=0, log=r.log,
        )  # fmt: skip
        record, payload = encode_op(op)
        outcome = fsm.apply(op, payload)
        if outcome is not Outcome.APPLIED:
            raise RecoveryLogError(f"recorder FSM of {r.log} refused its own op {op}: {outcome.value}")
        self._applied += 1
        self._writer.write(record)
        if data:
            self._writer.write(data)
