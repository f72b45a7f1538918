package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

func TestParseDecisionAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		check    func(t *testing.T, d *xctv1.Decision)
	}{
		{"spec next_step", `{"next_step":{"tool":"fs.write","arguments":{"path":"config.yaml","content":"..."},"goal":"update the config"}}`,
			func(t *testing.T, d *xctv1.Decision) {
				ns := d.GetNextStep()
				if ns.GetTool() != "fs.write" || ns.GetGoal() != "update the config" || ns.GetArguments().AsMap()["path"] != "config.yaml" {
					t.Fatalf("got %v", ns)
				}
			}},
		{"spec done", `{"done": true, "message": "config updated"}`,
			func(t *testing.T, d *xctv1.Decision) {
				if d.GetDone().GetMessage() != "config updated" {
					t.Fatalf("got %v", d)
				}
			}},
		{"confidence", `{"next_step":{"tool":"fs.read","arguments":{},"confidence":0.55}}`,
			func(t *testing.T, d *xctv1.Decision) {
				if d.GetNextStep().Confidence == nil || d.GetNextStep().GetConfidence() != 0.55 {
					t.Fatalf("confidence = %v", d.GetNextStep().Confidence)
				}
			}},
		{"done without message", `{"done":true}`,
			func(t *testing.T, d *xctv1.Decision) {
				if d.GetDone() == nil {
					t.Fatal("not done")
				}
			}},
		{"empty arguments and no goal", ` {"next_step":{"tool":"fs.list","arguments":{}}} `,
			func(t *testing.T, d *xctv1.Decision) {
				if d.GetNextStep().GetTool() != "fs.list" || len(d.GetNextStep().GetArguments().GetFields()) != 0 {
					t.Fatalf("got %v", d)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := wire.ParseDecision([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, d)
		})
	}
}

func TestParseDecisionRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"empty", ``, "empty"},
		{"not json", `Sure! I'll do that.`, "not JSON"},
		{"array", `[{"done":true}]`, "JSON object was expected"},
		{"both", `{"next_step":{"tool":"a","arguments":{}},"done":true}`, "both"},
		{"neither", `{"message":"hi"}`, `"next_step" or "done"`},
		{"unknown top-level key", `{"done":true,"thoughts":"..."}`, `unknown key "thoughts"`},
		{"two steps", `{"next_step":{"tool":"a","arguments":{}},"next_step":{"tool":"b","arguments":{}}}`, "duplicate key"},
		{"done false", `{"done":false}`, `"done" must be true`},
		{"done string", `{"done":"yes"}`, `"done" must be true`},
		{"arguments array", `{"next_step":{"tool":"a","arguments":[1]}}`, "arguments\" must be an object"},
		{"arguments string", `{"next_step":{"tool":"a","arguments":"{}"}}`, "arguments\" must be an object"},
		{"arguments missing", `{"next_step":{"tool":"a"}}`, "is required"},
		{"tool missing", `{"next_step":{"arguments":{}}}`, "tool\" must be a non-empty string"},
		{"tool number", `{"next_step":{"tool":7,"arguments":{}}}`, "tool\" must be a non-empty string"},
		{"unknown step key", `{"next_step":{"tool":"a","arguments":{},"retries":3}}`, `unknown key "retries"`},
		{"trailing text", `{"done":true} and more`, "after the JSON object"},
		{"two objects", `{"done":true}{"done":true}`, "after the JSON object"},
		{"fenced", "```json\n{\"done\":true}\n```", "not JSON"},
		{"truncated", `{"next_step":{"tool":"a","argu`, "not JSON"},
		{"message with next_step", `{"next_step":{"tool":"a","arguments":{}},"message":"x"}`, `unknown key "message"`},
		{"goal not string", `{"next_step":{"tool":"a","arguments":{},"goal":1}}`, "goal\" must be a string"},
		{"confidence above 1", `{"next_step":{"tool":"a","arguments":{},"confidence":1.5}}`, "from 0 to 1"},
		{"confidence string", `{"next_step":{"tool":"a","arguments":{},"confidence":"high"}}`, "from 0 to 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.ParseDecision([]byte(tc.in))
			var de *wire.DecisionError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a DecisionError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParseDecisionSizeLimit(t *testing.T) {
	t.Parallel()
	big := `{"next_step":{"tool":"fs.write","arguments":{"content":"` + strings.Repeat("x", wire.MaxDecisionBytes) + `"}}}`
	_, err := wire.ParseDecision([]byte(big))
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("err = %v", err)
	}
}

func TestResponseShapes(t *testing.T) {
	t.Parallel()
	ok, err := wire.SuccessResponse(map[string]any{"bytes_written": 2048.0, "checksum": "a3f5b"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(wire.EncodeResponse(ok), &got); err != nil {
		t.Fatal(err)
	}
	if got["status"] != "success" || got["result"].(map[string]any)["bytes_written"] != 2048.0 || len(got) != 2 {
		t.Fatalf("success = %v", got)
	}

	e := wire.WithDetails(wire.Errorf(wire.CodePermissionDenied, "fs.write failed: %s", "outside"), map[string]any{"path": "/etc"})
	if err := json.Unmarshal(wire.EncodeResponse(wire.ErrorResponse(e)), &got); err != nil {
		t.Fatal(err)
	}
	details := got["details"].(map[string]any)
	if got["status"] != "error" || got["code"] != "PERMISSION_DENIED" || got["message"] != "fs.write failed: outside" {
		t.Fatalf("error = %v", got)
	}
	if details["category"] != "execution_error" || details["type"] != "tool_failure" || details["recoverable"] != true || details["path"] != "/etc" || details["suggested_action"] == "" {
		t.Fatalf("details = %v", details)
	}
}

func TestEncodeDecisionRoundTrip(t *testing.T) {
	t.Parallel()
	in := `{"next_step":{"tool":"fs.write","arguments":{"path":"a","n":1},"goal":"g"}}`
	d, err := wire.ParseDecision([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	again, err := wire.ParseDecision(wire.EncodeDecision(d))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetNextStep().GetArguments().AsMap()["n"] != 1.0 || again.GetNextStep().GetGoal() != "g" {
		t.Fatalf("round trip = %v", again)
	}
}

func TestStepID(t *testing.T) {
	t.Parallel()
	args := func(m map[string]any) *structpb.Struct { s, _ := structpb.NewStruct(m); return s }
	a := wire.StepID("run-1", 3, "fs.write", args(map[string]any{"path": "a", "content": "x"}))
	if len(a) != 32 {
		t.Fatalf("len = %d", len(a))
	}
	same := wire.StepID("run-1", 3, "fs.write", args(map[string]any{"content": "x", "path": "a"}))
	if a != same {
		t.Fatal("argument order changed the step id")
	}
	for name, other := range map[string]string{
		"arguments": wire.StepID("run-1", 3, "fs.write", args(map[string]any{"path": "a", "content": "y"})),
		"step":      wire.StepID("run-1", 4, "fs.write", args(map[string]any{"path": "a", "content": "x"})),
		"run":       wire.StepID("run-2", 3, "fs.write", args(map[string]any{"path": "a", "content": "x"})),
		"tool":      wire.StepID("run-1", 3, "fs.read", args(map[string]any{"path": "a", "content": "x"})),
	} {
		if other == a {
			t.Errorf("a different %s gave the same step id", name)
		}
	}
}

// FuzzParseDecision: any input either parses into exactly one decision kind
// that re-encodes and re-parses, or is a DecisionError. Never a panic.
func FuzzParseDecision(f *testing.F) {
	for _, s := range []string{
		`{"next_step":{"tool":"fs.write","arguments":{"path":"a"},"goal":"g"}}`,
		`{"done":true,"message":"m"}`,
		`{"done":true,"done":true}`,
		`{"next_step":{"tool":"a","arguments":{"x":[1,{"y":null}]}}}`,
		`[]`, `null`, `"str"`, `{`, `{"next_step":{}}`,
		`{"next_step":{"tool":"a","arguments":{"x":` + strings.Repeat("[", 62) + strings.Repeat("]", 62) + `}}}`,
		`{"next_step":{"tool":"a","arguments":{"x":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}}}`,
		`{"next_step":{"tool":"a","arguments":{"x":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat("}", 70) + `}}}`,
		`{"next_step":{"tool":"a","arguments":{"x":"` + strings.Repeat("[", 200) + `"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := wire.ParseDecision(in)
		if err != nil {
			var de *wire.DecisionError
			if !errors.As(err, &de) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if (d.GetNextStep() == nil) == (d.GetDone() == nil) {
			t.Fatalf("decision has not exactly one kind: %v", d)
		}
		if d.GetNextStep() != nil && d.GetNextStep().GetTool() == "" {
			t.Fatal("empty tool accepted")
		}
		// The depth limit: accepted arguments never nest deeper than it.
		if ns := d.GetNextStep(); ns != nil && wire.ValueDepthExceeds(ns.GetArguments().AsMap(), wire.MaxDepth) {
			t.Fatalf("arguments deeper than %d accepted", wire.MaxDepth)
		}
		if _, err := wire.ParseDecision(wire.EncodeDecision(d)); err != nil {
			t.Fatalf("re-encoded decision does not parse: %v", err)
		}
	})
}

// FuzzDepth: Depth of any JSON text is the nesting of the value it decodes
// to, and ValueDepthExceeds agrees with it at every limit around it.
func FuzzDepth(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `1`, `"[{"`, `{"a":[1,{"b":"]}\\\""}]}`, `[[[],[[]]]]`, strings.Repeat("[", 100) + strings.Repeat("]", 100)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var v any
		if json.Unmarshal(in, &v) != nil {
			_ = wire.Depth(in) // never panics on anything
			return
		}
		d := wire.Depth(in)
		if wire.ValueDepthExceeds(v, d) || (d > 0 && !wire.ValueDepthExceeds(v, d-1)) {
			t.Fatalf("Depth %d disagrees with the decoded value of %q", d, in)
		}
	})
}
