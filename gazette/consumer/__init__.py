"""Consumer runtime: applications, shards, transactions, checkpoints and stores (docs/semantics.md#consumers).

Shards (ShardSpec) are items and consumers members of the generic allocator under a consumer root;
each primary runs the transaction loop, committing a checkpoint atomically with its store and
appending ACK intents only after that commit. Members serve Gazette's consumer.Shard protocol and
keep Gazette's consumer key space, so Gazette's tools manage them (ShardClient works with Gazette's
consumers too); Shard service errors carry a `ShardStatus`. `SideEffects` gives transactions blobs
in `file://`/`s3://` stores that are published exactly once (register, prepare, commit, publish,
cleanup). Imports client, message, allocator, keyspace, fragment (stores), protocol.
"""

from gazette.consumer.application import Application, BatchApplication, DeferToNextTransaction
from gazette.consumer.client import (
    AsyncShardClient,
    ShardChange,
    ShardClient,
    ShardInspection,
    ShardStat,
    ShardTimeoutError,
)
from gazette.consumer.consumer import Consumer, ReplicaInfo, ShardInfo, apply_shards, list_shards
from gazette.consumer.json_store import JSONFileStore
from gazette.consumer.runner import ConsumerGroup
from gazette.consumer.shard import Shard
from gazette.consumer.side_effects import (
    SideEffect,
    SideEffectError,
    SideEffectRecord,
    SideEffects,
    SideEffectsState,
    read_side_effect,
)
from gazette.consumer.spec import ShardSpec, ShardSpecError, Source
from gazette.consumer.sql_store import SQLStore
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.consumer.store import ConsumerCheckpoint, FencingError, MemoryStore, Store
from gazette.consumer.transaction import Hooks, TxnTiming
from gazette.protocol.status import ShardStatus

__all__ = [
    "Application",
    "BatchApplication",
    "AsyncShardClient",
    "Consumer",
    "ConsumerCheckpoint",
    "ConsumerGroup",
    "DeferToNextTransaction",
    "FencingError",
    "Hooks",
    "JSONFileStore",
    "MemoryStore",
    "ReplicaCode",
    "ReplicaInfo",
    "ReplicaStatus",
    "SQLStore",
    "Shard",
    "ShardChange",
    "ShardClient",
    "ShardInfo",
    "ShardInspection",
    "ShardSpec",
    "ShardSpecError",
    "ShardStat",
    "ShardStatus",
    "ShardTimeoutError",
    "SideEffect",
    "SideEffectError",
    "SideEffectRecord",
    "SideEffects",
    "SideEffectsState",
    "Source",
    "Store",
    "TxnTiming",
    "apply_shards",
    "list_shards",
    "read_side_effect",
]
