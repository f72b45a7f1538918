package validator_test

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Tools with realistic schemas, one per effect class.
const (
	fsReadSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096},
    "max_bytes": {"type": "integer", "minimum": 1}
  },
  "required": ["path"],
  "additionalProperties": false
}`
	fsWriteSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": "^[^\\x00]+$"},
    "content": {"type": "string", "maxLength": 1048576},
    "mode": {"enum": ["create", "overwrite", "append"]},
    "options": {
      "type": "object",
      "properties": {
        "mkdirs": {"type": "boolean"},
        "permissions": {"type": "string", "pattern": "^0[0-7]{3}$"}
      },
      "additionalProperties": false
    },
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`
	shellSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1},
    "args": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["command"],
  "additionalProperties": false
}`
)

func testTools() []*xctv1.ToolDescriptor {
	return []*xctv1.ToolDescriptor{
		{Name: "fs.read", InputSchema: fsReadSchema, Effect: xctv1.Effect_EFFECT_READ, Idempotent: true},
		{Name: "fs.write", InputSchema: fsWriteSchema, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
		{Name: "shell.exec", InputSchema: shellSchema, Effect: xctv1.Effect_EFFECT_IRREVERSIBLE},
		{Name: "legacy.tool", InputSchema: `{"type": "object"}`}, // no effect class declared
	}
}

// args builds a proposal's arguments.
func args(tb testing.TB, m map[string]any) *structpb.Struct {
	tb.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		tb.Fatalf("arguments: %v", err)
	}
	return s
}

// request builds a ValidateRequest for tool with arguments m.
func request(tb testing.TB, tool string, m map[string]any) *xctv1.ValidateRequest {
	tb.Helper()
	return &xctv1.ValidateRequest{
		Run:      &xctv1.RunContext{RunId: "run-1", Principal: "alice", StepsUsed: 1},
		Step:     1,
		StepId:   "0123456789abcdef0123456789abcdef",
		Proposal: &xctv1.NextStep{Tool: tool, Arguments: args(tb, m), Goal: "test"},
	}
}

// writeFile writes text to a file in a temporary directory and returns its path.
func writeFile(tb testing.TB, name, text string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func reasonIDs(v *xctv1.Verdict) []string {
	var ids []string
	for _, r := range v.GetReasons() {
		ids = append(ids, r.GetRuleId())
	}
	return ids
}
