"""Wire types and the rules about them: the .proto protocol and its generated modules, status codes,
the error family, labels and selectors, names and JournalSpec validation.

The lowest layer: imports nothing else of gazette.
"""

from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status

__all__ = ["GazetteError", "LabelSet", "Status", "ValidationError"]
