package validator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

const approvalPolicy = `approval_ttl: 1h
rules:
  - id: allow-read
    effect: allow
    effects: [read]
  - id: allow-fs-write
    effect: allow
    tools: ["fs.write"]
  - id: config-writes-need-approval
    effect: require_approval
    tools: ["fs.write"]
    when: 'args.path.startsWith("config/")'
    message: writes under config/ need a human
`

// approvals is a validator on an embedded JetStream with the test tools
// published, and a fake clock.
type approvals struct {
	s      *validator.Service
	nc     *nats.Conn
	clock  *fakeClock
	path   string
	signer *verdict.Signer // nil: verdicts are not signed
	opts   []validator.Option
}

func startApprovals(tb testing.TB, opts ...validator.Option) *approvals {
	tb.Helper()
	ns := testutil.RunJetStream(tb)
	nc := testutil.Connect(tb, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := catalog.Publish(ctx, js, testTools()); err != nil {
		tb.Fatal(err)
	}
	a := &approvals{nc: nc, clock: newFakeClock(), path: writeFile(tb, "policy.yaml", approvalPolicy), opts: opts}
	a.s = a.start(tb)
	return a
}

// start starts a validator on the same NATS (a restart, when called again).
func (a *approvals) start(tb testing.TB) *validator.Service {
	tb.Helper()
	s, err := validator.New(validator.Config{PolicyFile: a.path, Replicas: 1, Signer: a.signer}, a.nc, nil, append([]validator.Option{validator.WithClock(a.clock.Now)}, a.opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func configWrite(tb testing.TB, n int, path string) *xctv1.ValidateRequest {
	return stepRequest(tb, "run-1", n, "fs.write", map[string]any{"path": path, "content": "color: green\n"})
}

func (a *approvals) request(tb testing.TB, req *xctv1.ValidateRequest, preview *xctv1.Preview) *xctv1.Approval {
	tb.Helper()
	resp, err := a.s.RequestApproval(context.Background(), &xctv1.RequestApprovalRequest{
		Run: req.GetRun(), Step: req.GetStep(), StepId: req.GetStepId(), Proposal: req.GetProposal(), Preview: preview,
	})
	if err != nil {
		tb.Fatalf("RequestApproval: %v", err)
	}
	return resp.GetApproval()
}

func (a *approvals) decide(run, step string, approve bool, approver, reason string) (*xctv1.Approval, error) {
	// The approver calls as itself (the server's auth interceptor puts
	// the authenticated principal in the context).
	ctx := auth.NewContext(context.Background(), auth.Principal{Name: approver, Roles: []string{auth.RoleApprover}})
	resp, err := a.s.DecideApproval(ctx, &xctv1.DecideApprovalRequest{
		RunId: run, Step: step, Approve: approve, Approver: approver, Reason: reason,
	})
	return resp.GetApproval(), err
}

func (a *approvals) list(tb testing.TB, run string, all bool) []*xctv1.Approval {
	tb.Helper()
	resp, err := a.s.ListApprovals(context.Background(), &xctv1.ListApprovalsRequest{RunId: run, All: all})
	if err != nil {
		tb.Fatalf("ListApprovals: %v", err)
	}
	return resp.GetApprovals()
}

func wantCode(tb testing.TB, err error, code codes.Code, text string) {
	tb.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), text) {
		tb.Errorf("err = %v, want %s mentioning %q", err, code, text)
	}
}

// TestApprovalFlow is the whole life of an approval: the step needs one,
// the orchestrator requests it with a preview, a human other than the run's
// principal approves it, and the exact step is then allowed.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	req := configWrite(t, 1, "config/app.yaml")
	v := validate(t, a.s, req)
	checkVerdict(t, v, approval, wire.CodeApprovalRequired, "allow-fs-write", "config-writes-need-approval")
	if v.GetApprovalTtl().AsDuration() != time.Hour {
		t.Errorf("approval_ttl = %v", v.GetApprovalTtl())
	}

	preview := &xctv1.Preview{Kind: "diff", Content: "--- a/config/app.yaml\n+++ b/config/app.yaml\n+color: green\n", BaseDigest: "absent"}
	ap := a.request(t, req, preview)
	if ap.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING || ap.GetRequestedBy() != "alice" ||
		ap.GetStepId() != req.GetStepId() || ap.GetStep() != 1 || ap.GetRunId() != "run-1" ||
		ap.GetPreview().GetContent() != preview.GetContent() || ap.GetPolicyVersion() != a.s.PolicyVersion() ||
		!ap.GetExpiresAt().AsTime().Equal(a.clock.Now().Add(time.Hour)) || len(ap.GetReasons()) != 2 ||
		ap.GetProposal().GetArguments().AsMap()["path"] != "config/app.yaml" {
		t.Fatalf("approval = %v", ap)
	}
	// Asking again for the same step returns the stored approval.
	a.clock.Advance(time.Minute)
	if again := a.request(t, req, nil); !again.GetRequestedAt().AsTime().Equal(ap.GetRequestedAt().AsTime()) || again.GetPreview() == nil {
		t.Errorf("second request = %v, want the stored approval", again)
	}
	if list := a.list(t, "", false); len(list) != 1 || list[0].GetStepId() != req.GetStepId() {
		t.Fatalf("pending = %v", list)
	}
	// Pending is not approved.
	checkVerdict(t, validate(t, a.s, req), approval, wire.CodeApprovalRequired, "allow-fs-write", "config-writes-need-approval")

	// The principal who started the run cannot approve it, however typed;
	// nobody can approve anonymously; a denial needs a reason.
	_, err := a.decide("run-1", "1", true, "alice", "mine")
	wantCode(t, err, codes.PermissionDenied, "cannot decide")
	_, err = a.decide("run-1", "1", true, " Alice ", "mine")
	wantCode(t, err, codes.PermissionDenied, "cannot decide")
	_, err = a.decide("run-1", "1", true, "  ", "")
	wantCode(t, err, codes.PermissionDenied, "approver is required")
	_, err = a.decide("run-1", "1", false, "bob", "")
	wantCode(t, err, codes.InvalidArgument, "reason is required")
	_, err = a.decide("run-1", "7", true, "bob", "")
	wantCode(t, err, codes.NotFound, "no such approval")

	decided, err := a.decide("run-1", "1", true, "bob", "looks fine")
	if err != nil {
		t.Fatal(err)
	}
	if decided.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || decided.GetDecidedBy() != "bob" ||
		decided.GetReason() != "looks fine" || !decided.GetDecidedAt().AsTime().Equal(a.clock.Now()) {
		t.Fatalf("decided = %v", decided)
	}
	if list := a.list(t, "run-1", false); len(list) != 0 {
		t.Errorf("pending after the decision = %v", list)
	}
	if list := a.list(t, "run-1", true); len(list) != 1 || list[0].GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Errorf("all = %v", list)
	}

	v = validate(t, a.s, req)
	checkVerdict(t, v, allow, "", "allow-fs-write", "config-writes-need-approval", "approval")
	if msg := v.GetReasons()[2].GetMessage(); msg != "approved by bob: looks fine" {
		t.Errorf("approval reason = %q", msg)
	}
	if v.GetApprovalTtl() != nil {
		t.Error("an allowed step carries an approval TTL")
	}
	// Decided is decided, by step id too.
	_, err = a.decide("run-1", req.GetStepId(), false, "carol", "changed my mind")
	wantCode(t, err, codes.FailedPrecondition, "already decided")

	// Changed arguments are another step id: a new approval is needed.
	changed := stepRequest(t, "run-1", 1, "fs.write", map[string]any{"path": "config/app.yaml", "content": "color: red\n"})
	checkVerdict(t, validate(t, a.s, changed), approval, wire.CodeApprovalRequired, "allow-fs-write", "config-writes-need-approval")

	// An approval counts until it expires.
	a.clock.Advance(59 * time.Minute)
	v = validate(t, a.s, req)
	checkVerdict(t, v, deny, wire.CodeApprovalExpired, "allow-fs-write", "config-writes-need-approval", "approval")

	// Approvals live in KV: a restarted validator knows them.
	a.clock.Advance(-30 * time.Minute)
	restarted := a.start(t)
	checkVerdict(t, validate(t, restarted, req), allow, "", "allow-fs-write", "config-writes-need-approval", "approval")
}

// TestApprovalDenied checks that a denied approval denies the step with the
// approver's reason.
func TestApprovalDenied(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	req := configWrite(t, 2, "config/db.yaml")
	a.request(t, req, nil)
	if _, err := a.decide("run-1", "2", false, "carol", "the database config is frozen this week"); err != nil {
		t.Fatal(err)
	}
	v := validate(t, a.s, req)
	checkVerdict(t, v, deny, wire.CodeApprovalDenied, "allow-fs-write", "config-writes-need-approval", "approval")
	if e := v.GetError(); !strings.Contains(e.GetMessage(), "carol") || !strings.Contains(e.GetMessage(), "frozen this week") ||
		e.GetCategory() != "output_error" || e.GetType() != "validation_failed" {
		t.Errorf("error = %v", e)
	}
}

// TestApprovalExpiry checks that an undecided approval expires: deciding
// it is refused and marks it, listing marks it, and the step is denied.
func TestApprovalExpiry(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	first, second := configWrite(t, 1, "config/a.yaml"), configWrite(t, 2, "config/b.yaml")
	a.request(t, first, nil)
	a.request(t, second, nil)
	a.clock.Advance(time.Hour)

	_, err := a.decide("run-1", "1", true, "bob", "late")
	wantCode(t, err, codes.FailedPrecondition, "expired")
	_, err = a.decide("run-1", "1", true, "bob", "late")
	wantCode(t, err, codes.FailedPrecondition, "expired")
	checkVerdict(t, validate(t, a.s, first), deny, wire.CodeApprovalExpired, "allow-fs-write", "config-writes-need-approval", "approval")

	// Listing marks the other one.
	if pending := a.list(t, "run-1", false); len(pending) != 0 {
		t.Errorf("pending = %v", pending)
	}
	all := a.list(t, "run-1", true)
	if len(all) != 2 {
		t.Fatalf("all = %v", all)
	}
	for _, ap := range all {
		if ap.GetState() != xctv1.ApprovalState_APPROVAL_STATE_EXPIRED {
			t.Errorf("approval of step %d is %v, want EXPIRED", ap.GetStep(), ap.GetState())
		}
	}
	checkVerdict(t, validate(t, a.s, second), deny, wire.CodeApprovalExpired, "allow-fs-write", "config-writes-need-approval", "approval")
}

// TestApprovalApprovedJustBeforeItsExpiry (issue 12, session 20): a
// decision taken in time holds for the verdict after it for the verdict
// TTL, past expires_at (the run's owner lost right after the decision
// asks later), and no longer; an approval approved early still counts
// only until its expiry.
func TestApprovalApprovedJustBeforeItsExpiry(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	late, early := configWrite(t, 1, "config/a.yaml"), configWrite(t, 2, "config/b.yaml")
	a.request(t, late, nil)
	a.request(t, early, nil)
	if _, err := a.decide("run-1", "2", true, "bob", "early"); err != nil {
		t.Fatal(err)
	}
	a.clock.Advance(time.Hour - time.Second)
	if _, err := a.decide("run-1", "1", true, "bob", "just in time"); err != nil {
		t.Fatal(err)
	}
	a.clock.Advance(2 * time.Second) // past both expiries
	checkVerdict(t, validate(t, a.s, late), allow, "", "allow-fs-write", "config-writes-need-approval", "approval")
	checkVerdict(t, validate(t, a.s, early), deny, wire.CodeApprovalExpired, "allow-fs-write", "config-writes-need-approval", "approval")

	a.clock.Advance(verdict.DefaultTTL) // past the decision's grace
	v := validate(t, a.s, late)
	checkVerdict(t, v, deny, wire.CodeApprovalExpired, "allow-fs-write", "config-writes-need-approval", "approval")
	if msg := v.GetError().GetMessage(); !strings.Contains(msg, "approved by bob") || !strings.Contains(msg, "not acted on") {
		t.Errorf("an approval approved in time and not used: %q", msg)
	}
}

// TestApprovalConcurrentDecisions checks that of concurrent decisions
// exactly one wins.
func TestApprovalConcurrentDecisions(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	req := configWrite(t, 1, "config/app.yaml")
	a.request(t, req, nil)
	const deciders = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []*xctv1.Approval
	)
	for i := range deciders {
		wg.Go(func() {
			approver := []string{"bob", "carol", "dave", "erin"}[i%4]
			// Each decider sends its own decision (a reason of its own): the
			// same decision sent twice is one decision (TestApprovalDecisionResent).
			got, err := a.decide("run-1", req.GetStepId(), i%2 == 0, approver, fmt.Sprintf("reason %d of %s", i, approver))
			if err != nil {
				if status.Code(err) != codes.FailedPrecondition {
					t.Errorf("decider %d: %v", i, err)
				}
				return
			}
			mu.Lock()
			wins = append(wins, got)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d decisions won, want exactly 1", len(wins))
	}
	stored := a.list(t, "run-1", true)
	if len(stored) != 1 || stored[0].GetDecidedBy() != wins[0].GetDecidedBy() || stored[0].GetState() != wins[0].GetState() {
		t.Errorf("stored = %v, winner = %v", stored, wins[0])
	}
}

// TestApprovalRequestChecks checks what RequestApproval refuses.
func TestApprovalRequestChecks(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	ctx := context.Background()
	req := configWrite(t, 1, "config/app.yaml")
	ask := func(m func(r *xctv1.RequestApprovalRequest)) error {
		r := &xctv1.RequestApprovalRequest{Run: req.GetRun(), Step: req.GetStep(), StepId: req.GetStepId(), Proposal: req.GetProposal()}
		m(r)
		_, err := a.s.RequestApproval(ctx, r)
		return err
	}
	wantCode(t, ask(func(r *xctv1.RequestApprovalRequest) { r.StepId = "0123456789abcdef0123456789abcdef" }), codes.InvalidArgument, "step_id is not the id")
	wantCode(t, ask(func(r *xctv1.RequestApprovalRequest) { r.Step = 2 }), codes.InvalidArgument, "step_id is not the id")
	wantCode(t, ask(func(r *xctv1.RequestApprovalRequest) { r.StepId = "a.b" }), codes.InvalidArgument, "step")
	wantCode(t, ask(func(r *xctv1.RequestApprovalRequest) {
		r.Run = &xctv1.RunContext{RunId: "run.1", Principal: "alice"}
	}), codes.InvalidArgument, "run_id")
	wantCode(t, ask(func(r *xctv1.RequestApprovalRequest) {
		r.Run = &xctv1.RunContext{RunId: "run-1"}
	}), codes.InvalidArgument, "principal")
	wantCode(t, ask(func(r *xctv1.RequestApprovalRequest) { r.Proposal = nil }), codes.InvalidArgument, "tool")
	// A step the policy allows needs no approval.
	plain := configWrite(t, 1, "docs/a.md")
	_, err := a.s.RequestApproval(ctx, &xctv1.RequestApprovalRequest{Run: plain.GetRun(), Step: 1, StepId: plain.GetStepId(), Proposal: plain.GetProposal()})
	wantCode(t, err, codes.FailedPrecondition, "does not require an approval")
	// A huge preview is cut to fit.
	big := &xctv1.Preview{Kind: "diff", Content: strings.Repeat("+x\n", 200_000), BaseDigest: "absent"}
	ap := a.request(t, req, big)
	if n := len(ap.GetPreview().GetContent()); n > 256<<10 || !strings.HasSuffix(ap.GetPreview().GetContent(), "(preview truncated)") {
		t.Errorf("preview of %d bytes, suffix %q", n, ap.GetPreview().GetContent()[n-30:])
	}
	if list := a.list(t, "run-none", true); len(list) != 0 {
		t.Errorf("approvals of a run without any = %v", list)
	}
	_, err = a.s.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: "a>b"})
	wantCode(t, err, codes.InvalidArgument, "run_id")
	_, err = a.decide("run-1", "a.b", true, "bob", "")
	wantCode(t, err, codes.InvalidArgument, "step")
}

// TestApprovalsNeedJetStream checks that a validator without JetStream
// refuses the approval RPCs and leaves steps waiting.
func TestApprovalsNeedJetStream(t *testing.T) {
	t.Parallel()
	s := newService(t, approvalPolicy)
	ctx := context.Background()
	req := configWrite(t, 1, "config/app.yaml")
	checkVerdict(t, validate(t, s, req), approval, wire.CodeApprovalRequired, "allow-fs-write", "config-writes-need-approval")
	_, err := s.RequestApproval(ctx, &xctv1.RequestApprovalRequest{Run: req.GetRun(), Step: 1, StepId: req.GetStepId(), Proposal: req.GetProposal()})
	wantCode(t, err, codes.Unavailable, "unavailable")
	_, err = s.ListApprovals(ctx, &xctv1.ListApprovalsRequest{})
	wantCode(t, err, codes.Unavailable, "unavailable")
	_, err = s.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "run-1", Step: "1", Approve: true, Approver: "bob"})
	wantCode(t, err, codes.Unavailable, "unavailable")
}
