package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// Session 17 (ops17), issue 17: the debugger's approve and deny (the
// tracer's /api/approvals/decide, forwarded to the validator's
// DecideApproval) while the validator cannot be reached, then while NATS
// is down. Each time the page gets 503 UNAVAILABLE saying that the
// validator cannot decide now, to try again once it is back and that the
// approvals list shows whether the decision was recorded; nothing is
// half decided (the approval still pending at the validator, no
// approval_decided on the chain, the step not run); and the same
// decision goes through once the dependency is back.
func TestDebuggerDecideWhileADependencyIsDown(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf(approvalPolicy, "1h")), 0o600); err != nil {
		t.Fatal(err)
	}
	js := testutil.RestartableJetStream(t)
	// The tracer reaches the validator through a proxy the test cuts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	valAddr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	proxy := testutil.NewProxy(t, valAddr)
	tool := &deployTool{ledger: map[string]int{}}
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.NATSURL = js.URL()
		cfg.ValidatorListen = valAddr
		cfg.Validator.PolicyFile = policy
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
		cfg.Tracer.ValidatorAddr = proxy.Addr()
		o.ExtraTools = []executor.Tool{tool}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("deployer", &deployer{targets: []string{"blue", "green"}}))
	})
	v := c.validatorAs(t, "bob")
	events, err := eventlog.Bind(context.Background(), js.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + c.app.Tracer.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	a := pending(t, v, id, 1)

	bob := map[string]string{"Authorization": "Bearer " + c.creds.Token(t, "bob"), "X-XCT-CSRF": "1", "Content-Type": "application/json"}
	approve := `{"run_id":"` + id + `","step":"` + a.GetStepId() + `","approve":true,"reason":"change 42"}`
	type apiErr struct {
		Error struct{ Code, Message string }
	}
	var decided struct {
		Approval struct {
			State     string
			DecidedBy string `json:"decidedBy"`
		}
	}
	refused := func() {
		t.Helper()
		var e apiErr
		code := debuggerCall(t, "POST", base+"/api/approvals/decide", approve, bob, &e)
		if code != 503 || e.Error.Code != "UNAVAILABLE" || !strings.Contains(e.Error.Message, "the validator cannot decide now") ||
			!strings.Contains(e.Error.Message, "try again once it is back") {
			t.Fatalf("approve while the validator cannot be reached: %d %+v; want 503 UNAVAILABLE saying the validator cannot decide now and to try again", code, e)
		}
	}
	// Not half decided: pending at the validator, nothing on the chain,
	// the step not run.
	undecided := func() {
		t.Helper()
		if got := pending(t, v, id, 1); got.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING || got.GetDecidedBy() != "" {
			t.Fatalf("after a refused decision the approval is %v", got)
		}
		chain, err := events.ReadChainFrom(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range chain {
			if e.Type == lctl.TypeApprovalDecided {
				t.Fatalf("the chain records a decision that was refused: %v", e)
			}
		}
		if tool.count("blue") != 0 {
			t.Fatal("the step ran")
		}
	}

	// The validator cannot be reached.
	proxy.Cut()
	refused()
	undecided()
	proxy.Restore()
	// The approver tries again (the tracer's connection to the validator
	// may still be waiting to reconnect: refused the same way meanwhile).
	testutil.Eventually(t, time.Minute, func() error {
		code := debuggerCall(t, "POST", base+"/api/approvals/decide", approve, bob, &decided)
		if code != 200 || decided.Approval.State != "APPROVAL_STATE_APPROVED" || decided.Approval.DecidedBy != "bob" {
			return fmt.Errorf("approve once the validator is back: %d %+v", code, decided)
		}
		return nil
	})
	b := pending(t, v, id, 2)
	if tool.count("blue") != 1 {
		t.Fatalf("blue deployed %d times after its approval", tool.count("blue"))
	}

	// NATS is down: the validator answers, and cannot decide.
	js.Stop()
	deny := `{"run_id":"` + id + `","step":"` + b.GetStepId() + `","approve":false,"reason":"not on a Friday"}`
	testutil.Eventually(t, time.Minute, func() error {
		var e apiErr
		code := debuggerCall(t, "POST", base+"/api/approvals/decide", deny, bob, &e)
		if code != 503 || e.Error.Code != "UNAVAILABLE" || !strings.Contains(e.Error.Message, "the validator cannot decide now") {
			return fmt.Errorf("deny while NATS is down: %d %+v", code, e)
		}
		return nil
	})
	js.Start()
	testutil.Eventually(t, time.Minute, func() error {
		code := debuggerCall(t, "POST", base+"/api/approvals/decide", deny, bob, &decided)
		if code != 200 || decided.Approval.State != "APPROVAL_STATE_DENIED" {
			return fmt.Errorf("deny once NATS is back: %d %+v", code, decided)
		}
		return nil
	})
	c.watch(t, ctx, id)
	if tool.count("green") != 0 {
		t.Fatal("a denied step ran")
	}
}
