package validator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// serve serves a's validator on loopback and returns a client calling as
// principal.
func (a *approvals) serve(tb testing.TB, principal string) xctv1.ValidatorServiceClient {
	tb.Helper()
	creds := grpcxtest.New(tb)
	srv := grpcx.NewServer("validator", slog.New(slog.DiscardHandler), creds.ServerOptions()...)
	a.s.Register(srv.GRPC)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	tb.Cleanup(srv.GRPC.Stop)
	return xctv1.NewValidatorServiceClient(creds.Dial(tb, srv.Addr(), principal))
}

// Session 15 (resolve15), issue 11: a decision named by a step number
// whose approval changed between the approver's list and the decision.
// Step 3's first approval was withdrawn (its run cancelled, or the step
// proposed again after a takeover) and another opened for step 3, other
// arguments: on main bob's "approve run-1 3", meant for the write he had
// read, approved the other (the pending one of the number). Now a number
// decides only the one approval ever opened for it; else the decision
// must name the step id, and names what it would have chosen among.
func TestDecisionByNumberRefusedWhenTheNumberNamesSeveral(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	bob := a.serve(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := configWrite(t, 3, "config/app.yaml")
	first := a.request(t, seen, nil)
	// Withdrawn, as a cancelled run's orchestrator does, as a service.
	svc := a.serve(t, grpcxtest.Service)
	if _, err := svc.WithdrawApproval(ctx, &xctv1.WithdrawApprovalRequest{RunId: "run-1", StepId: first.GetStepId(), By: "carol", Reason: "wrong file"}); err != nil {
		t.Fatal(err)
	}
	other := stepRequest(t, "run-1", 3, "fs.write", map[string]any{"path": "config/secrets.yaml", "content": "open: true\n"})
	second := a.request(t, other, nil)
	if second.GetStepId() == first.GetStepId() || second.GetStep() != 3 {
		t.Fatalf("second approval %v", second)
	}
	_, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "run-1", Step: "3", Approve: true, Reason: "config/app.yaml looks fine"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), first.GetStepId()) ||
		!strings.Contains(status.Convert(err).Message(), second.GetStepId()) {
		t.Errorf("bob's approval of step 3 by number: %v; want FAILED_PRECONDITION naming both step ids", err)
	}
	if got := a.list(t, "run-1", true); len(got) != 2 || stateOf(got, second.GetStepId()) != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("approvals after bob's decision by number: %v", got)
	}
	// By its step id, the one he means is decided (here: the one he read
	// is withdrawn, so that is refused too).
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "run-1", Step: first.GetStepId(), Approve: true, Reason: "fine"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("bob's approval of the withdrawn one by id: %v", err)
	}
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "run-1", Step: second.GetStepId(), Approve: false, Reason: "no"}); err != nil {
		t.Errorf("bob's denial of the second by id: %v", err)
	}
	// One approval of a number: the number still decides it.
	one := a.request(t, configWrite(t, 4, "config/app.yaml"), nil)
	if d, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "run-1", Step: "4", Approve: true, Reason: "fine"}); err != nil || d.GetApproval().GetStepId() != one.GetStepId() {
		t.Errorf("bob's approval of step 4 by number: %v, %v", d, err)
	}
}

func stateOf(list []*xctv1.Approval, stepID string) xctv1.ApprovalState {
	for _, a := range list {
		if a.GetStepId() == stepID {
			return a.GetState()
		}
	}
	return xctv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED
}

// Session 15 (resolve15), issue 11: an approval counts under the policy
// that asked for it. alice's config write waited for a human under one
// policy; the policy was replaced by another (which still wants a human
// for it, for another rule) before bob approved. On main bob's approval,
// given for what the first policy asked, allowed the write under the
// second. Now the approval records the policy in force when it was
// decided, and Validate counts it only when the policy that asked, the
// one it was decided under and the one in force are one: otherwise the
// step is denied, saying so (the model may propose it again, and the
// policy in force asks its human).
func TestApprovalUnderAnotherPolicyIsRefused(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	bob := a.serve(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := configWrite(t, 1, "config/app.yaml")
	asked := a.request(t, req, nil)
	before := a.s.PolicyVersion()
	if asked.GetPolicyVersion() != before {
		t.Fatalf("approval asked under %s, the policy is %s", asked.GetPolicyVersion(), before)
	}
	changed := strings.Replace(approvalPolicy, "config-writes-need-approval", "config-writes-need-a-second-look", 1)
	if err := os.WriteFile(a.path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.s.ReloadPolicy(); err != nil || a.s.PolicyVersion() == before {
		t.Fatalf("reload: %v (version %s)", err, a.s.PolicyVersion())
	}
	d, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "run-1", Step: asked.GetStepId(), Approve: true, Reason: "fine"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetApproval().GetDecidedPolicyVersion(); got != a.s.PolicyVersion() {
		t.Errorf("the approval records the policy %q it was decided under, want %q", got, a.s.PolicyVersion())
	}
	v := validate(t, a.s, req)
	if v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_DENY || v.GetError().GetCode() != string(wire.CodePolicyDenied) ||
		!strings.Contains(v.GetError().GetMessage(), "policy") {
		t.Fatalf("verdict after bob approved under another policy: %v", v)
	}
}

// Session 16 (ops16), issue 12: a policy reload that does not change what
// the policy asks a human about a step does not undo the human's approval
// of it; one that changes it does. On main any reload (a new version)
// made every approval given before it, and not yet used, deny its step,
// and a pending one too once decided: an operator who added an unrelated
// rule made every waiting approver's work void. Now an approval counts
// while the policy in force asks a human about the step for the rules and
// messages the approver was shown (TestApprovalUnderAnotherPolicyIsRefused:
// a rule renamed asks for another; it still denies). A reload that denies
// the step denies it, approved or not; one that allows it needs no human.
func TestApprovalAcrossAPolicyReload(t *testing.T) {
	t.Parallel()
	unrelated := approvalPolicy + `  - id: no-shell-in-config
    effect: deny
    tools: ["shell.exec"]
    when: 'args.command.contains("config/")'
`
	denies := strings.Replace(approvalPolicy, "effect: require_approval", "effect: deny", 1)
	message := strings.Replace(approvalPolicy, "writes under config/ need a human", "writes under config/ need two humans", 1)
	for _, tc := range []struct {
		name   string
		policy string
		// decided: bob decides before the reload (else after it).
		decidedBefore bool
		want          xctv1.VerdictDecision
		code          wire.Code
	}{
		{"unrelated rule added; approved before", unrelated, true, xctv1.VerdictDecision_VERDICT_DECISION_ALLOW, ""},
		{"unrelated rule added; approved after", unrelated, false, xctv1.VerdictDecision_VERDICT_DECISION_ALLOW, ""},
		{"step now denied; approved before", denies, true, xctv1.VerdictDecision_VERDICT_DECISION_DENY, wire.CodePolicyDenied},
		{"step now denied; approved after", denies, false, xctv1.VerdictDecision_VERDICT_DECISION_DENY, wire.CodePolicyDenied},
		{"the asking rule says another thing", message, true, xctv1.VerdictDecision_VERDICT_DECISION_DENY, wire.CodePolicyDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := startApprovals(t)
			req := configWrite(t, 1, "config/app.yaml")
			asked := a.request(t, req, nil)
			decide := func() {
				t.Helper()
				if _, err := a.decide("run-1", asked.GetStepId(), true, "bob", "fine"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.decidedBefore {
				decide()
			}
			before := a.s.PolicyVersion()
			if err := os.WriteFile(a.path, []byte(tc.policy), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := a.s.ReloadPolicy(); err != nil || a.s.PolicyVersion() == before {
				t.Fatalf("reload: %v (version %s)", err, a.s.PolicyVersion())
			}
			if !tc.decidedBefore {
				decide()
			}
			v := validate(t, a.s, req)
			if v.GetDecision() != tc.want || (tc.code != "" && v.GetError().GetCode() != string(tc.code)) {
				t.Fatalf("verdict: %v; want %v %s", v, tc.want, tc.code)
			}
			if tc.want == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && !strings.Contains(fmt.Sprint(v.GetReasons()), "approved by bob") {
				t.Errorf("allowed without saying bob approved it: %v", v.GetReasons())
			}
		})
	}
}

// Session 17 (attack17c), issue 11: an approval bound the step's
// arguments, not the file the approver saw the diff against. The grant of
// an approved step now binds the preview's base digest (signed: the
// orchestrator cannot drop it on the way to the executor), and a diff of
// fs.write that names no base (an old executor's, or one the base was
// dropped from) is not shown, for no approval would bind what it shows.
func TestApprovalBindsTheFileThePreviewWasMadeAgainst(t *testing.T) {
	t.Parallel()
	signer, verifier, err := verdict.NewPair(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := startApprovals(t)
	a.signer = signer
	a.s = a.start(t)
	const base = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	grantOf := func(req *xctv1.ValidateRequest) *xctv1.VerdictGrant {
		t.Helper()
		v := validate(t, a.s, req)
		checkVerdict(t, v, allow, "", "allow-fs-write", "config-writes-need-approval", "approval")
		g, err := verifier.Verify(v.GetSigned(), a.clock.Now())
		if err != nil {
			t.Fatalf("the approved step's verdict: %v", err)
		}
		return g
	}
	for _, tc := range []struct {
		name     string
		step     int
		preview  *xctv1.Preview
		shown    bool   // the diff is in the approval
		wantBase string // the grant's preview_base
	}{
		{"a diff against a file", 1, &xctv1.Preview{Kind: "diff", Content: "+color: green\n", BaseDigest: base}, true, base},
		{"a diff against no file", 2, &xctv1.Preview{Kind: "diff", Content: "+color: green\n", BaseDigest: "absent"}, true, "absent"},
		{"a diff naming no file", 3, &xctv1.Preview{Kind: "diff", Content: "+color: green\n"}, false, ""},
		{"no preview", 4, nil, false, ""},
	} {
		req := configWrite(t, tc.step, "config/app.yaml")
		ap := a.request(t, req, tc.preview)
		if shown := strings.Contains(ap.GetPreview().GetContent(), "+color: green"); shown != tc.shown || ap.GetPreview().GetBaseDigest() != tc.wantBase {
			t.Errorf("%s: the approval's preview %v, want shown %v, base %q", tc.name, ap.GetPreview(), tc.shown, tc.wantBase)
		}
		if !tc.shown && tc.preview != nil && !strings.Contains(ap.GetPreview().GetContent(), "not shown") {
			t.Errorf("%s: the approval's preview %q, want a note that it is not shown", tc.name, ap.GetPreview().GetContent())
		}
		if _, err := a.decide("run-1", fmt.Sprint(tc.step), true, "bob", "fine"); err != nil {
			t.Fatal(err)
		}
		if g := grantOf(req); g.GetPreviewBase() != tc.wantBase {
			t.Errorf("%s: the grant's preview_base %q, want %q", tc.name, g.GetPreviewBase(), tc.wantBase)
		}
	}
}
