package executor

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/wire"
)

// Step records keep a step's response redacted (docs/security.md,
// Redaction): the record is what a replay answers and what GetStep and
// xct resolve show, and none of them needs the secret back, because the
// orchestrator records and folds only redacted results anyway. The tool
// and the live caller get the real values. Compensations (what undo
// restores) are kept as they are: undoing a write must put back the real
// bytes.

// redactorOrNil returns the Redactor, nil before Start (which redacts
// nothing: nothing is recorded before Start either).
func (s *Service) redactorOrNil() *redact.Redactor {
	s.state.RLock()
	defer s.state.RUnlock()
	return s.redactor
}

// redactResponse returns resp with its secrets replaced; the secrets found
// under keys of the arguments are replaced where the response repeats
// them. resp itself is not changed.
func (s *Service) redactResponse(args map[string]any, resp *xctv1.Response) *xctv1.Response {
	scope := s.redactorOrNil().Scope()
	if scope == nil || resp == nil {
		return resp
	}
	scope.Value(args)
	if e := resp.GetError(); e != nil {
		out := proto.CloneOf(e)
		out.Message = scope.Text(e.GetMessage())
		out.SuggestedAction = scope.Text(e.GetSuggestedAction())
		if d := e.GetDetails(); d != nil {
			if st, err := structpb.NewStruct(scope.Map(d.AsMap())); err == nil {
				out.Details = st
			}
		}
		return wire.ErrorResponse(out)
	}
	result, changed := scope.Redact(resp.GetSuccess().GetResult().AsInterface())
	if !changed {
		return resp
	}
	red, err := wire.SuccessResponse(result)
	if err != nil {
		// Cannot happen for a value that came from a Response; never keep
		// the unredacted one.
		return wire.ErrorResponse(wire.Errorf(wire.CodeToolFailure, "the result could not be redacted: %v", err))
	}
	return red
}
