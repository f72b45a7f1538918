package lctl

import "testing"

// TestStateReadsData: State.ReadsData is in step with Apply. For each
// state a command streams with (the full state, the summary states of
// replay and stats, a facts-only state) and each type, an event of a type
// ReadsData says is not read is applied with its data not decoded (a read
// of it panics), after steps, facts and tool calls that give every folding
// rule something to find; and the types it folds with data are said to be
// read. DataTypes (ReadsData's copy for the decoding cores) says the same.
func TestStateReadsData(t *testing.T) {
	t.Parallel()
	types := []string{TypeStepStart, TypeStepEnd, TypeFactAdded, TypeFactModified, TypeToolCall, TypeError,
		TypeCheckpoint, TypeContractValidation, TypeModelRouting, TypeStreamStart, TypeStreamChunk, TypeStreamEnd,
		TypeRunStarted, TypeVerdict, TypeRunFinished, TypeApprovalRequested, TypeApprovalDecided, TypeStepInDoubt,
		TypeRunReleased, TypeRunResumed, TypeRollbackStarted, TypeRollbackFinished, TypeSignedCheckpoint,
		"handoff", "agent_profile", "custom"}
	states := map[string]func() *State{
		"full": func() *State { return NewState("c") },
		"replay summary": func() *State {
			s := NewSummaryState("c")
			s.CountToolCalls()
			s.NoFactHistory()
			s.NoCurrentStep()
			return s
		},
		"stats summary": func() *State {
			s := NewSummaryState("c")
			s.DeferTypeCounts()
			s.CountToolCalls()
			s.NoFactHistory()
			s.NoCurrentStep()
			s.KeepTokens()
			return s
		},
		"summary listing calls": func() *State { return NewSummaryState("c") },
		"facts only": func() *State {
			s := NewState("c")
			s.FactsOnly()
			return s
		},
	}
	for name, mk := range states {
		for _, typ := range types {
			s := mk()
			seq := uint64(0)
			next := func(typ string, data map[string]any) *Event {
				seq++
				return &Event{Seq: seq, Type: typ, Agent: "a", Timestamp: "2026-01-01T00:00:00Z", Data: data}
			}
			s.Apply(next(TypeRunStarted, map[string]any{"goal": "g"}))
			s.Apply(next(TypeStepStart, map[string]any{"step": 1.0, "tool": "t", "intent": "i", "step_id": "s1"}))
			s.Apply(next(TypeToolCall, map[string]any{"step": 1.0, "tool": "t", "status": "success"}))
			s.Apply(next(TypeFactAdded, map[string]any{"id": "F1", "text": "x", "confidence": 0.5}))
			e := next(typ, nil)
			e.skipped = true
			reads := s.ReadsData(typ)
			if s.DataTypes()(typ) != reads {
				t.Errorf("%s: DataTypes says %s's data is read: %v, ReadsData %v", name, typ, !reads, reads)
			}
			func() {
				defer func() {
					if r := recover(); r != nil && !reads {
						t.Errorf("%s: a %s event's data was read, but ReadsData says it is not: %v", name, typ, r)
					}
				}()
				s.Apply(e)
			}()
			if k := typeIndex(typ); !reads && k >= 0 && !s.factsOnly && k != kVerdict && k != kToolCall {
				t.Errorf("%s: %s is folded, but ReadsData says its data is not read", name, typ)
			}
		}
	}
	// What the summary states skip: a verdict and a counted tool call.
	s := NewSummaryState("c")
	s.CountToolCalls()
	if s.ReadsData(TypeVerdict) || s.ReadsData(TypeToolCall) || s.ReadsData("handoff") || !s.ReadsData(TypeStepStart) {
		t.Error("a summary state counting calls: verdict, tool_call or handoff read, or step_start not")
	}
	if f := NewState("c"); !f.ReadsData(TypeVerdict) || !f.ReadsData(TypeToolCall) {
		t.Error("the full state: verdict or tool_call not read")
	}
}
