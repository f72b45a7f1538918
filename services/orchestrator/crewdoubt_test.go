package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
	"github.com/xct-dev/xct/services/executor"
)

// Issue 12 and 16, session 14 (rollback14): a crew's step in doubt is
// settled by a human as a single agent's is (xct resolve: the step's
// record at the executor), and the run goes on with the crew's state as
// its chain holds it: the facts, the handoffs, the agent in control.

// chargeCrew is a crew whose agents may charge (test.charge: not
// idempotent, so a charge in doubt waits for a human).
const chargeCrew = `crew: pair
agents:
  - name: finder
    profile: {type: analyzer, capabilities: [pattern_detection], model: "func:tester", reliability_score: 0.9}
    tools: [test.charge, facts.add, xct.handoff]
    hands_to: [checker]
  - name: checker
    profile: {type: reviewer, capabilities: [assessment], model: "func:tester", reliability_score: 0.9}
    tools: [test.charge, facts.update]
handoffs: {entry: finder, max_depth: 2, cycles: forbid}
# The checker ends the work (session 21: only the entry agent by default).
authority: {end_run: [finder, checker]}
# The test's model answers by the run's turn (len(history)): it is shown
# the run's history, every member's turns.
history: shared
`

// The crew's turns after the step in doubt: the finder hands F1 to the
// checker, which assesses it.
var (
	addF1       = `{"next_step": {"tool": "facts.add", "arguments": {"id": "F1", "text": "a finding", "confidence": 0.9, "source": "scan"}, "goal": "record it"}}`
	handToCheck = `{"next_step": {"tool": "xct.handoff", "arguments": {"to": "checker", "summary": "check F1"}, "goal": "hand over"}}`
	assessF1    = `{"next_step": {"tool": "facts.update", "arguments": {"id": "F1", "confidence": 0.8, "reason": "checked"}, "goal": "assess F1"}}`
)

// crewGoesOn checks a crew run that ended after a step in doubt was
// resolved: done, verifying, the handoff to the checker and the checker's
// assessment of F1 carried out (the checker was in control, F1 in the
// store), each once, and the facts of the last checkpoint those of the
// chain (want).
func crewGoesOn(t *testing.T, events []lctl.Event, want ...string) {
	t.Helper()
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	if last := events[len(events)-1]; last.Type != lctl.TypeRunFinished || last.Data["status"] != "done" {
		t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	calls := map[string][]lctl.Event{}
	for _, e := range only(events, lctl.TypeToolCall) {
		calls[str(e.Data, "tool")] = append(calls[str(e.Data, "tool")], e)
	}
	if h := calls["xct.handoff"]; len(h) != 1 || h[0].Agent != "finder" || fmt.Sprint(h[0].Data["output"].(map[string]any)["handed_to"]) != "checker" {
		t.Fatalf("the handoff to the checker was not carried out once after the resolution:\n%s", describe(events))
	}
	if u := calls["facts.update"]; len(u) != 1 || u[0].Agent != "checker" {
		t.Fatalf("the checker's assessment of F1 was not carried out once:\n%s", describe(events))
	}
	if n := len(only(events, lctl.TypeFactModified)); n != 1 {
		t.Fatalf("%d fact_modified, want 1:\n%s", n, describe(events))
	}
	cps := only(events, lctl.TypeCheckpoint)
	if len(cps) == 0 {
		t.Fatalf("no crew checkpoint:\n%s", describe(events))
	}
	snap, _ := cps[len(cps)-1].Data["facts_snapshot"].(map[string]any)
	var got []string
	for id := range snap {
		got = append(got, id)
	}
	if len(got) != len(want) {
		t.Fatalf("facts at the checkpoint %v, want %v:\n%s", got, want, describe(events))
	}
	for _, id := range want {
		if _, ok := snap[id]; !ok {
			t.Fatalf("facts at the checkpoint %v, want %v:\n%s", got, want, describe(events))
		}
	}
}

// A crew's executor step (the finder's charge) in doubt: its executor
// died mid-call after the tool acted, and nothing of it was recorded. The
// run waits IN_DOUBT; carol resolves the step as done, or as not done, and
// the crew goes on where it was: the finder in control hands over, the
// checker assesses F1. Also after a takeover while it waited. (A guard:
// main held.)
func TestCrewExecutorStepInDoubtIsResolved(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		decision xctv1.StepDecision
		takeover bool
	}{
		{"done", xctv1.StepDecision_STEP_DECISION_SUCCEEDED, false},
		{"not-done", xctv1.StepDecision_STEP_DECISION_FAILED, false},
		{"done-after-takeover", xctv1.StepDecision_STEP_DECISION_SUCCEEDED, true},
		{"not-done-after-takeover", xctv1.StepDecision_STEP_DECISION_FAILED, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newOutcomeFixture(t, 300*time.Millisecond)
			gate := f.charge.gate(1)
			model := newGatedModel(addF1, step("test.charge", 1), handToCheck, assessF1)
			a, anc := f.orch("orch-a", model)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "find and check", Crew: []byte(chargeCrew), CrewFile: "pair.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			entered(t, f.charge.entered)
			f.proxy.Cut() // the executor "dies": nothing it does is recorded any more
			f.es.kill()
			close(gate)
			ex2, err := executor.New(executor.Config{Workspace: t.TempDir(), StepGrace: 200 * time.Millisecond, RecordTimeout: time.Second, Verifier: f.verifier},
				connect(t, f.ns), testLogger(), f.charge)
			if err != nil {
				t.Fatal(err)
			}
			if err := ex2.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ex2.Stop(context.Background()) })
			f.es.ex = ex2
			f.es.start()
			f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
			f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
			owner := a
			if c.takeover {
				anc.Close() // A is gone while the step waits: B takes the run over
				owner, _ = f.orch("orch-b", model)
				f.waitFor(id, "run_resumed", func(e lctl.Event) bool { return e.Type == TypeRunResumed })
				f.runStatus(owner, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
			}
			stepID := resolveByNumber(t, owner, ex2, id, 2, c.decision)
			events := f.waitEnd(id)
			crewGoesOn(t, events, "F1")
			if n := f.charge.count(1); n != 1 {
				t.Fatalf("the charge acted %d times", n)
			}
			var outcome string
			for _, e := range only(events, lctl.TypeStepEnd) {
				if str(e.Data, "step_id") == stepID {
					outcome = str(e.Data, "outcome")
					if e.Agent != "finder" {
						t.Fatalf("the resolved step ended as %s's:\n%s", e.Agent, describe(events))
					}
				}
			}
			if want := map[bool]string{true: xctevent.OutcomeSuccess, false: xctevent.OutcomeError}[c.decision == xctv1.StepDecision_STEP_DECISION_SUCCEEDED]; outcome != want {
				t.Fatalf("the resolved step ended %q, want %q:\n%s", outcome, want, describe(events))
			}
		})
	}
}

// resolveByNumber settles step n of run id as xct resolve does: the step's
// id from GetRun, then the executor's ResolveStep, by carol.
func resolveByNumber(t *testing.T, s *Service, ex *executor.Service, id string, n int, decision xctv1.StepDecision) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stepID := ""
	testutil.Eventually(t, 30*time.Second, func() error {
		resp, err := s.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			t.Fatal(err)
		}
		var seq uint64
		for _, st := range resp.GetRun().GetSteps() {
			if int(st.GetNumber()) == n {
				stepID, seq = st.GetStepId(), st.GetInDoubtSeq()
			}
		}
		if stepID == "" {
			t.Fatalf("run %s has no step %d: %v", id, n, resp.GetRun().GetSteps())
		}
		if seq == 0 {
			return fmt.Errorf("step %d is not in doubt on the chain yet", n) // a takeover's new attempt, say
		}
		_, err = ex.ResolveStep(ctx, stepID, executor.Resolution{Decision: decision, ResolvedBy: "carol", Reason: "read the ledger", RunID: id, InDoubtSeq: seq})
		if errors.Is(err, executor.ErrNotInDoubt) || errors.Is(err, executor.ErrStepConflict) {
			// Its deadline has not passed yet, or its record or chain
			// changed meanwhile (a takeover's new attempt between GetRun
			// and the decision): look again, as a human would.
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	return stepID
}

// A crew's system tool in doubt: the finder's facts.add F1 was taken over
// with events of its carry on the chain that this orchestrator's carry
// does not make (another writer's: F1 and F2 added, as a carry of another
// version might), so what the step did is the chain's and only a human
// can say whether it counts as done. Before the fix the step was recorded
// as an error in doubt and the run ended failed, pointing at xct resolve,
// which wrote a record nobody read (the executor never sees a crew's
// system tools). Now the run waits IN_DOUBT; carol resolves the step as
// done or not done (xct resolve, the same way as any step), the step is
// closed so, and the crew goes on with its state as the chain holds it:
// F1 and F2 in the store, the finder in control until it hands over.
func TestCrewSystemToolInDoubtIsResolved(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		decision xctv1.StepDecision
		outcome  string
	}{
		{"done", xctv1.StepDecision_STEP_DECISION_SUCCEEDED, xctevent.OutcomeSuccess},
		{"not-done", xctv1.StepDecision_STEP_DECISION_FAILED, xctevent.OutcomeError},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			model := newGatedModel(addF1, handToCheck, assessF1)
			f := newFixture(t, model)
			a, paused := f.launchLossy("orch-a", model)
			held, let := paused.HoldNext(func(subject string, body []byte) bool {
				return strings.HasPrefix(subject, "lctl.chain.") && strings.Contains(string(body), `"type":"`+lctl.TypeFactAdded+`"`)
			})
			defer let()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "find and check", Crew: []byte(handoverCrew), CrewFile: "pair.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			select {
			case <-held: // A carries facts.add out; its fact_added waits, A is paused
			case <-ctx.Done():
				t.Fatal("A never recorded the fact")
			}
			w, err := f.events.ResumeChainWriter(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, fact := range []map[string]any{
				{"id": "F1", "text": "a finding", "confidence": 0.9, "source": "scan"},
				{"id": "F2", "text": "another finding", "confidence": 0.7, "source": "scan"},
			} {
				if _, err := w.Append(ctx, lctl.TypeFactAdded, "finder", fact); err != nil {
					t.Fatal(err)
				}
			}
			// Only now another orchestrator: it takes the run over once A's
			// key has been silent for a lease, from the chain as it is.
			b, _ := f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: "orch-b", CallTimeout: time.Minute,
				TakeoverTimeout: 2 * time.Second, SettleTimeout: 500 * time.Millisecond, SettlePoll: 200 * time.Millisecond}, model)
			events := f.waitFor(id, "step_in_doubt or the run's end", func(e lctl.Event) bool {
				return e.Type == TypeStepInDoubt || e.Type == lctl.TypeRunFinished
			})
			if last := events[len(events)-1]; last.Type != TypeStepInDoubt || num(last.Data, "step") != 1 {
				t.Fatalf("the step whose chain holds a carry it does not make is not waiting in doubt:\n%s", describe(events))
			}
			(&outcomeFixture{fixture: f}).runStatus(b, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
			stepID := resolveByNumber(t, b, f.exec, id, 1, c.decision)
			events = f.waitEnd(id)
			crewGoesOn(t, events, "F1", "F2")
			if n := len(only(events, lctl.TypeFactAdded)); n != 2 {
				t.Fatalf("%d fact_added, want the 2 on the chain before the takeover:\n%s", n, describe(events))
			}
			var ends []string
			for _, e := range only(events, lctl.TypeStepEnd) {
				if str(e.Data, "step_id") == stepID {
					ends = append(ends, str(e.Data, "outcome"))
				}
			}
			if len(ends) != 1 || ends[0] != c.outcome {
				t.Fatalf("the resolved step ended %v, want once %s:\n%s", ends, c.outcome, describe(events))
			}
		})
	}
}
