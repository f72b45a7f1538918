from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from xct.v1 import decision_pb2 as _decision_pb2
from xct.v1 import tool_pb2 as _tool_pb2
from xct.v1 import validator_pb2 as _validator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
STEP_DECISION_FAILED: StepDecision
STEP_DECISION_RETRY: StepDecision
STEP_DECISION_SUCCEEDED: StepDecision
STEP_DECISION_UNSPECIFIED: StepDecision
STEP_RECORD_STATE_FAILED: StepRecordState
STEP_RECORD_STATE_IN_DOUBT: StepRecordState
STEP_RECORD_STATE_PENDING: StepRecordState
STEP_RECORD_STATE_RETRY: StepRecordState
STEP_RECORD_STATE_SUCCEEDED: StepRecordState
STEP_RECORD_STATE_UNSPECIFIED: StepRecordState

class ExecuteRequest(_message.Message):
    __slots__ = ["arguments", "run_id", "step_id", "tool", "verdict"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    run_id: str
    step_id: str
    tool: str
    verdict: _validator_pb2.SignedVerdict
    def __init__(self, run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., verdict: _Optional[_Union[_validator_pb2.SignedVerdict, _Mapping]] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ["attempt", "duration", "replayed", "response"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    duration: _duration_pb2.Duration
    replayed: bool
    response: _decision_pb2.Response
    def __init__(self, response: _Optional[_Union[_decision_pb2.Response, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., replayed: bool = ..., attempt: _Optional[int] = ...) -> None: ...

class GetStepRequest(_message.Message):
    __slots__ = ["fence", "step_id"]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    fence: bool
    step_id: str
    def __init__(self, step_id: _Optional[str] = ..., fence: bool = ...) -> None: ...

class GetStepResponse(_message.Message):
    __slots__ = ["in_doubt", "step"]
    IN_DOUBT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    in_doubt: bool
    step: StepRecord
    def __init__(self, step: _Optional[_Union[StepRecord, _Mapping]] = ..., in_doubt: bool = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ["tools"]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_tool_pb2.ToolDescriptor]
    def __init__(self, tools: _Optional[_Iterable[_Union[_tool_pb2.ToolDescriptor, _Mapping]]] = ...) -> None: ...

class PreviewStepRequest(_message.Message):
    __slots__ = ["arguments", "tool"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    tool: str
    def __init__(self, tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class PreviewStepResponse(_message.Message):
    __slots__ = ["preview"]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    preview: _validator_pb2.Preview
    def __init__(self, preview: _Optional[_Union[_validator_pb2.Preview, _Mapping]] = ...) -> None: ...

class ResolveStepRequest(_message.Message):
    __slots__ = ["decision", "in_doubt_seq", "reason", "resolved_by", "result", "run_id", "step_id"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    IN_DOUBT_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    decision: StepDecision
    in_doubt_seq: int
    reason: str
    resolved_by: str
    result: _struct_pb2.Value
    run_id: str
    step_id: str
    def __init__(self, step_id: _Optional[str] = ..., decision: _Optional[_Union[StepDecision, str]] = ..., resolved_by: _Optional[str] = ..., reason: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., run_id: _Optional[str] = ..., in_doubt_seq: _Optional[int] = ...) -> None: ...

class ResolveStepResponse(_message.Message):
    __slots__ = ["step"]
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: StepRecord
    def __init__(self, step: _Optional[_Union[StepRecord, _Mapping]] = ...) -> None: ...

class StepCompensation(_message.Message):
    __slots__ = ["attempt", "blob", "checksum", "size"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    blob: str
    checksum: str
    size: int
    def __init__(self, attempt: _Optional[int] = ..., blob: _Optional[str] = ..., size: _Optional[int] = ..., checksum: _Optional[str] = ...) -> None: ...

class StepRecord(_message.Message):
    __slots__ = ["arguments_digest", "attempt", "compensations", "deadline", "duration", "effect", "executor", "finished_at", "idempotent", "reruns", "resolution", "response", "response_blob", "run_id", "started_at", "state", "step_id", "tool", "verdict_grants"]
    ARGUMENTS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMPENSATIONS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    RERUNS_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_BLOB_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VERDICT_GRANTS_FIELD_NUMBER: _ClassVar[int]
    arguments_digest: str
    attempt: int
    compensations: _containers.RepeatedCompositeFieldContainer[StepCompensation]
    deadline: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    effect: _tool_pb2.Effect
    executor: str
    finished_at: _timestamp_pb2.Timestamp
    idempotent: bool
    reruns: _containers.RepeatedCompositeFieldContainer[StepRerun]
    resolution: StepResolution
    response: _decision_pb2.Response
    response_blob: str
    run_id: str
    started_at: _timestamp_pb2.Timestamp
    state: StepRecordState
    step_id: str
    tool: str
    verdict_grants: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, step_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_digest: _Optional[str] = ..., state: _Optional[_Union[StepRecordState, str]] = ..., attempt: _Optional[int] = ..., effect: _Optional[_Union[_tool_pb2.Effect, str]] = ..., idempotent: bool = ..., executor: _Optional[str] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., response: _Optional[_Union[_decision_pb2.Response, _Mapping]] = ..., response_blob: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reruns: _Optional[_Iterable[_Union[StepRerun, _Mapping]]] = ..., compensations: _Optional[_Iterable[_Union[StepCompensation, _Mapping]]] = ..., resolution: _Optional[_Union[StepResolution, _Mapping]] = ..., verdict_grants: _Optional[_Iterable[str]] = ...) -> None: ...

class StepRerun(_message.Message):
    __slots__ = ["at", "attempt", "executor", "reason"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    attempt: int
    executor: str
    reason: str
    def __init__(self, attempt: _Optional[int] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., executor: _Optional[str] = ...) -> None: ...

class StepResolution(_message.Message):
    __slots__ = ["decision", "in_doubt_seq", "previous_state", "reason", "resolved_at", "resolved_by"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    IN_DOUBT_SEQ_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_AT_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    decision: StepDecision
    in_doubt_seq: int
    previous_state: StepRecordState
    reason: str
    resolved_at: _timestamp_pb2.Timestamp
    resolved_by: str
    def __init__(self, decision: _Optional[_Union[StepDecision, str]] = ..., resolved_by: _Optional[str] = ..., reason: _Optional[str] = ..., resolved_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., previous_state: _Optional[_Union[StepRecordState, str]] = ..., in_doubt_seq: _Optional[int] = ...) -> None: ...

class StepRecordState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StepDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
