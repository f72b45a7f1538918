package attack

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/services/executor"
)

const awsKey = "AKIAIOSFODNN7EXAMPLE"

// Attack 4 (issue #11): binary tool output was stored base64 with the
// secret intact, and a run's goal was stored as written. Neither the chain
// (GetRun, WatchRun) nor the executor's step record keeps them now.
func TestAttackSecretsInBinaryOutputAndGoal(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t)
	raw := append([]byte{0xff, 0xfe, 0x00, 0x01}, []byte("aws_access "+awsKey+"\x00\x9c")...)
	if err := os.WriteFile(filepath.Join(c.workspace, "blob.bin"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	encoded := base64.StdEncoding.EncodeToString(raw)
	token := "Bearer q8Zx3vLm9TnR2wYp5KdA"
	c.writeScript(t, "read.yaml", "steps:\n  - next_step: {tool: fs.read, arguments: {path: blob.bin}}\n  - done: true\n")
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "read it with " + token, Model: "scripted:read.yaml"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("run: %s %s", run.GetStatus(), run.GetMessage())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Everything the chain holds, as its readers get it.
	stream, err := c.orchestratorAs(t, "dave").WatchRun(ctx, &xctv1.WatchRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	var chain strings.Builder
	for {
		msg, err := stream.Recv()
		if err != nil {
			break
		}
		b, _ := protojson.Marshal(msg)
		chain.Write(b)
	}
	view, _ := protojson.Marshal(run)
	stored := chain.String() + string(view)
	if chain.Len() == 0 {
		t.Fatal("no events watched")
	}
	// The step record the executor keeps (what a replay answers).
	rec, err := c.executorAs(t, "dave").GetStep(ctx, &xctv1.GetStepRequest{StepId: run.GetSteps()[0].GetStepId()})
	if err != nil {
		t.Fatal(err)
	}
	recJSON, _ := protojson.Marshal(rec)
	stored += string(recJSON)
	for _, leak := range []string{encoded, awsKey, "q8Zx3vLm9TnR2wYp5KdA"} {
		if strings.Contains(stored, leak) {
			t.Errorf("stored data holds %q", leak)
		}
	}
	// The content is still base64 of the file's bytes, the secret
	// replaced by its marker.
	content := rec.GetStep().GetResponse().GetSuccess().GetResult().GetStructValue().GetFields()["content"].GetStringValue()
	b, err := base64.StdEncoding.DecodeString(content)
	if err != nil || b[0] != 0xff || !strings.Contains(string(b), "[REDACTED") {
		t.Fatalf("recorded content %q (%v)", content, err)
	}
	if !strings.Contains(run.GetGoal(), "[REDACTED") {
		t.Fatalf("goal: %q", run.GetGoal())
	}
}

// Attack 4 (issue #11): GET /api/approvals?all=true returned a step's raw
// arguments to any role. ListApprovals (which the debugger's API calls
// with the caller's identity) shows them raw only to a principal who may
// decide the approval.
func TestAttackApprovalArgumentsOnlyForDeciders(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{deployTool{}}
		cfg.Tracer.HTTPListen = "127.0.0.1:0" // the debugger's API
	})
	c.writeScript(t, "deploy.yaml", "steps:\n  - next_step: {tool: test.deploy, arguments: {target: prod, password: \"hunter2-prod-pw\"}}\n  - done: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "scripted:deploy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	list := func(principal string) *xctv1.Approval {
		t.Helper()
		for {
			l, err := c.validatorAs(t, principal).ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: id, All: true})
			if err != nil {
				t.Fatalf("%s: %v", principal, err)
			}
			if len(l.GetApprovals()) == 1 {
				return l.GetApprovals()[0]
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no approval for %s", id)
			case <-time.After(20 * time.Millisecond): // poll until the run asks
			}
		}
	}
	for principal, raw := range map[string]bool{"bob": true, "admin": true, "dave": false, "alice": false, "carol": false} {
		got := list(principal).GetProposal().GetArguments().GetFields()["password"].GetStringValue()
		if raw && got != "hunter2-prod-pw" {
			t.Errorf("%s, who may decide, sees %q", principal, got)
		}
		if !raw && (got == "hunter2-prod-pw" || !strings.HasPrefix(got, "[REDACTED")) {
			t.Errorf("%s, who may not decide, sees %q", principal, got)
		}
	}
	// The debugger's API asks the validator with the caller's identity.
	for principal, raw := range map[string]bool{"bob": true, "dave": false} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.app.Tracer.HTTPAddr()+"/api/approvals?all=true&run="+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+c.creds.Token(t, principal))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/approvals as %s: %d %s %v", principal, resp.StatusCode, body, err)
		}
		if got := strings.Contains(string(body), "hunter2-prod-pw"); got != raw {
			t.Errorf("GET /api/approvals?all=true as %s shows the password: %v (%s)", principal, got, body)
		}
		if !raw && !strings.Contains(string(body), "[REDACTED") {
			t.Errorf("GET /api/approvals as %s: no marker in %s", principal, body)
		}
	}
	if _, err := c.orchestratorAs(t, "alice").CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "done testing"}); err != nil {
		t.Fatal(err)
	}
}

// deployTool is an irreversible tool: the default policy asks a human.
type deployTool struct{}

func (deployTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "test.deploy", Description: "deploys", Effect: xctv1.Effect_EFFECT_IRREVERSIBLE,
		InputSchema: `{"type":"object","properties":{"target":{"type":"string"},"password":{"type":"string"}},"required":["target"],"additionalProperties":false}`,
	}
}

func (deployTool) Invoke(context.Context, map[string]any) (any, *xctv1.Error) {
	return map[string]any{"deployed": true}, nil
}
