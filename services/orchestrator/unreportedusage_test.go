package orchestrator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/lctl"
)

// billingModel is an endpoint that bills every call it reads (5 in, 1
// out) whether or not its caller reads the answer. The calls named in
// slow (by their turn: the history's length) are answered after the
// caller's deadline: the caller sees the deadline, never the usage.
// A turn is the history's length: 0 for the run's first call.
type billingModel struct {
	name      string
	decisions []string
	slow      map[int]bool // turns answered past the deadline; -1: every turn

	mu        sync.Mutex
	billedIn  int64
	billedOut int64
	timedOut  int
}

func (m *billingModel) Name() string { return m.name }
func (m *billingModel) Close() error { return nil }
func (m *billingModel) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	turn := len(req.GetHistory())
	m.mu.Lock()
	m.billedIn += 5
	m.billedOut++
	m.mu.Unlock()
	if m.slow[turn] || m.slow[-1] {
		// The endpoint works on it; the caller's deadline passes first.
		<-ctx.Done()
		m.mu.Lock()
		m.timedOut++
		m.mu.Unlock()
		return nil, ctx.Err()
	}
	out := `{"done": true, "message": "finished"}`
	if turn < len(m.decisions) {
		out = m.decisions[turn]
	}
	return &xctv1.ProposeResponse{Output: out, Model: m.name, Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

func (m *billingModel) billed() (in, out int64, timedOut int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.billedIn, m.billedOut, m.timedOut
}

// Session 19 (faults19), issue 12, faults18's leftover: a model call
// that failed without its endpoint reporting what it used (its deadline
// passed while the endpoint worked on it) was charged nothing: its error
// event carried no tokens, and run_finished counted less than the
// endpoint billed. Now such a call is charged an estimate (the last
// reported call's usage, or the request's size, whichever is larger),
// marked estimated on the chain.
func TestAFailedModelCallWithoutUsageIsCharged(t *testing.T) {
	t.Parallel()
	model := &billingModel{name: "tester", decisions: []string{step("test.count", 1)}, slow: map[int]bool{1: true}}
	f := newFixture(t, newGatedModel())
	a, _ := f.launch(Config{RunLease: time.Minute, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute, ProposeTimeout: 500 * time.Millisecond}, model)
	id := f.start(a)
	events := f.waitEnd(id)
	in, out, timedOut := model.billed()
	if timedOut != 1 {
		t.Fatalf("the model's deadline passed %d time(s), want 1:\n%s", timedOut, describe(events))
	}
	end := events[len(events)-1]
	tokens, _ := end.Data["tokens"].(map[string]any)
	if end.Data["status"] != "failed" || num(tokens, "input") < in || num(tokens, "output") < out {
		t.Fatalf("run ended %v; the endpoint billed %d in, %d out (two calls, the second past its deadline): the chain charges less:\n%s", end.Data, in, out, describe(events))
	}
	errs := only(events, lctl.TypeError)
	if len(errs) != 1 {
		t.Fatalf("want one error event (the failed call):\n%s", describe(events))
	}
	et, _ := errs[0].Data["tokens"].(map[string]any)
	if et == nil || num(et, "input") < 5 || num(et, "output") < 1 || et["estimated"] != true {
		t.Fatalf("the failed call's error does not charge an estimate of it: %v\n%s", errs[0].Data, describe(events))
	}
	// A later owner folds the same from the chain.
	if rs := foldResume(id, events[:len(events)-1]); rs.tokensIn < in || rs.tokensOut < out {
		t.Fatalf("the chain without its run_finished folds %d in, %d out; the endpoint billed %d, %d", rs.tokensIn, rs.tokensOut, in, out)
	}
}

const timeoutCrew = `crew: solo
agents:
  - name: counter
    profile: {type: analyzer, capabilities: [pattern_detection], model: "func:tester", fallbacks: ["func:backup"], reliability_score: 0.9}
    tools: [test.count]
handoffs: {entry: counter, max_depth: 1, cycles: forbid}
`

// The same hole let a crew pass its token budget: its primary model
// timing out (billed, usage unreported) and its fallback answering, each
// step charged only the fallback's call. With a budget of 15 tokens and
// 6 a call, step 1 is billed 12 (the primary's call and the fallback's)
// and step 2 18 before its verdict: on main the validator saw 6 and 12
// and let both count; now step 2 is never allowed.
func TestACrewsTimedOutCallsCountAgainstItsBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel())
	f.withPolicy(tokenBudget)
	primary := &billingModel{name: "tester", slow: map[int]bool{-1: true}}
	backup := &billingModel{name: "backup", decisions: []string{step("test.count", 1), step("test.count", 2), step("test.count", 3)}}
	nc := connect(t, f.ns)
	s, err := New(Config{ValidatorAddr: f.valAddr, ExecutorAddr: f.execAddr, RunLease: time.Minute, DrainTimeout: 5 * time.Second, Instance: "orch-a",
		CallTimeout: time.Minute, ProposeTimeout: 300 * time.Millisecond},
		nc, testLogger(), WithProposer("tester", primary), WithProposer("backup", backup), WithDialOptions(grpcx.WithToken(f.creds.Token(t, grpcxtest.Service))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "count", Crew: []byte(timeoutCrew), CrewFile: "solo.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	events := f.waitEnd(id)
	pin, pout, timedOut := primary.billed()
	bin, bout, _ := backup.billed()
	if timedOut == 0 {
		t.Fatalf("the primary never timed out:\n%s", describe(events))
	}
	if n := f.count.count(2); n != 0 {
		t.Fatalf("step 2 counted %d time(s) with %d tokens billed before it (budget 15): the primary's timed-out calls were charged to no one:\n%s",
			n, pin+pout+bin+bout, describe(events))
	}
	end := events[len(events)-1]
	tokens, _ := end.Data["tokens"].(map[string]any)
	// The budget counts input and output together; an estimate of a
	// call that timed out before any reported call knows no output.
	if end.Data["status"] != "failed" || num(tokens, "input")+num(tokens, "output") < pin+bin+pout+bout {
		t.Fatalf("run ended %v; the endpoints billed %d in, %d out:\n%s", end.Data, pin+bin, pout+bout, describe(events))
	}
	for _, e := range only(events, lctl.TypeModelRouting) {
		if str(e.Data, "failure_code") == "" {
			continue
		}
		ft, _ := e.Data["failed_tokens"].(map[string]any)
		if ft == nil || ft["estimated"] != true || !strings.Contains(str(e.Data, "failed_model"), "tester") {
			t.Fatalf("a routing after a timed-out call does not charge an estimate of it: %v\n%s", e.Data, describe(events))
		}
	}
}
