package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/examples"
	"github.com/xct-dev/xct/lctl"
)

// TestCrewRun plays the bundled crew demo (the LCTL spec's scenario) through
// a real cluster: three agents take turns, every proposal validated; the
// analyzer's large model fails and the crew falls back; a handoff that
// breaks the analyzer's contract is refused and repaired; the reviewer
// confirms the fact by consensus; the fixer writes the fix through the
// executor. The chain it leaves is what lctl's tools read as the scenario.
func TestCrewRun(t *testing.T) {
	c := startCluster(t)
	c.writeScript(t, "crew-demo.yaml", string(examples.CrewDemoScript))
	run, events := c.runToEnd(t, &xctv1.StartRunRequest{
		Goal: "Find and fix the SQL injection in UserController.py", Crew: examples.CrewDemo, CrewFile: "crew.yaml",
	})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	if run.GetModel() != "crew:security-review-demo" {
		t.Errorf("run model %q", run.GetModel())
	}
	var lines []string
	for _, e := range events {
		lines = append(lines, e.Agent+":"+e.Type)
	}
	got := strings.Join(lines, " ")
	for _, want := range []string{
		// The large model failed: the fallback is recorded before the step.
		"orchestrator:model_routing code-analyzer:step_start validator:verdict code-analyzer:fact_added code-analyzer:tool_call code-analyzer:step_end",
		// The refused handoff: both contracts checked, the signal to the analyzer.
		"system:contract_validation system:contract_validation code-analyzer:error code-analyzer:step_end",
		// The handoff, and the checkpoint after its step.
		"code-analyzer:handoff code-analyzer:tool_call code-analyzer:step_end system:checkpoint",
		"security-reviewer:step_start validator:verdict security-reviewer:fact_modified",
		// The fixer's write goes through the executor.
		"fix-implementer:step_start validator:verdict executor:tool_call fix-implementer:step_end",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("chain lacks %q:\n%s", want, got)
		}
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("verify: %v", err)
	}
	fixed, err := os.ReadFile(filepath.Join(c.workspace, "UserController.py"))
	if err != nil || !strings.Contains(string(fixed), "?") {
		t.Fatalf("the fix was not written: %v %q", err, fixed)
	}

	// lctl on the exported chain.
	path := filepath.Join(t.TempDir(), "crew.lctl.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.NewFile(run.GetRunId(), events).Encode(f, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	var stats struct {
		Agents        []string       `json:"agents"`
		Facts         int            `json:"facts"`
		AvgConfidence *float64       `json:"avg_confidence"`
		EventTypes    map[string]int `json:"event_types"`
	}
	if code, out := lctlRun(nil, "stats", "--json", path); code != 0 || json.Unmarshal([]byte(out), &stats) != nil {
		t.Fatalf("stats %d: %s", code, out)
	}
	if stats.Facts != 1 || stats.AvgConfidence == nil || stats.EventTypes["handoff"] != 2 || stats.EventTypes["contract_validation"] != 6 ||
		stats.EventTypes["model_routing"] < 1 || !strings.Contains(strings.Join(stats.Agents, ","), "security-reviewer") {
		t.Errorf("stats %+v", stats)
	}
	if code, out := lctlRun(nil, "query", "SELECT * WHERE severity IN ('high', 'critical')", path); code != 0 || !strings.Contains(out, "F1") {
		t.Errorf("query %d:\n%s", code, out)
	}
	if code, out := lctlRun(nil, "confidence", path); code != 0 || !strings.Contains(out, "F1") {
		t.Errorf("confidence %d:\n%s", code, out)
	}
	if code, out := lctlRun(nil, "validate", "--contracts", "../../examples/crews/demo/crew.yaml", path); code != 1 || !strings.Contains(out, "code-analyzer") {
		t.Errorf("validate --contracts %d (want 1: the refused handoff's violation is on the chain):\n%s", code, out)
	}
	if code, out := lctlRun(nil, "verify", path); code != 0 {
		t.Errorf("verify %d:\n%s", code, out)
	}
}
