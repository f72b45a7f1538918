package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/examples"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/validator"
)

// TestCrewRun plays the bundled crew demo (the LCTL spec's scenario) through
// a real cluster: three agents take turns, every proposal validated; the
// analyzer's large model fails and the crew falls back; a handoff that
// breaks the analyzer's contract is refused and repaired; the reviewer
// confirms the fact by consensus; the fixer, unsure of its fix (0.35),
// waits for a human under the crew's confidence gate, is approved, and
// writes the fix through the executor. The chain it leaves is what lctl's
// tools read as the scenario.
func TestCrewRun(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The gate's approval: asked of the validator with the crew's context
	// (without it the policy alone would allow, and the step would be
	// refused after the decision).
	id, v, a := startCrewDemo(t, ctx, c)
	if a.GetProposal().GetTool() != "fs.write" {
		t.Fatalf("approval for %v", a.GetProposal())
	}
	// Who asked (session 20): the member and the hand-overs, for the
	// human deciding.
	if a.GetCrew() != "security-review-demo" || a.GetAgent() != "fix-implementer" ||
		strings.Join(a.GetHandoffPath(), ",") != "code-analyzer,security-reviewer,fix-implementer" {
		t.Fatalf("approval of crew %q, member %q, hand-overs %v", a.GetCrew(), a.GetAgent(), a.GetHandoffPath())
	}
	if _, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: a.GetStepId(), Approve: true, Reason: "read the diff"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, id)
	final, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	run := final.GetRun()
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
		// The fixer's write waits for a human, then goes through the executor.
		"fix-implementer:step_start validator:verdict orchestrator:approval_requested bob:approval_decided validator:verdict executor:tool_call fix-implementer:step_end",
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
	// xct policy check judges the crew's steps as the validator did: with
	// their crew contexts rebuilt from the chain (the system tools with
	// their own descriptors, the gate on the fixer's write).
	policy, err := validator.LoadPolicyFiles("../../examples/policies/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rechecked, err := validator.Recheck(policy, nil, events)
	if err != nil {
		t.Fatal(err)
	}
	if len(rechecked) != 7 {
		t.Fatalf("rechecked %d steps, want 7", len(rechecked))
	}
	for _, r := range rechecked {
		if r.Changed() {
			t.Errorf("step %d (%s) was %v, is now %v: %v", r.Step, r.Tool, r.Was, r.Now.GetDecision(), r.Now.GetReasons())
		}
	}
	if code, out := lctlRun(nil, "bottleneck", path); code != 0 || !strings.Contains(out, "fix-implementer") {
		t.Errorf("bottleneck %d:\n%s", code, out)
	}

	// What lctl says of the crew's chain, word for word but for what
	// changes from run to run (ids, times, hashes): golden files
	// (go test ./test/e2e -run TestCrewRun -update writes them).
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stats", []string{"stats", path}},
		{"confidence", []string{"confidence", path}},
		{"query", []string{"query", "SELECT * WHERE confidence >= 0.6 ORDER BY confidence DESC", path}},
		{"validate-contracts", []string{"validate", "--contracts", "../../examples/crews/demo/crew.yaml", path}},
		{"replay", []string{"replay", path}},
	} {
		_, out := lctlRun(nil, tc.args...)
		checkGolden(t, "crew-"+tc.name, normalizeRun(out, run.GetRunId(), path))
	}
}

var update = flag.Bool("update", false, "write the golden files under testdata/golden")

// volatile are the parts of lctl's output that change from run to run.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`\d\d:\d\d:\d\d(\.\d+)?`), "CLOCK"},
	{regexp.MustCompile(`sha256:[0-9a-f]+`), "HASH"},
	{regexp.MustCompile(`[0-9a-f]{16,}`), "HASH"},
	{regexp.MustCompile(`\d+(\.\d+)?\s?(ns|µs|ms|s|m)\b`), "DUR"},
}

func normalizeRun(out, runID, path string) string {
	out = strings.ReplaceAll(out, path, "CHAIN.lctl.json")
	out = strings.ReplaceAll(out, runID, "RUN")
	for _, v := range volatile {
		out = v.re.ReplaceAllString(out, v.with)
	}
	return out
}

// checkGolden compares got with testdata/golden/NAME.txt.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, file, got, want)
	}
}

// A crew the orchestrator cannot run is refused at StartRun with every
// problem, and no run starts: a broken file, and a crew whose agents list
// a tool the cluster does not have.
func TestCrewRunRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx := context.Background()
	bad, err := os.ReadFile("../../internal/crew/testdata/invalid/confidence-above-one.yaml")
	if err != nil {
		t.Fatal(err)
	}
	unknownTool := strings.Replace(string(examples.CrewDemo), "tools: [fs.read, fs.write, facts.update, facts.query]", "tools: [fs.read, fs.write, db.drop, facts.update, facts.query]", 1)
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"confidence 1.7", bad, "bad.yaml:13: confidence.thresholds.proceed 1.7 is not in [0, 1]"},
		{"a tool not in the catalog", []byte(unknownTool), "db.drop"},
		{"not YAML", []byte("crew: [unclosed"), "bad.yaml"},
		{"too large to record", append(append([]byte{}, examples.CrewDemo...), []byte("\n# "+strings.Repeat("x", 300<<10)+"\n")...), "more than the 262144 a run can record"},
	} {
		_, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Crew: tc.file, CrewFile: "bad.yaml"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: err = %v, want InvalidArgument naming %q", tc.name, err, tc.want)
		}
	}
	runs, err := c.orch.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || len(runs.GetRuns()) != 0 {
		t.Fatalf("runs after refused starts: %v %v", runs.GetRuns(), err)
	}
}

// startCrewDemo starts the bundled crew demo on c and waits until its
// fixer's step (7) waits for a human; it returns the run, a validator
// client as the approver bob, and the pending approval.
func startCrewDemo(t *testing.T, ctx context.Context, c *cluster) (string, xctv1.ValidatorServiceClient, *xctv1.Approval) {
	t.Helper()
	for name, script := range examples.CrewDemoScripts {
		c.writeScript(t, name, string(script))
	}
	started, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{
		Goal: "Find and fix the SQL injection in UserController.py", Crew: examples.CrewDemo, CrewFile: "crew.yaml",
	})
	if err != nil {
		t.Fatal(err)
	}
	id := started.GetRun().GetRunId()
	v := c.validatorAs(t, "bob")
	return id, v, pending(t, v, id, 7)
}
