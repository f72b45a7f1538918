package crew

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// base is a small valid crew; the table's cases edit it.
const base = `crew: t
agents:
  - name: a
    profile: {type: analyzer, capabilities: [static_analysis], model: "openai:m1", reliability_score: 0.9}
    tools: [fs.read, facts.add, xct.handoff]
    hands_to: [b]
  - name: b
    profile: {type: reviewer, capabilities: [assessment], model: "openai:m2"}
    tools: [facts.update]
`

func load(t testing.TB, src string) (*Crew, error) {
	t.Helper()
	return Load("t.yaml", []byte(src))
}

func TestLoadExample(t *testing.T) {
	c, err := LoadFile("../../examples/crews/security-review.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.AgentNames(), ","); got != "code-analyzer,security-reviewer,fix-implementer" {
		t.Fatalf("agents %s", got)
	}
	a := c.Agent("security-reviewer")
	if a.Profile.Type != "reviewer" || a.Profile.ReliabilityScore != 0.92 || !a.MayPropose(ToolFactsUpdate) || a.MayPropose("fs.write") || !a.MayHandTo("fix-implementer") {
		t.Fatalf("security-reviewer %+v", a)
	}
	if c.Entry != "code-analyzer" || c.Handoffs.MaxDepth != 4 || c.Handoffs.Cycles != CyclesForbid || c.Handoffs.MaxVisits != 1 {
		t.Fatalf("handoffs %+v entry %s", c.Handoffs, c.Entry)
	}
	if len(c.Contracts.Agents) != 3 || c.Contracts.Contracts["security-reviewer"].Outputs[0].Values["severity"] == nil {
		t.Fatalf("contracts %+v", c.Contracts.Contracts)
	}
	if c.Confidence.DecayRate != 0.95 || c.Confidence.Thresholds != SpecThresholds || len(c.Routing.Rules) != 2 {
		t.Fatalf("confidence %+v routing %+v", c.Confidence, c.Routing)
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("warnings %v", c.Warnings)
	}
}

func TestLoadDefaults(t *testing.T) {
	c, err := load(t, base)
	if err != nil {
		t.Fatal(err)
	}
	if c.Entry != "a" || c.Handoffs.MaxDepth != DefaultMaxDepth || c.Handoffs.MaxVisits != 1 || c.Confidence.DecayRate != 0.95 ||
		c.Confidence.MinAssessors != 2 || c.Agent("b").Profile.ReliabilityScore != 1 || len(c.Routing.FallbackOn) != 3 ||
		c.Routing.FallbackConfidence != DefaultFallbackConfidence {
		t.Fatalf("defaults: %+v %+v %+v", c.Handoffs, c.Confidence, c.Routing)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the error
	}{
		{"unknown agent type", strings.Replace(base, "type: analyzer", "type: wizard", 1),
			[]string{`t.yaml:4: a: unknown agent type "wizard" (the spec's types: analyzer, executor, planner, researcher, reviewer)`}},
		{"handoff to an agent that does not exist", strings.Replace(base, "hands_to: [b]", "hands_to: [b, c]", 1),
			[]string{`t.yaml:6: a: hands_to "c": no agent of the crew has that name (agents: a, b)`}},
		{"cycle when cycles are forbidden", strings.Replace(base, "tools: [facts.update]", "tools: [facts.update, xct.handoff]\n    hands_to: [a]", 1),
			[]string{"t.yaml:6: the handoff graph has a cycle a -> b -> a, and handoffs.cycles is forbid"}},
		{"contract requires a field no agent can produce", base + "contracts:\n  b:\n    inputs:\n      - type: fact\n        required_fields: [id, severity]\n",
			[]string{"t.yaml:13: contracts: b's input cannot be satisfied by any agent that can hand to it (a: its output contract does not promise field severity)"}},
		{"contract requires facts no agent can produce", strings.Replace(base, "facts.add, ", "", 1) + "contracts:\n  b:\n    inputs:\n      - type: fact\n",
			[]string{"t.yaml:13: contracts: b requires facts as input, but no agent that can hand to it can produce facts (facts.add)"}},
		{"contract values that cannot meet", base + "contracts:\n  a:\n    outputs:\n      - type: fact\n        required_fields: [severity]\n        severity_values: [low]\n  b:\n    inputs:\n      - type: fact\n        required_fields: [severity]\n        severity_values: [high]\n",
			[]string{"b's input cannot be satisfied", "its severity values [low] and the input's [high] have nothing in common"}},
		{"contract min confidence above 1", base + "contracts:\n  a:\n    outputs:\n      - type: fact\n        confidence_min: 1.2\n",
			[]string{"t.yaml:14: contracts: confidence_min must be a number between 0 and 1"}},
		{"contract of an agent not in the crew", base + "contracts:\n  z:\n    outputs:\n      - type: fact\n",
			[]string{"t.yaml:11: contracts: z: no agent of the crew has that name"}},
		{"output contract without fact tools", strings.Replace(base, "tools: [facts.update]", "tools: [fs.read]", 1) + "contracts:\n  b:\n    outputs:\n      - type: fact\n",
			[]string{"contracts: b must output facts, but cannot propose facts.add or facts.update"}},
		{"contract typo", base + "contracts:\n  a:\n    outputs:\n      - type: fact\n        required_feilds: [id]\n",
			[]string{`t.yaml:14: contracts: unknown key "required_feilds"`}},
		{"reliability 1.7", strings.Replace(base, "reliability_score: 0.9", "reliability_score: 1.7", 1),
			[]string{"t.yaml:4: a: reliability_score 1.7 is not in [0, 1]"}},
		{"decay rate 1.7", base + "confidence:\n  decay_rate: 1.7\n", []string{"t.yaml:11: confidence.decay_rate 1.7: want a rate in (0, 1]"}},
		{"threshold 1.7", base + "confidence:\n  thresholds: {proceed: 1.7}\n", []string{"confidence.thresholds.proceed 1.7 is not in [0, 1]"}},
		{"thresholds out of order", base + "confidence:\n  thresholds: {proceed: 0.5, warn: 0.6}\n", []string{"want verify < warn < proceed"}},
		{"routing confidence 1.7", base + "routing:\n  rules:\n    - {name: r, model: 'openai:m3', confidence: 1.7}\n", []string{"t.yaml:12: r: confidence 1.7 is not in [0, 1]"}},
		{"fallback confidence 1.7", base + "routing:\n  fallback_confidence: 1.7\n", []string{"routing.fallback_confidence 1.7 is not in [0, 1]"}},
		{"agent with no tools", strings.Replace(base, "tools: [facts.update]", "tools: []", 1), []string{"t.yaml:7: b: no tools"}},
		{"duplicate agent names", strings.Replace(base, "name: b", "name: a", 1), []string{`t.yaml:7: duplicate agent name "a" (first defined at line 3)`}},
		{"unknown field", strings.Replace(base, "tools: [facts.update]", "toolz: [facts.update]", 1), []string{"t.yaml:9: unknown field toolz in an agent"}},
		{"unknown top-level field", base + "agentz: []\n", []string{"t.yaml:10: unknown field agentz at the top level"}},
		{"unknown system tool", strings.Replace(base, "tools: [facts.update]", "tools: [facts.delete]", 1), []string{`b: unknown system tool "facts.delete"`}},
		{"bad model reference", strings.Replace(base, `model: "openai:m2"`, `model: "gpt4"`, 1), []string{`b: model "gpt4" is not a model reference`}},
		{"fallback equal to the model", strings.Replace(base, `model: "openai:m2"`, `model: "openai:m2", fallbacks: ["openai:m2"]`, 1), []string{`b: fallback "openai:m2" is the primary model`}},
		{"bad suggested query", strings.Replace(base, "tools: [facts.update]", "tools: [facts.update]\n    suggested_queries: [\"SELECT * WHERE confidence >= 'high'\"]", 1),
			[]string{"t.yaml:10: b: suggested query", "confidence is a number"}},
		{"hands off without the tool", strings.Replace(base, "facts.add, xct.handoff", "facts.add", 1), []string{"a: may hand to b but cannot propose xct.handoff"}},
		{"handoff tool without targets", strings.Replace(base, "tools: [facts.update]", "tools: [facts.update, xct.handoff]", 1), []string{"b: may propose xct.handoff but hands_to names no agent"}},
		{"unreachable agent", strings.Replace(base, "    hands_to: [b]\n", "", 1), []string{"a: may propose xct.handoff but hands_to names no agent", "b: no handoff path leads to it from the entry agent a"}},
		{"unknown entry", base + "handoffs: {entry: zed}\n", []string{`handoffs.entry "zed": no agent of the crew has that name`}},
		{"bad cycle policy", base + "handoffs: {cycles: sometimes}\n", []string{`handoffs.cycles "sometimes": want forbid or allow`}},
		{"max visits without cycles", base + "handoffs: {max_visits: 2}\n", []string{"handoffs.max_visits needs cycles: allow"}},
		{"routing step kind", base + "routing:\n  rules:\n    - {name: r, when: {step_kind: lunch}, model: 'openai:m3'}\n", []string{`r: step_kind "lunch": want one of start, handoff, retry, verify, continue`}},
		{"routing by cost without costs", base + "routing:\n  rules:\n    - {name: r, cheapest: true}\n", []string{`a: model "openai:m1" has no cost_per_1k_tokens under models:`}},
		{"routing rule without a choice", base + "routing:\n  rules:\n    - {name: r}\n", []string{"r: give model (the model to use) or cheapest: true"}},
		{"routing failure code", base + "routing:\n  fallback_on: [OOPS]\n", []string{`routing.fallback_on "OOPS": want model failure codes`}},
		{"routing unknown agent", base + "routing:\n  rules:\n    - {name: r, when: {agent: zed}, model: 'openai:m3'}\n", []string{`r: agent "zed": no agent of the crew has that name`}},
		{"reserved agent name", strings.Replace(base, "name: b", "name: system", 1), []string{`agent name "system" is reserved`}},
		{"no agents", "crew: t\nagents: []\n", []string{"agents: a crew needs at least one agent"}},
		{"no crew name", strings.Replace(base, "crew: t\n", "", 1), []string{"crew: names the crew and is required"}},
		{"syntax error", "crew: t\nagents:\n  - name: [\n", []string{"t.yaml:3: did not find expected node content"}},
		{"not a mapping", "- a\n- b\n", []string{"t.yaml:1: a crew file is a mapping"}},
		{"empty", "", []string{"t.yaml: the file is empty"}},
		{"too many agents", "crew: t\nagents:\n" + strings.Repeat("  - {name: a}\n", MaxAgents+1), []string{"t.yaml:1: a crew has at most 100 agents"}},
		{"too many tools", strings.Replace(base, "tools: [facts.update]", "tools: ["+strings.Repeat("fs.read, ", MaxToolsPerAgent)+"fs.read]", 1), []string{"t.yaml:7: agent 2: at most 128 tools"}},
		{"wrong type", strings.Replace(base, "reliability_score: 0.9", "reliability_score: high", 1), []string{"t.yaml:4: cannot unmarshal !!str `high` into float64"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.src)
			if err == nil {
				t.Fatalf("loaded %+v, want an error", c)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, c *Crew)
	}{
		{"cycle allowed", strings.Replace(base, "tools: [facts.update]", "tools: [facts.update, xct.handoff]\n    hands_to: [a]", 1) + "handoffs: {cycles: allow, max_visits: 2}\n",
			func(t *testing.T, c *Crew) {
				if c.Handoffs.Cycles != CyclesAllow || c.Handoffs.MaxVisits != 2 {
					t.Fatalf("%+v", c.Handoffs)
				}
			}},
		{"non-standard capability is a warning", strings.Replace(base, "capabilities: [assessment]", "capabilities: [assessment, threat_modeling]", 1),
			func(t *testing.T, c *Crew) {
				if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], `t.yaml:8: b: capability "threat_modeling" is not one of the reviewer type's standard ones`) {
					t.Fatalf("warnings %v", c.Warnings)
				}
			}},
		{"contract on a core field", base + "contracts:\n  b:\n    inputs:\n      - type: fact\n        required_fields: [id, text, source]\n",
			func(t *testing.T, c *Crew) {
				if len(c.Contracts.Contracts["b"].Inputs) != 1 {
					t.Fatal("contract not kept")
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.src)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// TestLoadReportsEveryProblem: one pass names all problems, in file order.
func TestLoadReportsEveryProblem(t *testing.T) {
	src := strings.Replace(strings.Replace(base, "type: analyzer", "type: wizard", 1), "reliability_score: 0.9", "reliability_score: 1.7", 1)
	src = strings.Replace(src, "tools: [facts.update]", "tools: []", 1)
	_, err := load(t, src)
	var le *LoadError
	if !errors.As(err, &le) || len(le.Problems) != 3 {
		t.Fatalf("want 3 problems, got %v", err)
	}
	for i, prefix := range []string{"t.yaml:4:", "t.yaml:4:", "t.yaml:7:"} {
		if !strings.HasPrefix(le.Problems[i], prefix) {
			t.Errorf("problem %d %q, want prefix %s", i, le.Problems[i], prefix)
		}
	}
}

// TestLoadInvalidExamples: the files under testdata/invalid each fail with
// the message their first line names.
func TestLoadInvalidExamples(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(raw), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("%s: the first line must be '# want: MESSAGE'", f)
			}
			_, err = LoadFile(f)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
		})
	}
}

func TestLoadFileErrors(t *testing.T) {
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read crew file") {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("crew: t\n#"+strings.Repeat("x", MaxFileBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big file: %v", err)
	}
}
