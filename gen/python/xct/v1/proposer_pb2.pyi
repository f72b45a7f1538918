from xct.v1 import tool_pb2 as _tool_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProposeRequest(_message.Message):
    __slots__ = ["goal", "history", "instructions", "run_id", "tools"]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    goal: str
    history: _containers.RepeatedCompositeFieldContainer[Turn]
    instructions: str
    run_id: str
    tools: _containers.RepeatedCompositeFieldContainer[_tool_pb2.ToolDescriptor]
    def __init__(self, run_id: _Optional[str] = ..., goal: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_tool_pb2.ToolDescriptor, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., instructions: _Optional[str] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ["model", "output", "usage"]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    output: str
    usage: Usage
    def __init__(self, output: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ["decision", "response"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    decision: str
    response: str
    def __init__(self, decision: _Optional[str] = ..., response: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["input_tokens", "output_tokens"]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...
