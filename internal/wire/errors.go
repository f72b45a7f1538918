package wire

import (
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Code is a stable machine code carried by every error signal.
type Code string

// The error codes XCT sends to models. docs/events.md lists them with their
// LCTL taxonomy.
const (
	CodeGenerationFailed     Code = "GENERATION_FAILED"     // model output did not parse
	CodeUnknownTool          Code = "UNKNOWN_TOOL"          // tool is not in the catalog
	CodeSchemaInvalid        Code = "SCHEMA_INVALID"        // arguments do not satisfy the tool's schema
	CodePolicyDenied         Code = "POLICY_DENIED"         // a policy rule denied, or none allowed
	CodeApprovalRequired     Code = "APPROVAL_REQUIRED"     // a human must approve first
	CodeValidatorUnavailable Code = "VALIDATOR_UNAVAILABLE" // the validator could not be asked: deny
	CodePermissionDenied     Code = "PERMISSION_DENIED"     // the tool refused: outside the sandbox
	CodeNotFound             Code = "NOT_FOUND"             // the tool's target does not exist
	CodeInvalidArgument      Code = "INVALID_ARGUMENT"      // the tool rejected an argument's value
	CodeTimeout              Code = "TIMEOUT"               // the tool ran past its deadline
	CodeOutputTooLarge       Code = "OUTPUT_TOO_LARGE"      // the result exceeded the tool's cap
	CodeToolFailure          Code = "TOOL_FAILURE"          // the tool failed for another reason
	CodeExecutorUnavailable  Code = "EXECUTOR_UNAVAILABLE"  // the executor could not be reached
	CodeBudgetExceeded       Code = "BUDGET_EXCEEDED"       // a run budget is used up
	CodeInDoubt              Code = "IN_DOUBT"              // a step may have acted: a human must decide
	CodeApprovalDenied       Code = "APPROVAL_DENIED"       // a human denied the step
	CodeApprovalExpired      Code = "APPROVAL_EXPIRED"      // no human decided in time
	CodeRateLimited          Code = "RATE_LIMITED"          // a tool's rate limit is reached: wait
	CodeToolNotAllowed       Code = "TOOL_NOT_ALLOWED"      // a crew agent proposed a tool its crew file does not give it
	CodeVerification         Code = "VERIFICATION_REQUIRED" // a crew step's confidence asks a reviewer agent to verify first
	CodeChangedSincePreview  Code = "CHANGED_SINCE_PREVIEW" // the file changed after the preview a human approved: nothing was done
)

// taxonomy is the LCTL classification of a code (spec part 6).
type taxonomy struct {
	category, typ, action string
	recoverable           bool
}

var taxonomies = map[Code]taxonomy{
	CodeGenerationFailed:     {"output_error", "generation_failed", "reply_with_one_valid_decision", true},
	CodeUnknownTool:          {"input_error", "invalid_format", "choose_a_tool_from_the_catalog", true},
	CodeSchemaInvalid:        {"input_error", "invalid_format", "fix_arguments", true},
	CodePolicyDenied:         {"output_error", "validation_failed", "propose_a_different_action", true},
	CodeApprovalRequired:     {"output_error", "validation_failed", "wait_for_human_approval", true},
	CodeValidatorUnavailable: {"orchestration_error", "delegation_rejected", "retry_later", true},
	CodePermissionDenied:     {"execution_error", "tool_failure", "stay_inside_the_workspace", true},
	CodeNotFound:             {"execution_error", "tool_failure", "check_the_path", true},
	CodeInvalidArgument:      {"input_error", "invalid_format", "fix_arguments", true},
	CodeTimeout:              {"execution_error", "timeout", "reduce_the_work_per_step", true},
	CodeOutputTooLarge:       {"execution_error", "resource_exhausted", "request_less_output", true},
	CodeToolFailure:          {"execution_error", "tool_failure", "propose_a_different_action", true},
	CodeExecutorUnavailable:  {"execution_error", "tool_failure", "retry_later", true},
	CodeBudgetExceeded:       {"execution_error", "resource_exhausted", "finish_with_done", false},
	CodeInDoubt:              {"execution_error", "tool_failure", "needs_human_decision", false},
	CodeApprovalDenied:       {"output_error", "validation_failed", "propose_a_different_action", true},
	CodeApprovalExpired:      {"output_error", "validation_failed", "propose_again_or_finish", true},
	CodeRateLimited:          {"execution_error", "rate_limited", "wait_and_retry_later", true},
	CodeToolNotAllowed:       {"output_error", "validation_failed", "choose_one_of_your_tools", true},
	CodeVerification:         {"output_error", "validation_failed", "hand_off_to_the_verifier", true},
	CodeChangedSincePreview:  {"execution_error", "tool_failure", "propose_again_for_a_new_approval", true},
}

// Errorf builds an error signal with the code's LCTL taxonomy.
func Errorf(code Code, format string, args ...any) *xctv1.Error {
	t, ok := taxonomies[code]
	if !ok {
		t = taxonomies[CodeToolFailure]
	}
	return &xctv1.Error{
		Code:            string(code),
		Message:         fmt.Sprintf(format, args...),
		Category:        t.category,
		Type:            t.typ,
		Recoverable:     t.recoverable,
		SuggestedAction: t.action,
	}
}

// WithDetails attaches JSON details to e and returns it. Details that cannot
// be represented are dropped rather than failing the signal.
func WithDetails(e *xctv1.Error, details map[string]any) *xctv1.Error {
	if s, err := structpb.NewStruct(details); err == nil {
		e.Details = s
	}
	return e
}

// ErrorResponse wraps an error signal in a Response.
func ErrorResponse(e *xctv1.Error) *xctv1.Response {
	return &xctv1.Response{Outcome: &xctv1.Response_Error{Error: e}}
}

// SuccessResponse wraps a JSON result in a Response.
func SuccessResponse(result any) (*xctv1.Response, error) {
	v, err := structpb.NewValue(result)
	if err != nil {
		return nil, fmt.Errorf("result is not JSON: %w", err)
	}
	return &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}, nil
}
