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
		StepStart{Step: 3, StepID: "s3", Tool: "fs.read", Arguments: map[string]any{}, Model: "m", Tokens: &Tokens{Input: 5, Output: 1}},
		StepStart{Step: 4, InputSummary: "invalid model output", Raw: &raw, Tokens: &Tokens{Input: 2, Output: 3}},
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
	if _, ok := (StepStart{Step: 1, Tool: "xct.undo"}).Data()["tokens"]; ok {
		t.Error("a step_start without tokens (an undo) writes tokens")
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

// The events of every step (step_start, verdict, tool_call, error,
// step_end) give their numbers as the float64 they are on the chain, so an
// append shares their payload as it is (lctl.DataShared copies a map that
// holds an int, to change it), and they are encoded as before: the same
// canonical bytes as the same payload with ints.
func TestStepEventsAreChainValues(t *testing.T) {
	t.Parallel()
	same := func(a, b map[string]any) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	conf := 0.5
	raw := "x"
	cases := []struct {
		ev     Event
		asInts map[string]any // the payload as it was written with ints
	}{
		{StepStart{Step: 7, StepID: "s", Intent: "i", InputSummary: "t", Tool: "t", Arguments: map[string]any{"p": "a"}, Model: "m", Confidence: &conf},
			map[string]any{"step": 7, "step_id": "s", "intent": "i", "input_summary": "t", "tool": "t", "arguments": map[string]any{"p": "a"}, "model": "m", "confidence": 0.5}},
		{StepStart{Step: 8, InputSummary: "invalid model output", Raw: &raw},
			map[string]any{"step": 8, "intent": "", "input_summary": "invalid model output", "raw": "x"}},
		{Verdict{Step: 7, StepID: "s", Tool: "t", Decision: DecisionAllow, Reasons: []Reason{{RuleID: "r", Message: "m"}}, PolicyVersion: "v", EvaluatedAt: "2026-01-01T00:00:00Z"},
			map[string]any{"step": 7, "step_id": "s", "tool": "t", "decision": DecisionAllow, "reasons": []any{map[string]any{"rule_id": "r", "message": "m"}}, "policy_version": "v", "evaluated_at": "2026-01-01T00:00:00Z"}},
		{ToolCall{Step: 7, StepID: "s", Tool: "t", Input: map[string]any{"p": "a"}, Output: map[string]any{"ok": true}, DurationMS: 0.25, Status: ToolCallSuccess},
			map[string]any{"step": 7, "step_id": "s", "tool": "t", "input": map[string]any{"p": "a"}, "output": map[string]any{"ok": true}, "duration_ms": 0.25, "status": ToolCallSuccess}},
		{Error{Step: 7, StepID: "s", Code: "C", Message: "m", Details: map[string]any{"k": "v"}},
			map[string]any{"step": 7, "step_id": "s", "code": "C", "category": "", "type": "", "message": "m", "recoverable": false, "suggested_action": "", "details": map[string]any{"k": "v"}}},
		{StepEnd{Step: 7, StepID: "s", Outcome: OutcomeSuccess, OutputSummary: "ok", DurationMS: 1.5, Tokens: &Tokens{Input: 1 << 40, Output: 3}},
			map[string]any{"step": 7, "step_id": "s", "outcome": OutcomeSuccess, "output_summary": "ok", "duration_ms": 1.5, "tokens": map[string]any{"input": int64(1 << 40), "output": int64(3)}}},
	}
	for _, c := range cases {
		d := c.ev.Data()
		shared, err := lctl.DataShared(d)
		if err != nil {
			t.Fatal(err)
		}
		if !same(shared, d) {
			t.Errorf("%s: the append copies its payload (a value is not a JSON value): %#v", c.ev.Type(), d)
		}
		if tok, ok := d["tokens"].(map[string]any); ok && !same(shared["tokens"].(map[string]any), tok) {
			t.Errorf("%s: the append copies its tokens", c.ev.Type())
		}
		old, err := lctl.DataOf(c.asInts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := lctl.Canonical(old)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lctl.Canonical(shared)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: encoded\n%s\nwas\n%s", c.ev.Type(), got, want)
		}
	}
}
