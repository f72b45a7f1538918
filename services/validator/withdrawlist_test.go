package validator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// runChain writes a run's chain as its orchestrator does, for the
// validator to read.
type runChain struct {
	tb testing.TB
	w  *eventlog.ChainWriter
}

func (a *approvals) chain(tb testing.TB, runID string) *runChain {
	tb.Helper()
	log, err := eventlog.Open(context.Background(), a.nc)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := log.NewChainWriter(runID)
	if err != nil {
		tb.Fatal(err)
	}
	return &runChain{tb: tb, w: w}
}

func (c *runChain) add(evs ...xctevent.Event) uint64 {
	c.tb.Helper()
	var seq uint64
	for _, ev := range evs {
		e, err := c.w.Append(context.Background(), ev.Type(), "orchestrator", ev.Data())
		if err != nil {
			c.tb.Fatal(err)
		}
		seq = e.Seq
	}
	return seq
}

// waiting writes step n of a run up to its approval's request, the
// approval opened between its verdict and the request as the
// orchestrator opens it, and returns the approval.
func (a *approvals) waiting(tb testing.TB, c *runChain, req *xctv1.ValidateRequest) *xctv1.Approval {
	tb.Helper()
	n, id, tool := int(req.GetStep()), req.GetStepId(), req.GetProposal().GetTool()
	verdict := c.add(xctevent.StepStart{Step: n, StepID: id, Tool: tool, Arguments: req.GetProposal().GetArguments().AsMap(), Intent: "write"},
		xctevent.Verdict{Step: n, StepID: id, Tool: tool, Decision: xctevent.DecisionNeedsApproval})
	ap := a.request(tb, req, nil)
	if ap.GetOpenedAtSeq() != verdict {
		tb.Fatalf("approval opened after event %d of its run's chain records %d", verdict, ap.GetOpenedAtSeq())
	}
	c.add(xctevent.ApprovalRequested{Step: n, StepID: id, Tool: tool, RequestedBy: ap.GetRequestedBy()})
	return ap
}

// cancelled writes what a cancel of the run records while its validator
// cannot be told: the approval withdrawn, the step and the run ended.
func (c *runChain) cancelled(ap *xctv1.Approval, by, reason string) {
	c.tb.Helper()
	n, id := int(ap.GetStep()), ap.GetStepId()
	c.add(xctevent.ApprovalDecided{Step: n, StepID: id, Decision: xctevent.ApprovalWithdrawn, By: by, Reason: reason},
		xctevent.StepEnd{Step: n, StepID: id, Outcome: xctevent.OutcomeCancelled},
		xctevent.RunFinished{Status: xctevent.StatusCancelled, Message: "cancelled by " + by + ": " + reason, Steps: n})
}

// Session 16 (ops16), issue 17: an approval its run's chain shows withdrawn
// (the run cancelled while the validator was down, so the orchestrator's
// WithdrawApproval never reached it) was listed as pending, for approvers
// to read and try, until someone tried to decide it. Now the list reads
// the chain (from where the approval was opened) and lists it withdrawn,
// as the chain says, and stores it so; also from a validator started
// after the cancel. One still pending on its chain stays listed.
func TestListShowsAnApprovalItsChainWithdrew(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	one := a.chain(t, "run-1")
	// A long run before the step: the chain is read from the approval on.
	for n := 1; n <= 40; n++ {
		one.add(xctevent.StepStart{Step: n, StepID: "s-read", Tool: "fs.read", Arguments: map[string]any{}, Intent: "read"},
			xctevent.StepEnd{Step: n, StepID: "s-read", Outcome: xctevent.OutcomeSuccess})
	}
	withdrawn := a.waiting(t, one, configWrite(t, 41, "config/app.yaml"))
	two := a.chain(t, "run-2")
	open := a.waiting(t, two, stepRequest(t, "run-2", 1, "fs.write", map[string]any{"path": "config/db.yaml", "content": "x: 1\n"}))
	one.cancelled(withdrawn, "carol", "wrong ticket")

	pendingOnly := a.list(t, "", false)
	if len(pendingOnly) != 1 || pendingOnly[0].GetStepId() != open.GetStepId() {
		t.Fatalf("pending approvals: %v; want only run-2's", pendingOnly)
	}
	got := a.list(t, "run-1", true)
	if len(got) != 1 || got[0].GetState() != xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN || got[0].GetDecidedBy() != "carol" || got[0].GetReason() != "wrong ticket" {
		t.Fatalf("run-1's approvals: %v; want withdrawn by carol (wrong ticket)", got)
	}
	_, err := a.decide("run-1", withdrawn.GetStepId(), true, "bob", "fine")
	wantCode(t, err, codes.FailedPrecondition, "withdrawn")

	// Another run cancelled while no validator ran; a validator started
	// afterwards lists it withdrawn too.
	three := a.chain(t, "run-3")
	later := a.waiting(t, three, stepRequest(t, "run-3", 1, "fs.write", map[string]any{"path": "config/cache.yaml", "content": "y: 2\n"}))
	if err := a.s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	three.cancelled(later, "dave", "not needed")
	a.s = a.start(t)
	if got := a.list(t, "", false); len(got) != 1 || got[0].GetStepId() != open.GetStepId() {
		t.Fatalf("pending approvals after the restart: %v; want only run-2's", got)
	}
	if got := a.list(t, "run-3", true); len(got) != 1 || got[0].GetState() != xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN || got[0].GetDecidedBy() != "dave" {
		t.Fatalf("run-3's approvals after the restart: %v", got)
	}
	// run-2's is still decidable.
	if d, err := a.decide("run-2", open.GetStepId(), true, "bob", "fine"); err != nil || d.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("run-2's approval: %v, %v", d, err)
	}
}

// An approval opened before its run's chain had an event (or before
// approvals recorded where they were opened) is checked against the whole
// chain.
func TestWithdrawalFoundInTheWholeChainWhenTheApprovalSaysNoPlace(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	req := configWrite(t, 1, "config/app.yaml")
	ap := a.request(t, req, nil) // no chain yet
	if ap.GetOpenedAtSeq() != 0 {
		t.Fatalf("opened_at_seq %d for a run with no chain", ap.GetOpenedAtSeq())
	}
	c := a.chain(t, "run-1")
	c.add(xctevent.StepStart{Step: 1, StepID: ap.GetStepId(), Tool: "fs.write", Arguments: req.GetProposal().GetArguments().AsMap(), Intent: "write"},
		xctevent.ApprovalRequested{Step: 1, StepID: ap.GetStepId(), Tool: "fs.write", RequestedBy: ap.GetRequestedBy()})
	c.cancelled(ap, "carol", "stop")
	if got := a.list(t, "run-1", false); len(got) != 0 {
		t.Fatalf("pending: %v", got)
	}
	_, err := a.decide("run-1", "1", true, "bob", "fine")
	if err == nil || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("decision: %v", err)
	}
}

// BenchmarkListPendingOnALongChain lists a run's pending approval, which
// reads the run's chain for a withdrawal (as a decision does), on a chain
// of 5000 events before the approval: read from where the approval was
// opened (opened-at), or whole, one get per event (an approval that
// records no place: opened before the chain had an event, or before
// session 16).
func BenchmarkListPendingOnALongChain(b *testing.B) {
	a := startApprovals(b)
	const n = 5000
	fill := func(c *runChain) {
		for i := range n / 2 {
			c.add(xctevent.StepStart{Step: i + 1, StepID: "s-read", Tool: "fs.read", Arguments: map[string]any{}, Intent: "read"},
				xctevent.StepEnd{Step: i + 1, StepID: "s-read", Outcome: xctevent.OutcomeSuccess})
		}
	}
	whole := a.request(b, stepRequest(b, "run-whole", n/2+1, "fs.write", map[string]any{"path": "config/a.yaml", "content": "a\n"}), nil)
	fill(a.chain(b, "run-whole"))
	c := a.chain(b, "run-opened")
	fill(c)
	opened := a.waiting(b, c, stepRequest(b, "run-opened", n/2+1, "fs.write", map[string]any{"path": "config/b.yaml", "content": "b\n"}))
	for _, ap := range []*xctv1.Approval{opened, whole} {
		name := "opened-at"
		if ap.GetOpenedAtSeq() == 0 {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := a.list(b, ap.GetRunId(), false); len(got) != 1 {
					b.Fatalf("listed %v", got)
				}
			}
		})
	}
}

// With NATS gone, a decision and a list are refused UNAVAILABLE, saying
// the approvals cannot be read: never taken, never listed from memory.
func TestDecisionWithoutNATSIsUnavailable(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	c := a.chain(t, "run-1")
	ap := a.waiting(t, c, configWrite(t, 1, "config/app.yaml"))
	a.nc.Close()
	_, err := a.decide("run-1", ap.GetStepId(), true, "bob", "fine")
	wantCode(t, err, codes.Unavailable, "approvals are unavailable")
	_, err = a.s.ListApprovals(context.Background(), &xctv1.ListApprovalsRequest{RunId: "run-1"})
	wantCode(t, err, codes.Unavailable, "approvals are unavailable")
}

// BenchmarkListManyPendingApprovals lists the pending approvals of 300
// runs, one each (issue 17, session 17): each is checked against its
// run's chain (a piece from where it was opened), so the list's cost is
// that of 300 chain reads, made 16 at a time since session 17.
func BenchmarkListManyPendingApprovals(b *testing.B) {
	a := startApprovals(b)
	const runs = 300
	for i := range runs {
		id := fmt.Sprintf("run-%d", i)
		c := a.chain(b, id)
		a.waiting(b, c, stepRequest(b, id, 1, "fs.write", map[string]any{"path": "config/a.yaml", "content": "a\n"}))
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := a.list(b, "", false); len(got) != runs {
			b.Fatalf("listed %d pending approvals, want %d", len(got), runs)
		}
	}
}

// Session 17 (ops17): a list remembers how far it read each pending
// approval's chain and reads only what came after; a withdrawal recorded
// after one list is still seen by the next, the other runs' approvals
// still pending, also when the chains grew in between.
func TestListAfterListSeesALaterWithdrawal(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	var chains []*runChain
	var waiting []*xctv1.Approval
	for i := range 40 {
		id := fmt.Sprintf("run-%d", i)
		c := a.chain(t, id)
		chains = append(chains, c)
		waiting = append(waiting, a.waiting(t, c, stepRequest(t, id, 1, "fs.write", map[string]any{"path": "config/a.yaml", "content": "a\n"})))
	}
	if got := a.list(t, "", false); len(got) != 40 {
		t.Fatalf("first list: %d pending, want 40", len(got))
	}
	// The chains grow (a crew's other lane, say), then three runs are
	// cancelled while the validator cannot be told.
	for i, c := range chains {
		c.add(xctevent.StepStart{Step: 2, StepID: fmt.Sprintf("other-%d", i), Tool: "fs.read", Arguments: map[string]any{}, Intent: "read"})
	}
	if got := a.list(t, "", false); len(got) != 40 {
		t.Fatalf("second list: %d pending, want 40", len(got))
	}
	for _, i := range []int{3, 17, 39} {
		chains[i].cancelled(waiting[i], "carol", fmt.Sprintf("stop %d", i))
	}
	got := a.list(t, "", false)
	if len(got) != 37 {
		t.Fatalf("after three cancels: %d pending, want 37", len(got))
	}
	for _, i := range []int{3, 17, 39} {
		id := fmt.Sprintf("run-%d", i)
		for _, ap := range got {
			if ap.GetRunId() == id {
				t.Fatalf("%s's approval listed pending after its run was cancelled", id)
			}
		}
		all := a.list(t, id, true)
		if len(all) != 1 || all[0].GetState() != xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN || all[0].GetReason() != fmt.Sprintf("stop %d", i) {
			t.Fatalf("%s: %v; want withdrawn by carol", id, all)
		}
	}
}
