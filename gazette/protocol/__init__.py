"""Wire types and the rules about them: the .proto protocol and its generated modules, status codes
(the broker's Status, the consumer Shard service's ShardStatus), the error family, labels and
selectors, codecs, names and JournalSpec validation.

The lowest layer: imports nothing else of gazette.
"""

from gazette.protocol.codec import Codec
from gazette.protocol.durations import parse_duration
from gazette.protocol.errors import (
    AppendError,
    ConfigurationError,
    FencedError,
    GazetteError,
    PeerError,
    StateError,
    StoreError,
    ValidationError,
)
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import ShardStatus, Status

__all__ = [
    "AppendError",
    "Codec",
    "ConfigurationError",
    "FencedError",
    "GazetteError",
    "JournalSpec",
    "LabelSelector",
    "LabelSet",
    "PeerError",
    "ShardStatus",
    "StateError",
    "Status",
    "StoreError",
    "ValidationError",
    "parse_duration",
]
