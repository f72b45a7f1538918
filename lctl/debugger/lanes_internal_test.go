package debugger

import (
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
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
