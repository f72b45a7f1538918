package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Issue 12, session 11: an undo replayed after a crash. The orchestrator
// running a rollback loses the event log after the executor undid a step
// and before the undo's outcome is on the chain; the operator retries the
// rollback on another orchestrator, as told (UNAVAILABLE). Before the fix
// the retry saw an undo without an outcome, undid the step again, found
// the workspace no longer what the step left (the first undo had restored
// it) and answered that the step was NOT undone ("failed": the workspace
// changed), while it was, and the chain held an undo step with no outcome
// forever. Now the retry reads the executor's record of the open undo,
// records its outcome, and counts the step as undone: one undo, and the
// answer says so.
func TestRollbackRetriedAfterTheUndoActedUnseen(t *testing.T) {
	t.Parallel()
	write := func(content string) string {
		return fmt.Sprintf(`{"next_step": {"tool": "fs.write", "arguments": {"path": "notes.txt", "content": %q}, "goal": "write"}}`, content)
	}
	model := newGatedModel(write("one\n"), write("two\n"))
	f := newFixture(t, model)
	b, _ := f.orchestrator("orch-b", time.Second)
	id := f.startDone(b)

	relay, relayAddr := newHeldExecutor(t, f, f.execAddr)
	a, anc := f.orchestratorVia("orch-a", time.Second, relayAddr, "")

	operator := as(context.Background(), "oscar", auth.RoleOperator)
	rollback := func(s *Service) (*xctv1.RollbackRunResponse, error) {
		ctx, cancel := context.WithTimeout(operator, time.Minute)
		defer cancel()
		return s.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id, ToStep: 1, Principal: "oscar"})
	}
	first := make(chan error, 1)
	go func() {
		_, err := rollback(a)
		first <- err
	}()
	entered(t, relay.entered) // A's undo of step 2 is on its way to the executor
	anc.Close()               // A loses the event log
	relay.let()               // the undo acts; A cannot record it
	if err := <-relay.done; err != nil {
		t.Fatalf("the undo call: %v", err)
	}
	if err := <-first; err == nil {
		t.Fatal("the rollback whose outcome could not be recorded answered success")
	}

	// The operator retries elsewhere: refused (FAILED_PRECONDITION) while
	// A's claim on the run lasts, taken once it expired (a lease).
	var resp *xctv1.RollbackRunResponse
	testutil.Eventually(t, 30*time.Second, func() error {
		var err error
		resp, err = rollback(b)
		if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "another orchestrator") {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	events := f.waitFor(id, "rollback_finished", func(e lctl.Event) bool { return e.Type == TypeRollbackFinished })
	if resp.GetStatus() != "done" || fmt.Sprint(resp.GetUndone()) != "[2]" {
		t.Fatalf("retried rollback: %s %v %q\n%s", resp.GetStatus(), resp.GetUndone(), resp.GetMessage(), describe(events))
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	// Every undo step on the chain has its outcome, and exactly one acted.
	undos, succeeded := 0, 0
	for _, st := range xctevent.Fold(events).Steps {
		if st.Start.Tool != undoTool {
			continue
		}
		undos++
		if st.End == nil {
			t.Fatalf("undo step %d has no end:\n%s", st.Number(), describe(events))
		}
		if st.Result != nil {
			succeeded++
		}
	}
	if succeeded != 1 {
		t.Fatalf("%d undo steps succeeded (of %d), want 1:\n%s", succeeded, undos, describe(events))
	}
}
