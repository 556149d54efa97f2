"""Player: rebuilds a recorded directory by playing back its recovery log, then hands off
(docs/semantics.md#recovery-logs).

Playback starts where the FSM hints say (the log's start without hints), applies operations to an
FSM and re-enacts the applied ones on files staged under `<directory>/.fnodes/`, reading through the
log's write head (then `tailing` is set: a hot standby keeps reading as the primary records).
It completes on request: `finish_at_head()` stops at the current head; `inject_handoff(author)`
appends a no-op sequenced after everything read that also sets the `author` register to the new
author (fencing out the previous recorder), and completes once that no-op is read back applied
(injecting again after losing a race). Completion links the live files into place and writes the
properties, as Gazette's player does (playback.go), so it plays logs Gazette's recorder wrote and
Gazette's plays ours. Records of gazette-py's earlier JSON encoding are played too (see `ops`); a
playback reading some says so in its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar, cast

from gazette.client.aio import AsyncClient, ReadChunk
from gazette.consumer.recoverylog.fsm import FSM, Outcome
from gazette.consumer.recoverylog.hints import FSMHints
from gazette.consumer.recoverylog.ops import (
    AUTHOR_REGISTER,
    DecodedRecord,
    OpDecoder,
    RecordedOp,
    RecoveryLogError,
    author_fence,
    encode_op,
)
from gazette.consumer.recoverylog.recorder import STAGING_DIR
from gazette.protocol.errors import PeerError
from gazette.protocol.validate import CONTENT_TYPE, CONTENT_TYPE_RECOVERY_LOG

log = logging.getLogger(__name__)

T = TypeVar("T")


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Runs `fn` on the default executor; if cancelled meanwhile, waits for it to finish first (so no
    thread is still touching staged files when playback is torn down)."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait([fut])
        raise


class Player:
    """Plays back `log` into `directory` from `hints` (None: from the log's first byte).

    Run `play()` as a task; it returns once playback completed after `finish_at_head()` or
    `inject_handoff(author)`, leaving `fsm`, `author` and `write_head` for a Recorder. `tailing` is
    set once playback has read through the write head seen at its start.
    """

    def __init__(self, client: AsyncClient, log: str, directory: str, hints: FSMHints | None = None) -> None:
        if hints is not None and hints.log != log:
            raise RecoveryLogError(f"hints of log {hints.log!r} cannot play back log {log!r}")
        self.client = client
        self.log = log
        self.directory = os.path.abspath(directory)
        self.hints = hints or FSMHints(log)
        self.fsm = FSM(self.hints)
        self.tailing = asyncio.Event()
        self.start_offset: int | None = None  # where reading began (> 0 when hints let it skip)
        self.head_at_start = 0  # the log's write head when playback began
        self.offset = 0  # the end of the last record played
        self.write_head = 0  # a lower bound of the log's head once complete
        self.author = 0  # the author this playback handed off to (0: finished at head)
        self.applied = 0  # operations applied
        self.skipped = 0  # operations that were dead branches (duplicates, fenced writers, lost races)
        self.legacy = 0  # records read in gazette-py's earlier JSON encoding
        self._request: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._progress = asyncio.Condition()
        self._apply_lock = asyncio.Lock()  # held while a chunk is applied off the loop
        self._handoff_author = 0
        self._handoff_applied = False
        self._staging = os.path.join(self.directory, STAGING_DIR)

    def __repr__(self) -> str:
        return f"Player({self.log!r}, offset={self.offset}, next_seq_no={self.fsm.next_seq_no})"

    # ---- requests

    def finish_at_head(self) -> None:
        """Completes playback once it reaches the log's current write head."""
        self._set_request(0)

    def inject_handoff(self, author: int) -> None:
        """Completes playback by handing the log off to `author` (fencing out the current recorder)."""
        author_fence(author)  # validates
        self._set_request(author)

    def _set_request(self, author: int) -> None:
        if self._request.done():
            raise RecoveryLogError(f"playback of {self.log} was already asked to finish or hand off")
        self._request.set_result(author)

    # ---- playback

    async def play(self) -> None:
        """Plays back until a requested finish or hand-off completed; raises RecoveryLogError on a
        log it cannot trust (and GazetteError on journal errors), leaving nothing staged."""
        reader: asyncio.Task[None] | None = None
        try:
            await self._check_log()
            head = (await self.client.append(self.log, b"")).end  # an empty append: the transactional head
            self.head_at_start = head
            for s in self.fsm.hinted_segments:
                if s.first_offset >= head or s.last_offset > head:
                    raise RecoveryLogError(
                        f"recovery log {self.log} ends at {head}, before hinted segment {s}: possible data loss"
                    )
            await _in_thread(self._prepare_directory)
            start = self.fsm.hinted_segments[0].first_offset if self.fsm.hinted_segments else 0
            self.start_offset = self.offset = start
            self._check_tailing()
            reader = asyncio.create_task(self._read(start), name=f"play {self.log}")
            author = await self._until(reader, self._request)
            while True:
                head = (await self.client.append(self.log, b"")).end
                await self._until_offset(reader, head)
                if not author:
                    break
                if await self._inject(reader, author):
                    break
                log.info("recovery log %s: hand-off to %s lost a race; injecting again", self.log, author)
            self.author = author
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self.write_head = max(self.offset, head)
            await _in_thread(self._make_live)
            log.info(
                "recovery log %s played back from offset %d to %d (%d ops applied, %d skipped)%s",
                self.log, start, self.offset, self.applied, self.skipped,
                f"; handed off to author {author_fence(author)}" if author else "",
            )  # fmt: skip
            if self.legacy:
                log.warning(
                    "recovery log %s: %d of the records played are in gazette-py's earlier JSON encoding, "
                    "which Gazette (gazctl shards recover) cannot play; gazette-py records Gazette's "
                    "protobuf RecordedOps from now on, and once the shard's hints no longer reach back to "
                    "those records (its live files rewritten since) Gazette plays the log",
                    self.log, self.legacy,
                )  # fmt: skip
        except BaseException:
            if reader is not None:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            await _in_thread(shutil.rmtree, self._staging, True)
            raise

    async def _check_log(self) -> None:
        infos = await self.client.list_journals(f"name={self.log}", patient=True)
        if not infos:
            raise RecoveryLogError(
                f'recovery log journal "{self.log}" does not exist (create it with label '
                f"{CONTENT_TYPE}={CONTENT_TYPE_RECOVERY_LOG})"
            )
        content_type = infos[0].spec.labels.value_of(CONTENT_TYPE)
        if content_type != CONTENT_TYPE_RECOVERY_LOG:
            raise RecoveryLogError(
                f'journal "{self.log}" has {CONTENT_TYPE} {content_type!r}, so it is not a recovery log '
                f"(expected {CONTENT_TYPE_RECOVERY_LOG})"
            )

    async def _inject(self, reader: asyncio.Task[None], author: int) -> bool:
        """Appends a hand-off no-op sequenced after what was read; True once it was read back applied."""
        async with self._apply_lock:
            noop = RecordedOp(self.fsm.next_seq_no, self.fsm.next_checksum, author)
            self._handoff_author, self._handoff_applied = author, False
        record, _ = encode_op(noop)
        result = await self.client.append(
            self.log,
            record,
            subtract_registers={AUTHOR_REGISTER: ""},  # every previous author ...
            union_registers={AUTHOR_REGISTER: author_fence(author)},  # ... is replaced by this one
        )
        await self._until_offset(reader, result.end)
        return self._handoff_applied

    async def _until(self, reader: asyncio.Task[None], what: asyncio.Future[T]) -> T:
        """`await what`, but raises the reader's error if it fails first."""
        waiters: set[asyncio.Future[Any]] = {reader, what}
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not what.done():
            reader.result()
            raise RecoveryLogError(f"reading recovery log {self.log} ended unexpectedly")
        return what.result()

    async def _until_offset(self, reader: asyncio.Task[None], offset: int) -> None:
        async def reached() -> None:
            async with self._progress:
                await self._progress.wait_for(lambda: self.offset >= offset)

        waiter = asyncio.ensure_future(reached())
        try:
            await self._until(reader, waiter)
        finally:
            waiter.cancel()

    def _check_tailing(self) -> None:
        if self.tailing.is_set() or self.offset < self.head_at_start:
            return
        if self.fsm.has_remaining_hints():
            raise RecoveryLogError(
                f"recovery log {self.log} was read through its head {self.head_at_start}, but hinted "
                f"operations were not found (next hinted: {self.fsm.hinted_segments[:1]}): possible data loss"
            )
        self.tailing.set()

    async def _read(self, offset: int) -> None:
        """Reads and applies records from `offset`, blocking at the head, seeking to hinted segments."""
        decoder = OpDecoder(self.log, offset)
        while True:
            seek: int | None = None
            stream = cast(
                AsyncGenerator[ReadChunk, None], self.client.read(self.log, decoder.offset, block=True)
            )
            async with contextlib.aclosing(stream):
                async for chunk in stream:
                    expected = decoder.offset + decoder.buffered
                    if chunk.offset != expected:
                        self._jumped(expected, chunk.offset)
                        decoder.reset(chunk.offset)
                    records = decoder.feed(chunk.content)
                    if records:
                        async with self._apply_lock:
                            await _in_thread(self._apply, records, decoder.offset)
                        async with self._progress:
                            self._progress.notify_all()
                    decoder.check()
                    self._check_tailing()
                    segments = self.fsm.hinted_segments
                    if segments and segments[0].first_offset > decoder.offset + decoder.buffered:
                        seek = segments[0].first_offset  # skip log content no hinted file needs
                        break
            if seek is None:
                raise PeerError(f"blocking read of recovery log {self.log} ended")
            decoder.reset(seek)
            self.offset = seek

    def _jumped(self, expected: int, to: int) -> None:
        segments = self.fsm.hinted_segments
        if to < expected or (segments and segments[0].first_offset < to):
            raise RecoveryLogError(
                f"recovery log {self.log}: reading jumped from offset {expected} to {to}"
                + (f" over hinted segment {segments[0]}: possible data loss" if segments else "")
            )
        log.warning(
            "recovery log %s: offset jump from %d to %d (content was removed)", self.log, expected, to
        )

    # ---- applying records (on an executor thread, one chunk at a time)

    def _apply(self, records: list[DecodedRecord], end: int) -> None:
        for rec in records:
            op = rec.op
            self.legacy += rec.legacy
            outcome = self.fsm.apply(op, rec.payload)
            if outcome is Outcome.APPLIED:
                self.applied += 1
                self._reenact(op, rec.data)
            elif outcome.advanced:
                self.applied += 1  # a file the hints say is deleted later: nothing to stage
            else:
                self.skipped += 1
                if (
                    outcome not in (Outcome.WRONG_SEQ_NO, Outcome.NOT_HINTED_AUTHOR)
                    or op.seq_no > self.fsm.next_seq_no
                ):
                    log.info("recovery log %s: did not apply %s at offset %d: %s",
                             self.log, op, op.first_offset, outcome.value)  # fmt: skip
            if self._handoff_author and op.author == self._handoff_author and not op.kind:
                self._handoff_applied = self._handoff_applied or outcome is Outcome.APPLIED
        self.offset = end

    def _staged(self, fnode: int) -> str:
        return os.path.join(self._staging, str(fnode))

    def _reenact(self, op: RecordedOp, data: bytes) -> None:
        if op.kind == "create":
            with open(self._staged(op.seq_no), "xb"):
                pass
        elif op.kind == "write":
            with open(self._staged(op.fnode), "r+b") as f:
                f.seek(op.offset)
                f.write(data)
        elif op.kind == "unlink" and op.fnode not in self.fsm.live_nodes:
            os.remove(self._staged(op.fnode))

    def _prepare_directory(self) -> None:
        """Playback owns the directory: anything in it is removed first."""
        if os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                path = os.path.join(self.directory, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        os.makedirs(self._staging)

    def _make_live(self) -> None:
        """Links each live file into its paths, then removes the staging directory."""
        for fnode, node in self.fsm.live_nodes.items():
            staged = self._staged(fnode)
            for path in sorted(node.links):
                target = self._target(path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                try:
                    os.link(staged, target)
                except OSError:
                    shutil.copyfile(staged, target)
            os.remove(staged)
        leftover = os.listdir(self._staging)
        if leftover:
            raise RecoveryLogError(
                f"playback of {self.log} staged files {leftover[:5]} that no live file explains"
            )
        os.rmdir(self._staging)
        for path, content in sorted(self.fsm.properties.items()):
            target = self._target(path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "xb") as f:  # a property path is never also a live file's
                f.write(content.encode("utf-8", "surrogateescape"))

    def _target(self, path: str) -> str:
        """The local path of recorded `path`: Gazette's "/a/b" (or "a/b"), under the directory."""
        parts = (path[1:] if path.startswith("/") else path).split("/")
        if any(p in ("", ".", "..") for p in parts) or parts[0] == STAGING_DIR:
            raise RecoveryLogError(f"recovery log {self.log} links a file at {path!r}, outside the directory")
        return os.path.join(self.directory, *parts)
