package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// tokenBudget allows every tool and ends a run past 15 tokens: two of the
// gated model's calls (5 in, 1 out each) fit, a third does not.
const tokenBudget = "budgets: {max_tokens: 15}\nrules:\n  - {id: all, effect: allow, effects: [read, reversible, irreversible]}\n"

// Session 18 (faults18), issue 12, faults17's leftover: a model call
// whose proposal never reached the chain (its owner lost the run while
// it waited for the answer) was paid and charged to no budget. Here the
// owner asks the model for step 2 and is lost mid-call (cut off from
// NATS, or stopped with a drain too short for the call); the next owner
// asks again. Three calls were made (18 tokens > 15), but the chain held
// two: on main the validator allowed step 2 at 12 tokens and the count
// ran. Now the takeover counts the lost call (run_resumed
// unrecorded_calls: 1), the next call recorded charges it at what that
// call used (the same request), and the budget ends the run before step
// 2 acts.
func TestAModelCallLostWithItsOwnerIsCharged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, f *fixture, model *gatedModel) (id string)
	}{
		{"owner cut off mid-call", func(t *testing.T, f *fixture, model *gatedModel) string {
			a, anc := f.orchestrator("orch-a", time.Second)
			_, _ = f.orchestrator("orch-b", time.Second)
			id := f.start(a)
			if turn := <-model.asked; turn != 1 {
				t.Fatalf("asked for turn %d", turn)
			}
			anc.Close() // A is gone for the cluster while it waits for its model
			f.waitFor(id, "run_resumed", func(e lctl.Event) bool { return e.Type == TypeRunResumed })
			return id
		}},
		{"stop cut the call short", func(t *testing.T, f *fixture, model *gatedModel) string {
			a, _ := f.launch(Config{RunLease: time.Minute, DrainTimeout: 500 * time.Millisecond, Instance: "orch-a", CallTimeout: time.Minute}, model)
			id := f.start(a)
			if turn := <-model.asked; turn != 1 {
				t.Fatalf("asked for turn %d", turn)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := a.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			events := f.waitFor(id, "run_released", func(e lctl.Event) bool { return e.Type == TypeRunReleased })
			if cut, _ := events[len(events)-1].Data["call_cut"].(bool); !cut {
				t.Fatalf("the stop cut a model call short, and run_released does not say so:\n%s", describe(events))
			}
			_, _ = f.orchestrator("orch-b", time.Minute)
			return id
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			model := newGatedModel(step("test.count", 1), step("test.count", 2), step("test.count", 3))
			f := newFixture(t, model)
			f.withPolicy(tokenBudget)
			gate := model.gate(1) // A's call for step 2 waits
			defer close(gate)
			id := tc.lose(t, f, model)
			events := f.waitEnd(id)
			model.mu.Lock()
			asked := model.calls[1]
			model.mu.Unlock()
			if asked != 2 {
				t.Fatalf("the model was asked %d times for step 2, want 2 (the lost owner's, the next owner's):\n%s", asked, describe(events))
			}
			if n := f.count.count(2); n != 0 {
				t.Fatalf("step 2 counted %d time(s) with 18 tokens spent of a budget of 15 (the lost call charged to no one):\n%s", n, describe(events))
			}
			resumed := only(events, TypeRunResumed)
			if len(resumed) != 1 || num(resumed[0].Data, "unrecorded_calls") != 1 {
				t.Fatalf("run_resumed does not count the lost call:\n%s", describe(events))
			}
			var start2 *lctl.Event
			for i, e := range events {
				if e.Type == lctl.TypeStepStart && num(e.Data, "step") == 2 {
					start2 = &events[i]
				}
			}
			u, _ := start2.Data["unrecorded"].(map[string]any)
			if start2 == nil || num(u, "calls") != 1 || num(u["tokens"].(map[string]any), "input") != 5 || num(u["tokens"].(map[string]any), "output") != 1 {
				t.Fatalf("step 2's step_start does not charge the lost call:\n%s", describe(events))
			}
			end := events[len(events)-1]
			tokens, _ := end.Data["tokens"].(map[string]any)
			if end.Data["status"] != "failed" || !strings.Contains(str(end.Data, "message"), "token budget") || num(tokens, "input") != 15 || num(tokens, "output") != 3 {
				t.Fatalf("run ended %v; want failed on the token budget with 15 in, 3 out (three calls):\n%s", end.Data, describe(events))
			}
			// What a later owner folds from the chain agrees.
			if rs := foldResume(id, events[:len(events)-1]); rs.tokensIn != 15 || rs.tokensOut != 3 {
				t.Fatalf("the chain without its run_finished folds %d in, %d out; want 15, 3", rs.tokensIn, rs.tokensOut)
			}
		})
	}
}

// unrecordedCalls counts, at a takeover, the model calls of earlier
// owners the chain holds no proposal of, for every point a takeover can
// meet.
func TestUnrecordedCallsAtATakeover(t *testing.T) {
	t.Parallel()
	ev := func(typ string, d map[string]any) lctl.Event {
		return lctl.Event{Type: typ, Agent: "orchestrator", Data: d}
	}
	start := ev(lctl.TypeRunStarted, map[string]any{"goal": "g"})
	proposal := ev(lctl.TypeStepStart, map[string]any{"step": float64(1), "step_id": "s1", "tool": "test.count", "arguments": map[string]any{}})
	allow := ev(lctl.TypeVerdict, map[string]any{"step": float64(1), "decision": "allow"})
	end := ev(lctl.TypeStepEnd, map[string]any{"step": float64(1), "outcome": "success"})
	resumed := func(n int) lctl.Event {
		d := map[string]any{"instance": "b", "step": float64(2)}
		if n > 0 {
			d["unrecorded_calls"] = float64(n)
		}
		return ev(TypeRunResumed, d)
	}
	released := ev(TypeRunReleased, map[string]any{"instance": "a", "step": float64(2)})
	cut := ev(TypeRunReleased, map[string]any{"instance": "a", "step": float64(2), "call_cut": true})
	checkpoint := ev(lctl.TypeSignedCheckpoint, map[string]any{"seq": float64(5)})
	for _, tc := range []struct {
		name     string
		events   []lctl.Event
		maxSteps int
		want     int
	}{
		{"lost before step 1's proposal", []lctl.Event{start}, 10, 1},
		{"lost at a step boundary", []lctl.Event{start, proposal, allow, end}, 10, 1},
		{"lost inside a step", []lctl.Event{start, proposal, allow}, 10, 0},
		{"handed over at a boundary", []lctl.Event{start, proposal, allow, end, released, checkpoint}, 10, 0},
		{"handed over, its call cut short", []lctl.Event{start, proposal, allow, end, cut, checkpoint}, 10, 1},
		{"the next owner lost too, before its call was recorded", []lctl.Event{start, proposal, allow, end, resumed(1)}, 10, 2},
		{"an earlier loss charged by a recorded call", []lctl.Event{start, resumed(1), proposal, allow, end}, 10, 1},
		{"an earlier loss carried through a hand-over", []lctl.Event{start, proposal, allow, end, resumed(1), released}, 10, 1},
		{"no call next: the step budget is used up", []lctl.Event{start, proposal, allow, end}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := foldResume("run-u", tc.events)
			if got := unrecordedCalls(tc.events, rs, tc.maxSteps); got != tc.want {
				t.Fatalf("%d unrecorded calls, want %d", got, tc.want)
			}
		})
	}
}
