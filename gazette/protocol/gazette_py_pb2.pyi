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
    status: _shard_pb2.Status
    header: _broker_pb2.Header
    checkpoint_json: str
    sequencer_json: str
    queued: _containers.ScalarMap[str, int]
    transactions: _containers.RepeatedCompositeFieldContainer[TxnTiming]
    transactions_completed: int
    read_through: _containers.ScalarMap[str, int]
    publish_at: _containers.ScalarMap[str, int]
    def __init__(self, status: _Optional[_Union[_shard_pb2.Status, str]] = ..., header: _Optional[_Union[_broker_pb2.Header, _Mapping]] = ..., checkpoint_json: _Optional[str] = ..., sequencer_json: _Optional[str] = ..., queued: _Optional[_Mapping[str, int]] = ..., transactions: _Optional[_Iterable[_Union[TxnTiming, _Mapping]]] = ..., transactions_completed: _Optional[int] = ..., read_through: _Optional[_Mapping[str, int]] = ..., publish_at: _Optional[_Mapping[str, int]] = ...) -> None: ...
