package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/executor"
)

// deployNModel deploys n different targets, one a step (a refused step
// is in the history too, so the next proposal is another target), then
// stops.
type deployNModel struct{ n int }

func (deployNModel) Name() string { return "deploy-n" }
func (deployNModel) Close() error { return nil }
func (m deployNModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	h := len(req.GetHistory())
	if h >= m.n {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "deployed what I could"}`}, nil
	}
	out, err := json.Marshal(map[string]any{"next_step": map[string]any{"tool": "test.deploy", "arguments": map[string]any{"target": fmt.Sprintf("prod-%d", h)}}})
	return &xctv1.ProposeResponse{Output: string(out)}, err
}

// TestAttackRateLimitPerReplica: an operator's policy allows 3 deploys an
// hour across all runs. A policy's rate limits were counted in each
// validator process, and the cluster runs several replicas (prod: 2 to
// 10): two runs, each started on another orchestrator (whose calls go to
// another validator), deployed 3 times each (on main 6 deploys; with N
// replicas 3·N). Now the count is the cluster's (NATS KV, a
// compare-and-set per call): 3 deploys in all, the other steps refused
// RATE_LIMITED.
func TestAttackRateLimitPerReplica(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`
rate_limits:
  - {tool: "test.deploy", global: 3/1h}
rules:
  - id: deploys-run
    effect: allow
    tools: ["test.deploy"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var deployed atomic.Int64
	opts := func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
		cfg.Validator.PolicyFile = policy
	}
	a := startBindClusterOn(t, ns, withProposer("deploy-n", deployNModel{n: 3}), opts)
	b := startReplicaOn(t, ns, withProposer("deploy-n", deployNModel{n: 3}), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, orch := range []xctv1.OrchestratorServiceClient{a.orchestratorAs(t, "alice"), b.orchestratorAs(t, "alice")} {
		id := fmt.Sprintf("deploys-%d", i)
		if _, err := orch.StartRun(ctx, &xctv1.StartRunRequest{RunId: id, Goal: "deploy", Model: "func:deploy-n", MaxSteps: 10}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { watchToEnd(ctx, t, orch, id) })
	}
	wg.Wait()
	limited := 0
	for i, orch := range []xctv1.OrchestratorServiceClient{a.orchestratorAs(t, "alice"), b.orchestratorAs(t, "alice")} {
		r, err := orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: fmt.Sprintf("deploys-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.GetRun().GetSteps() {
			if s.GetVerdict().GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_DENY && s.GetResponse().GetError().GetCode() == "RATE_LIMITED" {
				limited++
			} else if s.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
				t.Errorf("step %d of %s: %v", s.GetNumber(), r.GetRun().GetRunId(), s)
			}
		}
	}
	if n := deployed.Load(); n != 3 || limited != 3 {
		t.Fatalf("%d deploys, %d steps refused RATE_LIMITED; want 3 and 3 (the limit is 3 an hour in the cluster)", n, limited)
	}
}
