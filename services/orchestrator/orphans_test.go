package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
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
	indexLive(ctx, f, id) // as its StartRun did before run_started
	writeChain(ctx, f, id)
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

// A run that ended, whose writer died between its end and the removal of
// its live index entry, and whose chain's last event hides the end (a
// signed checkpoint after run_finished): the stale entry costs one check.
// The search reads the chain whole, remembers the run ended, removes the
// entry and writes nothing.
func TestStaleLiveEntryOfAnEndedRunIsRemoved(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	const id = "run-ended-checkpointed"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	indexLive(ctx, f, id)
	writeEndedCheckpointed(ctx, f, id) // then the writer died
	a, _ := f.launch(Config{RunLease: 200 * time.Millisecond, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute,
		OrphanScan: 50 * time.Millisecond}, model)
	testutil.Eventually(t, 30*time.Second, func() error {
		if r, ok := a.runs.summary(id); !ok || !ended(r) {
			return fmt.Errorf("the search has not found the run ended: %v", r)
		}
		if _, err := f.owners.Get(ctx, livePrefix+id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the stale live entry stays: %w", err)
		}
		return nil
	})
	events, err := f.events.ReadChain(ctx, id)
	if err != nil || len(events) != 3 {
		t.Fatalf("chain %v, %v", describe(events), err)
	}
	if _, err := f.owners.Get(ctx, id); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("an ended run got an owner key: %v", err)
	}
}

// A run that ended with a signed checkpoint after its run_finished (what
// every run of a cluster that signs checkpoints ends with) is listed as
// ended by a replica that did not run it: its summary is not made from
// its first event and the checkpoint, which carries no status (it was
// listed RUNNING by every orchestrator but its owner, and after a restart
// by all of them).
func TestListRunsSeesTheEndBeforeACheckpoint(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	const id = "run-ended-listed"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writeEndedCheckpointed(ctx, f, id)
	a, _ := f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute, OrphanScan: -1}, model)
	for range 2 { // the second answer comes from the summary the first kept
		list, err := a.ListRuns(ctx, &xctv1.ListRunsRequest{})
		if err != nil || len(list.GetRuns()) != 1 {
			t.Fatalf("list: %v, %v", list, err)
		}
		if r := list.GetRuns()[0]; r.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || r.GetLastSeq() != 3 {
			t.Fatalf("listed as %s at seq %d, want DONE at 3", r.GetStatus(), r.GetLastSeq())
		}
	}
}

// indexLive writes a run's live index entry, as StartRun does before the
// run's run_started.
func indexLive(ctx context.Context, f *fixture, id string) {
	f.t.Helper()
	kv, err := f.events.JetStream().KeyValue(ctx, OwnersBucket)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := kv.Put(ctx, livePrefix+id, []byte("orch-gone")); err != nil {
		f.t.Fatal(err)
	}
}

// writeChain writes a run's chain by hand, as an orchestrator would have:
// its run_started, then events (none: a run started and not ended).
func writeChain(ctx context.Context, f *fixture, id string, events ...xctevent.Event) *eventlog.ChainWriter {
	f.t.Helper()
	w, err := f.events.NewChainWriter(id)
	if err != nil {
		f.t.Fatal(err)
	}
	started := xctevent.RunStarted{RunID: id, Goal: "count", Model: "func:tester", Principal: "alice", Roles: []string{auth.RoleSubmitter}, MaxSteps: 10}
	for _, e := range append([]xctevent.Event{started}, events...) {
		if _, err := w.Append(ctx, e.Type(), agentOrchestrator, e.Data()); err != nil {
			f.t.Fatal(err)
		}
	}
	return w
}

// writeEndedCheckpointed writes a run's chain that ended done, with a
// signed checkpoint after its run_finished (a cluster that signs
// checkpoints ends every run so).
func writeEndedCheckpointed(ctx context.Context, f *fixture, id string) {
	f.t.Helper()
	w := writeChain(ctx, f, id, xctevent.RunFinished{Status: "done", Message: "finished"})
	cp := xctevent.SignedCheckpoint{Note: "a note", Seq: 2, HeadHash: w.Last().Hash, Key: "test"}
	if _, err := w.Append(ctx, cp.Type(), agentOrchestrator, cp.Data()); err != nil {
		f.t.Fatal(err)
	}
}
