package xctevent

import (
	"reflect"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// Every event written through Data reads back through Parse as itself,
// after the payload was normalized to JSON types the way the log stores it.
func TestDataParseRoundTrip(t *testing.T) {
	t.Parallel()
	conf := 0.75
	raw := "not json"
	events := []Event{
		RunStarted{RunID: "r1", Goal: "g", Model: "m", Principal: "p", Roles: []string{"dev"}, Labels: map[string]string{"team": "a"}, MaxSteps: 5},
		StepStart{Step: 1, StepID: "s1", Intent: "i", InputSummary: "fs.read path=a", Tool: "fs.read", Arguments: map[string]any{"path": "a"}, Model: "m", Confidence: &conf},
		StepStart{Step: 2, InputSummary: "invalid model output", Raw: &raw},
		Verdict{Step: 1, StepID: "s1", Tool: "fs.read", Decision: DecisionDeny, Reasons: []Reason{{RuleID: "r", Message: "no"}}, PolicyVersion: "v1", EvaluatedAt: "2026-01-01T00:00:00Z", Code: "POLICY_DENIED", EndsRun: true,
			Shadow: []ShadowVerdict{{PolicyVersion: "v2", Decision: DecisionAllow, Reasons: []Reason{{RuleID: "s", Message: "ok"}}}}},
		ApprovalRequested{Step: 1, StepID: "s1", Tool: "t", RequestedBy: "p", ExpiresAt: "2026-01-01T00:00:00Z", Preview: &Preview{Kind: "diff", Content: "+a"}},
		ApprovalDecided{Step: 1, StepID: "s1", Decision: ApprovalApproved, By: "carol", Reason: "fine"},
		ToolCall{Step: 1, StepID: "s1", Tool: "t", Input: map[string]any{"path": "a"}, Output: "x", DurationMS: 1.5, Status: ToolCallSuccess},
		Error{Step: 1, StepID: "", Code: "TIMEOUT", Category: "execution_error", ErrType: "timeout", Message: "slow", Recoverable: true, SuggestedAction: "wait", Details: map[string]any{"outcome_unknown": true}},
		StepEnd{Step: 1, StepID: "s1", Outcome: OutcomeSuccess, OutputSummary: "ok", DurationMS: 2.25, Tokens: &Tokens{Input: 3, Output: 4}},
		StepEnd{Step: 2, Outcome: OutcomeInvalid, OutputSummary: "bad"},
		RunFinished{Status: StatusDone, Message: "m", Steps: 2, Tokens: Tokens{Input: 7, Output: 8}},
		RunReleased{Instance: "a", Reason: "stop", Step: 3},
		RunResumed{Instance: "b", PreviousOwner: "a", Reason: "released", Step: 3},
		StepInDoubt{Step: 1, StepID: "s1", Tool: "t", Reason: "r", RecordState: "pending", Resolve: "xct resolve r1 1"},
		RollbackStarted{Principal: "p", ToStep: 1, Steps: []int{3, 2}},
		RollbackFinished{Status: StatusFailed, Message: "m", Undone: []int{3}},
		SignedCheckpoint{Note: "n", Seq: 9, HeadHash: "h", Key: "k"},
	}
	for _, want := range events {
		data, err := lctl.DataOf(want.Data())
		if err != nil {
			t.Fatalf("%s: %v", want.Type(), err)
		}
		got := Parse(&lctl.Event{Type: want.Type(), Data: data})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", want.Type(), got, want)
		}
	}
}

// The optional fields are omitted exactly as XCT always wrote them.
func TestDataOmissions(t *testing.T) {
	t.Parallel()
	if _, ok := (StepEnd{Step: 1}).Data()["step_id"]; ok {
		t.Error("step_end without a step id writes step_id")
	}
	if _, ok := (Error{Step: 1}).Data()["step_id"]; !ok {
		t.Error("error without a step id must still write step_id")
	}
	v := Verdict{Decision: DecisionAllow}.Data()
	for _, k := range []string{"code", "ends_run", "shadow"} {
		if _, ok := v[k]; ok {
			t.Errorf("an allow verdict writes %s", k)
		}
	}
	if r, ok := v["reasons"].([]any); !ok || len(r) != 0 {
		t.Errorf("reasons = %#v, want an empty list", v["reasons"])
	}
	if _, ok := (StepStart{Step: 1, Tool: "fs.read"}).Data()["model"]; !ok {
		t.Error("a model's step_start without a model name must still write model")
	}
	if _, ok := (StepStart{Step: 1, Tool: "xct.undo"}).Data()["model"]; ok {
		t.Error("an undo step writes model")
	}
	if keys := len((StepStart{Raw: new(string)}).Data()); keys != 4 {
		t.Errorf("invalid step_start has %d keys, want 4", keys)
	}
}

func TestParseUnknownAndLenient(t *testing.T) {
	t.Parallel()
	u := Parse(&lctl.Event{Type: "fact_added", Data: map[string]any{"id": "f"}})
	if x, ok := u.(Unknown); !ok || x.Type() != "fact_added" || x.Data()["id"] != "f" {
		t.Errorf("Parse(fact_added) = %#v", u)
	}
	got := Parse(&lctl.Event{Type: TypeStepEnd, Data: map[string]any{"step": "three", "outcome": 7}}).(StepEnd)
	if got.Step != 0 || got.Outcome != "" || got.Tokens != nil {
		t.Errorf("mistyped fields: %#v", got)
	}
	if !Extension(TypeStepInDoubt) || Extension(TypeStepStart) {
		t.Error("Extension misclassifies")
	}
}
