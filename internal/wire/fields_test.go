package wire_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
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
