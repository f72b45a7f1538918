package orchestrator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

// dearFailure is a crew's primary model whose first call fails after the
// endpoint read a long prompt (5000 input tokens, RATE_LIMITED), and
// whose later calls end the run (5 in, 1 out).
type dearFailure struct{ calls atomic.Int32 }

func (m *dearFailure) Name() string { return "tester" }
func (m *dearFailure) Close() error { return nil }
func (m *dearFailure) Propose(context.Context, *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if m.calls.Add(1) == 1 {
		return nil, &ModelError{Model: "tester", Code: wire.CodeRateLimited, Status: 429, Msg: "slow down", Usage: &xctv1.Usage{InputTokens: 5000}}
	}
	return &xctv1.ProposeResponse{Output: `{"done": true, "message": "counted"}`, Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

// stuckBackup is the fallback: its first call waits until the test ends
// (its owner is lost meanwhile), its later calls propose test.count 1.
type stuckBackup struct {
	calls  atomic.Int32
	asked  chan struct{}
	unstop chan struct{}
}

func (m *stuckBackup) Name() string { return "backup" }
func (m *stuckBackup) Close() error { return nil }
func (m *stuckBackup) Propose(ctx context.Context, _ *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if m.calls.Add(1) == 1 {
		close(m.asked)
		select {
		case <-m.unstop:
		case <-ctx.Done():
		}
		return nil, &ModelError{Model: "backup", Code: wire.CodeTimeout, Msg: "no answer"}
	}
	return &xctv1.ProposeResponse{Output: step("test.count", 1), Model: "backup", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

const fallbackCrew = `crew: solo
agents:
  - name: counter
    profile: {type: analyzer, capabilities: [pattern_detection], model: "func:tester", fallbacks: ["func:backup"], reliability_score: 0.9}
    tools: [test.count]
handoffs: {entry: counter, max_depth: 1, cycles: forbid}
`

// Session 18 (attack18b), tokens15's leftover: a crew's failed call is
// counted with the call that answers the step (its step_start's tokens),
// so an owner lost between a failed call and the fallback's answer left
// the failed call's tokens nowhere on the chain but in its memory. Here
// the primary model fails after reading 5000 tokens, the crew routes to
// its fallback, and the owner is cut off from NATS while the fallback's
// call is in flight; the next owner takes over. On main its run_finished
// counted 15 input tokens (the lost fallback call charged at 5, the
// fallback's answer, the primary's final answer), not 5015: a model that
// fails dear calls on purpose spent off the budget once per takeover.
// Now the failed call's tokens are on the model_routing that follows it,
// and the fold counts them.
func TestATakeoverBetweenACrewsFallbacksKeepsTheFailedCallsTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel())
	backup := &stuckBackup{asked: make(chan struct{}), unstop: make(chan struct{})}
	defer close(backup.unstop)
	primary := &dearFailure{}
	launch := func(name string) (*Service, func()) {
		nc := connect(t, f.ns)
		s, err := New(Config{ValidatorAddr: f.valAddr, ExecutorAddr: f.execAddr, RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: name, CallTimeout: time.Minute},
			nc, testLogger().With("instance", name), WithProposer("tester", primary), WithProposer("backup", backup),
			WithDialOptions(grpcx.WithToken(f.creds.Token(t, grpcxtest.Service))))
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
		return s, nc.Close
	}
	a, cutA := launch("orch-a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "count", Crew: []byte(fallbackCrew), CrewFile: "solo.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	select {
	case <-backup.asked:
	case <-ctx.Done():
		t.Fatal("the fallback was never asked")
	}
	cutA() // A is gone for the cluster while it waits for the fallback
	_, _ = launch("orch-b")
	events := f.waitEnd(id)
	end := events[len(events)-1]
	tokens, _ := end.Data["tokens"].(map[string]any)
	if end.Data["status"] != "done" || num(tokens, "input") != 5015 || num(tokens, "output") != 3 {
		t.Fatalf("run ended %v; want done with 5015 in, 3 out (the failed call's 5000, the lost fallback call charged at 5, two answers):\n%s", end.Data, describe(events))
	}
	// What the next owner folds from the chain as A left it (up to the
	// fallback's routing) holds the failed call.
	routed := 0
	for i, e := range events {
		if e.Type == lctl.TypeModelRouting {
			routed = i + 1
		}
	}
	if rs := foldResume(id, events[:routed]); routed == 0 || rs.tokensIn != 5000 || rs.tokensOut != 0 {
		t.Fatalf("the chain up to the fallback's model_routing folds %d in, %d out; want 5000, 0:\n%s", rs.tokensIn, rs.tokensOut, describe(events))
	}
}
