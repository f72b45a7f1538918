from google.protobuf import timestamp_pb2 as _timestamp_pb2
from lctl.v1 import event_pb2 as _event_pb2
from xct.v1 import decision_pb2 as _decision_pb2
from xct.v1 import validator_pb2 as _validator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_DONE: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_IN_DOUBT: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_WAITING_APPROVAL: RunStatus
STEP_STATE_ALLOWED: StepState
STEP_STATE_CANCELLED: StepState
STEP_STATE_DENIED: StepState
STEP_STATE_FAILED: StepState
STEP_STATE_INVALID: StepState
STEP_STATE_IN_DOUBT: StepState
STEP_STATE_NEEDS_APPROVAL: StepState
STEP_STATE_PROPOSED: StepState
STEP_STATE_SUCCEEDED: StepState
STEP_STATE_UNSPECIFIED: StepState

class CancelRunRequest(_message.Message):
    __slots__ = ["reason", "run_id"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ["limit"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ["runs"]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class RollbackRunRequest(_message.Message):
    __slots__ = ["principal", "run_id", "to_step"]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TO_STEP_FIELD_NUMBER: _ClassVar[int]
    principal: str
    run_id: str
    to_step: int
    def __init__(self, run_id: _Optional[str] = ..., to_step: _Optional[int] = ..., principal: _Optional[str] = ...) -> None: ...

class RollbackRunResponse(_message.Message):
    __slots__ = ["message", "status", "undone"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UNDONE_FIELD_NUMBER: _ClassVar[int]
    message: str
    status: str
    undone: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, undone: _Optional[_Iterable[int]] = ..., status: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ["created_at", "goal", "input_tokens", "labels", "last_seq", "message", "model", "output_tokens", "principal", "run_id", "status", "steps", "updated_at"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    goal: str
    input_tokens: int
    labels: _containers.ScalarMap[str, str]
    last_seq: int
    message: str
    model: str
    output_tokens: int
    principal: str
    run_id: str
    status: RunStatus
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., goal: _Optional[str] = ..., model: _Optional[str] = ..., principal: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., status: _Optional[_Union[RunStatus, str]] = ..., message: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_seq: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ["crew", "crew_file", "goal", "labels", "max_steps", "model", "principal", "run_id"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREW_FIELD_NUMBER: _ClassVar[int]
    CREW_FILE_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    crew: bytes
    crew_file: str
    goal: str
    labels: _containers.ScalarMap[str, str]
    max_steps: int
    model: str
    principal: str
    run_id: str
    def __init__(self, goal: _Optional[str] = ..., model: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., run_id: _Optional[str] = ..., max_steps: _Optional[int] = ..., principal: _Optional[str] = ..., crew: _Optional[bytes] = ..., crew_file: _Optional[str] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ["in_doubt_seq", "number", "proposal", "response", "state", "step_id", "verdict"]
    IN_DOUBT_SEQ_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    in_doubt_seq: int
    number: int
    proposal: _decision_pb2.NextStep
    response: _decision_pb2.Response
    state: StepState
    step_id: str
    verdict: _validator_pb2.Verdict
    def __init__(self, number: _Optional[int] = ..., step_id: _Optional[str] = ..., state: _Optional[_Union[StepState, str]] = ..., proposal: _Optional[_Union[_decision_pb2.NextStep, _Mapping]] = ..., verdict: _Optional[_Union[_validator_pb2.Verdict, _Mapping]] = ..., response: _Optional[_Union[_decision_pb2.Response, _Mapping]] = ..., in_doubt_seq: _Optional[int] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ["from_seq", "run_id"]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    from_seq: int
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., from_seq: _Optional[int] = ...) -> None: ...

class WatchRunResponse(_message.Message):
    __slots__ = ["event"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _event_pb2.Event
    def __init__(self, event: _Optional[_Union[_event_pb2.Event, _Mapping]] = ...) -> None: ...

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StepState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
