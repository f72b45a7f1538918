package analysis

import (
	"fmt"
	"strings"

	"github.com/xct-dev/xct/lctl"
)

// AgentProfile is what a step_start's agent_profile says of its agent
// (spec part 5): its type, capabilities, model and reliability.
type AgentProfile struct {
	Agent        string   `json:"agent"`
	Type         string   `json:"type,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	Model        string   `json:"model,omitempty"`
	Reliability  *float64 `json:"reliability_score,omitempty"`
}

// profileOf reads data.agent_profile; ok is false when there is none with
// a type, capabilities or a model.
func profileOf(agent string, d *lctl.Event) (AgentProfile, bool) {
	p, _ := d.Get("agent_profile").(map[string]any)
	if p == nil {
		return AgentProfile{}, false
	}
	out := AgentProfile{Agent: agent}
	out.Type, _ = p["type"].(string)
	if list, ok := p["capabilities"].([]any); ok {
		for _, c := range list {
			if s, ok := c.(string); ok && s != "" {
				out.Capabilities = append(out.Capabilities, s)
			}
		}
	}
	out.Model = modelName(p["model"])
	if r, ok := numberOf(p["reliability_score"]); ok && r >= 0 && r <= 1 {
		out.Reliability = &r
	}
	return out, out.Type != "" || len(out.Capabilities) > 0 || out.Model != ""
}

// String renders a profile for a line: "reviewer: assessment, approval".
func (p AgentProfile) String() string {
	s := p.Type
	if len(p.Capabilities) > 0 {
		if s != "" {
			s += ": "
		}
		s += strings.Join(p.Capabilities, ", ")
	}
	return s
}

func modelName(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		s, _ := x["id"].(string)
		return s
	}
	return ""
}

// consensusText renders a fact event's own consensus block (spec part 3):
// "consensus: 2 assessors (code-analyzer, security-reviewer), agreement 1.00".
func consensusText(d *lctl.Event) string {
	c, _ := d.Get("consensus").(map[string]any)
	if c == nil {
		return ""
	}
	var names []string
	if list, ok := c["assessors"].([]any); ok {
		for _, a := range list {
			if s, ok := a.(string); ok && s != "" {
				names = append(names, s)
			}
		}
	}
	parts := []string{}
	if len(names) > 0 {
		parts = append(parts, fmt.Sprintf("%d %s (%s)", len(names), plural(len(names), "assessor", "assessors"), clip(strings.Join(names, ", "), 60)))
	}
	if ag, ok := numberOf(c["agreement"]); ok {
		parts = append(parts, fmt.Sprintf("agreement %.2f", ag))
	}
	if len(parts) == 0 {
		return ""
	}
	return "consensus: " + strings.Join(parts, ", ")
}

// profileTracker keeps each agent's latest profile, in order of the
// agents' first profile.
type profileTracker struct {
	byAgent map[string]int
	list    []AgentProfile
}

func (t *profileTracker) add(e *lctl.Event) {
	if e.Type != lctl.TypeStepStart {
		return
	}
	p, ok := profileOf(e.Agent, e)
	if !ok {
		return
	}
	if t.byAgent == nil {
		t.byAgent = map[string]int{}
	}
	if i, seen := t.byAgent[e.Agent]; seen {
		t.list[i] = p
		return
	}
	t.byAgent[e.Agent] = len(t.list)
	t.list = append(t.list, p)
}
