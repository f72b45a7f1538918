package orchestrator

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"
)

// Session 19 (faults19), issue 12: an approval decided while its owner
// is lost, at the worst instants. The owner's NATS connection loses the
// acknowledgement of one event of the approval's path (stored, unseen:
// the owner stops there, as one killed right after the write), while the
// approver, a client retrying as told, sends its decision twice. Whatever
// the event, the takeover waits for (or reads) the same approval, the
// step acts once, the chain holds one request and one decision, and the
// resent decision is answered as the first.
func TestApprovalPathEventLandedUnseen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		typ  string
		nth  int // the nth event of typ on the chain is the one lost
	}{
		{"approval_requested", TypeApprovalRequested, 1},
		{"approval_decided", TypeApprovalDecided, 1},
		{"the verdict after the decision", lctl.TypeVerdict, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			model := newGatedModel(step("test.deploy", 1))
			f := newFixture(t, model)
			s, loser := f.launchLossy("orch-a", model)
			seen := 0
			loser.LoseNext(func(subject string, body []byte) bool {
				if !strings.HasPrefix(subject, "lctl.chain.") || !bytes.Contains(body, []byte(`"type":"`+tc.typ+`"`)) {
					return false
				}
				seen++
				return seen == tc.nth
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := s.StartRun(as(ctx, "carol", auth.RoleOperator), &xctv1.StartRunRequest{Goal: "write", Model: "func:tester", Principal: "carol"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			// The approval is open at the validator (whether or not the
			// owner saw its request recorded): the approver decides, and
			// sends the decision again as a client whose answer was lost.
			var decided *xctv1.Approval
			for attempt := 0; attempt < 2; attempt++ {
				for {
					d, err := f.val.DecideApproval(as(ctx, "bob", auth.RoleApprover), &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "ok"})
					if err == nil {
						if decided != nil && (d.GetApproval().GetStepId() != decided.GetStepId() || d.GetApproval().GetDecidedAt().AsTime() != decided.GetDecidedAt().AsTime()) {
							t.Fatalf("the resent decision was answered %v, the first %v", d.GetApproval(), decided)
						}
						decided = d.GetApproval()
						break
					}
					if decided != nil || ctx.Err() != nil {
						t.Fatalf("decide (attempt %d): %v", attempt+1, err)
					}
					// Not open yet: the step has not asked.
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			events := f.waitEnd(id)
			select {
			case <-loser.Lost:
			default:
				t.Fatalf("no acknowledgement was lost:\n%s", describe(events))
			}
			if len(only(events, TypeRunResumed)) == 0 {
				t.Fatalf("no takeover after the lost acknowledgement:\n%s", describe(events))
			}
			f.checkChain(id, events, 1)
			if n := f.deploy.count(1); n != 1 {
				t.Fatalf("the approved step acted %d time(s):\n%s", n, describe(events))
			}
			if r, d := len(only(events, TypeApprovalRequested)), len(only(events, TypeApprovalDecided)); r != 1 || d != 1 {
				t.Fatalf("%d approval_requested and %d approval_decided on the chain, want one each:\n%s", r, d, describe(events))
			}
			if end := events[len(events)-1]; end.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", end.Data, describe(events))
			}
		})
	}
}
