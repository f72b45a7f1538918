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
	t.Parallel()
	cfg, err := ParseToolsConfig("tools.yaml", []byte("http:\n  allow_hosts: [api.test]\nshell:\n  binaries: [{name: echo}, {name: ls}]\n"))
	must(t, err)
	s, err := New(Config{Workspace: t.TempDir(), Tools: cfg}, nil, nil)
	must(t, err)
	defer func() { _ = s.Stop(t.Context()) }()
	cases := map[string]struct{ valid, invalid []string }{
		"http.request": {
			valid: []string{`{"method":"GET","url":"https://api.test/x"}`, `{"method":"POST","url":"u","headers":{"A":"b"},"body":"x"}`},
			invalid: []string{`{"url":"u"}`, `{"method":"TRACE","url":"u"}`, `{"method":"GET"}`, `{"method":"GET","url":"u","headers":{"A":1}}`,
				`{"method":"GET","url":"u","proxy":"p"}`, `{"method":"GET","url":""}`},
		},
		"shell.exec": {
			valid: []string{`{"argv":["echo"]}`, `{"argv":["ls","-l","x"],"cwd":"sub","stdin":"in"}`},
			invalid: []string{`{}`, `{"argv":[]}`, `{"argv":["sh","-c","x"]}`, `{"argv":["/bin/echo"]}`, `{"argv":"echo x"}`,
				`{"argv":["echo",1]}`, `{"argv":["echo"],"env":{}}`, `{"argv":["echo"],"cwd":""}`},
		},
		"fs.read": {
			valid:   []string{`{"path":"a.txt"}`},
			invalid: []string{`{}`, `{"path":""}`, `{"path":1}`, `{"path":"a","extra":1}`, `[]`},
		},
		"fs.write": {
			valid:   []string{`{"path":"a","content":""}`, `{"path":"a","content":"x","create_dirs":false}`},
			invalid: []string{`{"path":"a"}`, `{"content":"x"}`, `{"path":"a","content":1}`, `{"path":"a","content":"x","create_dirs":"yes"}`, `{"path":"a","content":"x","mode":1}`},
		},
		"fs.delete": {
			valid:   []string{`{"path":"a"}`, `{"path":"a","recursive":true}`},
			invalid: []string{`{}`, `{"path":""}`, `{"path":"a","recursive":"yes"}`, `{"path":"a","force":true}`},
		},
		"fs.move": {
			valid:   []string{`{"from":"a","to":"b"}`},
			invalid: []string{`{"from":"a"}`, `{"to":"b"}`, `{"from":"","to":"b"}`, `{"from":"a","to":1}`, `{"from":"a","to":"b","overwrite":true}`},
		},
		"xct.undo": {
			valid: []string{`{"step_id":"39a8925527f36a20f6b1e5f92e242703","actions":[]}`,
				`{"step_id":"a","actions":[{"op":"remove","path":"x"},{"op":"rename","path":"y","from":"z"}]}`},
			invalid: []string{`{}`, `{"step_id":"a"}`, `{"step_id":"","actions":[]}`, `{"step_id":"../x","actions":[]}`,
				`{"step_id":"a","actions":[],"force":true}`, `{"step_id":"a","actions":[{"op":"chmod","path":"x"}]}`,
				`{"step_id":"a","actions":[{"op":"remove"}]}`, `{"step_id":"a","actions":[{"op":"remove","path":"x","mode":1}]}`},
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
