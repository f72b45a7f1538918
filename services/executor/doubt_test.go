package executor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Session 16 (ops16), issue 12: a decision about a step in doubt reads the
// run's chain from the step_in_doubt it names, not whole (a long run's
// chain was read one get per event), and decides as the whole chain's
// fold does: the same doubt found, the same refusals, at each point of a
// step's life after its doubt.
func TestChainDoubtFromTheNamedDoubtAgreesWithTheWholeChain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	log, err := eventlog.Open(ctx, nc)
	must(t, err)
	w, err := log.NewChainWriter("run-long")
	must(t, err)
	other, err := log.NewChainWriter("run-other")
	must(t, err)
	appendAll := func(evs ...xctevent.Event) uint64 {
		t.Helper()
		var seq uint64
		for _, ev := range evs {
			e, err := w.Append(ctx, ev.Type(), "orchestrator", ev.Data())
			must(t, err)
			seq = e.Seq
			_, err = other.Append(ctx, ev.Type(), "orchestrator", ev.Data())
			must(t, err)
		}
		return seq
	}
	// Six settled steps, then step 7 in doubt.
	for n := 1; n <= 6; n++ {
		id := "s-done-" + string(rune('0'+n))
		appendAll(xctevent.StepStart{Step: n, StepID: id, Tool: "fs.read", Arguments: map[string]any{}, Intent: "read"},
			xctevent.Verdict{Step: n, StepID: id, Tool: "fs.read", Decision: xctevent.DecisionAllow},
			xctevent.ToolCall{Step: n, StepID: id, Tool: "fs.read", Status: "success"},
			xctevent.StepEnd{Step: n, StepID: id, Outcome: xctevent.OutcomeSuccess})
	}
	const step = "s-seven"
	appendAll(xctevent.StepStart{Step: 7, StepID: step, Tool: "pay", Arguments: map[string]any{}, Intent: "pay"},
		xctevent.Verdict{Step: 7, StepID: step, Tool: "pay", Decision: xctevent.DecisionAllow})
	doubt := appendAll(xctevent.StepInDoubt{Step: 7, StepID: step, Tool: "pay", Reason: "its executor died mid-call"})

	// check asks both ways and wants the same answer: the doubt's seq,
	// or a refusal (ErrNotInDoubt) mentioning what.
	check := func(named, want uint64, refusal string) {
		t.Helper()
		for _, from := range []uint64{named, 0} {
			got, err := chainDoubt(ctx, log, "run-long", step, from)
			switch {
			case refusal == "" && (err != nil || got != want):
				t.Errorf("named %d, read from %d: %d, %v; want %d", named, from, got, err, want)
			case refusal != "" && (!errors.Is(err, ErrNotInDoubt) || !strings.Contains(err.Error(), refusal)):
				t.Errorf("named %d, read from %d: %d, %v; want ErrNotInDoubt mentioning %q", named, from, got, err, refusal)
			}
		}
	}
	check(doubt, doubt, "")
	// An event that is not the step's doubt, or none at all: the whole
	// chain is read, which says where the step's doubt is (the caller
	// refuses a decision that names another).
	for _, named := range []uint64{doubt - 1, 3, doubt + 1} {
		if got, err := chainDoubt(ctx, log, "run-long", step, named); err != nil || got != doubt {
			t.Errorf("named %d (not the step's step_in_doubt): %d, %v; want %d", named, got, err, doubt)
		}
	}
	if _, err := chainDoubt(ctx, log, "run-none", step, 4); !errors.Is(err, ErrNotInDoubt) || !strings.Contains(err.Error(), "no run") {
		t.Errorf("a run with no chain: %v", err)
	}
	// Another attempt's verdict: no longer in doubt.
	appendAll(xctevent.Verdict{Step: 7, StepID: step, Tool: "pay", Decision: xctevent.DecisionAllow})
	check(doubt, 0, "allowed, executing")
	// That attempt in doubt too: the step's doubt now is the later one,
	// whichever doubt the decision names.
	later := appendAll(xctevent.StepInDoubt{Step: 7, StepID: step, Tool: "pay", Reason: "again"})
	check(doubt, later, "")
	check(later, later, "")
	// A step of another number after it does not settle it.
	appendAll(xctevent.StepStart{Step: 8, StepID: "s-eight", Tool: "fs.read", Arguments: map[string]any{}, Intent: "read"})
	check(later, later, "")
	// Its outcome recorded: settled.
	appendAll(xctevent.ToolCall{Step: 7, StepID: step, Tool: "pay", Status: "success"})
	check(later, 0, "its outcome recorded")
	appendAll(xctevent.StepEnd{Step: 7, StepID: step, Outcome: xctevent.OutcomeSuccess})
	check(later, 0, "ended success")
}

// With NATS gone the chain cannot be read, and no decision is taken
// (ErrChainUnreadable: UNAVAILABLE over gRPC), whichever event it names.
func TestChainDoubtWithoutNATSIsUnreadable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	log, err := eventlog.Open(ctx, nc)
	must(t, err)
	nc.Close()
	for _, named := range []uint64{0, 3} {
		if _, err := chainDoubt(ctx, log, "run-1", "s-1", named); !errors.Is(err, ErrChainUnreadable) {
			t.Errorf("named %d without NATS: %v, want ErrChainUnreadable", named, err)
		}
	}
}
