package crew

import (
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
