package orchestrator

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
)

// firstTool is a countTool that records its compensation before its
// effect (executor.CompensatedFirst, like fs.delete and fs.move). Its
// gate, for the first call of an n, is before that record (after: false)
// or after it (after: true); acted counts the effects, made only once
// the compensation is recorded.
type firstTool struct {
	*countTool
	after bool
	acted atomic.Int32
}

func (*firstTool) CompensatesFirst() {}

func (c *firstTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	commit := func() *xctv1.Error {
		return executor.CommitCompensated(ctx, &executor.Compensation{Tool: c.name})
	}
	if c.after {
		if e := commit(); e != nil {
			return nil, e
		}
	}
	res, e := c.countTool.Invoke(ctx, args) // counts the call; waits at its gate
	if e != nil {
		return nil, e
	}
	if !c.after {
		if e := commit(); e != nil {
			return nil, e
		}
	}
	c.acted.Add(1)
	return res, nil
}

// newFirstFixture is newOutcomeFixture with tool: the executor's NATS
// goes through the fixture's proxy, its gRPC server can be killed.
func newFirstFixture(t *testing.T, tool *firstTool) *outcomeFixture {
	t.Helper()
	f := &outcomeFixture{fixture: newFixture(t, newGatedModel()), charge: tool.countTool}
	f.proxy = testutil.NewProxy(t, strings.TrimPrefix(f.ns.ClientURL(), "nats://"))
	f.es = &execServer{t: t, ex: f.executorWith(t, "nats://"+f.proxy.Addr(), tool), cr: f.creds}
	f.es.start()
	t.Cleanup(func() { f.es.kill() })
	f.execAddr = f.es.addr
	return f
}

// executorWith is executorOn for any tool.
func (f *outcomeFixture) executorWith(t *testing.T, url string, tool executor.Tool) *executor.Service {
	t.Helper()
	nc, err := nats.Connect(url, testutil.Admin(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ex, err := executor.New(executor.Config{Workspace: t.TempDir(), StepGrace: 200 * time.Millisecond, RecordTimeout: time.Second, Verifier: f.verifier}, nc, testLogger(), tool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = ex.Stop(ctx)
	})
	f.validatorKnows(tool)
	return ex
}

// Session 17 (faults17), issue 12, chaos15's and chaos16's leftover: a
// step whose executor died after its claim (the pending record) and
// before the tool acted waited in doubt for a human, although nothing
// acted. For a tool that records its compensation before any effect
// (fs.delete, fs.move: executor.CompensatedFirst), a first attempt whose
// record holds no compensation past its deadline provably did not act:
// the executor the orchestrator asks records it as not executed (a
// conditional update of the revision the compensation would replace),
// the model is told so, and its next proposal acts once. A step whose
// compensation was recorded before its executor died stays in doubt.
func TestExecutorDiedBeforeTheToolActedIsNotExecuted(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{false, true} {
		name := "died-before-the-compensation"
		if after {
			name = "died-after-the-compensation"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tool := &firstTool{countTool: newCountTool("test.charge", xctv1.Effect_EFFECT_REVERSIBLE), after: after}
			tool.timeout = 300 * time.Millisecond
			f := newFirstFixture(t, tool)
			gate := tool.gate(1)
			defer close(gate)
			a, _ := f.orch("orch-a", retryModel{newGatedModel()})
			id := f.startWith(a)
			entered(t, tool.entered) // claimed, and the tool waits (before or after its compensation's record)
			f.proxy.Cut()            // the executor dies
			f.es.kill()
			f.es.ex = f.executorWith(t, f.ns.ClientURL(), tool) // another comes on the same address and records
			f.es.start()

			if after {
				// It may have acted: in doubt, for a human.
				events := f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
				stepID := str(only(events, TypeStepInDoubt)[0].Data, "step_id")
				waitRecord(t, f.es.ex, stepID, 1)
				if n := len(only(events, lctl.TypeError)); n != 0 {
					t.Fatalf("a step whose compensation was recorded got an outcome without a human:\n%s", describe(events))
				}
				return
			}
			events := f.waitFor(id, "step 1's outcome", func(e lctl.Event) bool {
				return e.Type == lctl.TypeError && num(e.Data, "step") == 1
			})
			e := only(events, lctl.TypeError)[0]
			details, _ := e.Data["details"].(map[string]any)
			if notExec, _ := details["not_executed"].(bool); !notExec {
				t.Fatalf("step 1 ended %v; want not executed:\n%s", e.Data, describe(events))
			}
			events = f.waitEnd(id)
			if last := events[len(events)-1]; last.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
			}
			if n := tool.acted.Load(); n != 1 {
				t.Fatalf("the charge acted %d time(s); want once (step 2):\n%s", n, describe(events))
			}
			rec, doubt, err := f.es.ex.Step(context.Background(), str(e.Data, "step_id"))
			if err != nil || doubt || !executor.NotExecuted(rec) {
				t.Fatalf("step 1's record %v (in doubt %v), %v; want not executed", rec, doubt, err)
			}
		})
	}
}
