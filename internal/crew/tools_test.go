package crew

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestSystemToolSchemas: each schema compiles as the validator compiles
// tool schemas, accepts the arguments the parsers take and refuses bad
// ones (a confidence of 1.7, an unknown field).
func TestSystemToolSchemas(t *testing.T) {
	tests := []struct {
		tool string
		args string
		ok   bool
	}{
		{ToolHandoff, `{"to": "security-reviewer", "summary": "Review F1"}`, true},
		{ToolHandoff, `{"to": "security-reviewer"}`, false},
		{ToolHandoff, `{"to": "x", "summary": "y", "facts": ["F1"]}`, false},
		{ToolFactsAdd, `{"id": "F1", "text": "SQL injection", "confidence": 0.85, "source": "static-analysis", "tags": ["critical"], "fields": {"line": 45}}`, true},
		{ToolFactsAdd, `{"id": "F1", "text": "SQL injection", "confidence": 1.7}`, false},
		{ToolFactsAdd, `{"id": "F1", "text": "SQL injection"}`, false},
		{ToolFactsAdd, `{"id": "F1", "text": "x", "confidence": 0.5, "fields": {"where": {"a": 1}}}`, false},
		{ToolFactsUpdate, `{"id": "F1", "confidence": 0.95, "reason": "verified_by_consensus", "fields": {"severity": "high"}}`, true},
		{ToolFactsUpdate, `{"id": "F1", "confidence": 0.95}`, false},
		{ToolFactsQuery, `{"query": "SELECT * WHERE confidence >= 0.8"}`, true},
		{ToolFactsQuery, `{"sql": "SELECT *"}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.tool+" "+tc.args, func(t *testing.T) {
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(SystemToolSchemas[tc.tool]))
			if err != nil {
				t.Fatal(err)
			}
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			if err := c.AddResource("mem:///"+tc.tool+".json", doc); err != nil {
				t.Fatal(err)
			}
			s, err := c.Compile("mem:///" + tc.tool + ".json")
			if err != nil {
				t.Fatal(err)
			}
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(inst); (err == nil) != tc.ok {
				t.Fatalf("schema: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(tc.args), &args); err != nil {
				t.Fatal(err)
			}
			var sig *Signal
			switch tc.tool {
			case ToolHandoff:
				_, sig = ParseHandoff(args)
			case ToolFactsQuery:
				_, sig = ParseQueryArgs(args)
			default:
				_, sig = ParseFactArgs(tc.tool, args)
			}
			if sig != nil {
				t.Fatalf("parse: %v", sig)
			}
		})
	}
	if len(SystemToolSchemas) != len(SystemTools) {
		t.Fatal("a system tool has no schema")
	}
}

// TestParseArgs: the parsers refuse what the schema would, so the
// orchestrator never acts on arguments the validator did not check.
func TestParseArgs(t *testing.T) {
	if _, sig := ParseHandoff(map[string]any{"to": "b", "summary": "s", "extra": 1.0}); sig == nil || sig.Code != "SCHEMA_INVALID" {
		t.Fatalf("extra field: %v", sig)
	}
	if _, sig := ParseHandoff(map[string]any{"to": "b"}); sig == nil {
		t.Fatal("no summary accepted")
	}
	if _, sig := ParseFactArgs(ToolFactsAdd, map[string]any{"id": "F1", "text": "t", "confidence": 0.5, "reason": "r"}); sig == nil {
		t.Fatal("reason on facts.add accepted")
	}
	in, sig := ParseFactArgs(ToolFactsUpdate, map[string]any{"id": "F1", "confidence": 0.95, "reason": "ok", "fields": map[string]any{"severity": "high"}})
	if sig != nil || *in.Confidence != 0.95 || in.Fields["severity"] != "high" || in.Reason != "ok" {
		t.Fatalf("%+v %v", in, sig)
	}
	if _, sig := ParseQueryArgs(map[string]any{"query": 3.0}); sig == nil {
		t.Fatal("a number as query accepted")
	}
	// A parsed add with confidence 1.7 still meets the store's check.
	c := example(t)
	in, sig = ParseFactArgs(ToolFactsAdd, map[string]any{"id": "F9", "text": "t", "confidence": 1.7})
	if sig != nil {
		t.Fatal(sig)
	}
	if _, sig := NewFactStore(c).Add("code-analyzer", in); sig == nil || sig.Code != CodeInvalidFact {
		t.Fatalf("store took 1.7: %v", sig)
	}
}
