from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[Status]
    ETCD_TRANSACTION_FAILED: _ClassVar[Status]
    SHARD_NOT_FOUND: _ClassVar[Status]
    NO_SHARD_PRIMARY: _ClassVar[Status]
    NOT_SHARD_PRIMARY: _ClassVar[Status]
    SHARD_STOPPED: _ClassVar[Status]
OK: Status
ETCD_TRANSACTION_FAILED: Status
SHARD_NOT_FOUND: Status
NO_SHARD_PRIMARY: Status
NOT_SHARD_PRIMARY: Status
SHARD_STOPPED: Status

class ProcessId(_message.Message):
    __slots__ = ("zone", "suffix")
    ZONE_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    zone: str
    suffix: str
    def __init__(self, zone: _Optional[str] = ..., suffix: _Optional[str] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("process_id", "etcd_revision", "proxied")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    ETCD_REVISION_FIELD_NUMBER: _ClassVar[int]
    PROXIED_FIELD_NUMBER: _ClassVar[int]
    process_id: ProcessId
    etcd_revision: int
    proxied: bool
    def __init__(self, process_id: _Optional[_Union[ProcessId, _Mapping]] = ..., etcd_revision: _Optional[int] = ..., proxied: _Optional[bool] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("code", "errors")
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    code: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class Replica(_message.Message):
    __slots__ = ("id", "slot", "status", "endpoint")
    ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    id: ProcessId
    slot: int
    status: ReplicaStatus
    endpoint: str
    def __init__(self, id: _Optional[_Union[ProcessId, _Mapping]] = ..., slot: _Optional[int] = ..., status: _Optional[_Union[ReplicaStatus, _Mapping]] = ..., endpoint: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("selector",)
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: str
    def __init__(self, selector: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("status", "header", "shards")
    class Shard(_message.Message):
        __slots__ = ("spec_json", "mod_revision", "create_revision", "replicas")
        SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
        MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
        CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
        REPLICAS_FIELD_NUMBER: _ClassVar[int]
        spec_json: str
        mod_revision: int
        create_revision: int
        replicas: _containers.RepeatedCompositeFieldContainer[Replica]
        def __init__(self, spec_json: _Optional[str] = ..., mod_revision: _Optional[int] = ..., create_revision: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    header: Header
    shards: _containers.RepeatedCompositeFieldContainer[ListResponse.Shard]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., header: _Optional[_Union[Header, _Mapping]] = ..., shards: _Optional[_Iterable[_Union[ListResponse.Shard, _Mapping]]] = ...) -> None: ...

class ApplyRequest(_message.Message):
    __slots__ = ("changes",)
    class Change(_message.Message):
        __slots__ = ("expect_mod_revision", "upsert_json", "delete")
        EXPECT_MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
        UPSERT_JSON_FIELD_NUMBER: _ClassVar[int]
        DELETE_FIELD_NUMBER: _ClassVar[int]
        expect_mod_revision: int
        upsert_json: str
        delete: str
        def __init__(self, expect_mod_revision: _Optional[int] = ..., upsert_json: _Optional[str] = ..., delete: _Optional[str] = ...) -> None: ...
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[ApplyRequest.Change]
    def __init__(self, changes: _Optional[_Iterable[_Union[ApplyRequest.Change, _Mapping]]] = ...) -> None: ...

class ApplyResponse(_message.Message):
    __slots__ = ("status", "header")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    status: Status
    header: Header
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., header: _Optional[_Union[Header, _Mapping]] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("header", "shard", "read_through")
    class ReadThroughEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    READ_THROUGH_FIELD_NUMBER: _ClassVar[int]
    header: Header
    shard: str
    read_through: _containers.ScalarMap[str, int]
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., shard: _Optional[str] = ..., read_through: _Optional[_Mapping[str, int]] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("status", "header", "read_through", "publish_at")
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
    READ_THROUGH_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_AT_FIELD_NUMBER: _ClassVar[int]
    status: Status
    header: Header
    read_through: _containers.ScalarMap[str, int]
    publish_at: _containers.ScalarMap[str, int]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., header: _Optional[_Union[Header, _Mapping]] = ..., read_through: _Optional[_Mapping[str, int]] = ..., publish_at: _Optional[_Mapping[str, int]] = ...) -> None: ...

class UnassignRequest(_message.Message):
    __slots__ = ("shards", "only_failed", "dry_run")
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    ONLY_FAILED_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedScalarFieldContainer[str]
    only_failed: bool
    dry_run: bool
    def __init__(self, shards: _Optional[_Iterable[str]] = ..., only_failed: _Optional[bool] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class UnassignResponse(_message.Message):
    __slots__ = ("status", "header", "shards")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    header: Header
    shards: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., header: _Optional[_Union[Header, _Mapping]] = ..., shards: _Optional[_Iterable[str]] = ...) -> None: ...

class InspectRequest(_message.Message):
    __slots__ = ("header", "shard")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    header: Header
    shard: str
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., shard: _Optional[str] = ...) -> None: ...

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

class InspectResponse(_message.Message):
    __slots__ = ("status", "header", "checkpoint_json", "sequencer_json", "queued", "transactions", "transactions_completed", "read_through", "publish_at")
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
    status: Status
    header: Header
    checkpoint_json: str
    sequencer_json: str
    queued: _containers.ScalarMap[str, int]
    transactions: _containers.RepeatedCompositeFieldContainer[TxnTiming]
    transactions_completed: int
    read_through: _containers.ScalarMap[str, int]
    publish_at: _containers.ScalarMap[str, int]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., header: _Optional[_Union[Header, _Mapping]] = ..., checkpoint_json: _Optional[str] = ..., sequencer_json: _Optional[str] = ..., queued: _Optional[_Mapping[str, int]] = ..., transactions: _Optional[_Iterable[_Union[TxnTiming, _Mapping]]] = ..., transactions_completed: _Optional[int] = ..., read_through: _Optional[_Mapping[str, int]] = ..., publish_at: _Optional[_Mapping[str, int]] = ...) -> None: ...
