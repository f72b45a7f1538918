package orchestrator

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// settleRepeatable applies the rule "an unknown outcome of a tool that is
// read-only or idempotent is a definite error, not in doubt": whether such
// a call acted does not matter (running it again changes nothing more), so
// the step ends as a plain error signal the model reacts to (TIMEOUT, say),
// the run goes on, and the error on the chain says so (outcome_unknown
// false, repeatable true) — as the executor's record says failed. Other
// errors, and IN_DOUBT (the executor's own verdict on a tool that is not
// idempotent), are returned as they are.
func (r *run) settleRepeatable(tool string, e *xctv1.Error) *xctv1.Error {
	if e == nil || !unknownOutcome(e) || e.GetCode() == string(wire.CodeInDoubt) || !r.repeatable(tool) {
		return e
	}
	out := proto.CloneOf(e)
	details := map[string]any{}
	if d := e.GetDetails(); d != nil {
		details = d.AsMap()
	}
	details["outcome_unknown"] = false
	details["repeatable"] = true
	if s, err := structpb.NewStruct(details); err == nil {
		out.Details = s
	}
	out.Message = e.GetMessage() + " (the tool is read-only or idempotent: nothing is in doubt, and proposing the step again is safe)"
	return out
}

// repeatable reports whether the run's catalog says tool is read-only or
// idempotent.
func (r *run) repeatable(tool string) bool {
	for _, d := range r.tools {
		if d.GetName() == tool {
			return d.GetEffect() == xctv1.Effect_EFFECT_READ || d.GetIdempotent()
		}
	}
	return false
}
