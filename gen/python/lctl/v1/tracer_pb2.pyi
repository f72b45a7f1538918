from google.protobuf import struct_pb2 as _struct_pb2
from lctl.v1 import event_pb2 as _event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EXPORT_FORMAT_JSON: ExportFormat
EXPORT_FORMAT_UNSPECIFIED: ExportFormat
EXPORT_FORMAT_YAML: ExportFormat
STATE_VIEW_FULL: StateView
STATE_VIEW_SUMMARY: StateView
STATE_VIEW_UNSPECIFIED: StateView

class AgentTime(_message.Message):
    __slots__ = ["agent", "duration_ms", "share", "steps"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    agent: str
    duration_ms: float
    share: float
    steps: int
    def __init__(self, agent: _Optional[str] = ..., duration_ms: _Optional[float] = ..., share: _Optional[float] = ..., steps: _Optional[int] = ...) -> None: ...

class ChainStatsRequest(_message.Message):
    __slots__ = ["chain_id", "prices"]
    class PricesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ModelPrice
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelPrice, _Mapping]] = ...) -> None: ...
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    PRICES_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    prices: _containers.MessageMap[str, ModelPrice]
    def __init__(self, chain_id: _Optional[str] = ..., prices: _Optional[_Mapping[str, ModelPrice]] = ...) -> None: ...

class ChainStatsResponse(_message.Message):
    __slots__ = ["agents", "avg_confidence", "cost", "cost_by_model", "duration_ms", "duration_source", "errors", "event_types", "events", "facts", "run_status", "steps", "tokens_in", "tokens_out", "tool_calls", "unpriced", "wall_clock_ms"]
    class EventTypesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    AVG_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    COST_BY_MODEL_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_SOURCE_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    RUN_STATUS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    UNPRICED_FIELD_NUMBER: _ClassVar[int]
    WALL_CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedScalarFieldContainer[str]
    avg_confidence: float
    cost: float
    cost_by_model: _containers.RepeatedCompositeFieldContainer[ModelCost]
    duration_ms: float
    duration_source: str
    errors: int
    event_types: _containers.ScalarMap[str, int]
    events: int
    facts: int
    run_status: str
    steps: int
    tokens_in: int
    tokens_out: int
    tool_calls: int
    unpriced: _containers.RepeatedScalarFieldContainer[str]
    wall_clock_ms: float
    def __init__(self, events: _Optional[int] = ..., duration_ms: _Optional[float] = ..., duration_source: _Optional[str] = ..., wall_clock_ms: _Optional[float] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., cost: _Optional[float] = ..., cost_by_model: _Optional[_Iterable[_Union[ModelCost, _Mapping]]] = ..., unpriced: _Optional[_Iterable[str]] = ..., agents: _Optional[_Iterable[str]] = ..., errors: _Optional[int] = ..., facts: _Optional[int] = ..., avg_confidence: _Optional[float] = ..., steps: _Optional[int] = ..., tool_calls: _Optional[int] = ..., event_types: _Optional[_Mapping[str, int]] = ..., run_status: _Optional[str] = ...) -> None: ...

class ChainSummary(_message.Message):
    __slots__ = ["agents", "chain_id", "events", "first_timestamp", "last_timestamp", "verified", "verify_error"]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    VERIFY_ERROR_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedScalarFieldContainer[str]
    chain_id: str
    events: int
    first_timestamp: str
    last_timestamp: str
    verified: bool
    verify_error: str
    def __init__(self, chain_id: _Optional[str] = ..., events: _Optional[int] = ..., first_timestamp: _Optional[str] = ..., last_timestamp: _Optional[str] = ..., agents: _Optional[_Iterable[str]] = ..., verified: bool = ..., verify_error: _Optional[str] = ...) -> None: ...

class ConfidencePoint(_message.Message):
    __slots__ = ["agent", "blocked", "kind", "reason", "seq", "value"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    blocked: bool
    kind: str
    reason: str
    seq: int
    value: float
    def __init__(self, seq: _Optional[int] = ..., agent: _Optional[str] = ..., kind: _Optional[str] = ..., value: _Optional[float] = ..., blocked: bool = ..., reason: _Optional[str] = ...) -> None: ...

class ContractFile(_message.Message):
    __slots__ = ["content", "name"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    name: str
    def __init__(self, name: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class ContractResult(_message.Message):
    __slots__ = ["agent", "checked", "direction", "ok", "violations"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    agent: str
    checked: int
    direction: str
    ok: bool
    violations: _containers.RepeatedCompositeFieldContainer[Violation]
    def __init__(self, agent: _Optional[str] = ..., direction: _Optional[str] = ..., checked: _Optional[int] = ..., ok: bool = ..., violations: _Optional[_Iterable[_Union[Violation, _Mapping]]] = ...) -> None: ...

class DiffChainsRequest(_message.Message):
    __slots__ = ["chain_id_a", "chain_id_b", "compare_all_fields", "ignore_fields"]
    CHAIN_ID_A_FIELD_NUMBER: _ClassVar[int]
    CHAIN_ID_B_FIELD_NUMBER: _ClassVar[int]
    COMPARE_ALL_FIELDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_FIELDS_FIELD_NUMBER: _ClassVar[int]
    chain_id_a: str
    chain_id_b: str
    compare_all_fields: bool
    ignore_fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, chain_id_a: _Optional[str] = ..., chain_id_b: _Optional[str] = ..., ignore_fields: _Optional[_Iterable[str]] = ..., compare_all_fields: bool = ...) -> None: ...

class DiffChainsResponse(_message.Message):
    __slots__ = ["added", "aligned", "changed", "differences", "identical", "ignored_fields", "removed"]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    ALIGNED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    IDENTICAL_FIELD_NUMBER: _ClassVar[int]
    IGNORED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    added: int
    aligned: bool
    changed: int
    differences: _containers.RepeatedCompositeFieldContainer[Difference]
    identical: bool
    ignored_fields: _containers.RepeatedScalarFieldContainer[str]
    removed: int
    def __init__(self, identical: bool = ..., differences: _Optional[_Iterable[_Union[Difference, _Mapping]]] = ..., changed: _Optional[int] = ..., added: _Optional[int] = ..., removed: _Optional[int] = ..., aligned: bool = ..., ignored_fields: _Optional[_Iterable[str]] = ...) -> None: ...

class Difference(_message.Message):
    __slots__ = ["a", "b", "fields", "kind"]
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    a: EventRef
    b: EventRef
    fields: _containers.RepeatedCompositeFieldContainer[FieldChange]
    kind: str
    def __init__(self, kind: _Optional[str] = ..., a: _Optional[_Union[EventRef, _Mapping]] = ..., b: _Optional[_Union[EventRef, _Mapping]] = ..., fields: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ...) -> None: ...

class EventRef(_message.Message):
    __slots__ = ["agent", "detail", "position", "seq", "subject", "type"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    detail: str
    position: int
    seq: int
    subject: str
    type: str
    def __init__(self, seq: _Optional[int] = ..., position: _Optional[int] = ..., agent: _Optional[str] = ..., type: _Optional[str] = ..., subject: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ExportChainRequest(_message.Message):
    __slots__ = ["chain_id", "format"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    format: ExportFormat
    def __init__(self, chain_id: _Optional[str] = ..., format: _Optional[_Union[ExportFormat, str]] = ...) -> None: ...

class ExportChainResponse(_message.Message):
    __slots__ = ["content", "content_type"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    content_type: str
    def __init__(self, content: _Optional[bytes] = ..., content_type: _Optional[str] = ...) -> None: ...

class Fact(_message.Message):
    __slots__ = ["added_by", "confidence", "fields", "id", "source", "tags", "text", "updated_by", "updated_seq"]
    ADDED_BY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    UPDATED_SEQ_FIELD_NUMBER: _ClassVar[int]
    added_by: str
    confidence: float
    fields: _struct_pb2.Struct
    id: str
    source: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    text: str
    updated_by: str
    updated_seq: int
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., confidence: _Optional[float] = ..., source: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., fields: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., added_by: _Optional[str] = ..., updated_by: _Optional[str] = ..., updated_seq: _Optional[int] = ...) -> None: ...

class FactConfidenceRequest(_message.Message):
    __slots__ = ["chain_id", "decay_rate"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    DECAY_RATE_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    decay_rate: float
    def __init__(self, chain_id: _Optional[str] = ..., decay_rate: _Optional[float] = ...) -> None: ...

class FactConfidenceResponse(_message.Message):
    __slots__ = ["decay_rate", "facts", "hops", "warnings"]
    DECAY_RATE_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    decay_rate: float
    facts: _containers.RepeatedCompositeFieldContainer[FactTimeline]
    hops: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, facts: _Optional[_Iterable[_Union[FactTimeline, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., hops: _Optional[int] = ..., decay_rate: _Optional[float] = ...) -> None: ...

class FactTimeline(_message.Message):
    __slots__ = ["band", "blocked_seq", "conflict", "consensus_score", "final", "id", "labels", "points", "text"]
    BAND_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_SCORE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    band: str
    blocked_seq: int
    conflict: float
    consensus_score: float
    final: float
    id: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    points: _containers.RepeatedCompositeFieldContainer[ConfidencePoint]
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., points: _Optional[_Iterable[_Union[ConfidencePoint, _Mapping]]] = ..., final: _Optional[float] = ..., band: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., blocked_seq: _Optional[int] = ..., consensus_score: _Optional[float] = ..., conflict: _Optional[float] = ...) -> None: ...

class FieldChange(_message.Message):
    __slots__ = ["a", "b", "path"]
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    a: _struct_pb2.Value
    b: _struct_pb2.Value
    path: str
    def __init__(self, path: _Optional[str] = ..., a: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., b: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class FindBottlenecksRequest(_message.Message):
    __slots__ = ["chain_id", "top"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    top: int
    def __init__(self, chain_id: _Optional[str] = ..., top: _Optional[int] = ...) -> None: ...

class FindBottlenecksResponse(_message.Message):
    __slots__ = ["by_agent", "recommendation", "steps", "total_ms", "unfinished"]
    BY_AGENT_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDATION_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    by_agent: _containers.RepeatedCompositeFieldContainer[AgentTime]
    recommendation: str
    steps: _containers.RepeatedCompositeFieldContainer[StepTiming]
    total_ms: float
    unfinished: _containers.RepeatedCompositeFieldContainer[StepTiming]
    def __init__(self, steps: _Optional[_Iterable[_Union[StepTiming, _Mapping]]] = ..., total_ms: _Optional[float] = ..., by_agent: _Optional[_Iterable[_Union[AgentTime, _Mapping]]] = ..., unfinished: _Optional[_Iterable[_Union[StepTiming, _Mapping]]] = ..., recommendation: _Optional[str] = ...) -> None: ...

class GetChainRequest(_message.Message):
    __slots__ = ["chain_id", "from_seq", "page_size"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    from_seq: int
    page_size: int
    def __init__(self, chain_id: _Optional[str] = ..., from_seq: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class GetChainResponse(_message.Message):
    __slots__ = ["events", "next_seq", "summary"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    next_seq: int
    summary: ChainSummary
    def __init__(self, summary: _Optional[_Union[ChainSummary, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., next_seq: _Optional[int] = ...) -> None: ...

class ListChainsRequest(_message.Message):
    __slots__ = ["limit"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class ListChainsResponse(_message.Message):
    __slots__ = ["chains"]
    CHAINS_FIELD_NUMBER: _ClassVar[int]
    chains: _containers.RepeatedCompositeFieldContainer[ChainSummary]
    def __init__(self, chains: _Optional[_Iterable[_Union[ChainSummary, _Mapping]]] = ...) -> None: ...

class ModelCost(_message.Message):
    __slots__ = ["cost", "input_tokens", "model", "output_tokens"]
    COST_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cost: float
    input_tokens: int
    model: str
    output_tokens: int
    def __init__(self, model: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost: _Optional[float] = ...) -> None: ...

class ModelPrice(_message.Message):
    __slots__ = ["input_per_1k", "output_per_1k"]
    INPUT_PER_1K_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PER_1K_FIELD_NUMBER: _ClassVar[int]
    input_per_1k: float
    output_per_1k: float
    def __init__(self, input_per_1k: _Optional[float] = ..., output_per_1k: _Optional[float] = ...) -> None: ...

class Problem(_message.Message):
    __slots__ = ["kind", "message", "position", "seq"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    kind: str
    message: str
    position: int
    seq: int
    def __init__(self, seq: _Optional[int] = ..., position: _Optional[int] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class QueryFactsRequest(_message.Message):
    __slots__ = ["chain_id", "query", "to_seq"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    query: str
    to_seq: int
    def __init__(self, chain_id: _Optional[str] = ..., query: _Optional[str] = ..., to_seq: _Optional[int] = ...) -> None: ...

class QueryFactsResponse(_message.Message):
    __slots__ = ["columns", "facts"]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    facts: _containers.RepeatedCompositeFieldContainer[Fact]
    def __init__(self, facts: _Optional[_Iterable[_Union[Fact, _Mapping]]] = ..., columns: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplayChainRequest(_message.Message):
    __slots__ = ["chain_id", "include_hash", "to_seq", "view"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HASH_FIELD_NUMBER: _ClassVar[int]
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    include_hash: bool
    to_seq: int
    view: StateView
    def __init__(self, chain_id: _Optional[str] = ..., to_seq: _Optional[int] = ..., view: _Optional[_Union[StateView, str]] = ..., include_hash: bool = ...) -> None: ...

class ReplayChainResponse(_message.Message):
    __slots__ = ["from_snapshot_seq", "seq", "state", "state_hash", "summary"]
    FROM_SNAPSHOT_SEQ_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_HASH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    from_snapshot_seq: int
    seq: int
    state: _struct_pb2.Struct
    state_hash: str
    summary: StateSummary
    def __init__(self, seq: _Optional[int] = ..., state: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., summary: _Optional[_Union[StateSummary, _Mapping]] = ..., state_hash: _Optional[str] = ..., from_snapshot_seq: _Optional[int] = ...) -> None: ...

class StateSummary(_message.Message):
    __slots__ = ["agent", "agents", "current_intent", "current_step_seq", "errors", "events", "facts", "last_checkpoint_seq", "last_error_seq", "last_timestamp", "run_status", "seq", "tokens_in", "tokens_out", "tool_calls", "unknown_types"]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_INTENT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_STEP_SEQ_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    RUN_STATUS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TYPES_FIELD_NUMBER: _ClassVar[int]
    agent: str
    agents: int
    current_intent: str
    current_step_seq: int
    errors: int
    events: int
    facts: int
    last_checkpoint_seq: int
    last_error_seq: int
    last_timestamp: str
    run_status: str
    seq: int
    tokens_in: int
    tokens_out: int
    tool_calls: int
    unknown_types: int
    def __init__(self, seq: _Optional[int] = ..., events: _Optional[int] = ..., facts: _Optional[int] = ..., agent: _Optional[str] = ..., current_step_seq: _Optional[int] = ..., current_intent: _Optional[str] = ..., agents: _Optional[int] = ..., errors: _Optional[int] = ..., tool_calls: _Optional[int] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., run_status: _Optional[str] = ..., last_checkpoint_seq: _Optional[int] = ..., unknown_types: _Optional[int] = ..., last_timestamp: _Optional[str] = ..., last_error_seq: _Optional[int] = ...) -> None: ...

class StepTiming(_message.Message):
    __slots__ = ["agent", "duration_ms", "intent", "share", "start_seq", "step", "tool_ms", "unfinished"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    START_SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOOL_MS_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    agent: str
    duration_ms: float
    intent: str
    share: float
    start_seq: int
    step: int
    tool_ms: float
    unfinished: bool
    def __init__(self, agent: _Optional[str] = ..., step: _Optional[int] = ..., start_seq: _Optional[int] = ..., duration_ms: _Optional[float] = ..., share: _Optional[float] = ..., tool_ms: _Optional[float] = ..., unfinished: bool = ..., intent: _Optional[str] = ...) -> None: ...

class ValidateContractsRequest(_message.Message):
    __slots__ = ["chain_id", "files"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    files: _containers.RepeatedCompositeFieldContainer[ContractFile]
    def __init__(self, chain_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[ContractFile, _Mapping]]] = ...) -> None: ...

class ValidateContractsResponse(_message.Message):
    __slots__ = ["ok", "results", "violations"]
    OK_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    results: _containers.RepeatedCompositeFieldContainer[ContractResult]
    violations: int
    def __init__(self, ok: bool = ..., results: _Optional[_Iterable[_Union[ContractResult, _Mapping]]] = ..., violations: _Optional[int] = ...) -> None: ...

class VerifyChainRequest(_message.Message):
    __slots__ = ["chain_id"]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    chain_id: str
    def __init__(self, chain_id: _Optional[str] = ...) -> None: ...

class VerifyChainResponse(_message.Message):
    __slots__ = ["checks", "events", "notes", "ok", "problems"]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.RepeatedCompositeFieldContainer[VerifyCheck]
    events: int
    notes: _containers.RepeatedScalarFieldContainer[str]
    ok: bool
    problems: _containers.RepeatedCompositeFieldContainer[Problem]
    def __init__(self, ok: bool = ..., events: _Optional[int] = ..., checks: _Optional[_Iterable[_Union[VerifyCheck, _Mapping]]] = ..., problems: _Optional[_Iterable[_Union[Problem, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class VerifyCheck(_message.Message):
    __slots__ = ["name", "ok", "problems", "summary"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    name: str
    ok: bool
    problems: int
    summary: str
    def __init__(self, name: _Optional[str] = ..., ok: bool = ..., summary: _Optional[str] = ..., problems: _Optional[int] = ...) -> None: ...

class Violation(_message.Message):
    __slots__ = ["message", "rule", "seq", "subject"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    message: str
    rule: str
    seq: int
    subject: str
    def __init__(self, seq: _Optional[int] = ..., subject: _Optional[str] = ..., message: _Optional[str] = ..., rule: _Optional[str] = ...) -> None: ...

class StateView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ExportFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
