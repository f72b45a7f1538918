package debugger

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// events builds a chain from (type, agent, data) triples.
func events(list ...any) []lctl.Event {
	var out []lctl.Event
	for i := 0; i+2 < len(list); i += 3 {
		d, _ := list[i+2].(map[string]any)
		if d == nil {
			d = map[string]any{}
		}
		out = append(out, lctl.Event{Seq: uint64(len(out) + 1), Type: list[i].(string), Agent: list[i+1].(string), Data: d})
	}
	return out
}

func nodeIDs(p FlowPage) string {
	var s []string
	for _, n := range p.Nodes {
		s = append(s, n.ID+":"+n.Kind+":"+n.Lane)
	}
	return strings.Join(s, " ")
}

// A streamed answer and its routing come before the step (the loop calls
// the model first): they go on the step, also when the flow is read
// between them and the step (a live chain).
func TestFlowStreamOnItsStep(t *testing.T) {
	t.Parallel()
	ev := events(
		"run_started", "orchestrator", nil,
		"model_routing", "orchestrator", map[string]any{"for": "a", "model": "m1", "decision": "route_to_m1", "reason": "cheapest"},
		"stream_start", "a", map[string]any{"model": "m1"},
		"stream_chunk", "a", map[string]any{"index": 0.0, "content": "hel"},
		"stream_chunk", "a", map[string]any{"index": 1.0, "content": "lo"},
		"stream_end", "a", map[string]any{"status": "error", "total_chunks": 2.0, "total_tokens": 3.0, "code": "GENERATION_FAILED"},
		"model_routing", "orchestrator", map[string]any{"for": "a", "model": "m2", "failed_model": "m1", "failure_code": "GENERATION_FAILED", "confidence": 0.75},
		"stream_start", "a", map[string]any{"model": "m2"},
		"stream_end", "a", map[string]any{"status": "ok", "total_chunks": 0.0, "total_tokens": 5.0, "duration_ms": 12.0},
		"step_start", "a", map[string]any{"step": 1.0, "intent": "read", "tool": "fs.read"},
		"step_end", "a", map[string]any{"step": 1.0, "outcome": "success"},
		// A routing decision whose step never came: a node of its own.
		"model_routing", "orchestrator", map[string]any{"for": "b", "model": "m3"},
		"run_finished", "orchestrator", map[string]any{"status": "failed"},
	)
	f := newFlow()
	// Read while only the prelude is there: a node in a's lane.
	f.update(ev[:6])
	p := f.page(0, 100)
	if got := nodeIDs(p); got != "n1:event:orchestrator n2:event:a" || p.Nodes[1].Label != "route to m1" || len(p.Nodes[1].Streams) != 1 {
		t.Fatalf("before the step: %s %+v", got, p.Nodes)
	}
	f.update(ev)
	p = f.page(0, 100)
	if got := nodeIDs(p); got != "n1:event:orchestrator n10:agent_step:a n12:event:b n13:event:orchestrator" {
		t.Fatalf("nodes %s", got)
	}
	step := p.Nodes[1]
	if step.Events != 10 || len(step.Routing) != 2 || step.Routing[1].FailedModel != "m1" || step.Routing[1].FailureCode != "GENERATION_FAILED" {
		t.Fatalf("step %+v", step)
	}
	if len(step.Streams) != 2 {
		t.Fatalf("streams %+v", step.Streams)
	}
	s0, s1 := step.Streams[0], step.Streams[1]
	if s0.Seq != 3 || s0.Model != "m1" || s0.Status != "error" || s0.Chunks != 2 || *s0.Tokens != 3 ||
		s1.Seq != 8 || s1.Status != "ok" || *s1.Tokens != 5 || *s1.DurationMS != 12 {
		t.Fatalf("streams %+v %+v", s0, s1)
	}
	// Stream ends are listed; starts, chunks and routing are not.
	var types []string
	for _, a := range step.Attached {
		types = append(types, a.Type)
	}
	if strings.Join(types, ",") != "stream_end,stream_end,step_end" || step.Attached[0].Status != statusError {
		t.Fatalf("attached %+v", step.Attached)
	}
	if p.Nodes[2].Routing[0].Model != "m3" || p.Nodes[2].Type != "model_routing" {
		t.Fatalf("lone routing %+v", p.Nodes[2])
	}
	lanes := []string{}
	for _, l := range p.Lanes {
		lanes = append(lanes, l.Agent)
		if l.Agent == "a" && (l.Nodes != 1 || l.Steps != 1) {
			t.Fatalf("lane a %+v", l)
		}
	}
	if strings.Join(lanes, " ") != "orchestrator a b" {
		t.Fatalf("lanes %v", lanes)
	}
	if len(p.Edges) != 3 || p.Edges[0].From != "n1" || p.Edges[0].To != "n10" {
		t.Fatalf("edges %+v", p.Edges)
	}
}

// A chain without step numbers (lctl's v3 conversion) with a handoff event
// between two agents' steps: the handoff is a node of its own and an edge
// to the receiver's step.
func TestFlowHandoffWithoutStepNumbers(t *testing.T) {
	t.Parallel()
	ev := events(
		"step_start", "a", map[string]any{"intent": "plan"},
		"step_end", "a", map[string]any{"outcome": "success"},
		"handoff", "a", map[string]any{"from": "a", "to": "b", "summary": "go"},
		"step_start", "c", map[string]any{"intent": "aside"},
		"step_end", "c", nil,
		"step_start", "b", map[string]any{"intent": "do"},
		"fact_added", "b", map[string]any{"id": "F1", "text": "x", "confidence": 0.9},
		"step_end", "b", nil,
	)
	f := newFlow()
	f.update(ev)
	p := f.page(0, 100)
	if got := nodeIDs(p); got != "n1:agent_step:a n3:handoff:a n4:agent_step:c n6:agent_step:b" {
		t.Fatalf("nodes %s", got)
	}
	if h := p.Nodes[1].Handoff; h == nil || h.Status != handoffPassed || h.To != "b" || h.Summary != "go" || len(h.Contracts) != 0 {
		t.Fatalf("handoff node %+v", p.Nodes[1])
	}
	var edges []string
	for _, e := range p.Edges {
		edges = append(edges, e.From+">"+e.To+":"+e.Kind)
	}
	// c's step is reached by a change of agent (inferred), b's by the
	// recorded handoff.
	if strings.Join(edges, " ") != "n1>n3:next n3>n4:handoff n4>n6:next n3>n6:handoff" {
		t.Fatalf("edges %v", edges)
	}
	if types := p.Nodes[3].Attached; len(types) != 2 || types[0].Type != "fact_added" {
		t.Fatalf("b's step %+v", p.Nodes[3].Attached)
	}
}

// The fact track says what lctl confidence says of the chain cut at every
// event: each fact's confidence (decay and blocking included), band and
// assessments.
func TestFactTrackAgreesWithLctl(t *testing.T) {
	t.Parallel()
	r, err := os.Open(filepath.Join("testdata", "crew-demo.lctl.json"))
	if err != nil {
		t.Fatal(err)
	}
	crew, err := lctl.DecodeFile(r, lctl.FormatJSON)
	_ = r.Close()
	if err != nil {
		t.Fatal(err)
	}
	chains := map[string][]lctl.Event{
		"crew demo": crew.Events,
		"generated": lctltest.Chain("g", 1200, lctltest.Options{Facts: 40}),
		"workflow":  lctltest.Workflow("w", 1200, lctltest.WorkflowOptions{}),
	}
	for name, events := range chains {
		tr := newFactTrack()
		facts := 0
		for pos := range events {
			tr.add(&events[pos])
			rep := analysis.Confidence("c", events[:pos+1], analysis.ConfidenceOptions{})
			for _, fc := range rep.Facts {
				f := tr.facts[fc.ID]
				if f == nil {
					t.Fatalf("%s at %d: %s not tracked", name, pos, fc.ID)
				}
				got := f.at(pos)
				if (got.Confidence == nil) != (fc.Final == nil) || got.Confidence != nil && math.Abs(*got.Confidence-*fc.Final) > 1e-12 || got.Band != fc.Band {
					t.Fatalf("%s at %d: %s %v %s, lctl %v %s", name, pos, fc.ID, got.Confidence, got.Band, fc.Final, fc.Band)
				}
				if fc.Consensus != nil {
					if len(got.Assessments) != len(fc.Consensus.Assessments) {
						t.Fatalf("%s at %d: %s assessments %+v, lctl %+v", name, pos, fc.ID, got.Assessments, fc.Consensus.Assessments)
					}
					for i, a := range fc.Consensus.Assessments {
						if got.Assessments[i].Agent != a.Agent || got.Assessments[i].Confidence != a.Confidence {
							t.Fatalf("%s at %d: %s assessment %d %+v, lctl %+v", name, pos, fc.ID, i, got.Assessments[i], a)
						}
					}
				}
			}
			facts = max(facts, len(rep.Facts))
		}
		if facts == 0 {
			t.Fatalf("%s: no facts to compare", name)
		}
	}
}

// BenchmarkFactTrack100k is following the facts of a 100,000-event chain
// (500 facts, a hop at every step): what the first state request of a
// chain with facts pays once.
func BenchmarkFactTrack100k(b *testing.B) {
	events := lctltest.Chain("big", 100_000, lctltest.Options{})
	b.ResetTimer()
	for b.Loop() {
		t := newFactTrack()
		for i := range events {
			t.add(&events[i])
		}
	}
}

// A fact's data are its author's: a crew member's fact fields are at the
// top level of fact_added / fact_modified. A fact with data.step 1 and
// data.tool fs.write, recorded in agent b's step 2, was drawn as step 1
// (agent a's) with tool fs.write, and the state panel showed a's step,
// its proposal and verdict, for it. It is b's step 2's.
func TestFactDataNamesNoStep(t *testing.T) {
	t.Parallel()
	ev := events(
		"run_started", "orchestrator", nil,
		"step_start", "a", map[string]any{"step": 1.0, "intent": "write", "tool": "fs.write"},
		"verdict", "validator", map[string]any{"step": 1.0, "decision": "allow", "tool": "fs.write"},
		"step_end", "a", map[string]any{"step": 1.0, "outcome": "success"},
		"step_start", "b", map[string]any{"step": 2.0, "intent": "note", "tool": "facts.update"},
		"verdict", "validator", map[string]any{"step": 2.0, "decision": "allow", "tool": "facts.update"},
		"fact_modified", "b", map[string]any{"id": "F1", "text": "t", "reason": "r", "step": 1.0, "tool": "fs.write"},
		"step_end", "b", map[string]any{"step": 2.0, "outcome": "success"},
		"fact_added", "b", map[string]any{"id": "F2", "text": "t", "confidence": 0.5, "step": 1.0, "tool": "fs.write"},
		"run_finished", "orchestrator", map[string]any{"status": "done"},
	)
	f := newFlow()
	f.update(ev)
	p := f.page(0, 100)
	if got := nodeIDs(p); got != "n1:event:orchestrator n2:agent_step:a n5:agent_step:b n9:fact:b n10:event:orchestrator" {
		t.Fatalf("nodes %s", got)
	}
	b := p.Nodes[2]
	if b.Step == nil || *b.Step != 2 || b.Tool != "facts.update" || b.Events != 4 {
		t.Fatalf("b's step %+v", b)
	}
	if a := p.Nodes[1]; a.Events != 3 {
		t.Fatalf("a's step took another's event: %+v", a)
	}
	if n := p.Nodes[3]; n.Step != nil || n.Tool != "" {
		t.Fatalf("the fact after the steps: step %v tool %q", n.Step, n.Tool)
	}

	c := &Chain{Events: ev}
	st := lctl.NewState("c")
	for i := range ev {
		st.Apply(&ev[i])
		if ev[i].Seq != 7 {
			continue
		}
		d := stepAt(c, i, st)
		if d == nil || d.Agent != "b" || d.Step == nil || *d.Step != 2 || d.Decision != "allow" || str(d.Verdict.Data, "tool") != "facts.update" {
			t.Fatalf("the fact's step: %+v", d)
		}
	}
}
