package orchestrator

import (
	"context"
	"errors"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

const handoverCrew = `crew: pair
agents:
  - name: finder
    profile: {type: analyzer, capabilities: [pattern_detection], model: "func:tester", reliability_score: 0.9}
    tools: [test.count, facts.add, xct.handoff]
    hands_to: [checker]
  - name: checker
    profile: {type: reviewer, capabilities: [assessment], model: "func:tester", reliability_score: 0.9}
    tools: [test.count, facts.update]
handoffs: {entry: finder, max_depth: 2, cycles: forbid}
# The checker ends the work (session 21: only the entry agent by default).
authority: {end_run: [finder, checker]}
# The test's model answers by the run's turn (len(history)): it is shown
# the run's history, every member's turns.
history: shared
`

// A crew run handed over in the middle goes on at another orchestrator
// with the crew's state rebuilt from the chain alone: the agent in control
// (after a handoff), the facts and their assessors. Every step runs once.
func TestCrewRunHandedOver(t *testing.T) {
	t.Parallel()
	model := newGatedModel(
		`{"next_step": {"tool": "facts.add", "arguments": {"id": "F1", "text": "a finding", "confidence": 0.9, "source": "scan"}, "goal": "record it"}}`,
		`{"next_step": {"tool": "xct.handoff", "arguments": {"to": "checker", "summary": "check F1"}, "goal": "hand over"}}`,
		`{"next_step": {"tool": "facts.update", "arguments": {"id": "F1", "confidence": 0.8, "reason": "checked"}, "goal": "assess F1"}}`,
		step("test.count", 1),
	)
	f := newFixture(t, model)
	proposing3 := model.gate(2)
	a, _ := f.orchestrator("orch-a", time.Minute)
	b, _ := f.orchestrator("orch-b", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "find and check", Crew: []byte(handoverCrew), CrewFile: "pair.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	if turn := <-model.asked; turn != 2 {
		t.Fatalf("asked for turn %d", turn)
	}
	// The checker's first proposal is in flight at A when A stops.
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		stopped <- a.Stop(sctx)
	}()
	testutil.Eventually(t, 30*time.Second, func() error {
		if !a.Stopping() {
			return errors.New("A is not stopping yet")
		}
		return nil
	})
	close(proposing3)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(id)
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	if n := len(only(events, lctl.TypeStepStart)); n != 4 {
		t.Fatalf("%d steps, want 4:\n%s", n, describe(events))
	}
	if len(only(events, TypeRunReleased)) != 1 || len(only(events, TypeRunResumed)) != 1 {
		t.Fatalf("not handed over once:\n%s", describe(events))
	}
	resumedAt := only(events, TypeRunResumed)[0].Seq
	agents := map[int]string{}
	var last lctl.Event
	for _, e := range only(events, lctl.TypeStepStart) {
		agents[int(num(e.Data, "step"))] = e.Agent
		last = e
	}
	if agents[1] != "finder" || agents[2] != "finder" || agents[3] != "checker" || agents[4] != "checker" {
		t.Fatalf("steps by %v, want finder, finder, checker, checker", agents)
	}
	// B proposed step 4 for the checker: it knew who was in control from
	// the chain alone.
	if last.Seq < resumedAt {
		t.Fatalf("step 4 (seq %d) was not proposed after the takeover (seq %d):\n%s", last.Seq, resumedAt, describe(events))
	}
	profile, _ := last.Data["agent_profile"].(map[string]any)
	if profile["type"] != "reviewer" {
		t.Fatalf("step 4's agent profile %v", profile)
	}
	mods := only(events, lctl.TypeFactModified)
	if len(mods) != 1 || mods[0].Agent != "checker" {
		t.Fatalf("fact_modified %v", mods)
	}
	cons, _ := mods[0].Data["consensus"].(map[string]any)
	if as, _ := cons["assessors"].([]any); len(as) != 2 {
		t.Fatalf("the resumed session lost the first assessment: consensus %v", cons)
	}
	if n := len(only(events, lctl.TypeHandoff)); n != 1 {
		t.Fatalf("%d handoffs", n)
	}
	if c := f.count.count(1); c != 1 {
		t.Fatalf("count 1 ran %d times", c)
	}
	got, err := b.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil || got.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || got.GetRun().GetModel() != "crew:pair" {
		t.Fatalf("run at B: %v, %v", got.GetRun(), err)
	}
}
