package lctl_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestCountToolCalls: a state that counts tool calls is the full state
// with an empty ToolCalls and their number in ToolCallCount (the steps,
// kept or not, get the calls' status as before), and refuses to be hashed.
func TestCountToolCalls(t *testing.T) {
	events := append(lctltest.Workflow("w", 5_000, lctltest.WorkflowOptions{}), lctltest.Chain("c", 2_000, lctltest.Options{})...)
	for _, summary := range []bool{false, true} {
		full, counted := lctl.NewState("w"), lctl.NewState("w")
		if summary {
			full, counted = lctl.NewSummaryState("w"), lctl.NewSummaryState("w")
		}
		counted.CountToolCalls()
		for i := range events {
			full.Apply(&events[i])
			counted.Apply(&events[i])
		}
		if len(full.ToolCalls) < 1000 || counted.ToolCallCount() != len(full.ToolCalls) || full.ToolCallCount() != len(full.ToolCalls) || len(counted.ToolCalls) != 0 {
			t.Fatalf("summary %v: %d tool calls listed, counted %d (listed %d)", summary, len(full.ToolCalls), counted.ToolCallCount(), len(counted.ToolCalls))
		}
		want, got := *full, *counted
		want.ToolCalls, got.ToolCalls = nil, nil
		wj, err1 := json.Marshal(&want)
		gj, err2 := json.Marshal(&got)
		if err1 != nil || err2 != nil || string(wj) != string(gj) {
			t.Fatalf("summary %v: a state counting tool calls differs beyond them", summary)
		}
		if _, err := counted.Hash(); err == nil {
			t.Fatal("a state counting tool calls was hashed")
		}
		if _, err := counted.HashV1(); err == nil {
			t.Fatal("a state counting tool calls was hashed (version 1)")
		}
	}
}

// TestFactsOnly: a state that keeps only facts has the full state's facts
// (text, confidence, source, tags), seq, counts and event types, no
// history, nothing else, and refuses to be hashed.
func TestFactsOnly(t *testing.T) {
	events := append(lctltest.Workflow("w", 5_000, lctltest.WorkflowOptions{}), lctltest.Chain("c", 2_000, lctltest.Options{})...)
	full, facts := lctl.NewState("w"), lctl.NewSummaryState("w")
	facts.FactsOnly()
	for i := range events {
		full.Apply(&events[i])
		facts.Apply(&events[i])
	}
	if len(full.Facts) < 10 || len(facts.Facts) != len(full.Facts) {
		t.Fatalf("%d facts kept, %d in the full state", len(facts.Facts), len(full.Facts))
	}
	for id, f := range full.Facts {
		g := facts.Facts[id]
		if g == nil || g.Text != f.Text || !reflect.DeepEqual(g.Confidence, f.Confidence) || g.Source != f.Source ||
			!reflect.DeepEqual(g.Tags, f.Tags) || len(g.History) != 0 {
			t.Fatalf("fact %s: %+v, full %+v", id, g, f)
		}
	}
	if facts.Seq != full.Seq || facts.EventCount != full.EventCount || facts.LastTimestamp != full.LastTimestamp ||
		!reflect.DeepEqual(facts.EventTypes, full.EventTypes) {
		t.Fatalf("seq %d/%d, events %d/%d, types %v/%v", facts.Seq, full.Seq, facts.EventCount, full.EventCount, facts.EventTypes, full.EventTypes)
	}
	if facts.ToolCallCount() != 0 || len(facts.Agents) != 0 || facts.Tokens != (lctl.Tokens{}) || facts.CurrentStep != nil {
		t.Fatal("a state keeping only facts folded more than facts")
	}
	if _, err := facts.Hash(); err == nil {
		t.Fatal("a state keeping only facts was hashed")
	}
}

// TestNoFactHistory: a state without fact histories is the full state
// with every fact's History empty (the facts themselves, the steps, kept
// or not, and everything else as before), and refuses to be hashed.
func TestNoFactHistory(t *testing.T) {
	events := append(lctltest.Workflow("w", 5_000, lctltest.WorkflowOptions{}), lctltest.Chain("c", 2_000, lctltest.Options{})...)
	for _, summary := range []bool{false, true} {
		full, short := lctl.NewState("w"), lctl.NewState("w")
		if summary {
			full, short = lctl.NewSummaryState("w"), lctl.NewSummaryState("w")
		}
		short.NoFactHistory()
		for i := range events {
			full.Apply(&events[i])
			short.Apply(&events[i])
		}
		changes := 0
		for id, f := range full.Facts {
			g := short.Facts[id]
			if g == nil || len(g.History) != 0 {
				t.Fatalf("summary %v: fact %s: %+v", summary, id, g)
			}
			changes += len(f.History)
			f.History = []lctl.FactChange{}
		}
		if len(full.Facts) < 10 || changes < 500 {
			t.Fatalf("summary %v: %d facts, %d changes: the test reads too few", summary, len(full.Facts), changes)
		}
		wj, err1 := json.Marshal(full)
		gj, err2 := json.Marshal(short)
		if err1 != nil || err2 != nil || string(wj) != string(gj) {
			t.Fatalf("summary %v: a state without fact histories differs beyond them", summary)
		}
		if _, err := short.Hash(); err == nil {
			t.Fatal("a state without fact histories was hashed")
		}
		if _, err := short.HashV1(); err == nil {
			t.Fatal("a state without fact histories was hashed (version 1)")
		}
	}
}

// TestNoCurrentStep: a state without the current step is the full state
// with CurrentStep nil (the steps, kept or not, the agents and the run's
// steps as before), and refuses to be hashed.
func TestNoCurrentStep(t *testing.T) {
	workflow := lctltest.Workflow("w", 5_000, lctltest.WorkflowOptions{})
	// The run without its end, so that its number of steps is the steps'
	// (run_finished would set it).
	var run []lctl.Event
	for _, e := range workflow {
		if e.Type != lctl.TypeRunFinished {
			run = append(run, e)
		}
	}
	for k, summary := range []bool{false, true, false, true} {
		events := append(workflow, lctltest.Chain("c", 2_000, lctltest.Options{})...)
		if k >= 2 {
			events = run
		}
		full, short := lctl.NewState("w"), lctl.NewState("w")
		if summary {
			full, short = lctl.NewSummaryState("w"), lctl.NewSummaryState("w")
		}
		short.NoCurrentStep()
		sawCurrent := 0
		for i := range events {
			full.Apply(&events[i])
			short.Apply(&events[i])
			if short.CurrentStep != nil {
				t.Fatalf("summary %v: event %d: a current step kept", summary, i)
			}
			if full.CurrentStep != nil {
				sawCurrent++
			}
		}
		if sawCurrent < 1000 || len(full.Agents) == 0 || (k >= 2 && (full.Run == nil || full.Run.Steps < 100 || full.Run.Status != "running")) {
			t.Fatalf("summary %v: %d events with a current step, %d agents, run %+v: the test reads too few", summary, sawCurrent, len(full.Agents), full.Run)
		}
		full.CurrentStep = nil
		wj, err1 := json.Marshal(full)
		gj, err2 := json.Marshal(short)
		if err1 != nil || err2 != nil || string(wj) != string(gj) {
			t.Fatalf("summary %v: a state without the current step differs beyond it", summary)
		}
		if _, err := short.Hash(); err == nil {
			t.Fatal("a state without the current step was hashed")
		}
		if _, err := short.HashV1(); err == nil {
			t.Fatal("a state without the current step was hashed (version 1)")
		}
	}
}

// TestSetCurrentStep: a state kept without its current step, given the
// last step_start applied when no step_end followed it (SetCurrentStep),
// has the current step the full state has, after every event of a
// workflow and of chains with steps without a number, an intent, a tool
// or a model.
func TestSetCurrentStep(t *testing.T) {
	events := lctltest.Workflow("w", 3_000, lctltest.WorkflowOptions{})
	events = append(events,
		lctl.Event{Type: lctl.TypeStepStart, Agent: "a", Data: map[string]any{"model": "m"}},
		lctl.Event{Type: lctl.TypeStepStart, Agent: "b", Data: map[string]any{"step": 2.5, "intent": "x"}},
		lctl.Event{Type: lctl.TypeStepEnd, Agent: "c"},
		lctl.Event{Type: lctl.TypeStepStart, Agent: "d", Data: map[string]any{"step": 7.0, "tool": "t", "model": map[string]any{"name": "n"}}},
		lctl.Event{Type: "note", Agent: "d"},
	)
	events = append(events, lctltest.Chain("c", 500, lctltest.Options{})...)
	full, short := lctl.NewSummaryState("w"), lctl.NewSummaryState("w")
	short.NoCurrentStep()
	var last *lctl.Event
	open, set := false, 0
	for i := range events {
		e := &events[i]
		e.Seq = uint64(i + 1)
		full.Apply(e)
		short.Apply(e)
		switch e.Type {
		case lctl.TypeStepStart:
			last, open = e, true
		case lctl.TypeStepEnd:
			open = false
		}
		if open {
			short.SetCurrentStep(last)
			set++
		} else {
			short.SetCurrentStep(nil)
		}
		if !reflect.DeepEqual(full.CurrentStep, short.CurrentStep) {
			t.Fatalf("event %d (%s): current step %+v, want %+v", i, e.Type, short.CurrentStep, full.CurrentStep)
		}
	}
	if set < 1000 {
		t.Fatalf("%d events with a step in progress: the test reads too few", set)
	}
}
