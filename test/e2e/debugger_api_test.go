package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/debugger"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// debuggerCall is one HTTP call to the debugger's API.
func debuggerCall(t *testing.T, method, url, body string, hdr map[string]string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Security-Policy") != debugger.ContentSecurityPolicy {
		t.Fatalf("%s %s: no CSP", method, url)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

// The debugger's JSON API against the real cluster: the tracer lists the
// validator's pending approval, the page's approve goes through the
// validator's DecideApproval (its rules included: the run's own principal
// is refused), the step runs, a deny ends the run, the live stream carries
// every event to the end, and the flowchart marks the gated and denied
// steps.
func TestDebuggerApprovalRoundTripOverHTTP(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf(approvalPolicy, "1h")), 0o600); err != nil {
		t.Fatal(err)
	}
	tool := &deployTool{ledger: map[string]int{}}
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
		o.ExtraTools = []executor.Tool{tool}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("deployer", &deployer{targets: []string{"blue", "green"}}))
	})
	v := c.validatorAs(t, "bob")
	// The debugger takes the same bearer tokens as gRPC: dave reads,
	// alice (the run's principal) and bob (an approver) decide.
	reader := map[string]string{"Authorization": "Bearer " + c.creds.Token(t, "dave")}
	withToken := func(h map[string]string, who string) map[string]string {
		out := map[string]string{"Authorization": "Bearer " + c.creds.Token(t, who)}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	base := "http://" + c.app.Tracer.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var info struct {
		Mode      string
		Approvals bool
	}
	if code := debuggerCall(t, "GET", base+"/api/info", "", reader, &info); code != 200 || info.Mode != "cluster" || !info.Approvals {
		t.Fatalf("info %d %+v (the in-process validator is wired)", code, info)
	}
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	pending(t, v, id, 1)

	// Follow the run live from its first event, once the tracer has it.
	if err := c.app.Tracer.WaitForSeq(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	req, err := http.NewRequestWithContext(lctx, http.MethodGet, base+"/api/chains/"+id+"/live?from=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", reader["Authorization"])
	live, err := http.DefaultClient.Do(req)
	if err != nil || live.StatusCode != 200 {
		body, _ := io.ReadAll(live.Body)
		t.Fatalf("live: %v %s %v", live.Status, body, err)
	}
	go func() {
		defer close(lines)
		defer func() { _ = live.Body.Close() }()
		sc := bufio.NewScanner(live.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- d
			}
		}
	}()

	var list struct {
		Approvals []struct {
			RunID       string `json:"runId"`
			Step        int
			StepID      string `json:"stepId"`
			State       string
			RequestedBy string `json:"requestedBy"`
			Proposal    struct {
				Tool      string
				Arguments map[string]any
			}
		}
	}
	if code := debuggerCall(t, "GET", base+"/api/approvals?run="+id, "", reader, &list); code != 200 || len(list.Approvals) != 1 {
		t.Fatalf("approvals %d %+v", code, list)
	}
	a := list.Approvals[0]
	if a.RunID != id || a.Step != 1 || a.State != "APPROVAL_STATE_PENDING" || a.RequestedBy != "alice" || a.Proposal.Tool != "test.deploy" || a.Proposal.Arguments["target"] != "blue" {
		t.Fatalf("approval %+v", a)
	}
	var chains struct {
		Chains []struct {
			ID               string
			Status           string
			PendingApprovals int `json:"pending_approvals"`
		}
	}
	testutil.Eventually(t, 20*time.Second, func() error {
		debuggerCall(t, "GET", base+"/api/chains?q="+id, "", reader, &chains)
		if len(chains.Chains) != 1 || chains.Chains[0].PendingApprovals != 1 || chains.Chains[0].Status != "running" {
			return fmt.Errorf("chains %+v", chains)
		}
		return nil
	})

	decide := func(body string, hdr map[string]string, out any) int {
		return debuggerCall(t, "POST", base+"/api/approvals/decide", body, hdr, out)
	}
	csrf := map[string]string{"X-XCT-CSRF": "1", "Content-Type": "application/json"}
	var apiErr struct {
		Error struct{ Code, Message string }
	}
	// Without the CSRF header nothing reaches the validator.
	if code := decide(`{"run_id":"`+id+`","step":1,"approve":true,"approver":"bob"}`, withToken(map[string]string{"Content-Type": "application/json"}, "bob"), &apiErr); code != 403 {
		t.Fatalf("no CSRF header: %d %+v", code, apiErr)
	}
	// The validator refuses the run's own principal.
	if code := decide(`{"run_id":"`+id+`","step":1,"approve":true,"approver":"alice"}`, withToken(csrf, "alice"), &apiErr); code != 403 || apiErr.Error.Code != "PERMISSION_DENIED" {
		t.Fatalf("self-approval: %d %+v", code, apiErr)
	}
	if tool.count("blue") != 0 {
		t.Fatal("the step ran before it was approved")
	}
	var decided struct {
		Approval struct {
			State     string
			DecidedBy string `json:"decidedBy"`
		}
	}
	if code := decide(`{"run_id":"`+id+`","step":1,"approve":true,"approver":"bob","reason":"change 42"}`, withToken(csrf, "bob"), &decided); code != 200 ||
		decided.Approval.State != "APPROVAL_STATE_APPROVED" || decided.Approval.DecidedBy != "bob" {
		t.Fatalf("approve: %d %+v", code, decided)
	}
	// Deciding again is refused by the validator.
	if code := decide(`{"run_id":"`+id+`","step":1,"approve":true,"approver":"bob"}`, withToken(csrf, "bob"), &apiErr); code < 400 {
		t.Fatalf("second decision accepted: %d", code)
	}

	b := pending(t, v, id, 2)
	if tool.count("blue") != 1 {
		t.Fatalf("blue deployed %d times after its approval", tool.count("blue"))
	}
	if code := decide(`{"run_id":"`+id+`","step":"`+b.GetStepId()+`","approve":false,"approver":"bob","reason":"not on a Friday"}`, withToken(csrf, "bob"), &decided); code != 200 ||
		decided.Approval.State != "APPROVAL_STATE_DENIED" {
		t.Fatalf("deny: %d %+v", code, decided)
	}
	c.watch(t, ctx, id)
	if tool.count("green") != 0 {
		t.Fatal("a denied step ran")
	}

	// The live stream carried the whole run, in order, to run_finished.
	var seq uint64
	for done := false; !done; {
		select {
		case d, ok := <-lines:
			if !ok {
				t.Fatal("the live stream ended before the run did")
			}
			var e struct {
				Seq  uint64
				Type string
			}
			if err := json.Unmarshal([]byte(d), &e); err != nil {
				continue // a ping
			}
			if e.Seq != seq+1 {
				t.Fatalf("live: seq %d after %d", e.Seq, seq)
			}
			seq = e.Seq
			done = e.Type == "run_finished"
		case <-time.After(30 * time.Second):
			t.Fatalf("live: no run_finished (last seq %d)", seq)
		}
	}

	var flow debugger.FlowPage
	if code := debuggerCall(t, "GET", base+"/api/chains/"+id+"/flow", "", reader, &flow); code != 200 || flow.TotalEvents != int(seq) {
		t.Fatalf("flow %d: %d events, live saw %d", code, flow.TotalEvents, seq)
	}
	var steps []string
	for _, n := range flow.Nodes {
		if n.Kind == "agent_step" {
			steps = append(steps, fmt.Sprintf("%d %s gated=%v", *n.Step, n.Status, n.Gated))
		}
	}
	if got := strings.Join(steps, "; "); got != "1 approved gated=true; 2 denied gated=true" {
		t.Fatalf("flow steps: %s", got)
	}
	if code := debuggerCall(t, "GET", base+"/api/approvals?run="+id, "", reader, &list); code != 200 || len(list.Approvals) != 0 {
		t.Fatalf("pending after the run: %+v", list)
	}
}
