from gazette.protocol import broker_pb2 as _broker_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
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
