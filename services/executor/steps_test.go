package executor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// counted is a test tool that counts its invocations.
type counted struct {
	*funcTool
	calls atomic.Int32
}

func countedTool(name string, idempotent bool, effect xctv1.Effect) *counted {
	c := &counted{}
	c.funcTool = testTool(name, 0, 0, func(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
		if e := Commit(ctx); e != nil {
			return nil, e
		}
		n := c.calls.Add(1)
		return map[string]any{"call": n, "step_id": StepID(ctx), "args": args}, nil
	})
	c.desc.Idempotent, c.desc.Effect = idempotent, effect
	return c
}

// execStep runs one step with the given id.
func execStep(tb testing.TB, s *Service, id, tool string, args map[string]any) *xctv1.ExecuteResponse {
	tb.Helper()
	st, err := structpb.NewStruct(args)
	must(tb, err)
	resp, err := s.execute(context.Background(), &xctv1.ExecuteRequest{RunId: "run", StepId: id, Tool: tool, Arguments: st})
	must(tb, err)
	return resp
}

// orphan records a step as an executor that died mid-step leaves it:
// pending, with the given deadline.
func orphan(tb testing.TB, store StepStore, id, tool string, args map[string]any, idempotent bool, deadline time.Time) {
	tb.Helper()
	_, err := store.Create(context.Background(), &xctv1.StepRecord{
		StepId: id, RunId: "run", Tool: tool, ArgumentsDigest: argumentsDigest(args),
		State: statePending, Attempt: 1, Idempotent: idempotent, Effect: xctv1.Effect_EFFECT_IRREVERSIBLE,
		Executor:  "dead-executor",
		StartedAt: timestamppb.New(deadline.Add(-time.Minute)), Deadline: timestamppb.New(deadline),
	})
	must(tb, err)
}

func TestStepRunsOnce(t *testing.T) {
	t.Parallel()
	tool := countedTool("test.count", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	s := newService(t, t.TempDir(), tool)
	args := map[string]any{"k": "v"}
	first := execStep(t, s, "step-1", "test.count", args)
	if first.GetReplayed() || first.GetAttempt() != 1 {
		t.Fatalf("first: replayed %v attempt %d", first.GetReplayed(), first.GetAttempt())
	}
	again := execStep(t, s, "step-1", "test.count", args)
	if !again.GetReplayed() || again.GetAttempt() != 1 || tool.calls.Load() != 1 {
		t.Fatalf("again: replayed %v attempt %d, calls %d", again.GetReplayed(), again.GetAttempt(), tool.calls.Load())
	}
	if a, b := resultAs[map[string]any](t, first.GetResponse()), resultAs[map[string]any](t, again.GetResponse()); a["call"] != b["call"] || a["step_id"] != "step-1" {
		t.Fatalf("replay %v differs from %v", b, a)
	}
	// A failed step is replayed too: no implicit retry.
	bad := testTool("test.fails", 0, 0, nil)
	fails := 0
	bad.fn = func(context.Context, map[string]any) (any, *xctv1.Error) {
		fails++
		return nil, wire.Errorf(wire.CodeNotFound, "no")
	}
	s2 := newService(t, t.TempDir(), bad)
	for range 3 {
		if r := execStep(t, s2, "f", "test.fails", nil); codeOf(r.GetResponse()) != string(wire.CodeNotFound) {
			t.Fatalf("response %v", r)
		}
	}
	if fails != 1 {
		t.Fatalf("a failed step ran %d times", fails)
	}
	// A step id names one call: another tool or other arguments are refused.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{{"test.count", map[string]any{"k": "other"}}, {"fs.list", nil}} {
		r := execStep(t, s, "step-1", c.tool, c.args)
		if codeOf(r.GetResponse()) != string(wire.CodeInvalidArgument) || tool.calls.Load() != 1 {
			t.Fatalf("reused id: %v, calls %d", r, tool.calls.Load())
		}
	}
}

func TestStepConcurrentCalls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	slow := testTool("test.slow", time.Minute, 0, func(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
		calls.Add(1)
		<-release
		return "done", nil
	})
	s := newService(t, t.TempDir(), slow)
	const n = 8
	var wg sync.WaitGroup
	results := make(chan *xctv1.ExecuteResponse, n)
	for range n {
		wg.Go(func() { results <- execStep(t, s, "same", "test.slow", nil) })
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if calls.Load() == 0 {
			return errors.New("not started")
		}
		return nil
	})
	close(release)
	wg.Wait()
	close(results)
	replayed := 0
	for r := range results {
		if got := resultAs[string](t, r.GetResponse()); got != "done" {
			t.Fatalf("result %q", got)
		}
		if r.GetReplayed() {
			replayed++
		}
	}
	if calls.Load() != 1 || replayed != n-1 {
		t.Fatalf("calls %d, replayed %d", calls.Load(), replayed)
	}
}

func TestStepInDoubt(t *testing.T) {
	t.Parallel()
	idem := countedTool("test.idem", true, xctv1.Effect_EFFECT_REVERSIBLE)
	once := countedTool("test.once", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	s := newService(t, t.TempDir(), idem, once)
	past := time.Now().Add(-time.Second)
	ctx := context.Background()

	t.Run("idempotent tool is re-run once", func(t *testing.T) {
		orphan(t, s.steps, "d-idem", "test.idem", nil, true, past)
		r := execStep(t, s, "d-idem", "test.idem", nil)
		if codeOf(r.GetResponse()) != "" || r.GetReplayed() || r.GetAttempt() != 2 || idem.calls.Load() != 1 {
			t.Fatalf("re-run: %v, calls %d", r, idem.calls.Load())
		}
		rec, doubt, err := s.Step(ctx, "d-idem")
		must(t, err)
		if doubt || rec.GetState() != stateSucceeded || len(rec.GetReruns()) != 1 || !strings.Contains(rec.GetReruns()[0].GetReason(), "idempotent") {
			t.Fatalf("record: %v", rec)
		}
		// Recorded now: asked again, it is replayed.
		if r := execStep(t, s, "d-idem", "test.idem", nil); !r.GetReplayed() || idem.calls.Load() != 1 {
			t.Fatalf("after the re-run: %v", r)
		}
	})

	t.Run("non-idempotent tool is IN_DOUBT until resolved", func(t *testing.T) {
		orphan(t, s.steps, "d-once", "test.once", nil, false, past)
		for range 2 {
			r := execStep(t, s, "d-once", "test.once", nil)
			e := r.GetResponse().GetError()
			if e.GetCode() != string(wire.CodeInDoubt) || e.GetRecoverable() || e.GetSuggestedAction() != "needs_human_decision" ||
				e.GetCategory() != "execution_error" || e.GetType() != "tool_failure" || e.GetDetails().AsMap()["step_id"] != "d-once" {
				t.Fatalf("in doubt: %v", e)
			}
		}
		if once.calls.Load() != 0 {
			t.Fatal("a step in doubt was run")
		}
		rec, doubt, err := s.Step(ctx, "d-once")
		must(t, err)
		if !doubt || rec.GetState() != stateInDoubt {
			t.Fatalf("record %v, in doubt %v", rec, doubt)
		}
		// A human checks the world and says it failed.
		rec, err = s.ResolveStep(ctx, "d-once", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_FAILED, ResolvedBy: "alice", Reason: "no charge in the ledger"})
		must(t, err)
		if rec.GetState() != stateFailed || rec.GetResolution().GetResolvedBy() != "alice" || rec.GetResolution().GetPreviousState() != stateInDoubt {
			t.Fatalf("resolved: %v", rec)
		}
		r := execStep(t, s, "d-once", "test.once", nil)
		if e := r.GetResponse().GetError(); !r.GetReplayed() || e.GetCode() != string(wire.CodeToolFailure) || !strings.Contains(e.GetMessage(), "alice") {
			t.Fatalf("after resolution: %v", r)
		}
		// The explicit retry path: a failed step released for one more attempt.
		_, err = s.ResolveStep(ctx, "d-once", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_RETRY, ResolvedBy: "alice", Reason: "try again"})
		must(t, err)
		r = execStep(t, s, "d-once", "test.once", nil)
		if codeOf(r.GetResponse()) != "" || r.GetAttempt() != 2 || once.calls.Load() != 1 {
			t.Fatalf("retry: %v, calls %d", r, once.calls.Load())
		}
		rec, _, err = s.Step(ctx, "d-once")
		must(t, err)
		if rec.GetState() != stateSucceeded || len(rec.GetReruns()) != 1 || rec.GetReruns()[0].GetReason() != "retry allowed by alice" {
			t.Fatalf("after retry: %v", rec)
		}
	})

	t.Run("resolved as succeeded", func(t *testing.T) {
		orphan(t, s.steps, "d-ok", "test.once", nil, false, past)
		result, _ := structpb.NewValue(map[string]any{"charge_id": "ch_1"})
		_, err := s.ResolveStep(ctx, "d-ok", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, ResolvedBy: "bob", Result: resultValue(result)})
		must(t, err)
		r := execStep(t, s, "d-ok", "test.once", nil)
		if got := resultAs[map[string]any](t, r.GetResponse()); got["charge_id"] != "ch_1" || !r.GetReplayed() {
			t.Fatalf("after resolution: %v", r)
		}
	})

	t.Run("resolution errors", func(t *testing.T) {
		ok := execStep(t, s, "done-step", "test.idem", nil)
		if codeOf(ok.GetResponse()) != "" {
			t.Fatal(ok)
		}
		orphan(t, s.steps, "live", "test.once", nil, false, time.Now().Add(time.Hour))
		for _, c := range []struct {
			name string
			id   string
			r    Resolution
			want error
		}{
			{"no author", "done-step", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_FAILED}, ErrBadResolution},
			{"no decision", "done-step", Resolution{ResolvedBy: "a"}, ErrBadResolution},
			{"bad step id", "a.b", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_FAILED, ResolvedBy: "a"}, ErrBadStepID},
			{"succeeded step", "done-step", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_FAILED, ResolvedBy: "a"}, ErrNotInDoubt},
			{"retry of a succeeded step", "done-step", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_RETRY, ResolvedBy: "a"}, ErrNotInDoubt},
			{"step still running", "live", Resolution{Decision: xctv1.StepDecision_STEP_DECISION_FAILED, ResolvedBy: "a"}, ErrNotInDoubt},
		} {
			t.Run(c.name, func(t *testing.T) {
				if _, err := s.ResolveStep(ctx, c.id, c.r); !errors.Is(err, c.want) {
					t.Fatalf("ResolveStep = %v, want %v", err, c.want)
				}
			})
		}
	})
}

// TestStepPendingElsewhere: a step another executor is running is waited
// for, then answered from its record; past its deadline it is in doubt.
func TestStepPendingElsewhere(t *testing.T) {
	t.Parallel()
	once := countedTool("test.once", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	s := newService(t, t.TempDir(), once)
	ctx := context.Background()

	orphan(t, s.steps, "busy", "test.once", nil, false, time.Now().Add(time.Hour))
	got := make(chan *xctv1.ExecuteResponse, 1)
	go func() { got <- execStep(t, s, "busy", "test.once", nil) }()
	// The other executor finishes the step.
	rec, rev, err := s.steps.Get(ctx, "busy")
	must(t, err)
	resp, _ := wire.SuccessResponse("theirs")
	rec.State, rec.Response = stateSucceeded, resp
	_, err = s.steps.Update(ctx, rec, rev)
	must(t, err)
	r := <-got
	if resultAs[string](t, r.GetResponse()) != "theirs" || !r.GetReplayed() || once.calls.Load() != 0 {
		t.Fatalf("waited for: %v", r)
	}

	// A deadline that passes while waiting makes the step in doubt.
	orphan(t, s.steps, "dies", "test.once", nil, false, time.Now().Add(50*time.Millisecond))
	if r := execStep(t, s, "dies", "test.once", nil); codeOf(r.GetResponse()) != string(wire.CodeInDoubt) {
		t.Fatalf("after the deadline: %v", r)
	}

	// A caller that gives up while waiting gets its context's error.
	orphan(t, s.steps, "slow", "test.once", nil, false, time.Now().Add(time.Hour))
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = s.execute(cctx, &xctv1.ExecuteRequest{StepId: "slow", Tool: "test.once"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("caller gone: %v", err)
	}
}

// TestStepReleasedWhenNothingActed: a caller that leaves before the tool
// committed leaves no record, so the step can run later.
func TestStepReleasedWhenNothingActed(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var calls atomic.Int32
	tool := testTool("test.wait", time.Hour, 0, func(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
		}
		if e := Commit(ctx); e != nil {
			return nil, e
		}
		return "acted", nil
	})
	s := newService(t, t.TempDir(), tool)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.execute(ctx, &xctv1.ExecuteRequest{StepId: "gone", Tool: "test.wait"})
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v", err)
	}
	if _, _, err := s.steps.Get(context.Background(), "gone"); !errors.Is(err, ErrStepNotFound) {
		t.Fatalf("record after release: %v", err)
	}
	if r := execStep(t, s, "gone", "test.wait", nil); resultAs[string](t, r.GetResponse()) != "acted" {
		t.Fatalf("later: %v", r)
	}
}

// TestStepCommittedOutlivesCaller: a caller that leaves after the tool
// committed its effect does not cut the tool short: the tool runs to its
// own outcome, which is recorded, and a later call with the same step id
// (a replica that took the run over) gets that outcome without acting
// again.
func TestStepCommittedOutlivesCaller(t *testing.T) {
	t.Parallel()
	committed, finish := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	tool := testTool("test.remote", time.Hour, 0, func(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
		if e := Commit(ctx); e != nil {
			return nil, e
		}
		calls.Add(1)
		close(committed)
		<-finish // closed after the caller cancelled
		if err := ctx.Err(); err != nil {
			return nil, wire.Errorf(wire.CodeTimeout, "cut short: %v", err)
		}
		return "done", nil
	})
	s := newService(t, t.TempDir(), tool)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.execute(ctx, &xctv1.ExecuteRequest{StepId: "kept", Tool: "test.remote"})
		errc <- err
	}()
	<-committed
	cancel() // the caller is gone; the tool must keep going
	close(finish)
	if err := <-errc; err != nil { // answered to nobody, but answered
		t.Fatalf("the committed call: %v", err)
	}
	r := execStep(t, s, "kept", "test.remote", nil)
	if got := resultAs[string](t, r.GetResponse()); got != "done" || calls.Load() != 1 || !r.GetReplayed() {
		t.Fatalf("after the caller left: result %q, calls %d, replayed %v", got, calls.Load(), r.GetReplayed())
	}
}

// TestStepLargeResponse: a response too large for a record goes to a blob
// and is replayed from it.
func TestStepLargeResponse(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", memMaxRecordBytes+10)
	tool := testTool("test.big", 0, 4<<20, func(context.Context, map[string]any) (any, *xctv1.Error) { return big, nil })
	s := newService(t, t.TempDir(), tool)
	execStep(t, s, "big", "test.big", nil)
	rec, _, err := s.steps.Get(context.Background(), "big")
	must(t, err)
	if rec.GetResponseBlob() == "" || rec.GetResponse() != nil {
		t.Fatalf("record holds the response inline: blob %q", rec.GetResponseBlob())
	}
	r := execStep(t, s, "big", "test.big", nil)
	if !r.GetReplayed() || resultAs[string](t, r.GetResponse()) != big {
		t.Fatal("replay from the blob failed")
	}
	full, _, err := s.Step(context.Background(), "big")
	must(t, err)
	if full.GetResponse() == nil {
		t.Fatal("Step did not load the response")
	}
}

// TestStepStoreJetStream runs the store contract against JetStream.
func TestStepStoreJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	kv, err := OpenStepStore(ctx, nc, StepStoreConfig{})
	must(t, err)
	if kv.(*kvStepStore).put == nil {
		t.Fatal("the XCT_STEPS bucket is written through the generic KV client, not kvPut")
	}
	// The same bucket written by the generic KV client (what kvPut
	// replaces, and what a bucket it cannot address uses).
	generic := *kv.(*kvStepStore)
	generic.put = nil
	stores := map[string]StepStore{"jetstream": kv, "jetstream-generic": &generic, "memory": newMemStepStore()}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			id := "s1-" + name
			rec := &xctv1.StepRecord{StepId: id, Tool: "t", State: statePending, Attempt: 1}
			rev, err := store.Create(ctx, rec)
			must(t, err)
			if _, err := store.Create(ctx, rec); !errors.Is(err, ErrStepExists) {
				t.Fatalf("second Create = %v", err)
			}
			got, grev, err := store.Get(ctx, id)
			must(t, err)
			if grev != rev || got.GetTool() != "t" {
				t.Fatalf("Get = %v @%d", got, grev)
			}
			changed := make(chan error, 1)
			go func() { changed <- store.WaitChange(ctx, id, rev) }()
			rec.State = stateSucceeded
			rev2, err := store.Update(ctx, rec, rev)
			must(t, err)
			must(t, <-changed)
			if _, err := store.Update(ctx, rec, rev); !errors.Is(err, ErrStepConflict) {
				t.Fatalf("stale Update = %v", err)
			}
			if err := store.Delete(ctx, id, rev); !errors.Is(err, ErrStepConflict) {
				t.Fatalf("stale Delete = %v", err)
			}
			must(t, store.Delete(ctx, id, rev2))
			if _, _, err := store.Get(ctx, id); !errors.Is(err, ErrStepNotFound) {
				t.Fatalf("Get after Delete = %v", err)
			}
			must(t, store.WaitChange(ctx, id, rev2)) // gone: returns at once
			rev3, err := store.Create(ctx, rec)
			if err != nil {
				t.Fatalf("Create after Delete = %v", err)
			}
			if _, err := store.Create(ctx, rec); !errors.Is(err, ErrStepExists) {
				t.Fatalf("Create over a record created after a Delete = %v", err)
			}
			if _, err := store.Update(ctx, rec, rev2); !errors.Is(err, ErrStepConflict) {
				t.Fatalf("Update at the revision before the Delete = %v", err)
			}
			if got, grev, err := store.Get(ctx, id); err != nil || grev != rev3 || got.GetState() != stateSucceeded {
				t.Fatalf("Get after the second Create = %v @%d, %v (want @%d)", got, grev, err, rev3)
			}
			must(t, store.PutBlob(ctx, id+".1.compensation", []byte("undo")))
			if b, err := store.Blob(ctx, id+".1.compensation"); err != nil || string(b) != "undo" {
				t.Fatalf("Blob = %q, %v", b, err)
			}
			if _, err := store.Blob(ctx, "none"); !errors.Is(err, ErrStepNotFound) {
				t.Fatalf("missing Blob = %v", err)
			}
			if store.MaxRecordBytes() < 64<<10 {
				t.Fatalf("MaxRecordBytes = %d", store.MaxRecordBytes())
			}
		})
	}
}

// TestStepsOnJetStream: two executors on the same NATS share the records,
// so a step is executed once whichever executor is asked, and the gRPC
// GetStep and ResolveStep work end to end.
func TestStepsOnJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	tool := countedTool("test.once", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	ws := t.TempDir()
	var execs []*Service
	for range 2 {
		s, err := New(Config{Workspace: ws}, nc, testLogger(t), tool)
		must(t, err)
		must(t, s.Start(ctx))
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		execs = append(execs, s)
	}
	// Concurrently, on both executors.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			r := execStep(t, execs[i%2], "shared", "test.once", map[string]any{"n": 1})
			if codeOf(r.GetResponse()) != "" {
				t.Errorf("response %v", r)
			}
		})
	}
	wg.Wait()
	if tool.calls.Load() != 1 {
		t.Fatalf("executed %d times", tool.calls.Load())
	}
	// The record is in XCT_STEPS.
	js, err := jetstream.New(nc)
	must(t, err)
	kv, err := js.KeyValue(ctx, StepsBucket)
	must(t, err)
	e, err := kv.Get(ctx, "shared")
	must(t, err)
	rec, err := decodeRecord(e.Value())
	must(t, err)
	if rec.GetState() != stateSucceeded || rec.GetTool() != "test.once" || rec.GetEffect() != xctv1.Effect_EFFECT_IRREVERSIBLE || rec.GetExecutor() == "" {
		t.Fatalf("stored record: %v", rec)
	}

	// fs.write stores its compensation before the effect.
	w := execStep(t, execs[0], "write-1", "fs.write", map[string]any{"path": "a.txt", "content": "one"})
	if codeOf(w.GetResponse()) != "" {
		t.Fatal(w)
	}
	if w := execStep(t, execs[1], "write-2", "fs.write", map[string]any{"path": "a.txt", "content": "two"}); codeOf(w.GetResponse()) != "" {
		t.Fatal(w)
	}
	rec, _, err = execs[1].Step(ctx, "write-2")
	must(t, err)
	if len(rec.GetCompensations()) != 1 {
		t.Fatalf("compensations: %v", rec.GetCompensations())
	}
	data, err := execs[0].steps.Blob(ctx, rec.GetCompensations()[0].GetBlob())
	must(t, err)
	var comp Compensation
	must(t, json.Unmarshal(data, &comp))
	if comp.StepID != "write-2" || comp.Attempt != 1 || len(comp.Undo) != 1 || string(comp.Undo[0].Entry.Content) != "one" {
		t.Fatalf("compensation: %+v", comp)
	}
	if checksum(data) != rec.GetCompensations()[0].GetChecksum() {
		t.Fatal("compensation checksum")
	}

	// Through gRPC: an executor process that died mid-step left a record.
	b := newBinder(t)
	b.trust(t, execs[0])
	orphanReq := b.requestAt(t, "run", 1, "test.once", map[string]any{}, false)
	orphan(t, execs[0].steps, orphanReq.GetStepId(), "test.once", map[string]any{}, false, time.Now().Add(-time.Second))
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("executor", testLogger(t), creds.ServerOptions()...)
	execs[0].Register(srv.GRPC)
	must(t, srv.Listen("127.0.0.1:0"))
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Stop(context.Background()) })
	// The orchestrator executes; carol, an operator, resolves.
	client := xctv1.NewExecutorServiceClient(creds.Dial(t, srv.Addr(), grpcxtest.Service))
	carol := xctv1.NewExecutorServiceClient(creds.Dial(t, srv.Addr(), "carol"))
	got, err := client.GetStep(ctx, &xctv1.GetStepRequest{StepId: orphanReq.GetStepId()})
	must(t, err)
	if !got.GetInDoubt() {
		t.Fatalf("GetStep: %v", got)
	}
	resp, err := client.Execute(ctx, orphanReq)
	must(t, err)
	if codeOf(resp.GetResponse()) != string(wire.CodeInDoubt) {
		t.Fatalf("Execute: %v", resp)
	}
	// Only an operator resolves, and only in its own name.
	if _, err := client.ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: orphanReq.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, Reason: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ResolveStep as a service: %v", err)
	}
	if _, err := carol.ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: orphanReq.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, ResolvedBy: "mallory"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ResolveStep in another's name: %v", err)
	}
	// A decision names the doubt on the run's chain it settles, and the
	// chain must show it (written here as the orchestrator would).
	resolve := &xctv1.ResolveStepRequest{StepId: orphanReq.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, Reason: "seen in the ledger"}
	if _, err := carol.ResolveStep(ctx, resolve); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ResolveStep naming no doubt: %v", err)
	}
	resolve.InDoubtSeq = 1
	if _, err := carol.ResolveStep(ctx, resolve); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ResolveStep of a step its chain does not show in doubt: %v", err)
	}
	resolve.InDoubtSeq = chainInDoubt(ctx, t, nc, "run", 1, orphanReq.GetStepId(), "test.once")
	res, err := carol.ResolveStep(ctx, resolve)
	must(t, err)
	if res.GetStep().GetState() != stateSucceeded || res.GetStep().GetResolution().GetResolvedBy() != "carol" || res.GetStep().GetResolution().GetInDoubtSeq() != resolve.InDoubtSeq {
		t.Fatalf("ResolveStep: %v", res)
	}
	for _, c := range []struct {
		req  *xctv1.ResolveStepRequest
		code codes.Code
	}{
		{&xctv1.ResolveStepRequest{StepId: orphanReq.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_FAILED, ResolvedBy: "carol", InDoubtSeq: resolve.InDoubtSeq}, codes.FailedPrecondition},
		{&xctv1.ResolveStepRequest{StepId: orphanReq.GetStepId()}, codes.InvalidArgument}, // no decision
	} {
		if _, err := carol.ResolveStep(ctx, c.req); status.Code(err) != c.code {
			t.Errorf("ResolveStep(%v) = %v, want %v", c.req, err, c.code)
		}
	}
	// The same decision again is no error: the record already says so.
	if res, err := carol.ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: orphanReq.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, InDoubtSeq: resolve.InDoubtSeq}); err != nil || res.GetStep().GetState() != stateSucceeded {
		t.Errorf("ResolveStep(orphan, succeeded) again = %v, %v", res, err)
	}
	if _, err := client.GetStep(ctx, &xctv1.GetStepRequest{StepId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetStep(nope) = %v", err)
	}
	// A step without a record takes the decision as its record, once its
	// run (named) shows it in doubt.
	nope := &xctv1.ResolveStepRequest{StepId: "nope", Decision: xctv1.StepDecision_STEP_DECISION_FAILED, Reason: "never ran", InDoubtSeq: 1}
	if _, err := carol.ResolveStep(ctx, nope); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ResolveStep(nope) naming no run = %v", err)
	}
	nope.RunId = "run-nope"
	if _, err := carol.ResolveStep(ctx, nope); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ResolveStep(nope) of a run with no chain = %v", err)
	}
	nope.InDoubtSeq = chainInDoubt(ctx, t, nc, "run-nope", 1, "nope", "test.once")
	res, err = carol.ResolveStep(ctx, nope)
	if err != nil || res.GetStep().GetState() != stateFailed || res.GetStep().GetResolution().GetPreviousState() != xctv1.StepRecordState_STEP_RECORD_STATE_UNSPECIFIED {
		t.Errorf("ResolveStep(nope) = %v, %v", res, err)
	}
	if got, err := client.GetStep(ctx, &xctv1.GetStepRequest{StepId: "nope"}); err != nil || got.GetStep().GetState() != stateFailed {
		t.Errorf("GetStep(nope) after resolving = %v, %v", got, err)
	}
}

// TestStepStoreUnavailable: without a usable store nothing is executed.
func TestStepStoreUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	tool := countedTool("test.once", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	s, err := New(Config{Workspace: t.TempDir()}, nc, testLogger(t), tool)
	must(t, err)
	defer func() { _ = s.Stop(ctx) }()
	// Not started: no store yet.
	_, err = s.execute(ctx, &xctv1.ExecuteRequest{StepId: "x", Tool: "test.once"})
	if status.Code(err) != codes.Unavailable || tool.calls.Load() != 0 {
		t.Fatalf("before Start: %v", err)
	}
	must(t, s.Start(ctx))
	nc.Close()
	_, err = s.execute(ctx, &xctv1.ExecuteRequest{StepId: "y", Tool: "test.once"})
	if status.Code(err) != codes.Unavailable || tool.calls.Load() != 0 {
		t.Fatalf("NATS closed: %v", err)
	}
}

// TestStepRecordsRepublishedIntoAreRefused: the step records are the
// executor's alone to write (NATS permissions), but a stream's republish
// is the server's own publish, and a service may make its own streams
// with the settings it likes: one republishing into $KV.XCT_STEPS could
// plant a "succeeded" record for a step id not yet run (step ids are
// derived from the run, step, tool and arguments), and the executor would
// replay that made-up outcome instead of running the step. A store with
// such a stream beside it does not open, and a record read while one
// exists is refused, not trusted.
func TestStepRecordsRepublishedIntoAreRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	js, err := jetstream.New(nc)
	must(t, err)
	store, err := OpenStepStore(ctx, nc, StepStoreConfig{})
	must(t, err)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ELSEWHERE", Subjects: []string{"elsewhere.>"},
		RePublish: &jetstream.RePublish{Source: "elsewhere.>", Destination: "$KV." + StepsBucket + ".>"}}); err != nil {
		t.Fatal(err)
	}
	forged, err := encodeRecord(&xctv1.StepRecord{StepId: "planted", Tool: "t", State: stateSucceeded, Attempt: 1}, false)
	must(t, err)
	if _, err := js.Publish(ctx, "elsewhere.planted", forged); err != nil {
		t.Fatal(err)
	}
	// The planted record is in the bucket (the server republished it)...
	testutil.Eventually(t, time.Minute, func() error {
		_, err := store.(*kvStepStore).kv.Get(ctx, "planted")
		return err
	})
	// ...but the store does not hand it out as a step's record.
	if rec, _, err := store.Get(ctx, "planted"); !errors.Is(err, jsguard.ErrRepublished) {
		t.Fatalf("Get of a planted record = %v, %v; want %v", rec, err, jsguard.ErrRepublished)
	}
	if _, err := OpenStepStore(ctx, nc, StepStoreConfig{}); !errors.Is(err, jsguard.ErrRepublished) {
		t.Fatalf("OpenStepStore beside a stream republishing into the records = %v; want %v", err, jsguard.ErrRepublished)
	}
}

// chainInDoubt writes run runID's chain as the orchestrator leaves it
// when step (stepID, tool) is in doubt, and returns its step_in_doubt's
// seq.
func chainInDoubt(ctx context.Context, tb testing.TB, nc *nats.Conn, runID string, step int, stepID, tool string) uint64 {
	tb.Helper()
	log, err := eventlog.Open(ctx, nc)
	must(tb, err)
	w, err := log.NewChainWriter(runID)
	must(tb, err)
	var last lctl.Event
	for _, ev := range []xctevent.Event{
		xctevent.StepStart{Step: step, StepID: stepID, Tool: tool, Arguments: map[string]any{}, Intent: "test"},
		xctevent.Verdict{Step: step, StepID: stepID, Tool: tool, Decision: xctevent.DecisionAllow},
		xctevent.StepInDoubt{Step: step, StepID: stepID, Tool: tool, Reason: "its executor died mid-call"},
	} {
		last, err = w.Append(ctx, ev.Type(), "orchestrator", ev.Data())
		must(tb, err)
	}
	return last.Seq
}
