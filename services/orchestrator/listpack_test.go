package orchestrator

import (
	"context"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// drafts makes eventlog drafts of XCT events, written by the orchestrator.
func drafts(evs ...xctevent.Event) []eventlog.Draft {
	out := make([]eventlog.Draft, len(evs))
	for i, e := range evs {
		out[i] = eventlog.Draft{Type: e.Type(), Agent: agentOrchestrator, Data: e.Data()}
	}
	return out
}

// A listing's cached summary of an ended run is made again when the
// run's chain grew, also when the chain's events are written in packs
// (several in one stream message), where the chain's message count
// (what a listing reads of every chain) stays below its last seq: the
// summary was taken as current while its last seq was at least the
// count, so events added after the end (a rollback) were not listed.
func TestListRunsSeesAPackedChainGrow(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	const id = "run-packed-listed"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := f.events.NewChainWriter(id)
	if err != nil {
		t.Fatal(err)
	}
	started := xctevent.RunStarted{RunID: id, Goal: "count", Model: "func:tester", Principal: "alice", Roles: []string{auth.RoleSubmitter}, MaxSteps: 10}
	if _, err := w.AppendPackWithin(time.Minute, drafts(started, xctevent.RunFinished{Status: "done", Message: "finished"})); err != nil {
		t.Fatal(err)
	}
	a, _ := f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute, OrphanScan: -1}, model)
	listed := func(want uint64) {
		t.Helper()
		for range 2 { // the second answer may come from the summary the first kept
			list, err := a.ListRuns(ctx, &xctv1.ListRunsRequest{})
			if err != nil || len(list.GetRuns()) != 1 {
				t.Fatalf("list: %v, %v", list, err)
			}
			if r := list.GetRuns()[0]; r.GetLastSeq() != want || r.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
				t.Fatalf("listed as %s at seq %d, want DONE at %d", r.GetStatus(), r.GetLastSeq(), want)
			}
		}
	}
	listed(2) // one message
	rollback := drafts(xctevent.RollbackStarted{Principal: "alice", ToStep: 0}, xctevent.RollbackFinished{Status: "done", Message: "nothing to undo"})
	if _, err := w.AppendPackWithin(time.Minute, rollback); err != nil {
		t.Fatal(err)
	}
	listed(4) // two messages, four events
}
