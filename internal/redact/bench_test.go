package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

// A step's worth of values: fs.write arguments with a configuration file,
// and an fs.list result of 200 entries. Redaction runs on every step.
func benchValues(b *testing.B) (args, result any) {
	b.Helper()
	content := strings.Repeat("server:\n  port: 8080\n  name: checkout\n", 40) + "password: Hunter2-x\n"
	args = map[string]any{"path": "config/app.yaml", "content": content, "create_dirs": true}
	entries := make([]any, 200)
	for i := range entries {
		entries[i] = map[string]any{"name": "file-" + strings.Repeat("x", i%20) + ".txt", "size": float64(i * 100), "dir": false, "mod_time": "2026-11-21T13:42:23Z"}
	}
	raw, _ := json.Marshal(map[string]any{"path": ".", "entries": entries, "total": 200, "truncated": false})
	if err := json.Unmarshal(raw, &result); err != nil {
		b.Fatal(err)
	}
	return args, result
}

func BenchmarkStep(b *testing.B) {
	r := newTest(b, Rules{})
	args, result := benchValues(b)
	b.ReportAllocs()
	for b.Loop() {
		s := r.Scope()
		s.Value(args)
		s.Value(result)
	}
}

func BenchmarkSmallStep(b *testing.B) {
	r := newTest(b, Rules{})
	args := map[string]any{"path": "config/app.yaml"}
	result := map[string]any{"content": "deployment: green\n", "bytes": 18.0, "checksum": "sha256:14f706dc"}
	b.ReportAllocs()
	for b.Loop() {
		s := r.Scope()
		s.Value(args)
		s.Value(result)
	}
}

func BenchmarkMarker(b *testing.B) {
	r := newTest(b, Rules{})
	b.ReportAllocs()
	for b.Loop() {
		r.Marker("hunter2")
	}
}
