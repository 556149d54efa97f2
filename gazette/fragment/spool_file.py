"""SpoolFile: the unlinked temp file holding one spool fragment's uncompressed bytes
(docs/semantics.md#spool-proposals).

Addressed by journal offsets (file offset = journal offset - `begin`). Only positional I/O
(pread/pwrite), so readers on other threads never disturb the writer. Imports gazette.protocol only.
Invariant: a file is closed only when no reader can still hold it (otherwise leave it to GC).
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Iterator

from gazette import tunables
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status


class SpoolError(GazetteError):
    """A spool or spool file was driven against its rules (wrong content delta, offset outside the file)."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)


class SpoolFile:
    """An unlinked temp file holding one spool fragment's uncompressed bytes; offsets are journal offsets."""

    __slots__ = ("begin", "_fd", "_finalizer", "__weakref__")

    def __init__(self, begin: int, directory: str | None = None) -> None:
        fd, path = tempfile.mkstemp(prefix="gazette-spool-", dir=directory)
        try:
            os.unlink(path)  # the open descriptor is the only reference: disk is freed when it closes
        except BaseException:
            os.close(fd)
            raise
        self.begin = begin
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _position(self, journal_offset: int) -> int:
        if not self._finalizer.alive:
            # Never touch a closed descriptor: its number may already belong to another file.
            raise SpoolError(f"spool file at begin {self.begin} is closed")
        if journal_offset < self.begin:
            raise SpoolError(
                f"offset {journal_offset} is before the spool file's begin {self.begin} (expected >= {self.begin})"
            )
        return journal_offset - self.begin

    def pwrite(self, journal_offset: int, data: bytes | memoryview) -> None:
        """Writes all of `data` at `journal_offset`."""
        pos = self._position(journal_offset)
        n = os.pwrite(self._fd, data, pos)
        if n == len(data):
            return
        view = memoryview(data)[n:]
        pos += n
        while view:
            n = os.pwrite(self._fd, view, pos)
            view = view[n:]
            pos += n

    def pread(self, journal_offset: int, n: int) -> bytes:
        """Reads up to `n` bytes at `journal_offset`; fewer only where the file ends."""
        pos = self._position(journal_offset)
        data = os.pread(self._fd, n, pos)
        if len(data) == n or not data:
            return data
        parts = [data]
        got = len(data)
        while got < n:
            more = os.pread(self._fd, n - got, pos + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def reader(self, begin: int, end: int, chunk: int = tunables.SPOOL_READ_CHUNK_BYTES) -> Iterator[bytes]:
        """Yields the bytes of [begin, end) in chunks of at most `chunk`; errors if the file ends early."""
        if end < begin:
            raise SpoolError(f"read range [{begin}, {end}) has end < begin")
        if chunk <= 0:
            raise SpoolError(f"read chunk {chunk} is not positive")
        offset = begin
        while offset < end:
            data = self.pread(offset, min(chunk, end - offset))
            if not data:
                raise SpoolError(
                    f"spool file at begin {self.begin} ends at {offset} (expected bytes through {end})"
                )
            offset += len(data)
            yield data

    def close(self) -> None:
        """Closes the descriptor (idempotent). Dropping the last reference does the same."""
        self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"fd={self._fd}"
        return f"SpoolFile(begin={self.begin}, {state})"
