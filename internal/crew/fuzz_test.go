package crew

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: the loader never panics, and a crew it accepts is accepted
// again, the same, when loaded once more (validation is a function of the
// file alone).
func FuzzLoad(f *testing.F) {
	f.Add([]byte(base))
	f.Add([]byte(base + "contracts:\n  b:\n    inputs:\n      - type: fact\n        severity_values: [[a]]\n"))
	f.Add([]byte(base + "handoffs: {cycles: allow, max_visits: 2, max_depth: 3}\nrouting:\n  rules:\n    - {name: r, cheapest: true}\n"))
	f.Add([]byte("crew: &a t\nagents: *a\n"))
	for _, glob := range []string{"../../examples/crews/*.yaml", "testdata/invalid/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, p := range files {
			if raw, err := os.ReadFile(p); err == nil {
				f.Add(raw)
			}
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Load("f.yaml", raw)
		if err != nil {
			if c != nil {
				t.Fatal("a crew and an error")
			}
			return
		}
		again, err := Load("f.yaml", raw)
		if err != nil {
			t.Fatalf("accepted once, refused again: %v", err)
		}
		if len(again.Agents) != len(c.Agents) || again.Entry != c.Entry || again.Handoffs != c.Handoffs {
			t.Fatal("two loads differ")
		}
		// What an accepted crew promises: every agent has tools, a known
		// type, confidences in range, every edge names an agent.
		for _, a := range c.Agents {
			if len(a.Tools) == 0 || AgentTypes[a.Profile.Type] == nil || badConfidence(a.Profile.ReliabilityScore) {
				t.Fatalf("accepted agent %+v", a)
			}
			for _, to := range a.HandsTo {
				if c.Agent(to) == nil {
					t.Fatalf("accepted edge to %s", to)
				}
			}
		}
		if c.Agent(c.Entry) == nil {
			t.Fatalf("accepted entry %q", c.Entry)
		}
		if c.Handoffs.Cycles == CyclesForbid && c.findCycle() != nil {
			t.Fatal("accepted a cycle")
		}
	})
}

// FuzzFactTools: whatever arguments a model proposes to the fact tools,
// parsing and the store never panic, and the store holds only confidences
// in [0, 1] that its queries and events can carry.
func FuzzFactTools(f *testing.F) {
	f.Add(`{"id": "F1", "text": "SQL injection", "confidence": 0.85, "source": "static-analysis", "tags": ["critical"]}`, `{"id": "F1", "confidence": 0.95, "reason": "verified", "fields": {"severity": "high"}}`, "SELECT * WHERE severity = 'high'")
	f.Add(`{"id": "F1", "text": "x", "confidence": 1.7}`, `{"id": "F2", "reason": "r"}`, "SELECT * WHERE confidence >= 0.8 ORDER BY confidence DESC LIMIT 1")
	f.Add(`{"id": "F1", "text": "x", "confidence": 0.5, "fields": {"n": 1e308}}`, `{"id": "F1", "reason": "r", "tags": []}`, "SELECT id WHERE relevance('x') > 0.1")
	c, err := Load("fuzz.yaml", []byte(base))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, add, update, query string) {
		s := NewFactStore(c)
		s.BeginStep("a")
		var args map[string]any
		if json.Unmarshal([]byte(add), &args) == nil {
			if in, sig := ParseFactArgs(ToolFactsAdd, args); sig == nil {
				if ev, sig := s.Add("a", in); sig == nil {
					_ = ev.Data()
				}
			}
		}
		s.BeginStep("b")
		args = nil
		if json.Unmarshal([]byte(update), &args) == nil {
			if in, sig := ParseFactArgs(ToolFactsUpdate, args); sig == nil {
				if ev, sig := s.Update("b", in); sig == nil {
					if d := ev.Data(); d["encode_error"] != nil {
						t.Fatalf("an accepted update does not encode: %v", d)
					}
				}
			}
		}
		for _, fact := range s.Facts() {
			if badConfidence(fact.Confidence) {
				t.Fatalf("stored confidence %v", fact.Confidence)
			}
		}
		_, _ = s.Query(query)
	})
}
