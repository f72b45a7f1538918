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
