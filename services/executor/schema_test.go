package executor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestSchemas compiles every built-in input schema as the validator does
// (draft 2020-12) and checks it against arguments that must pass or fail.
func TestSchemas(t *testing.T) {
	s := newService(t, t.TempDir())
	cases := map[string]struct{ valid, invalid []string }{
		"fs.read": {
			valid:   []string{`{"path":"a.txt"}`},
			invalid: []string{`{}`, `{"path":""}`, `{"path":1}`, `{"path":"a","extra":1}`, `[]`},
		},
		"fs.write": {
			valid:   []string{`{"path":"a","content":""}`, `{"path":"a","content":"x","create_dirs":false}`},
			invalid: []string{`{"path":"a"}`, `{"content":"x"}`, `{"path":"a","content":1}`, `{"path":"a","content":"x","create_dirs":"yes"}`, `{"path":"a","content":"x","mode":1}`},
		},
		"fs.list": {
			valid:   []string{`{}`, `{"path":"."}`, `{"path":"sub"}`},
			invalid: []string{`{"path":""}`, `{"path":null}`, `{"recursive":true}`},
		},
	}
	for _, d := range s.Tools() {
		t.Run(d.GetName(), func(t *testing.T) {
			var raw map[string]any
			must(t, json.Unmarshal([]byte(d.GetInputSchema()), &raw))
			if raw["additionalProperties"] != false || raw["type"] != "object" {
				t.Fatalf("schema must be a closed object: %s", d.GetInputSchema())
			}
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(d.GetInputSchema()))
			must(t, err)
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			must(t, c.AddResource("tool.json", doc))
			sch, err := c.Compile("tool.json")
			must(t, err)
			tc, ok := cases[d.GetName()]
			if !ok {
				t.Fatalf("no cases for %s", d.GetName())
			}
			check := func(args string, want bool) {
				v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
				must(t, err)
				if err := sch.Validate(v); (err == nil) != want {
					t.Errorf("%s: valid = %v, want %v (%v)", args, err == nil, want, err)
				}
			}
			for _, a := range tc.valid {
				check(a, true)
			}
			for _, a := range tc.invalid {
				check(a, false)
			}
		})
	}
}
