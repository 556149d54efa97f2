"""CSV framing (`text/csv`, docs/semantics.md#framings): RFC 4180 records, column 0 holding the UUID string.

Messages are rows (lists of strings, column 0 included). A record ends at a newline outside quotes:
with RFC 4180 quoting that is a newline preceded by an even number of `"` since the record began,
so record boundaries are found on bytes and each record is parsed by the csv module.

As Gazette's CSV framing (Go's encoding/csv reader, one per read): every record must have as many
fields as the first record the decoder read, and a blank line is skipped. (Gazette counts a skipped
blank line into the next message's begin offset; here each record's [begin, end) is its own bytes.)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from gazette.message.envelope import Envelope
from gazette.message.framing.base import Decoder, Framing, FramingError
from gazette.message.uuid import UUID

CONTENT_TYPE = "text/csv"


class CSVDecoder(Decoder):
    """Splits records on unquoted newlines (b"\\n" or b"\\r\\n") and parses each with csv.reader."""

    def __init__(self, journal: str, offset: int) -> None:
        super().__init__(journal, offset)
        self._scanned = 0  # bytes of _buf already scanned for newlines
        self._quoted = False  # an odd number of quotes in _buf[:_scanned]
        self._fields: int | None = None  # field count of the first record read
        self._first: int = offset  # where that record began

    def feed(self, data: bytes) -> list[Envelope]:
        self._buf += data
        buf = self._buf
        base = self._offset
        out: list[Envelope] = []
        pos = 0
        i = self._scanned
        quoted = self._quoted
        try:
            while (nl := buf.find(b"\n", i)) >= 0:
                quoted ^= buf.count(b'"', i, nl) & 1 == 1
                i = nl + 1
                if quoted:
                    continue  # a newline inside a quoted field
                begin, pos = pos, i
                if pos - begin <= 2 and buf[begin:pos] in (b"\n", b"\r\n"):
                    continue  # a blank line is no record (as Go's csv.Reader, which skips it)
                out.append(self._envelope(bytes(buf[begin:pos]), base + begin, base + pos))
            quoted ^= buf.count(b'"', i) & 1 == 1
            i = len(buf)
        except FramingError as err:
            err.envelopes = out
            i, quoted = pos, False  # rescan what follows the bad record
            raise
        finally:
            del buf[:pos]
            self._offset = base + pos
            self._scanned = i - pos
            self._quoted = quoted
        return out

    def _envelope(self, record: bytes, begin: int, end: int) -> Envelope:
        try:
            rows = list(csv.reader([record.decode("utf-8")], strict=True))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise FramingError(
                f"CSV record at [{begin}, {end}) of journal {self.journal!r} is not valid: {exc}",
                journal=self.journal,
                begin=begin,
                end=end,
            ) from None
        if len(rows) != 1:
            raise FramingError(
                f"CSV record at [{begin}, {end}) of journal {self.journal!r} parses as {len(rows)} rows "
                "(a quote inside an unquoted field is not RFC 4180)",
                journal=self.journal,
                begin=begin,
                end=end,
            )
        row = rows[0]
        if self._fields is None:
            self._fields, self._first = len(row), begin
        elif len(row) != self._fields:
            # As Gazette's CSV framing (encoding/csv's ErrFieldCount): the read fails at this record.
            raise FramingError(
                f"CSV record at [{begin}, {end}) of journal {self.journal!r} has {len(row)} fields, but "
                f"the first record read (at offset {self._first}) has {self._fields}: every record must "
                "have as many",
                journal=self.journal,
                begin=begin,
                end=end,
            )
        producer, clock, flags = self._uuid_fields(row[0] if row else None, begin, end)
        return Envelope(self.journal, begin, end, row, None, producer, clock, flags)


class CSVFraming(Framing):
    """`text/csv`: rows whose column 0 is the UUID string. `columns`, when given, is the row width:
    encode checks it and ACK rows have it (otherwise ACK rows are as wide as `like`, or 1)."""

    content_type = CONTENT_TYPE

    def __init__(self, *, columns: int | None = None) -> None:
        if columns is not None and columns < 1:
            raise FramingError(f"columns={columns} must be at least 1 (column 0 holds the UUID)")
        self.columns = columns

    def encode(self, message: Any, uuid: UUID) -> bytes:
        if isinstance(message, (str, bytes)) or not isinstance(message, Sequence):
            raise FramingError(f"CSV message is a {type(message).__name__}, not a row (a list of fields)")
        if not message:
            raise FramingError("CSV message is an empty row: column 0 must be there to hold the UUID")
        if self.columns is not None and len(message) != self.columns:
            raise FramingError(f"CSV row has {len(message)} columns, this framing's columns={self.columns}")
        row = list(message)
        row[0] = str(uuid)
        return _write_row(row)

    def encode_ack(self, uuid: UUID, like: Any = None) -> bytes:
        width = self.columns if self.columns is not None else len(like) if like else 1
        return _write_row([str(uuid)] + [""] * (width - 1))

    def decoder(self, journal: str, offset: int) -> CSVDecoder:
        return CSVDecoder(journal, offset)

    def __repr__(self) -> str:
        return f"CSVFraming(columns={self.columns})"


def _write_row(row: list[Any]) -> bytes:
    """One record ending in "\n" (as Go's csv.Writer writes). The csv module quotes only fields
    holding characters of its lineterminator, so it writes "\r\n" (quoting any "\r" or "\n")
    and the terminator is swapped after."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(row)
    return out.getvalue()[:-2].encode("utf-8") + b"\n"
