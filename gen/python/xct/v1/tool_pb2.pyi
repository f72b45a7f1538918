from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from xct.v1 import decision_pb2 as _decision_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EFFECT_IRREVERSIBLE: Effect
EFFECT_READ: Effect
EFFECT_REVERSIBLE: Effect
EFFECT_UNSPECIFIED: Effect

class DescribeRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ["tools"]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDescriptor]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDescriptor, _Mapping]]] = ...) -> None: ...

class InvokeRequest(_message.Message):
    __slots__ = ["arguments", "idempotency_key", "tool"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    idempotency_key: str
    tool: str
    def __init__(self, tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class InvokeResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _decision_pb2.Response
    def __init__(self, response: _Optional[_Union[_decision_pb2.Response, _Mapping]] = ...) -> None: ...

class ToolDescriptor(_message.Message):
    __slots__ = ["description", "effect", "effect_from", "idempotent", "input_schema", "max_output_bytes", "name", "source", "timeout"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FROM_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    description: str
    effect: Effect
    effect_from: str
    idempotent: bool
    input_schema: str
    max_output_bytes: int
    name: str
    source: str
    timeout: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[str] = ..., effect: _Optional[_Union[Effect, str]] = ..., idempotent: bool = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_output_bytes: _Optional[int] = ..., source: _Optional[str] = ..., effect_from: _Optional[str] = ...) -> None: ...

class Effect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
