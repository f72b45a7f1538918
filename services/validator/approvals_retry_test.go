package validator_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Issue 12, session 11: a client that re-sends its decision (its first
// call's answer was lost, or it timed out while the call still ran) is
// told the decision it made. Before the fix it was told FAILED_PRECONDITION
// "already decided", and an approver (or a client library) took its
// approval for refused although it had been given. Any other decision
// (another approver, the other way, another reason) is still refused.
func TestApprovalDecisionResent(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	req := configWrite(t, 1, "config/app.yaml")
	a.request(t, req, nil)
	first, err := a.decide("run-1", "1", true, "bob", "looks fine")
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"1", req.GetStepId()} {
		again, err := a.decide("run-1", step, true, "bob", "looks fine")
		if err != nil {
			t.Fatalf("the same decision re-sent (step %s): %v", step, err)
		}
		if !proto.Equal(again, first) {
			t.Fatalf("re-sent decision answered %v, want %v", again, first)
		}
	}
	_, err = a.decide("run-1", "1", false, "bob", "changed my mind")
	wantCode(t, err, codes.FailedPrecondition, "already decided")
	_, err = a.decide("run-1", "1", true, "carol", "looks fine")
	wantCode(t, err, codes.FailedPrecondition, "already decided")
	_, err = a.decide("run-1", "1", true, "bob", "another note")
	wantCode(t, err, codes.FailedPrecondition, "already decided")
	if list := a.list(t, "run-1", true); len(list) != 1 || !proto.Equal(list[0], first) {
		t.Fatalf("stored %v, want %v", list, first)
	}
}
