package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
)

// Session 17 (faults17): a pending record of a compensated-first tool's
// first attempt, past its deadline, with no compensation of that attempt,
// is settled as not executed by the caller settling the step
// (SettledStep), with an update conditional on the revision the
// compensation would replace: the compensation's write, made after, is a
// conflict (so the tool cannot act). A reader (Step) only reads; a
// record with the compensation, a later attempt, a tool that does not
// compensate first, or a record before its deadline stay as they are.
func TestUnstartedStepIsSettledNotExecuted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	s, err := New(Config{Workspace: t.TempDir()}, nc, nil)
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	store, err := s.store()
	must(t, err)

	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name     string
		tool     string
		attempt  int32
		deadline time.Time
		comp     bool
		settled  bool
	}{
		{"delete-unstarted", "fs.delete", 1, past, false, true},
		{"move-unstarted", "fs.move", 1, past, false, true},
		{"compensation-recorded", "fs.delete", 1, past, true, false},
		{"second-attempt", "fs.delete", 2, past, false, false},
		{"before-its-deadline", "fs.delete", 1, future, false, false},
		{"write-does-not-promise", "fs.write", 1, past, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "unstarted-" + tc.name
			rec := &xctv1.StepRecord{StepId: id, RunId: "run", Tool: tc.tool, State: statePending, Attempt: tc.attempt,
				Effect: xctv1.Effect_EFFECT_REVERSIBLE, Executor: "dead", StartedAt: timestamppb.New(past.Add(-time.Minute)), Deadline: timestamppb.New(tc.deadline)}
			if tc.comp {
				rec.Compensations = []*xctv1.StepCompensation{{Attempt: tc.attempt, Blob: id + ".1.compensation"}}
			}
			rev, err := store.Create(ctx, rec)
			must(t, err)

			if got, _, err := s.Step(ctx, id); err != nil || got.GetState() != statePending {
				t.Fatalf("a reader's Step: %v %v; want the record as it is (pending)", got.GetState(), err)
			}
			got, doubt, err := s.SettledStep(ctx, id)
			must(t, err)
			if NotExecuted(got) != tc.settled {
				t.Fatalf("SettledStep: %v (in doubt %v); want settled not executed: %v", got, doubt, tc.settled)
			}
			if !tc.settled {
				return
			}
			// The stalled executor's compensation, written after: refused.
			late := cloneRecord(rec)
			late.Compensations = []*xctv1.StepCompensation{{Attempt: 1, Blob: id + ".1.compensation"}}
			if _, err := store.Update(ctx, late, rev); !errors.Is(err, ErrStepConflict) {
				t.Fatalf("the compensation recorded after the step was settled: %v; want a conflict", err)
			}
			if again, _, err := s.Step(ctx, id); err != nil || !NotExecuted(again) {
				t.Fatalf("the record after the late compensation: %v %v", again, err)
			}
		})
	}
}
