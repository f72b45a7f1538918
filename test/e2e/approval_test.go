package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// deployTool is an irreversible tool that keeps a ledger of what it did.
type deployTool struct {
	mu     sync.Mutex
	ledger map[string]int
}

func (d *deployTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "test.deploy", Description: "deploys a colour", Effect: xctv1.Effect_EFFECT_IRREVERSIBLE,
		InputSchema: `{"type":"object","properties":{"target":{"type":"string"}},"required":["target"],"additionalProperties":false}`,
	}
}

func (d *deployTool) Invoke(_ context.Context, args map[string]any) (any, *xctv1.Error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ledger[args["target"].(string)]++
	return map[string]any{"deployed": args["target"]}, nil
}

func (d *deployTool) count(target string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ledger[target]
}

// deployer proposes to deploy each target in turn, then says done; it
// decides from the context alone.
type deployer struct{ targets []string }

func (p *deployer) Name() string { return "deployer" }
func (p *deployer) Close() error { return nil }
func (p *deployer) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	n := len(req.GetHistory())
	if n >= len(p.targets) {
		return &xctv1.ProposeResponse{Output: `{"done":true,"message":"finished"}`}, nil
	}
	return &xctv1.ProposeResponse{Output: fmt.Sprintf(`{"next_step":{"tool":"test.deploy","arguments":{"target":%q},"goal":"deploy"}}`, p.targets[n])}, nil
}

const approvalPolicy = `
approval_ttl: %s
rules:
  - id: changes
    effect: allow
    effects: [read, reversible]
  - id: deploys-need-a-human
    effect: require_approval
    tools: ["test.deploy"]
    message: deploys need a human
`

func approvalCluster(t *testing.T, ttl string, targets ...string) (*cluster, *deployTool, xctv1.ValidatorServiceClient) {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf(approvalPolicy, ttl)), 0o600); err != nil {
		t.Fatal(err)
	}
	tool := &deployTool{ledger: map[string]int{}}
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		o.ExtraTools = []executor.Tool{tool}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("deployer", &deployer{targets: targets}))
	})
	return c, tool, c.validatorAs(t, "bob")
}

// pending waits until the run's step waits for a human and returns it.
func pending(t *testing.T, v xctv1.ValidatorServiceClient, runID string, step int32) *xctv1.Approval {
	t.Helper()
	var found *xctv1.Approval
	testutil.Eventually(t, 20*time.Second, func() error {
		resp, err := v.ListApprovals(context.Background(), &xctv1.ListApprovalsRequest{RunId: runID})
		if err != nil {
			return err
		}
		for _, a := range resp.GetApprovals() {
			if a.GetStep() == step {
				found = a
				return nil
			}
		}
		return fmt.Errorf("step %d is not waiting yet", step)
	})
	return found
}

func TestApprovalRoundTrip(t *testing.T) {
	t.Parallel()
	c, tool, v := approvalCluster(t, "1h", "blue", "green")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()

	a := pending(t, v, id, 1)
	if a.GetRequestedBy() != "alice" || a.GetProposal().GetArguments().AsMap()["target"] != "blue" || a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("approval = %v", a)
	}
	// The validator holds the approval before the orchestrator has
	// recorded approval_requested on the chain, so the run's status
	// follows a moment later.
	testutil.Eventually(t, 20*time.Second, func() error {
		run, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			return err
		}
		if st := run.GetRun().GetStatus(); st != xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL {
			return fmt.Errorf("run while waiting: %v", st)
		}
		return nil
	})
	if tool.count("blue") != 0 {
		t.Fatal("the step ran before it was approved")
	}
	// The principal who started the run cannot approve its steps (alice
	// is no approver; TestApproverCannotApproveOwnRun has one who is),
	// nor can an approver decide in her name.
	_, err = c.validatorAs(t, "alice").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("self-approval: %v", err)
	}
	_, err = v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "alice"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("approval in another's name: %v", err)
	}
	if _, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: a.GetStepId(), Approve: true, Approver: "bob", Reason: "change ticket 42"}); err != nil {
		t.Fatal(err)
	}

	// Step 2 has other arguments, hence another step id: it needs its own
	// approval. Bob denies it.
	b := pending(t, v, id, 2)
	if b.GetStepId() == a.GetStepId() || b.GetProposal().GetArguments().AsMap()["target"] != "green" {
		t.Fatalf("second approval = %v", b)
	}
	if tool.count("blue") != 1 {
		t.Fatalf("blue deployed %d times after its approval", tool.count("blue"))
	}
	if _, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "2", Approve: false, Approver: "bob", Reason: "not on a Friday"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, id)
	if tool.count("green") != 0 {
		t.Fatal("a denied step ran")
	}

	var got []string
	for _, e := range events {
		if e.Type == lctl.TypeVerdict || e.Type == orchestrator.TypeApprovalRequested || e.Type == orchestrator.TypeApprovalDecided || e.Type == lctl.TypeToolCall || e.Type == lctl.TypeError {
			got = append(got, step(e)+" "+fmt.Sprint(e.Data["decision"]))
		}
	}
	want := []string{
		"verdict/validator needs_approval needs_approval",
		"approval_requested/orchestrator <nil>",
		"approval_decided/bob approved",
		"verdict/validator allow allow",
		"tool_call/executor test.deploy <nil>",
		"verdict/validator needs_approval needs_approval",
		"approval_requested/orchestrator <nil>",
		"approval_decided/bob denied",
		"verdict/validator deny deny",
		"error/validator APPROVAL_DENIED <nil>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, e := range events {
		if e.Type == lctl.TypeError && e.Data["code"] == "APPROVAL_DENIED" && !strings.Contains(e.Data["message"].(string), "not on a Friday") {
			t.Fatalf("the model was not told why: %v", e.Data)
		}
		if e.Type == lctl.TypeVerdict && e.Data["decision"] == "allow" && !strings.Contains(fmt.Sprint(e.Data["reasons"]), "bob") {
			t.Fatalf("the allow does not name the approver: %v", e.Data["reasons"])
		}
	}
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run ended %v", last.Data)
	}
}

func TestApprovalExpires(t *testing.T) {
	t.Parallel()
	c, tool, v := approvalCluster(t, "1s", "blue")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	pending(t, v, id, 1)
	// Nobody decides: the run goes on without the step.
	events := c.watch(t, ctx, id)
	var codesSeen []string
	for _, e := range events {
		if e.Type == lctl.TypeError {
			codesSeen = append(codesSeen, e.Data["code"].(string))
		}
	}
	if fmt.Sprint(codesSeen) != "[APPROVAL_EXPIRED]" || tool.count("blue") != 0 {
		t.Fatalf("errors %v, deployed %d", codesSeen, tool.count("blue"))
	}
	// A decision after expiry is refused.
	_, err = v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "late"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("late approval: %v", err)
	}
}

func TestCancelWhileWaitingForApproval(t *testing.T) {
	t.Parallel()
	c, tool, v := approvalCluster(t, "1h", "blue")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	pending(t, v, id, 1)
	if _, err := c.orch.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "changed my mind"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, id)
	if last := events[len(events)-1]; last.Data["status"] != "cancelled" || tool.count("blue") != 0 {
		t.Fatalf("last %v, deployed %d", last.Data, tool.count("blue"))
	}
	// The open step is closed on the chain: its approval withdrawn, then
	// its step_end, then the run's end.
	var types []string
	for _, e := range events[len(events)-3:] {
		types = append(types, e.Type)
	}
	withdrawn, end := events[len(events)-3], events[len(events)-2]
	if fmt.Sprint(types) != "[approval_decided step_end run_finished]" || withdrawn.Data["decision"] != "withdrawn" ||
		withdrawn.Data["reason"] != "changed my mind" || end.Data["outcome"] != "cancelled" {
		t.Fatalf("chain ends %v: %v / %v", types, withdrawn.Data, end.Data)
	}
	// The validator says the same: the approval is withdrawn, and
	// approving it now is refused, saying why.
	list, err := v.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: id, All: true})
	if err != nil || len(list.GetApprovals()) != 1 || list.GetApprovals()[0].GetState() != xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN {
		t.Fatalf("approvals %v, %v", list.GetApprovals(), err)
	}
	_, err = v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "late"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "withdrawn") || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("approving a withdrawn approval: %v", err)
	}
	// And GetRun: cancelled, its one step cancelled.
	run, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil || run.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_CANCELLED || len(run.GetRun().GetSteps()) != 1 ||
		run.GetRun().GetSteps()[0].GetState() != xctv1.StepState_STEP_STATE_CANCELLED {
		t.Fatalf("run %v, %v", run.GetRun(), err)
	}
}

const writesNeedApproval = `
rules:
  - id: reads
    effect: allow
    effects: [read]
  - id: config-writes-need-a-human
    effect: require_approval
    tools: ["fs.write"]
    message: writes need a human
`

// The approver sees what the step would change: the unified diff of a
// file write against the file as it is.
func TestApprovalShowsTheDiff(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(writesNeedApproval), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) { cfg.Validator.PolicyFile = policy })
	if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "config", "app.yaml"), []byte("replicas: 3\ndeployment: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "w.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: config/app.yaml, content: "replicas: 3\ndeployment: green\n"}, goal: switch}
  - done: true
`)
	v := c.validatorAs(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	a := pending(t, v, resp.GetRun().GetRunId(), 1)
	want := "--- a/config/app.yaml\n+++ b/config/app.yaml\n@@ -1,2 +1,2 @@\n replicas: 3\n-deployment: blue\n+deployment: green\n"
	if a.GetPreview().GetKind() != "diff" || a.GetPreview().GetContent() != want {
		t.Fatalf("preview %q:\n%s", a.GetPreview().GetKind(), a.GetPreview().GetContent())
	}
	b, _ := os.ReadFile(filepath.Join(c.workspace, "config", "app.yaml"))
	if string(b) != "replicas: 3\ndeployment: blue\n" {
		t.Fatalf("the preview changed the file: %q", b)
	}
	if _, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: resp.GetRun().GetRunId(), Step: "1", Approve: true, Approver: "bob"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, resp.GetRun().GetRunId())
	for _, e := range events {
		if e.Type == orchestrator.TypeApprovalRequested {
			if p, _ := e.Data["preview"].(map[string]any); p["content"] != want {
				t.Fatalf("the chain does not record the preview: %v", e.Data)
			}
		}
	}
	b, _ = os.ReadFile(filepath.Join(c.workspace, "config", "app.yaml"))
	if string(b) != "replicas: 3\ndeployment: green\n" {
		t.Fatalf("approved write did not land: %q", b)
	}
}
