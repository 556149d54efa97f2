"""Errors of fragments_io: every one names the option, object, journal or field that was wrong.

They subclass ValueError so Spark surfaces their message in the PythonException it raises.
"""

from __future__ import annotations

import logging

log = logging.getLogger("fragments_io")


class FragmentsIOError(ValueError):
    """Base class of fragments_io's errors."""


class OptionError(FragmentsIOError):
    """A data source option is missing, unknown or malformed."""


class CorruptObjectError(FragmentsIOError):
    """A fragment object doesn't decode, or its length or SHA1 doesn't match its name."""


class DataLossError(FragmentsIOError):
    """Offsets a read needs are no longer in the store (pruned by retention), and option
    failOnDataLoss is true (the default)."""


def data_loss(fail: bool, journal: str, lo: int, hi: int, what: str) -> None:
    """Offsets [lo, hi) of `journal` that `what` needs are gone: DataLossError when `fail`, else a
    warning naming the same (failOnDataLoss=false skips them)."""
    where = f"journal {journal}: offsets [{lo}, {hi}) {what} are no longer in the store"
    if fail:
        raise DataLossError(
            f"{where} (its first persisted fragment begins at {hi}: pruned by retention?); set option "
            "failOnDataLoss=false to skip them"
        )
    log.warning("%s; skipped (failOnDataLoss=false)", where)


class FramingMismatchError(FragmentsIOError):
    """A journal's content doesn't decode with the framing given or guessed."""


class SchemaMismatchError(FragmentsIOError):
    """A message field doesn't fit the schema given or inferred."""


class JavaNotFoundError(FragmentsIOError, RuntimeError):
    """PySpark needs a Java runtime and none was found."""


class WorkerPythonError(FragmentsIOError, RuntimeError):
    """The Python that Spark's workers run cannot run the `gazette` source (a missing module, or
    another Python version than the driver's)."""


class SinkRowError(FragmentsIOError):
    """A row the `gazette` sink cannot turn into a message (names the row, column and value)."""


class SinkJournalError(FragmentsIOError):
    """A journal the `gazette` sink was asked to write is missing, or has a content type it cannot
    frame with message UUIDs; raised on the driver before any task runs."""


class SinkCommitError(FragmentsIOError, RuntimeError):
    """The driver could not record or append a write's ACKs (the write is completed by running it
    again with the same writeId, or by restarting the query from its checkpoint)."""
