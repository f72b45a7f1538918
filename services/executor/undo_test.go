package executor

import (
	"os"
	"path/filepath"
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
			if code := codeOf(exec(t, s, UndoToolName, map[string]any{"step_id": tc.target})); code != tc.code {
				t.Fatalf("code %q, want %q", code, tc.code)
			}
		})
	}
	if r := exec(t, s, UndoToolName, map[string]any{"step_id": "step-write"}); codeOf(r) != "" {
		t.Fatalf("undo: %v", r.GetError())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "before\n" {
		t.Fatalf("after undo: %q", b)
	}
	// Undoing again finds the file already as the step found it changed
	// from: the compensation refuses rather than guess.
	if code := codeOf(exec(t, s, UndoToolName, map[string]any{"step_id": "step-write"})); code != string(wire.CodeToolFailure) {
		t.Fatalf("second undo: %q", code)
	}
}
