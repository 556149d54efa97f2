"""Errors of fragments_io: every one names the option, object, journal or field that was wrong.

They subclass ValueError so Spark surfaces their message in the PythonException it raises.
"""

from __future__ import annotations


class FragmentsIOError(ValueError):
    """Base class of fragments_io's errors."""


class OptionError(FragmentsIOError):
    """A data source option is missing, unknown or malformed."""


class CorruptObjectError(FragmentsIOError):
    """A fragment object doesn't decode, or its length or SHA1 doesn't match its name."""


class FramingMismatchError(FragmentsIOError):
    """A journal's content doesn't decode with the framing given or guessed."""


class SchemaMismatchError(FragmentsIOError):
    """A message field doesn't fit the schema given or inferred."""


class JavaNotFoundError(FragmentsIOError, RuntimeError):
    """PySpark needs a Java runtime and none was found."""


class WorkerPythonError(FragmentsIOError, RuntimeError):
    """The Python that Spark's workers run cannot run the `gazette` source (a missing module, or
    another Python version than the driver's)."""
