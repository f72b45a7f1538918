package wire_test

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

// The encoders over recorded fields give the model exactly the bytes the
// encoders over protos give: the transcript needs no proto in between.
func TestFieldEncodersMatchProtoEncoders(t *testing.T) {
	t.Parallel()
	args, err := structpb.NewStruct(map[string]any{"path": "a.txt", "n": 3.0, "nested": map[string]any{"k": []any{"x", true}}})
	if err != nil {
		t.Fatal(err)
	}
	conf := 0.5
	for _, ns := range []*xctv1.NextStep{
		{Tool: "fs.read", Arguments: args, Goal: "read it", Confidence: &conf},
		{Tool: "fs.list", Goal: "list"},
	} {
		want := string(wire.EncodeDecision(&xctv1.Decision{Kind: &xctv1.Decision_NextStep{NextStep: ns}}))
		var m map[string]any
		if ns.GetArguments() != nil {
			m = ns.GetArguments().AsMap()
		}
		if got := string(wire.EncodeNextStep(ns.GetTool(), m, ns.GetGoal(), ns.Confidence)); got != want {
			t.Errorf("EncodeNextStep = %s\nwant %s", got, want)
		}
	}

	result := map[string]any{"lines": []any{"a", "b"}, "size": 2.0}
	ok, err := wire.SuccessResponse(result)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(wire.EncodeSuccess(result)), string(wire.EncodeResponse(ok)); got != want {
		t.Errorf("EncodeSuccess = %s\nwant %s", got, want)
	}

	details := map[string]any{"outcome_unknown": true, "grpc_code": "Unavailable"}
	e := wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable, "no answer"), details)
	f := wire.ErrorFields{
		Code: e.GetCode(), Message: e.GetMessage(), Category: e.GetCategory(), Type: e.GetType(),
		SuggestedAction: e.GetSuggestedAction(), Recoverable: e.GetRecoverable(), Details: details,
	}
	if got, want := string(wire.EncodeErrorFields(f)), string(wire.EncodeResponse(wire.ErrorResponse(e))); got != want {
		t.Errorf("EncodeErrorFields = %s\nwant %s", got, want)
	}
	if len(details) != 2 {
		t.Errorf("EncodeErrorFields changed the details it was given: %v", details)
	}
}

// StepIDOf over the arguments' JSON values is StepID over their proto.
func TestStepIDOfMatchesStepID(t *testing.T) {
	t.Parallel()
	m := map[string]any{"path": "a", "n": 2.0, "list": []any{"x", nil}}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := wire.StepIDOf("run-1", 3, "fs.write", m), wire.StepID("run-1", 3, "fs.write", s); a != b {
		t.Errorf("StepIDOf %s, StepID %s", a, b)
	}
	if a, b := wire.StepIDOf("run-1", 3, "fs.list", nil), wire.StepID("run-1", 3, "fs.list", nil); a != b {
		t.Errorf("no arguments: StepIDOf %s, StepID %s", a, b)
	}
	if wire.StepIDOf("run-1", 3, "fs.write", m) == wire.StepIDOf("run-1", 3, "fs.write", map[string]any{"path": "b"}) {
		t.Error("different arguments, same id")
	}
}

// The step id is the SHA-256 of the canonical JSON of the whole tuple: the
// head written without boxing (plain strings in quotes, the step's digits)
// gives the same bytes as encoding [chain, float64(step), tool, args] in
// one go, for ids and tools that need escaping and steps past 2^53 too.
func TestStepIDOfIsTheTupleHash(t *testing.T) {
	t.Parallel()
	args := []map[string]any{nil, {}, {"a": "\u2028\"x\\", "n": 1e21, "z": []any{nil, true}}}
	chains := []string{"run-1", "", "q\"q", "r\"u\\n", "\u00e9t\u00e9", "\x7f~ !", "a\x00b", "bad\xffutf8", "tab\there", "x\u2028y"}
	steps := []int{0, 1, -7, 1<<53 - 1, 1 << 53, 1<<53 + 1, -1 << 53, math.MaxInt64, math.MinInt64}
	for _, a := range args {
		m := a
		if m == nil {
			m = map[string]any{}
		}
		for _, chain := range chains {
			for _, step := range steps {
				for _, tool := range chains {
					full, err := lctl.Canonical([]any{chain, float64(step), tool, m})
					if err != nil {
						t.Fatal(err)
					}
					sum := sha256.Sum256(full)
					want := hex.EncodeToString(sum[:16])
					if got := wire.StepIDOf(chain, step, tool, a); got != want {
						t.Fatalf("StepIDOf(%q, %d, %q, %v) = %s, the tuple's hash is %s", chain, step, tool, a, got, want)
					}
				}
			}
		}
	}
}
