from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from xct.v1 import decision_pb2 as _decision_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

APPROVAL_STATE_APPROVED: ApprovalState
APPROVAL_STATE_DENIED: ApprovalState
APPROVAL_STATE_EXPIRED: ApprovalState
APPROVAL_STATE_PENDING: ApprovalState
APPROVAL_STATE_UNSPECIFIED: ApprovalState
APPROVAL_STATE_WITHDRAWN: ApprovalState
DESCRIPTOR: _descriptor.FileDescriptor
VERDICT_DECISION_ALLOW: VerdictDecision
VERDICT_DECISION_DENY: VerdictDecision
VERDICT_DECISION_NEEDS_APPROVAL: VerdictDecision
VERDICT_DECISION_UNSPECIFIED: VerdictDecision

class Approval(_message.Message):
    __slots__ = ["agent", "crew", "decided_at", "decided_by", "decided_policy_version", "expires_at", "handoff_path", "opened_at_seq", "policy_version", "preview", "proposal", "reason", "reasons", "requested_at", "requested_by", "run_id", "state", "step", "step_id"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CREW_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDED_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_PATH_FIELD_NUMBER: _ClassVar[int]
    OPENED_AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    agent: str
    crew: str
    decided_at: _timestamp_pb2.Timestamp
    decided_by: str
    decided_policy_version: str
    expires_at: _timestamp_pb2.Timestamp
    handoff_path: _containers.RepeatedScalarFieldContainer[str]
    opened_at_seq: int
    policy_version: str
    preview: Preview
    proposal: _decision_pb2.NextStep
    reason: str
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    requested_at: _timestamp_pb2.Timestamp
    requested_by: str
    run_id: str
    state: ApprovalState
    step: int
    step_id: str
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., step_id: _Optional[str] = ..., proposal: _Optional[_Union[_decision_pb2.NextStep, _Mapping]] = ..., requested_by: _Optional[str] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., policy_version: _Optional[str] = ..., preview: _Optional[_Union[Preview, _Mapping]] = ..., state: _Optional[_Union[ApprovalState, str]] = ..., requested_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., decided_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., decided_by: _Optional[str] = ..., reason: _Optional[str] = ..., decided_policy_version: _Optional[str] = ..., opened_at_seq: _Optional[int] = ..., crew: _Optional[str] = ..., agent: _Optional[str] = ..., handoff_path: _Optional[_Iterable[str]] = ...) -> None: ...

class CrewContext(_message.Message):
    __slots__ = ["agent", "agent_type", "crew", "crew_sha256", "handoff_path", "relies_on", "thresholds", "tools", "verifier"]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREW_FIELD_NUMBER: _ClassVar[int]
    CREW_SHA256_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_PATH_FIELD_NUMBER: _ClassVar[int]
    RELIES_ON_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    agent: str
    agent_type: str
    crew: str
    crew_sha256: str
    handoff_path: _containers.RepeatedScalarFieldContainer[str]
    relies_on: _containers.RepeatedCompositeFieldContainer[FactConfidence]
    thresholds: CrewThresholds
    tools: _containers.RepeatedScalarFieldContainer[str]
    verifier: str
    def __init__(self, crew: _Optional[str] = ..., crew_sha256: _Optional[str] = ..., agent: _Optional[str] = ..., agent_type: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., thresholds: _Optional[_Union[CrewThresholds, _Mapping]] = ..., relies_on: _Optional[_Iterable[_Union[FactConfidence, _Mapping]]] = ..., verifier: _Optional[str] = ..., handoff_path: _Optional[_Iterable[str]] = ...) -> None: ...

class CrewThresholds(_message.Message):
    __slots__ = ["proceed", "verify", "warn"]
    PROCEED_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    WARN_FIELD_NUMBER: _ClassVar[int]
    proceed: float
    verify: float
    warn: float
    def __init__(self, proceed: _Optional[float] = ..., warn: _Optional[float] = ..., verify: _Optional[float] = ...) -> None: ...

class DecideApprovalRequest(_message.Message):
    __slots__ = ["approve", "approver", "reason", "run_id", "step"]
    APPROVER_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    approve: bool
    approver: str
    reason: str
    run_id: str
    step: str
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[str] = ..., approve: bool = ..., approver: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DecideApprovalResponse(_message.Message):
    __slots__ = ["approval"]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class FactConfidence(_message.Message):
    __slots__ = ["confidence", "id"]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    confidence: float
    id: str
    def __init__(self, id: _Optional[str] = ..., confidence: _Optional[float] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ["all", "run_id"]
    ALL_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    all: bool
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., all: bool = ...) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ["approvals"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ...) -> None: ...

class Preview(_message.Message):
    __slots__ = ["base_digest", "content", "kind", "redacted"]
    BASE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    base_digest: str
    content: str
    kind: str
    redacted: bool
    def __init__(self, kind: _Optional[str] = ..., content: _Optional[str] = ..., base_digest: _Optional[str] = ..., redacted: bool = ...) -> None: ...

class Reason(_message.Message):
    __slots__ = ["message", "rule_id"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    message: str
    rule_id: str
    def __init__(self, rule_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RequestApprovalRequest(_message.Message):
    __slots__ = ["crew", "preview", "proposal", "run", "step", "step_id", "verdict"]
    CREW_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    crew: CrewContext
    preview: Preview
    proposal: _decision_pb2.NextStep
    run: RunContext
    step: int
    step_id: str
    verdict: Verdict
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., step: _Optional[int] = ..., step_id: _Optional[str] = ..., proposal: _Optional[_Union[_decision_pb2.NextStep, _Mapping]] = ..., verdict: _Optional[_Union[Verdict, _Mapping]] = ..., preview: _Optional[_Union[Preview, _Mapping]] = ..., crew: _Optional[_Union[CrewContext, _Mapping]] = ...) -> None: ...

class RequestApprovalResponse(_message.Message):
    __slots__ = ["approval"]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class RunContext(_message.Message):
    __slots__ = ["consecutive_errors", "elapsed", "input_tokens", "labels", "model", "models", "output_tokens", "principal", "principal_roles", "run_id", "steps_used"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONSECUTIVE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_ROLES_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_USED_FIELD_NUMBER: _ClassVar[int]
    consecutive_errors: int
    elapsed: _duration_pb2.Duration
    input_tokens: int
    labels: _containers.ScalarMap[str, str]
    model: str
    models: _containers.RepeatedScalarFieldContainer[str]
    output_tokens: int
    principal: str
    principal_roles: _containers.RepeatedScalarFieldContainer[str]
    run_id: str
    steps_used: int
    def __init__(self, run_id: _Optional[str] = ..., principal: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., steps_used: _Optional[int] = ..., consecutive_errors: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., model: _Optional[str] = ..., elapsed: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., principal_roles: _Optional[_Iterable[str]] = ..., models: _Optional[_Iterable[str]] = ...) -> None: ...

class ShadowVerdict(_message.Message):
    __slots__ = ["decision", "policy_version", "reasons"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    decision: VerdictDecision
    policy_version: str
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    def __init__(self, policy_version: _Optional[str] = ..., decision: _Optional[_Union[VerdictDecision, str]] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ...) -> None: ...

class SignedVerdict(_message.Message):
    __slots__ = ["grant", "key_id", "signature"]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    grant: bytes
    key_id: str
    signature: bytes
    def __init__(self, key_id: _Optional[str] = ..., grant: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class ValidateRequest(_message.Message):
    __slots__ = ["crew", "proposal", "run", "step", "step_id", "system_step"]
    CREW_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_STEP_FIELD_NUMBER: _ClassVar[int]
    crew: CrewContext
    proposal: _decision_pb2.NextStep
    run: RunContext
    step: int
    step_id: str
    system_step: bool
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., step: _Optional[int] = ..., step_id: _Optional[str] = ..., proposal: _Optional[_Union[_decision_pb2.NextStep, _Mapping]] = ..., system_step: bool = ..., crew: _Optional[_Union[CrewContext, _Mapping]] = ...) -> None: ...

class ValidateResponse(_message.Message):
    __slots__ = ["verdict"]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    def __init__(self, verdict: _Optional[_Union[Verdict, _Mapping]] = ...) -> None: ...

class Verdict(_message.Message):
    __slots__ = ["approval_ttl", "decision", "ends_run", "error", "evaluated_at", "policy_version", "reasons", "shadow", "signed"]
    APPROVAL_TTL_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ENDS_RUN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_AT_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    SIGNED_FIELD_NUMBER: _ClassVar[int]
    approval_ttl: _duration_pb2.Duration
    decision: VerdictDecision
    ends_run: bool
    error: _decision_pb2.Error
    evaluated_at: _timestamp_pb2.Timestamp
    policy_version: str
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    shadow: _containers.RepeatedCompositeFieldContainer[ShadowVerdict]
    signed: SignedVerdict
    def __init__(self, decision: _Optional[_Union[VerdictDecision, str]] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., policy_version: _Optional[str] = ..., evaluated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[_Union[_decision_pb2.Error, _Mapping]] = ..., shadow: _Optional[_Iterable[_Union[ShadowVerdict, _Mapping]]] = ..., ends_run: bool = ..., approval_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., signed: _Optional[_Union[SignedVerdict, _Mapping]] = ...) -> None: ...

class VerdictGrant(_message.Message):
    __slots__ = ["arguments_digest", "expires_at", "grant_id", "issued_at", "policy_version", "preview_base", "run_id", "step", "step_id", "system_step", "tool", "tool_digest"]
    ARGUMENTS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_BASE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_STEP_FIELD_NUMBER: _ClassVar[int]
    TOOL_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments_digest: str
    expires_at: _timestamp_pb2.Timestamp
    grant_id: str
    issued_at: _timestamp_pb2.Timestamp
    policy_version: str
    preview_base: str
    run_id: str
    step: int
    step_id: str
    system_step: bool
    tool: str
    tool_digest: str
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., step_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_digest: _Optional[str] = ..., policy_version: _Optional[str] = ..., issued_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., grant_id: _Optional[str] = ..., system_step: bool = ..., tool_digest: _Optional[str] = ..., preview_base: _Optional[str] = ...) -> None: ...

class WithdrawApprovalRequest(_message.Message):
    __slots__ = ["by", "reason", "run_id", "step_id"]
    BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    by: str
    reason: str
    run_id: str
    step_id: str
    def __init__(self, run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., by: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WithdrawApprovalResponse(_message.Message):
    __slots__ = ["approval"]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class VerdictDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ApprovalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
