package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

func TestUndoTool(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	s := newService(t, ws)
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := execStep(t, s, "step-write", "fs.write", map[string]any{"path": "a.txt", "content": "after\n"})
	if write.GetResponse().GetError() != nil {
		t.Fatal(write.GetResponse().GetError())
	}
	read := execStep(t, s, "step-read", "fs.read", map[string]any{"path": "a.txt"})
	if read.GetResponse().GetError() != nil {
		t.Fatal(read.GetResponse().GetError())
	}
	tests := []struct {
		name, target, code string
	}{
		{"unknown step", "no-such-step", string(wire.CodeNotFound)},
		{"a read left nothing to undo", "step-read", string(wire.CodeInvalidArgument)},
		{"not a step id", "../a.txt", string(wire.CodeInvalidArgument)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code := codeOf(exec(t, s, UndoToolName, undoArgs(t, s, tc.target))); code != tc.code {
				t.Fatalf("code %q, want %q", code, tc.code)
			}
		})
	}
	// The undo acts only on the actions it was judged on: another list,
	// or none, is refused and nothing changes.
	for name, actions := range map[string][]any{
		"none":         {},
		"another path": {map[string]any{"op": "restore", "path": "b.txt"}},
		"another op":   {map[string]any{"op": "remove", "path": "a.txt"}},
		"one more":     {map[string]any{"op": "restore", "path": "a.txt"}, map[string]any{"op": "remove", "path": "config"}},
	} {
		r := exec(t, s, UndoToolName, map[string]any{"step_id": "step-write", "actions": actions})
		if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "judged on") {
			t.Fatalf("undo judged on %s: %v", name, r)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "after\n" {
			t.Fatalf("after an undo judged on %s: %q", name, b)
		}
	}
	if got := undoArgs(t, s, "step-write")["actions"]; fmt.Sprint(got) != "[map[op:restore path:a.txt]]" {
		t.Fatalf("the preview lists %v", got)
	}
	if r := exec(t, s, UndoToolName, undoArgs(t, s, "step-write")); codeOf(r) != "" {
		t.Fatalf("undo: %v", r.GetError())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "before\n" {
		t.Fatalf("after undo: %q", b)
	}
	// Undoing again finds the file already as the step found it changed
	// from: the compensation refuses rather than guess.
	if code := codeOf(exec(t, s, UndoToolName, undoArgs(t, s, "step-write"))); code != string(wire.CodeToolFailure) {
		t.Fatalf("second undo: %q", code)
	}
}
