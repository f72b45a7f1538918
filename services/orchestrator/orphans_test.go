package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Issue 12, session 11: a run_started that landed after its writer gave up
// (its append timed out; the publish was still on its way) and after a
// takeover that found no chain yet had deleted the start's owner key: a
// run on the chain that nobody owns. A StartRun retry resumes it
// (TestStartRunRetryResumesAnUnownedRun), but this client never retries.
// Before the fix the run stayed RUNNING for ever: the owners watch finds
// runs only through their keys. Now an orchestrator's search of the chains
// finds it and takes it over.
func TestUnownedRunWithoutARetryIsFound(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	const id = "run-orphan"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := f.events.NewChainWriter(id)
	if err != nil {
		t.Fatal(err)
	}
	started := xctevent.RunStarted{RunID: id, Goal: "count", Model: "func:tester", Principal: "alice", Roles: []string{auth.RoleSubmitter}, MaxSteps: 10}
	if _, err := w.Append(ctx, started.Type(), agentOrchestrator, started.Data()); err != nil {
		t.Fatal(err)
	}
	f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute,
		OrphanScan: 200 * time.Millisecond}, model)
	f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: "orch-b", CallTimeout: time.Minute,
		OrphanScan: 200 * time.Millisecond}, model)

	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
	resumed := only(events, TypeRunResumed)
	if len(resumed) != 1 || str(resumed[0].Data, "reason") != "unowned" {
		t.Fatalf("want one run_resumed (unowned):\n%s", describe(events))
	}
}
