package validator_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
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

// stepRequest builds a ValidateRequest for step n of run with a real step
// id, as the orchestrator does.
func stepRequest(tb testing.TB, run string, n int, tool string, m map[string]any) *xctv1.ValidateRequest {
	tb.Helper()
	a := args(tb, m)
	return &xctv1.ValidateRequest{
		Run:      &xctv1.RunContext{RunId: run, Principal: "alice", StepsUsed: int32(n)},
		Step:     int32(n),
		StepId:   wire.StepID(run, n, tool, a),
		Proposal: &xctv1.NextStep{Tool: tool, Arguments: a, Goal: "test"},
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now().Truncate(time.Second)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newServiceWith builds a validator over the test tools with a policy made
// of files (YAML texts, in order) and options.
func newServiceWith(tb testing.TB, files []string, opts ...validator.Option) *validator.Service {
	tb.Helper()
	var paths []string
	for i, text := range files {
		paths = append(paths, writeFile(tb, "policy"+strconv.Itoa(i)+".yaml", text))
	}
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: strings.Join(paths, ",")}, catalog.Static(testTools()...), nil, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
