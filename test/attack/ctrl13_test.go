package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/testutil"
)

// Session 13 (ctrl13): the control plane as a taken-over service.

// asOtherService gives the cluster a second service identity, as a
// deployment's tracer has its own (service:tracer, role service): the
// executor and the validator take steps and verdicts from the
// orchestrator's identity only (--step-callers, --verdict-callers, as
// the manifests set them), the shared service:dev of the harness. It
// returns a function dialling a service of the cluster as that identity.
func asOtherService(t *testing.T, name string) (bindOption, func(*bindCluster, string) *grpcxDial) {
	t.Helper()
	tok, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	opt := func(cfg *app.Config, _ *app.Options) {
		b, err := os.ReadFile(cfg.Auth.TokensFile)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := auth.ParseTokens(b)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, auth.TokenEntry{Principal: name, Roles: []string{auth.RoleService}, Token: tok})
		out, err := yaml.Marshal(entries)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg.Auth.TokensFile, out, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Executor.StepCallers = []string{grpcxtest.Service}
		cfg.Validator.VerdictCallers = []string{grpcxtest.Service}
	}
	dial := func(c *bindCluster, target string) *grpcxDial {
		conn, err := grpcx.Dial(c.app.Addr(target), grpcx.WithToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return &grpcxDial{executor: xctv1.NewExecutorServiceClient(conn), validator: xctv1.NewValidatorServiceClient(conn)}
	}
	return opt, dial
}

type grpcxDial struct {
	executor  xctv1.ExecutorServiceClient
	validator xctv1.ValidatorServiceClient
}

// A taken-over tracer stopped every run's steps: GetStep's fence (a step
// without a record is recorded "not executed", so that a call of it still
// in flight replays that instead of acting) was open to every service
// identity, and --step-callers, which keeps Execute and PreviewStep to
// the orchestrator, did not cover it. The tracer reads every chain, and
// step_start names the step id before the step is judged; a step waiting
// for a human gives it all the time it needs. Under config-approval.yaml
// dev's write to config/app.yaml waits for bob; the tracer fences its
// step id; bob approves, and the approved step never ran: "not executed"
// (on main). The fence is now a step caller's only, as Execute is.
func TestAttackOtherServiceFencesAnApprovedStep(t *testing.T) {
	t.Parallel()
	opt, dial := asOtherService(t, "service:tracer")
	c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "config-approval.yaml")), opt)
	if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "config", "app.yaml"), []byte("mode: safe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "a.yaml", script(step("fs.write", `{path: config/app.yaml, content: "mode: fast\n"}`)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orchestratorAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	a := waitApproval(t, c, "bob", id)
	tracer := dial(c, app.TargetExecutor)
	_, err = tracer.executor.GetStep(ctx, &xctv1.GetStepRequest{StepId: a.GetStepId(), Fence: true})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "service:tracer") {
		t.Errorf("the tracer's fence of the waiting step: %v, want PermissionDenied naming it", err)
	}
	// Reading a record stays open to it (none yet).
	if _, err := tracer.executor.GetStep(ctx, &xctv1.GetStepRequest{StepId: a.GetStepId()}); status.Code(err) != codes.NotFound {
		t.Errorf("the tracer reading the step: %v, want NotFound", err)
	}
	if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true}); err != nil {
		t.Fatal(err)
	}
	run := c.waitRun(t, "dev", id)
	if got := stepErrors(run); fmt.Sprint(got) != "[]" && fmt.Sprint(got) != "[ ]" {
		t.Errorf("the approved step: %v, want it to succeed", got)
	}
	if got, _ := readWS(t, c.workspace, "config/app.yaml"); got != "mode: fast\n" {
		t.Errorf("config/app.yaml after bob approved: %q, want the write done", got)
	}
}

// rollbackWaitsPolicy lets runs write files and has carol's writes and
// deletes, which is what her rollbacks' undos are judged as (in the name
// of the rollback's principal), wait for a human.
const rollbackWaitsPolicy = `rules:
  - {id: allow-reversible, effect: allow, effects: [read, reversible]}
  - id: carols-changes-need-approval
    effect: require_approval
    tools: ["fs.write", "fs.delete"]
    when: 'run.principal == "carol"'
`

// An operator's rollbacks held every approval wait: a run waiting for a
// human holds a consumer on the approvals' stream, whose bound is shared
// by everyone, so one principal has at most --max-runs runs in progress
// (trust10b, trust11b); a rollback whose undo waits for a human holds one
// too, and rollbacks were counted nowhere. carol (operator) rolled back
// alice's ended runs, one rollback after another, each waiting for bob:
// past the stream's bound (12 here) bob could not list approvals and
// dev's next run could not wait for its own (on main). Now a rollback
// takes a place among its principal's runs in progress, across the
// cluster, until it returns: carol's fourth at once is refused
// RESOURCE_EXHAUSTED, and a rollback that ends frees its place.
func TestAttackRollbacksHoldEveryApprovalWait(t *testing.T) {
	t.Parallel()
	const bound = 3
	ns := testutil.RunJetStreamWith(t, natsembed.Config{MaxConsumersPerStream: 12})
	c := startBindClusterOn(t, ns, withTools(t, "", rollbackWaitsPolicy), func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.MaxRuns = bound
	})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const runs = 14
	ids := make([]string, runs)
	for i := range runs {
		c.writeScript(t, fmt.Sprintf("w%d.yaml", i), script(step("fs.write", fmt.Sprintf(`{path: f%d.txt, content: "x"}`, i))))
		// Read with GetRun, not WatchRun: a watch's consumer on the chains'
		// stream outlives it a little, and the stream's bound is small here.
		resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: fmt.Sprintf("scripted:w%d.yaml", i)})
		if err != nil {
			t.Fatal(err)
		}
		var run *xctv1.Run
		testutil.Eventually(t, 30*time.Second, func() error {
			got, err := c.orchestratorAs(t, "alice").GetRun(ctx, &xctv1.GetRunRequest{RunId: resp.GetRun().GetRunId()})
			if err != nil {
				return err
			}
			if run = got.GetRun(); run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
				return fmt.Errorf("run %s: %s", run.GetRunId(), run.GetStatus())
			}
			return nil
		})
		if got := stepErrors(run); fmt.Sprint(got) != "[]" && fmt.Sprint(got) != "[ ]" {
			t.Fatalf("alice's run %d: %v", i, got)
		}
		ids[i] = run.GetRunId()
	}
	carol, bob := c.orchestratorAs(t, "carol"), c.validatorAs(t, "bob")
	// A rollback waiting for a human ends only when one decides (the
	// orchestrator does not stop before): bob denies what is left.
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		l, err := bob.ListApprovals(dctx, &xctv1.ListApprovalsRequest{})
		if err != nil {
			t.Errorf("list what is left: %v", err)
			return
		}
		for _, a := range l.GetApprovals() {
			if _, err := bob.DecideApproval(dctx, &xctv1.DecideApprovalRequest{RunId: a.GetRunId(), Step: fmt.Sprint(a.GetStep()), Approve: false, Reason: "test over"}); err != nil {
				t.Errorf("deny what is left: %v", err)
			}
		}
	})
	pending := func(run string) error {
		l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: run})
		if err != nil {
			return err
		}
		if len(l.GetApprovals()) != 1 {
			return fmt.Errorf("run %s: %d pending approvals", run, len(l.GetApprovals()))
		}
		return nil
	}
	type result struct {
		i   int
		err error
	}
	done := make(chan result, runs+1)
	rollback := func(i int) {
		go func() {
			_, err := carol.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: ids[i]})
			done <- result{i, err}
		}()
	}
	// waits until rollback i waits for bob, or returns its end.
	waits := func(i int) (ended *result) {
		testutil.Eventually(t, 30*time.Second, func() error {
			select {
			case r := <-done:
				ended = &r
				return nil
			default:
			}
			return pending(ids[i])
		})
		return ended
	}
	waiting := 0
	var refused error
	for i := range ids {
		rollback(i)
		if r := waits(i); r != nil {
			if refused = r.err; refused == nil {
				refused = fmt.Errorf("rollback %d returned without waiting", r.i)
			}
			break
		}
		waiting++
	}
	if waiting != bound || status.Code(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), "--max-runs") {
		t.Fatalf("carol has %d rollbacks waiting, then: %v; want %d, then RESOURCE_EXHAUSTED naming --max-runs", waiting, refused, bound)
	}
	// Everyone else's approvals still work.
	if _, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{}); err != nil {
		t.Fatalf("bob lists approvals: %v", err)
	}
	// A rollback that ends frees its place.
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: ids[0], Step: "2", Approve: false, Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.i != 0 {
		t.Fatalf("rollback %d ended, want 0: %v", r.i, r.err)
	}
	rollback(bound)
	if r := waits(bound); r != nil {
		t.Fatalf("carol's rollback after one of hers ended: %v", r.err)
	}
}
