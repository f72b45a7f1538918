from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Event(_message.Message):
    __slots__ = ["agent", "chain_id", "data", "hash", "prev_hash", "seq", "timestamp", "type"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    chain_id: str
    data: _struct_pb2.Struct
    hash: str
    prev_hash: str
    seq: int
    timestamp: str
    type: str
    def __init__(self, chain_id: _Optional[str] = ..., seq: _Optional[int] = ..., type: _Optional[str] = ..., timestamp: _Optional[str] = ..., agent: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., prev_hash: _Optional[str] = ..., hash: _Optional[str] = ...) -> None: ...
