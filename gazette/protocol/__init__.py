"""Wire types and the rules about them: the .proto protocol and its generated modules, status codes,
the error family, labels and selectors, names and JournalSpec validation.

The lowest layer: imports nothing else of gazette.
"""

from typing import TYPE_CHECKING, Any

from gazette.protocol.durations import parse_duration
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import Status

if TYPE_CHECKING:
    from gazette.protocol.spec import JournalSpec

__all__ = [
    "GazetteError",
    "JournalSpec",
    "LabelSelector",
    "LabelSet",
    "Status",
    "ValidationError",
    "parse_duration",
]


def __getattr__(name: str) -> Any:
    # JournalSpec is loaded on first use: spec.py needs gazette.fragment.fragment's Codec, and that
    # module imports this package, so an eager import here would be circular.
    if name == "JournalSpec":
        from gazette.protocol.spec import JournalSpec

        return JournalSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
