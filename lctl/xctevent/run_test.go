package xctevent

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// chainOf turns typed payloads into events as the log stores them.
func chainOf(t *testing.T, evs ...Event) []lctl.Event {
	t.Helper()
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	out := make([]lctl.Event, 0, len(evs))
	for i, x := range evs {
		data, err := lctl.DataOf(x.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lctl.Event{
			Seq: uint64(i + 1), Type: x.Type(), ChainID: "run-1", Agent: "a",
			Timestamp: at.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano), Data: data,
		})
	}
	return out
}

func TestRunFold(t *testing.T) {
	t.Parallel()
	raw := "not json"
	events := chainOf(t,
		RunStarted{RunID: "run-1", Goal: "g", Model: "m", Principal: "p", Roles: []string{"dev"}},
		// 1: allowed, in doubt, then its outcome
		StepStart{Step: 1, StepID: "s1", Tool: "fs.read", Arguments: map[string]any{"path": "a"}},
		Verdict{Step: 1, StepID: "s1", Decision: DecisionAllow},
		StepInDoubt{Step: 1, StepID: "s1"},
		ToolCall{Step: 1, StepID: "s1", Output: "x", Status: ToolCallSuccess},
		StepEnd{Step: 1, StepID: "s1", Outcome: OutcomeSuccess, Tokens: &Tokens{Input: 10, Output: 2}},
		// 2: waits for a human, who denies
		StepStart{Step: 2, StepID: "s2", Tool: "fs.write", Arguments: map[string]any{}},
		Verdict{Step: 2, StepID: "s2", Decision: DecisionNeedsApproval},
		ApprovalRequested{Step: 2, StepID: "s2"},
		ApprovalDecided{Step: 2, StepID: "s2", Decision: ApprovalDenied},
		Verdict{Step: 2, StepID: "s2", Decision: DecisionDeny, Code: "APPROVAL_DENIED"},
		Error{Step: 2, StepID: "s2", Code: "APPROVAL_DENIED", Message: "no"},
		StepEnd{Step: 2, StepID: "s2", Outcome: OutcomeDenied, Tokens: &Tokens{Input: 5, Output: 1}},
		// 3: invalid output
		StepStart{Step: 3, Raw: &raw},
		Error{Step: 3, Code: "GENERATION_FAILED", Message: "not a decision"},
		StepEnd{Step: 3, Outcome: OutcomeInvalid, Tokens: &Tokens{Input: 1, Output: 1}},
		// outside any step: the budget
		Error{Step: 4, Code: "BUDGET_EXCEEDED", Message: "used up"},
	)
	v := Fold(events)
	if !v.HasStarted || v.Started.Goal != "g" || v.ChainID != "run-1" || v.LastSeq != uint64(len(events)) {
		t.Fatalf("run: %+v", v)
	}
	if v.Status != StatusRunning || v.Over() || v.Open() != nil {
		t.Errorf("status %q over %v open %v", v.Status, v.Over(), v.Open())
	}
	if len(v.Steps) != 3 {
		t.Fatalf("%d steps, want 3", len(v.Steps))
	}
	s1, s2, s3 := v.Steps[0], v.Steps[1], v.Steps[2]
	if !s1.Allowed() || !s1.InDoubt || s1.Result == nil || s1.Error != nil || s1.End.Outcome != OutcomeSuccess || s1.Seq != 2 {
		t.Errorf("step 1: %+v", s1)
	}
	if len(s2.Verdicts) != 2 || s2.Verdict().Decision != DecisionDeny || s2.Allowed() || s2.Requested == nil ||
		s2.Decided.Decision != ApprovalDenied || s2.Error.Code != "APPROVAL_DENIED" {
		t.Errorf("step 2: %+v", s2)
	}
	if !s3.Start.Invalid() || s3.Error == nil || s3.Verdict() != nil {
		t.Errorf("step 3: %+v", s3)
	}
	if v.After == nil || v.After.Code != "BUDGET_EXCEEDED" {
		t.Errorf("after: %+v", v.After)
	}
	if v.Tokens != (Tokens{Input: 16, Output: 4}) || v.ConsecutiveErrors != 2 || v.InvalidInARow != 1 {
		t.Errorf("tokens %+v errors %d invalid %d", v.Tokens, v.ConsecutiveErrors, v.InvalidInARow)
	}

	// Event by event, with replays of what was applied, is the same view.
	inc := &Run{}
	for i := range events {
		inc.Apply(&events[i])
		for j := 0; j <= i; j++ {
			inc.Apply(&events[j])
		}
	}
	if !reflect.DeepEqual(inc, v) {
		t.Errorf("incremental view differs:\n got %+v\nwant %+v", inc, v)
	}
}

func TestRunFoldStatus(t *testing.T) {
	t.Parallel()
	start := []Event{
		RunStarted{RunID: "run-1"},
		StepStart{Step: 1, StepID: "s1", Tool: "t", Arguments: map[string]any{}},
		Verdict{Step: 1, StepID: "s1", Decision: DecisionAllow},
	}
	done := []Event{ToolCall{Step: 1}, StepEnd{Step: 1, Outcome: OutcomeSuccess}, RunFinished{Status: StatusDone, Tokens: Tokens{Input: 7}}}
	for _, tc := range []struct {
		name string
		more []Event
		want string
		open bool
	}{
		{"running with an open step", nil, StatusRunning, true},
		{"waiting for a human", []Event{ApprovalRequested{Step: 1}}, StatusWaitingApproval, true},
		{"in doubt", []Event{StepInDoubt{Step: 1}}, StatusInDoubt, true},
		{"in doubt, then settled", []Event{StepInDoubt{Step: 1}, Error{Step: 1, Code: "TOOL_FAILURE"}}, StatusRunning, true},
		{"done", []Event{ToolCall{Step: 1}, StepEnd{Step: 1, Outcome: OutcomeSuccess}, RunFinished{Status: StatusDone, Tokens: Tokens{Input: 7}}}, StatusDone, false},
		{"cancelled", []Event{StepEnd{Step: 1, Outcome: OutcomeCancelled}, RunFinished{Status: StatusCancelled}}, StatusCancelled, false},
		{"an unknown end is a failure", []Event{StepEnd{Step: 1, Outcome: OutcomeError}, RunFinished{Status: "exploded"}}, StatusFailed, false},
		// A rollback's undo that waits for a human, or is in doubt, after
		// the run ended: the run stays ended (not live, not taken over).
		{"a rollback's undo waits for a human", append(slices.Clone(done), RollbackStarted{Steps: []int{1}},
			StepStart{Step: 2, StepID: "s2", Tool: "xct.undo", Arguments: map[string]any{}},
			Verdict{Step: 2, StepID: "s2", Decision: DecisionNeedsApproval}, ApprovalRequested{Step: 2}), StatusDone, true},
		{"a rollback's undo approved and done", append(slices.Clone(done), RollbackStarted{Steps: []int{1}},
			StepStart{Step: 2, StepID: "s2", Tool: "xct.undo", Arguments: map[string]any{}}, ApprovalRequested{Step: 2},
			ApprovalDecided{Step: 2, Decision: ApprovalApproved}, ToolCall{Step: 2}, StepEnd{Step: 2, Outcome: OutcomeSuccess},
			RollbackFinished{Status: StatusDone, Undone: []int{1}}), StatusDone, false},
		{"a rollback's undo in doubt", append(slices.Clone(done), RollbackStarted{Steps: []int{1}},
			StepStart{Step: 2, StepID: "s2", Tool: "xct.undo", Arguments: map[string]any{}}, StepInDoubt{Step: 2}), StatusDone, true},
	} {
		v := Fold(chainOf(t, append(append([]Event{}, start...), tc.more...)...))
		if v.Status != tc.want || (v.Open() != nil) != tc.open {
			t.Errorf("%s: status %q open %v, want %q open %v", tc.name, v.Status, v.Open() != nil, tc.want, tc.open)
		}
		if tc.want == StatusDone && v.Tokens.Input != 7 {
			t.Errorf("%s: run_finished's tokens not authoritative: %+v", tc.name, v.Tokens)
		}
	}
	// Another producer's step_start (no step number) is not an XCT step.
	other := []lctl.Event{{Seq: 1, Type: TypeStepStart, Data: map[string]any{"intent": "x"}}}
	if v := Fold(other); len(v.Steps) != 0 {
		t.Errorf("foreign step_start folded as a step: %+v", v.Steps)
	}
}

// DoubtSeq is the step_in_doubt a human's decision settles: the latest,
// while nothing of the step followed it (another attempt's verdict, an
// outcome, the step's end).
func TestRunFoldDoubtSeq(t *testing.T) {
	events := chainOf(t,
		StepStart{Step: 1, StepID: "s1", Tool: "t", Arguments: map[string]any{}}, // 1
		Verdict{Step: 1, StepID: "s1", Tool: "t", Decision: DecisionAllow},       // 2
		StepInDoubt{Step: 1, StepID: "s1"},                                       // 3
		Verdict{Step: 1, StepID: "s1", Tool: "t", Decision: DecisionAllow},       // 4: a retry
		StepInDoubt{Step: 1, StepID: "s1"},                                       // 5
		StepInDoubt{Step: 1, StepID: "other"},                                    // 6: not this step's
		ToolCall{Step: 1, StepID: "s1", Tool: "t"},                               // 7
	)
	for _, c := range []struct {
		upto int
		want uint64
	}{{2, 0}, {3, 3}, {4, 0}, {5, 5}, {6, 5}, {7, 0}} {
		if got := Fold(events[:c.upto]).Steps[0].DoubtSeq; got != c.want {
			t.Errorf("after %d events: DoubtSeq %d, want %d", c.upto, got, c.want)
		}
	}
}
