package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Issue 12, session 14 (rollback14): a rollback cancelled (CancelRun)
// while an undo executed went on to its next undo once that one finished:
// only a stopping orchestrator ended a rollback between undos. Now a
// cancel ends it there as a stop does: the undo in flight finishes and is
// recorded, no further undo starts, and rollback_finished is failed,
// saying who cancelled it and why.
func TestCancelEndsARollbackBeforeItsNextUndo(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n"), writeFile("two\n"), writeFile("three\n")))
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.startDone(b)
	relay, relayAddr := newHeldExecutor(t, f, f.execAddr)
	a, _ := f.orchestratorVia("orch-a", time.Minute, relayAddr, "")
	srv := f.serveOrchestrator(a)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, srv.Addr(), "carol"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		resp *xctv1.RollbackRunResponse
		err  error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := carol.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id, ToStep: 1})
		first <- result{resp, err}
	}()
	entered(t, relay.entered) // the undo of step 3 is on its way to the executor
	if _, err := carol.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "wrong run"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		for _, r := range a.activeRuns() {
			select {
			case <-r.ctx.Done():
				return nil
			default:
			}
		}
		return errors.New("the rollback is not cancelled yet")
	})
	relay.let()
	var r result
	select {
	case r = <-first:
	case <-time.After(90 * time.Second):
		t.Fatal("the cancelled rollback did not return")
	}
	if err := <-relay.done; err != nil {
		t.Fatalf("the undo's call: %v", err)
	}
	events := f.waitFor(id, "rollback_finished", func(e lctl.Event) bool { return e.Type == TypeRollbackFinished })
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "two\n" {
		t.Fatalf("notes.txt after the cancelled rollback: %q, %v (the undo of step 2 ran after the cancel?)\n%s", got, err, describe(events))
	}
	view := xctevent.Fold(events)
	undo := view.Steps[len(view.Steps)-1]
	if undo.Start.Tool != undoTool || undo.Number() != 4 || undo.End == nil || undo.End.Outcome != xctevent.OutcomeSuccess || undo.Result == nil {
		t.Fatalf("the undo in flight (step 4) is not recorded done, or another undo started after the cancel:\n%s", describe(events))
	}
	end := events[len(events)-1]
	if str(end.Data, "status") != xctevent.StatusFailed || !strings.Contains(str(end.Data, "message"), "cancelled by carol: wrong run") ||
		fmt.Sprint(end.Data["undone"]) != "[3]" {
		t.Fatalf("rollback_finished %v, want failed, cancelled by carol, step 3 undone:\n%s", end.Data, describe(events))
	}
	if r.err != nil || r.resp.GetStatus() != xctevent.StatusFailed || !strings.Contains(r.resp.GetMessage(), "cancelled by carol") ||
		fmt.Sprint(r.resp.GetUndone()) != "[3]" {
		t.Fatalf("the cancelled rollback answered %v, %v; want failed, cancelled by carol, undone [3]", r.resp, r.err)
	}
	// Nothing acts after: the rollback is over, its run free to roll back again.
	resp, err := b.RollbackRun(as(ctx, "carol", "operator"), &xctv1.RollbackRunRequest{RunId: id, ToStep: 1, Principal: "carol"})
	if err != nil || resp.GetStatus() != xctevent.StatusDone || fmt.Sprint(resp.GetUndone()) != "[2]" {
		t.Fatalf("rollback after the cancelled one: %v %v", resp, err)
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "one\n" {
		t.Fatalf("notes.txt after the second rollback: %q, %v", got, err)
	}
}
