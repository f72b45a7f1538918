package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCrewCheck runs xct crew check as a process: a valid crew file prints
// its agents and handoff graph (exit 0); each invalid one exits 2 with the
// problem at its file and line.
func TestCrewCheck(t *testing.T) {
	t.Parallel()
	xct, _ := binaries(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"the spec's scenario", []string{"crew", "check", "../../examples/crews/security-review.yaml"}, 0, []string{
			"crew security-review: 3 agents, entry code-analyzer",
			"security-reviewer  type reviewer, reliability 0.92, model openai:reviewer-large (fallbacks: openai:reviewer-small)",
			"tools: fs.read, fs.write, facts.update, facts.query",
			"  code-analyzer -> security-reviewer\n  security-reviewer -> fix-implementer\n",
			"rule code-generation: agent_type=executor step_kind=handoff -> openai:fixer-large",
			"history: own (each agent is shown its own turns, and what is handed to it)",
			"security-review.yaml: ok"}},
		{"no subcommand", []string{"crew"}, 2, []string{"usage: xct crew check FILE"}},
		{"no file", []string{"crew", "check"}, 2, []string{"usage: xct crew check FILE"}},
		{"missing file", []string{"crew", "check", "nowhere.yaml"}, 2, []string{"read crew file: open nowhere.yaml"}},
	}
	invalid, err := filepath.Glob("../../internal/crew/testdata/invalid/*.yaml")
	if err != nil || len(invalid) < 5 {
		t.Fatalf("invalid crews: %v %v", invalid, err)
	}
	for _, f := range invalid {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(raw), "\n")
		tests = append(tests, struct {
			name     string
			args     []string
			wantCode int
			want     []string
		}{"invalid " + filepath.Base(f), []string{"crew", "check", f}, 2, []string{strings.TrimPrefix(first, "# want: ")}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, "xct", xct, tc.args...)
			code, out := p.wait(t, 30*time.Second)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
