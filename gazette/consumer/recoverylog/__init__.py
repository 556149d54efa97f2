"""Recovery logs: a local directory's file operations recorded to a journal and played back
(docs/semantics.md#recovery-logs).

`ops` defines the record format and checksum chain, `fsm` the state machine sequencing operations,
`hints` the FSMHints that let playback skip to the segments live files need (and their etcd keys),
`recorder` the fenced writer, `player` playback and hand-off, `recovery` a shard assignment's use of
them. Imports client, protocol and the consumer's store errors and statuses; the invariant: only a
recorder whose author holds the log's `author` register can append, so a deposed primary cannot.
"""

from gazette.consumer.recoverylog.fsm import FSM, Outcome
from gazette.consumer.recoverylog.hints import (
    FnodeSegments,
    FSMHints,
    Property,
    Segment,
    ShardHints,
    backup_hints_key,
    fetch_hints,
    primary_hints_key,
    rotate_backup_hints,
    store_primary_hints,
)
from gazette.consumer.recoverylog.ops import (
    AUTHOR_REGISTER,
    OpDecoder,
    RecordedOp,
    RecoveryLogError,
    author_fence,
    crc32c,
    new_author,
)
from gazette.consumer.recoverylog.player import Player
from gazette.consumer.recoverylog.recorder import Recorder, RecorderTxn

__all__ = [
    "AUTHOR_REGISTER",
    "FSM",
    "FSMHints",
    "FnodeSegments",
    "OpDecoder",
    "Outcome",
    "Player",
    "Property",
    "RecordedOp",
    "Recorder",
    "RecorderTxn",
    "RecoveryLogError",
    "Segment",
    "ShardHints",
    "author_fence",
    "backup_hints_key",
    "crc32c",
    "fetch_hints",
    "new_author",
    "primary_hints_key",
    "rotate_backup_hints",
    "store_primary_hints",
]
