package validator_test

import (
	"encoding/json"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// The same action written two ways: an argument named twice, once as the
// policy reads it ("sql") and once in a spelling a tool's server may take
// for the same name. Go's encoding/json (Go MCP servers and tool servers
// decoding arguments into a struct) matches names without regard to case,
// folding the Kelvin sign to k and the long s to s, and the last member
// wins; the executor sends an MCP server the arguments as encoding/json
// writes a map, keys in byte order, so "ſql" (0xC5...) comes after "sql".
// On main the policy judged args.sql == "SELECT 1" and allowed; the server
// ran "DROP TABLE users". .NET's web defaults (the C# MCP SDK's) read
// names without regard to case too. Now a proposal whose arguments hold,
// in one object at any depth, two names that differ only in case, width,
// or invisible characters is denied (SCHEMA_INVALID), naming both.
func TestValidateArgumentNamesAToolMayTakeForOne(t *testing.T) {
	t.Parallel()
	tool := &xctv1.ToolDescriptor{
		Name: "db.query", Effect: read,
		// As an MCP server's schema often is: no additionalProperties.
		InputSchema: `{"type":"object","properties":{"sql":{"type":"string"},"opts":{"type":"object"}},"required":["sql"]}`,
	}
	s := newService(t, `rules:
  - id: selects-only
    effect: allow
    tools: ["db.query"]
    when: 'args.sql.startsWith("SELECT ")'
`, tool)

	// What such a server runs for each proposal below.
	served := func(a map[string]any) string {
		raw, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var q struct {
			SQL  string `json:"sql"`
			Opts struct {
				Kind string `json:"kind"`
			} `json:"opts"`
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			t.Fatal(err)
		}
		return q.SQL + "|" + q.Opts.Kind
	}
	for _, a := range []map[string]any{
		{"sql": "SELECT 1", "ſql": "DROP TABLE users"},                               // long s
		{"sql": "SELECT 1", "SQL": "DROP TABLE users"},                               // case (sorted first: the judged one wins in Go, not in every reader)
		{"sql": "SELECT 1", "ｓｑｌ": "DROP TABLE users"},                               // full width (NFKC)
		{"sql": "SELECT 1", "s\u200bql": "DROP TABLE users"},                         // a zero-width space
		{"sql": "SELECT 1", "opts": map[string]any{"kind": "ro", "\u212Aind": "rw"}}, // nested, Kelvin sign
	} {
		v := validate(t, s, request(t, "db.query", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
			t.Errorf("%q (a Go server runs %q): %v %v, want a SCHEMA_INVALID deny", a, served(a), v.GetDecision(), v.GetError())
			continue
		}
		if msg := v.GetError().GetMessage(); !strings.Contains(msg, "differ only in") {
			t.Errorf("%q: message %q, want it to name the names", a, msg)
		}
	}
	// Distinct names, and the same name in two objects, are fine.
	checkVerdict(t, validate(t, s, request(t, "db.query", map[string]any{"sql": "SELECT 1", "opts": map[string]any{"sql": "x", "kind": "ro"}})), allow, "", "selects-only")
}

// One argument alone, named otherwise than the schema names it: "PATH"
// where the schema names "path". A deny rule guarded by has(args.path)
// does not read it, and a Go server decoding into a struct does
// (test/attack TestAttackArgumentNamedUnlikeItsSchema). The schema's
// names are found through references, combinators and array items.
func TestValidateArgumentNamedUnlikeItsSchema(t *testing.T) {
	t.Parallel()
	tool := &xctv1.ToolDescriptor{
		Name: "db.query", Effect: read,
		InputSchema: `{"type":"object",
  "$defs": {"target": {"type":"object","properties":{"table":{"type":"string"}}}},
  "properties": {"sql": {"type":"string"}, "target": {"$ref": "#/$defs/target"},
    "steps": {"type":"array","items":{"allOf":[{"properties":{"Kind":{"type":"string"}}}]}}},
  "anyOf": [{"properties": {"dryRun": {"type":"boolean"}}}]}`,
	}
	s := newService(t, `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-drops
    effect: deny
    tools: ["db.query"]
    when: 'has(args.sql) && args.sql.contains("DROP")'
`, tool)
	for _, a := range []map[string]any{
		{"SQL": "DROP TABLE users"},
		{"ſql": "DROP TABLE users"},
		{"sql": "SELECT 1", "target": map[string]any{"TABLE": "users"}},               // through $ref
		{"sql": "SELECT 1", "steps": []any{map[string]any{"kind": "drop"}}},           // the schema's name is "Kind"
		{"sql": "SELECT 1", "dryrun": false},                                          // through anyOf
		{"sql": "SELECT 1", "steps": []any{map[string]any{"Kind": "a", "KIND": "b"}}}, // KeyClash's case
	} {
		v := validate(t, s, request(t, "db.query", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
			t.Errorf("%q: %v %v, want a SCHEMA_INVALID deny", a, v.GetDecision(), v.GetError())
		}
	}
	for _, a := range []map[string]any{
		{"sql": "SELECT 1", "target": map[string]any{"table": "users"}, "steps": []any{map[string]any{"Kind": "x"}}, "dryRun": true},
		{"sql": "SELECT 1", "other": map[string]any{"SQL": "x"}}, // undeclared, in no spelling
	} {
		checkVerdict(t, validate(t, s, request(t, "db.query", a)), allow, "", "allow-read")
	}
}

// TestValidateArgumentNamedUnlikeItsSchemaInAMap: a schema that names an
// argument inside the entries of a map (additionalProperties or
// patternProperties schemas: {"files": {"docs": {"path": …}}}) had the
// walk stop at the map's undeclared keys, so {"files": {"a": {"PATH":
// ".env"}}} was allowed on main past a rule reading each entry's path,
// and a Go server decoding into map[string]struct{Path string} reads it as
// path. Now the walk follows a member into the schemas that apply to it.
func TestValidateArgumentNamedUnlikeItsSchemaInAMap(t *testing.T) {
	t.Parallel()
	tool := &xctv1.ToolDescriptor{
		Name: "files.bundle", Effect: read,
		InputSchema: `{"type":"object",
  "properties": {
    "files": {"type":"object","additionalProperties":{"type":"object","properties":{"path":{"type":"string"}}}},
    "tagged": {"type":"object","patternProperties":{"^t-":{"type":"object","properties":{"path":{"type":"string"}}}}},
    "rest": {"type":"object","unevaluatedProperties":{"type":"object","properties":{"path":{"type":"string"}}}}}}`,
	}
	s := newService(t, `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-env
    effect: deny
    tools: ["files.bundle"]
    when: >-
      [has(args.files) ? args.files : {}, has(args.tagged) ? args.tagged : {}, has(args.rest) ? args.rest : {}]
      .exists(m, m.exists(k, has(m[k].path) && m[k].path.endsWith(".env")))
`, tool)
	for _, a := range []map[string]any{
		{"files": map[string]any{"a": map[string]any{"PATH": ".env"}}},
		{"tagged": map[string]any{"t-1": map[string]any{"Path": ".env"}}},
		{"rest": map[string]any{"x": map[string]any{"PATH": ".env"}}},
	} {
		v := validate(t, s, request(t, "files.bundle", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
			t.Errorf("%q: %v %v, want a SCHEMA_INVALID deny", a, v.GetDecision(), v.GetError())
		}
	}
	for _, a := range []map[string]any{
		{"files": map[string]any{"a": map[string]any{"path": "README"}}},
		{"tagged": map[string]any{"other": map[string]any{"PATH": "x"}}}, // no pattern matches: undeclared in any spelling
	} {
		checkVerdict(t, validate(t, s, request(t, "files.bundle", a)), allow, "", "allow-read")
	}
	if v := validate(t, s, request(t, "files.bundle", map[string]any{"files": map[string]any{"a": map[string]any{"path": ".env"}}})); v.GetDecision() != deny {
		t.Errorf("the plain spelling: %v, want the rule's deny", v.GetDecision())
	}
}

// TestValidateArgumentNamedUnlikeThePolicyReadsIt: a tool whose schema
// declares nothing (an MCP or gRPC tool server's `{"type": "object"}`, or
// properties that leave the argument out) gives schemaNameClash no name
// to compare with, while the policy's rules name it: a deny rule reading
// args.path (guarded by has(args.path)) did not see {"PATH": ".env"}
// and the read was allowed on main; a Go server decoding into a struct
// reads it as path (test/attack TestAttackArgumentNamedUnlikeThePolicyReadsIt).
// Now a member named as a rule of the tool reads an argument, in another
// spelling, is denied SCHEMA_INVALID naming both, at any depth the rule
// reads (args.opts.mask, args["key"], "X-Key" in args.headers).
func TestValidateArgumentNamedUnlikeThePolicyReadsIt(t *testing.T) {
	t.Parallel()
	open := &xctv1.ToolDescriptor{Name: "srv.read", Effect: read, InputSchema: `{"type":"object"}`}
	partial := &xctv1.ToolDescriptor{Name: "srv.get", Effect: read,
		InputSchema: `{"type":"object","properties":{"other":{"type":"string"}}}`}
	s := newService(t, `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-secrets
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.path) && args.path.matches("(^|/)\\.env$")'
  - id: masked
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.opts) && has(args.opts.mask) && args.opts.mask == "none"'
  - id: no-admin-key
    effect: deny
    tools: ["srv.*"]
    when: '("key" in args && args["key"] == "admin") || (has(args.headers) && "X-Key" in args.headers)'
`, open, partial)
	for _, tool := range []string{"srv.read", "srv.get"} {
		for _, a := range []map[string]any{
			{"PATH": ".env"},
			{"Path": ".env"},
			{"pa\u0422h": ".env"}, // a Cyrillic Te is another letter, not path: allowed below
			{"opts": map[string]any{"MASK": "none"}},
			{"OPTS": map[string]any{"mask": "none"}},
			{"KEY": "admin"},
			{"headers": map[string]any{"x-key": "stolen"}},
		} {
			v := validate(t, s, request(t, tool, a))
			if _, ok := a["pa\u0422h"]; ok {
				checkVerdict(t, v, allow, "", "allow-read")
				continue
			}
			if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
				t.Errorf("%s %q: %v %v, want a SCHEMA_INVALID deny", tool, a, v.GetDecision(), v.GetError())
				continue
			}
			if msg := v.GetError().GetMessage(); !strings.Contains(msg, "the policy reads") {
				t.Errorf("%s %q: message %q, want it to name the policy's name", tool, a, msg)
			}
		}
		// The names as the rules read them are judged by the rules; other
		// names, and the rules' names where they read nothing, are fine.
		for _, a := range []map[string]any{{"path": ".env"}, {"opts": map[string]any{"mask": "none"}}, {"key": "admin"}, {"headers": map[string]any{"X-Key": "k"}}} {
			if v := validate(t, s, request(t, tool, a)); v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodePolicyDenied) {
				t.Errorf("%s %q: %v %v, want the rules' deny", tool, a, v.GetDecision(), v.GetError())
			}
		}
		for _, a := range []map[string]any{{"path": "README"}, {"list": []any{map[string]any{"PATH": ".env"}}}, {"env": map[string]any{"PATH": "/bin"}}, {"mask": "none"}} {
			checkVerdict(t, validate(t, s, request(t, tool, a)), allow, "", "allow-read")
		}
	}
}

// TestValidateArgumentOfAnotherTypeThanThePolicyComparesItWith: CEL's ==
// across types is false, not an error, so a deny rule
// `has(args.recursive) && args.recursive == true` did not match
// {"recursive": "true"} (nor "false", 1, {}) for a tool whose schema does
// not type the argument, and the step was allowed on main; a server in
// Python or JavaScript reads any of them as true. Now a value of another
// JSON type than the constants a rule of the tool compares the argument
// with is denied SCHEMA_INVALID; null, and the types compared, are judged
// by the rules.
func TestValidateArgumentOfAnotherTypeThanThePolicyComparesItWith(t *testing.T) {
	t.Parallel()
	open := &xctv1.ToolDescriptor{Name: "srv.delete", Effect: reversible, InputSchema: `{"type":"object"}`}
	typed := &xctv1.ToolDescriptor{Name: "srv.typed", Effect: reversible,
		InputSchema: `{"type":"object","properties":{"recursive":{"type":"boolean"}}}`}
	s := newService(t, `rules:
  - {id: allow-all, effect: allow, tools: ["srv.*"]}
  - id: not-recursive
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.recursive) && args.recursive == true'
  - id: only-safe-modes
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.opts) && has(args.opts.mode) && !(args.opts.mode in ["safe", 1])'
`, open, typed)
	for _, a := range []map[string]any{
		{"recursive": "true"},
		{"recursive": "false"},
		{"recursive": 1.0},
		{"recursive": map[string]any{}},
		{"recursive": []any{true}},
		{"opts": map[string]any{"mode": true}},
		{"opts": map[string]any{"mode": []any{"safe"}}},
	} {
		v := validate(t, s, request(t, "srv.delete", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) ||
			!strings.Contains(v.GetError().GetMessage(), "which the policy compares it with") {
			t.Errorf("%q: %v %v, want a SCHEMA_INVALID deny naming the compared type", a, v.GetDecision(), v.GetError())
		}
	}
	if v := validate(t, s, request(t, "srv.delete", map[string]any{"recursive": true})); v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodePolicyDenied) {
		t.Errorf("recursive true: %v %v, want the rule's deny", v.GetDecision(), v.GetError())
	}
	for _, a := range []map[string]any{{"recursive": false}, {"recursive": nil}, {"opts": map[string]any{"mode": "safe"}}, {"opts": map[string]any{"mode": 1.0}}, {"other": "true"}} {
		checkVerdict(t, validate(t, s, request(t, "srv.delete", a)), allow, "", "allow-all")
	}
	// A schema typing the argument refuses the string first, as before.
	if v := validate(t, s, request(t, "srv.typed", map[string]any{"recursive": "true"})); v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
		t.Errorf("typed: %v %v", v.GetDecision(), v.GetError())
	}
}

// TestValidateArgumentInAListReadByAMacro: a rule reading the elements of
// a list argument through a macro (args.files.exists(f, has(f.path) &&
// ...)) reads files.*.path: {"files": [{"PATH": ".env"}]} is the same
// other spelling, and {"files": [{"path": ".env", "secret": "true"}]}
// the same other type, as at the top.
func TestValidateArgumentInAListReadByAMacro(t *testing.T) {
	t.Parallel()
	open := &xctv1.ToolDescriptor{Name: "srv.bundle", Effect: read, InputSchema: `{"type":"object"}`}
	s := newService(t, `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-secrets
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.files) && args.files.exists(f, has(f.path) && f.path.endsWith(".env") || has(f.secret) && f.secret == true)'
`, open)
	for _, a := range []map[string]any{
		{"files": []any{map[string]any{"path": "a.txt"}, map[string]any{"PATH": ".env"}}},
		{"files": []any{map[string]any{"path": "a.txt", "secret": "true"}}},
	} {
		v := validate(t, s, request(t, "srv.bundle", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
			t.Errorf("%q: %v %v, want a SCHEMA_INVALID deny", a, v.GetDecision(), v.GetError())
		}
	}
	if v := validate(t, s, request(t, "srv.bundle", map[string]any{"files": []any{map[string]any{"path": ".env"}}})); v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodePolicyDenied) {
		t.Errorf("the rule's spelling: %v %v", v.GetDecision(), v.GetError())
	}
	for _, a := range []map[string]any{
		{"files": []any{map[string]any{"path": "a.txt", "secret": false}}},
		{"files": map[string]any{"PATH": "x"}}, // not a list: the rule reads no member of it
		{"other": []any{map[string]any{"PATH": ".env"}}},
	} {
		checkVerdict(t, validate(t, s, request(t, "srv.bundle", a)), allow, "", "allow-read")
	}
}

// TestValidateArgumentComparedWithAVariableOrAnotherArgument (session 18):
// the type a rule holds an argument to comes from what it is compared
// with, also when that is not a constant. CEL's == across types is false,
// so on main each of these was allowed past a deny rule meant to match
// it, for a tool whose schema does not type the argument: an assignee
// given as a list where the rule compares it with run.principal (the
// run's own principal, a string), a target given as a list where the
// rule compares it with the source (JavaScript's "a" == ["a"] is true),
// and a map's value read through a macro (args.flags[k] == true, given
// "true"). Each is now SCHEMA_INVALID.
func TestValidateArgumentComparedWithAVariableOrAnotherArgument(t *testing.T) {
	t.Parallel()
	open := &xctv1.ToolDescriptor{Name: "srv.act", Effect: reversible, InputSchema: `{"type":"object"}`}
	s := newService(t, `rules:
  - {id: allow-all, effect: allow, tools: ["srv.*"]}
  - id: not-ones-own
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.assignee) && args.assignee == run.principal'
  - id: not-to-itself
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.source) && has(args.target) && args.source == args.target'
  - id: no-flag-set
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.flags) && args.flags.exists(k, args.flags[k] == true)'
  - id: no-role-name
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.group) && args.group in run.roles'
  - id: big-writes-need-a-human
    effect: require_approval
    tools: ["srv.*"]
    when: 'has(args.content) && size(string(args.content)) > 10'
`, open)
	for _, a := range []map[string]any{
		{"assignee": []any{"alice"}},
		{"assignee": map[string]any{"name": "alice"}},
		{"source": "a", "target": []any{"a"}},
		{"source": 1.0, "target": "1"},
		{"flags": map[string]any{"force": "true"}},
		{"flags": map[string]any{"a": false, "force": 1.0}},
		{"group": []any{"submitter"}},
	} {
		v := validate(t, s, request(t, "srv.act", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
			t.Errorf("%v: %v %v, want a SCHEMA_INVALID deny", a, v.GetDecision(), v.GetError())
		}
	}
	for _, a := range []map[string]any{
		{"assignee": "alice"},
		{"source": "a", "target": "a"},
		{"flags": map[string]any{"force": true}},
	} {
		v := validate(t, s, request(t, "srv.act", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodePolicyDenied) {
			t.Errorf("%v: %v %v, want the rule's deny", a, v.GetDecision(), v.GetError())
		}
	}
	for _, a := range []map[string]any{
		{"assignee": "bob"},
		{"assignee": nil},
		{"source": "a", "target": "b"},
		{"source": "a"},
		{"source": []any{"a"}, "target": []any{"b"}},
		{"flags": map[string]any{"force": false}},
		{"group": "ops"},
		{"content": "short"},
	} {
		checkVerdict(t, validate(t, s, request(t, "srv.act", a)), allow, "", "allow-all")
	}
	// What docs/policy.md advises for a size: a list fails the condition.
	if v := validate(t, s, request(t, "srv.act", map[string]any{"content": []any{"a long text, counted as one element"}})); v.GetDecision() != deny {
		t.Errorf("content as a list under size(string(...)): %v, want deny", v.GetDecision())
	}
}

// TestValidateArgumentReadByIndexOrPairedInAMacro (session 19): two reads
// the argument checks did not follow. An element of a list read by its
// index (args.cmd[0] == "rm") was held to no type, so under a deny rule
// meant to match it {"cmd": [["rm"], "-rf", "x"]} was allowed (CEL's ==
// of a list and a string is false), and a server joining its arguments
// in JavaScript (cmd.join(" ")) runs "rm -rf x"; nor was its name
// (has(args.ops[0].path) judged {"ops": [{"PATH": ".env"}]} pathless).
// And two arguments compared inside a macro over a list's elements
// (args.files.exists(f, f.src == f.dst)) were not held to one type:
// {"src": "a", "dst": ["a"]} was allowed past a rule denying a copy onto
// itself. Each is now SCHEMA_INVALID.
func TestValidateArgumentReadByIndexOrPairedInAMacro(t *testing.T) {
	t.Parallel()
	open := &xctv1.ToolDescriptor{Name: "srv.run", Effect: reversible, InputSchema: `{"type":"object"}`}
	s := newService(t, `rules:
  - {id: allow-all, effect: allow, tools: ["srv.*"]}
  - id: no-rm
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.cmd) && size(args.cmd) > 0 && args.cmd[0] == "rm"'
  - id: no-env-first
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.ops) && size(args.ops) > 0 && has(args.ops[0].path) && args.ops[0].path.endsWith(".env")'
  - id: no-copy-onto-itself
    effect: deny
    tools: ["srv.*"]
    when: 'has(args.files) && args.files.exists(f, f.src == f.dst)'
`, open)
	for _, a := range []map[string]any{
		{"cmd": []any{[]any{"rm"}, "-rf", "x"}},
		{"cmd": []any{map[string]any{"0": "rm"}}},
		{"ops": []any{map[string]any{"PATH": ".env"}}},
		{"files": []any{map[string]any{"src": "a", "dst": []any{"a"}}}},
		{"files": []any{map[string]any{"src": "a", "dst": "b"}, map[string]any{"src": 1.0, "dst": "1"}}},
	} {
		v := validate(t, s, request(t, "srv.run", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodeSchemaInvalid) {
			t.Errorf("%v: %v %v, want a SCHEMA_INVALID deny", a, v.GetDecision(), v.GetError())
		}
	}
	for _, a := range []map[string]any{
		{"cmd": []any{"rm", "-rf", "x"}},
		{"ops": []any{map[string]any{"path": "a/.env"}}},
		{"files": []any{map[string]any{"src": "a", "dst": "b"}, map[string]any{"src": "c", "dst": "c"}}},
	} {
		v := validate(t, s, request(t, "srv.run", a))
		if v.GetDecision() != deny || v.GetError().GetCode() != string(wire.CodePolicyDenied) {
			t.Errorf("%v: %v %v, want the rule's deny", a, v.GetDecision(), v.GetError())
		}
	}
	for _, a := range []map[string]any{
		{"cmd": []any{"ls", 5.0, []any{"x"}}}, // only the element read is held to a type
		{"cmd": []any{}},
		{"ops": []any{map[string]any{"path": "a.txt"}, map[string]any{"PATH": "b"}}},
		{"files": []any{map[string]any{"src": "a", "dst": "b"}, map[string]any{"src": "c", "dst": nil}}},
		{"files": []any{map[string]any{"src": []any{"a"}, "dst": []any{"b"}}}},
	} {
		checkVerdict(t, validate(t, s, request(t, "srv.run", a)), allow, "", "allow-all")
	}
}
