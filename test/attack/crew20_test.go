package attack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/orchestrator"
)

// memberModel is one crew member's model: it answers from the turns it
// is shown (decide) and keeps every request it was sent, so the test reads
// what the member's model saw. One value serves both replicas.
type memberModel struct {
	name   string
	decide func(history []*xctv1.Turn) string
	mu     sync.Mutex
	seen   []*xctv1.ProposeRequest
}

func (m *memberModel) Name() string { return m.name }
func (m *memberModel) Close() error { return nil }
func (m *memberModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	m.mu.Lock()
	m.seen = append(m.seen, proto.CloneOf(req))
	m.mu.Unlock()
	return &xctv1.ProposeResponse{Output: m.decide(req.GetHistory()), Model: m.name, Usage: &xctv1.Usage{InputTokens: 10, OutputTokens: 5}}, nil
}

func (m *memberModel) requests() []*xctv1.ProposeRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*xctv1.ProposeRequest(nil), m.seen...)
}

// proposed reports whether one of the turns is a proposal of tool.
func proposed(history []*xctv1.Turn, tool string) bool {
	for _, t := range history {
		if strings.Contains(t.GetDecision(), `"tool":"`+tool+`"`) || strings.Contains(t.GetDecision(), `"tool": "`+tool+`"`) {
			return true
		}
	}
	return false
}

// requestText is everything a model request shows the model.
func requestText(req *xctv1.ProposeRequest) string {
	var b strings.Builder
	b.WriteString(req.GetGoal())
	b.WriteString("\n")
	b.WriteString(req.GetInstructions())
	for _, t := range req.GetHistory() {
		b.WriteString("\n")
		b.WriteString(t.GetDecision())
		b.WriteString("\n")
		b.WriteString(t.GetResponse())
	}
	return b.String()
}

// whoAsked checks an approval of the poster's step names the crew, the
// member and the hand-overs.
func whoAsked(t *testing.T, where, crewName, agent string, path []string) {
	t.Helper()
	if crewName != "audit-and-post" || agent != "poster" || strings.Join(path, " -> ") != "auditor -> poster" {
		t.Fatalf("%s: crew %q, member %q, hand-overs %v; want audit-and-post, poster, auditor -> poster", where, crewName, agent, path)
	}
}

// auditCrew: a read-only auditor, which may read files and hand over, and
// a poster with an outward tool (http.request), which may not read files.
const auditCrew = `crew: audit-and-post
agents:
  - name: auditor
    profile: {type: analyzer, capabilities: [static_analysis], model: "func:auditor", reliability_score: 0.9}
    tools: [fs.read, xct.handoff]
    hands_to: [poster]
  - name: poster
    profile: {type: executor, capabilities: [tool_use], model: "func:poster", reliability_score: 0.9}
    tools: [fs.list, http.request]
handoffs: {entry: auditor, max_depth: 2, cycles: forbid}
authority: {end_run: [auditor, poster]}
`

// What a member reads reached every member after it: the transcript a
// crew member's model was shown was the run's, every step's proposal and
// result, so a file only the read-only auditor may read (fs.read is not
// the poster's) was in the model context of the poster, whose tool
// (http.request) sends things out. The crew file's tools limited what a
// member may do, not what it reads. Now each member is shown its own
// turns and what is handed to it (the hand-over summary, the facts):
// here the poster's model never sees the marker the auditor read, before
// or after the orchestrator running the crew stops and another takes the
// run over from its chain, and the poster's history rebuilt from the
// chain is the one it was shown live.
//
// And the human deciding the poster's http.request was shown the run's
// principal only (alice), not which member asked nor who handed it
// control: the approval names the crew, the member and the hand-overs
// now, at either replica and in the debugger's API.
func TestAttackCrewMemberReadsAnotherMembersFile(t *testing.T) {
	t.Parallel()
	const marker = "audit-only-7c41e9d2"
	var posted atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posted.Add(1)
	}))
	t.Cleanup(target.Close)
	auditor := &memberModel{name: "auditor", decide: func(h []*xctv1.Turn) string {
		if !proposed(h, "fs.read") {
			return `{"next_step": {"tool": "fs.read", "arguments": {"path": "audit/secret.txt"}, "goal": "read the audit notes"}}`
		}
		return `{"next_step": {"tool": "xct.handoff", "arguments": {"to": "poster", "summary": "the audit is done; post the status"}, "goal": "hand over"}}`
	}}
	poster := &memberModel{name: "poster", decide: func(h []*xctv1.Turn) string {
		switch {
		case !proposed(h, "fs.list"):
			return `{"next_step": {"tool": "fs.list", "arguments": {"path": "."}, "goal": "look around"}}`
		case !proposed(h, "http.request"):
			return fmt.Sprintf(`{"next_step": {"tool": "http.request", "arguments": {"method": "POST", "url": %q, "body": "status"}, "goal": "post the status"}}`, target.URL+"/status")
		}
		return `{"done": true, "message": "posted"}`
	}}
	tools := fmt.Sprintf("http:\n  allow_hosts: [%q]\n  allow_addresses: [127.0.0.1/32]\n  timeout: 5s\n", strings.TrimPrefix(target.URL, "http://"))
	opts := []bindOption{withTools(t, tools, ""), withProposer("auditor", auditor), withProposer("poster", poster),
		func(cfg *app.Config, _ *app.Options) { cfg.Tracer.HTTPListen = "127.0.0.1:0" }}
	ns := testutil.RunJetStream(t)
	a := startBindClusterOn(t, ns, opts...)
	b := startReplicaOn(t, ns, opts...)
	if err := os.MkdirAll(filepath.Join(a.workspace, "audit"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.workspace, "audit", "secret.txt"), []byte("audit notes: "+marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	resp, err := a.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "audit and post the status", Crew: []byte(auditCrew), CrewFile: "audit.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()

	// The poster's http.request waits for a human (irreversible): the
	// run is at A, the poster has proposed twice.
	approval := waitApproval(t, a, "bob", id)
	// The human deciding is shown who asked: the member that proposed
	// the step and the hand-overs that gave it control, not only the
	// run's principal (over gRPC, and the debugger's API).
	whoAsked(t, "ListApprovals at A", approval.GetCrew(), approval.GetAgent(), approval.GetHandoffPath())
	var api struct {
		Approvals []map[string]any `json:"approvals"`
	}
	getJSON(t, ctx, a, "bob", "/api/approvals?run="+id, &api)
	if len(api.Approvals) != 1 {
		t.Fatalf("GET /api/approvals: %d approvals", len(api.Approvals))
	}
	j := api.Approvals[0]
	var path []string
	p, _ := j["handoffPath"].([]any)
	if p == nil {
		p, _ = j["handoff_path"].([]any)
	}
	for _, x := range p {
		s, _ := x.(string)
		path = append(path, s)
	}
	crewName, _ := j["crew"].(string)
	agent, _ := j["agent"].(string)
	whoAsked(t, "GET /api/approvals", crewName, agent, path)
	live := poster.requests()
	if len(live) != 2 {
		t.Fatalf("the poster's model was asked %d times before its approval, want 2", len(live))
	}
	// The auditor's model did see the file: the marker is in the run.
	reqs := auditor.requests()
	if len(reqs) < 2 || !strings.Contains(requestText(reqs[1]), marker) {
		t.Fatalf("the auditor's second request does not show what it read (%d requests): the test reads nothing", len(reqs))
	}

	// A stops; B takes the run over from the chain. The human decides
	// after A has stopped: the poster's next request is B's.
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	a.app.Stop(sctx)
	scancel()
	again := waitApproval(t, b, "bob", id)
	whoAsked(t, "ListApprovals at B", again.GetCrew(), again.GetAgent(), again.GetHandoffPath())
	if _, err := b.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "4", Approve: false, Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	var types []string
	testutil.Eventually(t, 90*time.Second, func() error {
		types = types[:0]
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		stream, err := b.orchestratorAs(t, "alice").WatchRun(wctx, &xctv1.WatchRunRequest{RunId: id})
		if err != nil {
			return err
		}
		for {
			r, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			types = append(types, r.GetEvent().GetType())
		}
	})
	run := b.waitRun(t, "alice", id)
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	resumed := 0
	for _, ty := range types {
		if ty == orchestrator.TypeRunResumed {
			resumed++
		}
	}
	if resumed != 1 {
		t.Fatalf("the run was resumed %d times, want once (events %v)", resumed, types)
	}
	if n := posted.Load(); n != 0 {
		t.Fatalf("the denied request was sent %d times", n)
	}

	all := poster.requests()
	if len(all) != 3 {
		t.Fatalf("the poster's model was asked %d times, want 3 (fs.list, http.request, done)", len(all))
	}
	for i, req := range all {
		if strings.Contains(requestText(req), marker) {
			t.Errorf("the poster's request %d shows the file only the auditor may read (%s)", i+1, marker)
		}
		if proposed(req.GetHistory(), "fs.read") || proposed(req.GetHistory(), "xct.handoff") {
			t.Errorf("the poster's request %d shows the auditor's turns: %v", i+1, req.GetHistory())
		}
		if !strings.Contains(req.GetInstructions(), "the audit is done; post the status") {
			t.Errorf("the poster's request %d lacks the hand-over summary it was given", i+1)
		}
	}
	// After the takeover the poster is shown its own two turns, the first
	// as it was shown it live at A.
	after := all[2].GetHistory()
	if len(after) != 2 || !proto.Equal(after[0], live[1].GetHistory()[0]) ||
		!proposed(after[1:], "http.request") || !strings.Contains(after[1].GetResponse(), "error") {
		t.Fatalf("the poster's history at B: %v; want its fs.list turn as at A (%v), then its denied http.request", after, live[1].GetHistory())
	}
}
