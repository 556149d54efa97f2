from gazette.protocol import broker_pb2 as _broker_pb2
from gazette.protocol import shard_pb2 as _shard_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FlushRequest(_message.Message):
    __slots__ = ("header", "journal")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    header: _broker_pb2.Header
    journal: str
    def __init__(self, header: _Optional[_Union[_broker_pb2.Header, _Mapping]] = ..., journal: _Optional[str] = ...) -> None: ...

class FlushResponse(_message.Message):
    __slots__ = ("status", "header", "fragment", "store_error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    STORE_ERROR_FIELD_NUMBER: _ClassVar[int]
    status: _broker_pb2.Status
    header: _broker_pb2.Header
    fragment: _broker_pb2.Fragment
    store_error: str
    def __init__(self, status: _Optional[_Union[_broker_pb2.Status, str]] = ..., header: _Optional[_Union[_broker_pb2.Header, _Mapping]] = ..., fragment: _Optional[_Union[_broker_pb2.Fragment, _Mapping]] = ..., store_error: _Optional[str] = ...) -> None: ...

class InspectRequest(_message.Message):
    __slots__ = ("header", "shard")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    header: _broker_pb2.Header
    shard: str
    def __init__(self, header: _Optional[_Union[_broker_pb2.Header, _Mapping]] = ..., shard: _Optional[str] = ...) -> None: ...

class TxnTiming(_message.Message):
    __slots__ = ("began_at", "messages", "consume_s", "commit_s", "ack_s")
    BEGAN_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CONSUME_S_FIELD_NUMBER: _ClassVar[int]
    COMMIT_S_FIELD_NUMBER: _ClassVar[int]
    ACK_S_FIELD_NUMBER: _ClassVar[int]
    began_at: float
    messages: int
    consume_s: float
    commit_s: float
    ack_s: float
    def __init__(self, began_at: _Optional[float] = ..., messages: _Optional[int] = ..., consume_s: _Optional[float] = ..., commit_s: _Optional[float] = ..., ack_s: _Optional[float] = ...) -> None: ...

class SideEffectRecord(_message.Message):
    __slots__ = ("id", "attempt", "kind", "store", "path", "staging", "sha1", "size")
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STAGING_FIELD_NUMBER: _ClassVar[int]
    SHA1_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    kind: str
    store: str
    path: str
    staging: str
    sha1: str
    size: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., kind: _Optional[str] = ..., store: _Optional[str] = ..., path: _Optional[str] = ..., staging: _Optional[str] = ..., sha1: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class SideEffectsState(_message.Message):
    __slots__ = ("attempt", "stores", "staging_prefix", "open", "committing", "unpublished", "published", "last_published", "cleanup_pending", "removed", "cleanups", "last_cleanup_at", "cleanup_interval_s", "cleanup_error", "store_retries")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    STAGING_PREFIX_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    COMMITTING_FIELD_NUMBER: _ClassVar[int]
    UNPUBLISHED_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    LAST_PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_PENDING_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    CLEANUPS_FIELD_NUMBER: _ClassVar[int]
    LAST_CLEANUP_AT_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_ERROR_FIELD_NUMBER: _ClassVar[int]
    STORE_RETRIES_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    stores: _containers.RepeatedScalarFieldContainer[str]
    staging_prefix: str
    open: _containers.RepeatedCompositeFieldContainer[SideEffectRecord]
    committing: _containers.RepeatedCompositeFieldContainer[SideEffectRecord]
    unpublished: _containers.RepeatedCompositeFieldContainer[SideEffectRecord]
    published: int
    last_published: _containers.RepeatedCompositeFieldContainer[SideEffectRecord]
    cleanup_pending: _containers.RepeatedScalarFieldContainer[str]
    removed: int
    cleanups: int
    last_cleanup_at: float
    cleanup_interval_s: float
    cleanup_error: str
    store_retries: int
    def __init__(self, attempt: _Optional[int] = ..., stores: _Optional[_Iterable[str]] = ..., staging_prefix: _Optional[str] = ..., open: _Optional[_Iterable[_Union[SideEffectRecord, _Mapping]]] = ..., committing: _Optional[_Iterable[_Union[SideEffectRecord, _Mapping]]] = ..., unpublished: _Optional[_Iterable[_Union[SideEffectRecord, _Mapping]]] = ..., published: _Optional[int] = ..., last_published: _Optional[_Iterable[_Union[SideEffectRecord, _Mapping]]] = ..., cleanup_pending: _Optional[_Iterable[str]] = ..., removed: _Optional[int] = ..., cleanups: _Optional[int] = ..., last_cleanup_at: _Optional[float] = ..., cleanup_interval_s: _Optional[float] = ..., cleanup_error: _Optional[str] = ..., store_retries: _Optional[int] = ...) -> None: ...

class InspectResponse(_message.Message):
    __slots__ = ("status", "header", "checkpoint_json", "sequencer_json", "queued", "transactions", "transactions_completed", "read_through", "publish_at", "side_effects")
    class QueuedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ReadThroughEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class PublishAtEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    SEQUENCER_JSON_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    READ_THROUGH_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_AT_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    status: _shard_pb2.Status
    header: _broker_pb2.Header
    checkpoint_json: str
    sequencer_json: str
    queued: _containers.ScalarMap[str, int]
    transactions: _containers.RepeatedCompositeFieldContainer[TxnTiming]
    transactions_completed: int
    read_through: _containers.ScalarMap[str, int]
    publish_at: _containers.ScalarMap[str, int]
    side_effects: SideEffectsState
    def __init__(self, status: _Optional[_Union[_shard_pb2.Status, str]] = ..., header: _Optional[_Union[_broker_pb2.Header, _Mapping]] = ..., checkpoint_json: _Optional[str] = ..., sequencer_json: _Optional[str] = ..., queued: _Optional[_Mapping[str, int]] = ..., transactions: _Optional[_Iterable[_Union[TxnTiming, _Mapping]]] = ..., transactions_completed: _Optional[int] = ..., read_through: _Optional[_Mapping[str, int]] = ..., publish_at: _Optional[_Mapping[str, int]] = ..., side_effects: _Optional[_Union[SideEffectsState, _Mapping]] = ...) -> None: ...

class BrokerImplementation(_message.Message):
    __slots__ = ("implementation",)
    IMPLEMENTATION_FIELD_NUMBER: _ClassVar[int]
    implementation: str
    def __init__(self, implementation: _Optional[str] = ...) -> None: ...
