package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"
)

// chargeNeedsApproval asks a human about every charge.
const chargeNeedsApproval = `rules:
  - {id: charge-needs-approval, effect: require_approval, tools: ["test.charge"]}
`

// Session 21 (authz21), issue 11: a step a human approved ran once and
// went in doubt (its executor killed mid-call). Its run's own principal,
// dev (submitter and operator, as `xct dev` makes it), may not approve it
// (self-approval is refused), but on main it could release it for a retry
// itself: `xct resolve RUN 1 --outcome retry --as dev` was taken, the
// validator counted bob's approval again for the same step id, and a
// second executor charged a second time on one human's word. Now a
// retry of an approved step by the principal it was asked for (or a
// look-alike name) is PERMISSION_DENIED, the record stays in doubt, and
// another operator (carol) may still release it.
func TestAttackSelfReleasedRetryReusesAnApproval(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, 300*time.Millisecond)
	f.withPolicy(chargeNeedsApproval)
	gate1 := f.charge.gate(1)
	a, _ := f.orch("orch-a", retryModel{newGatedModel()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := a.StartRun(as(ctx, "dev", auth.RoleSubmitter, auth.RoleOperator, auth.RoleAuditor), &xctv1.StartRunRequest{Goal: "deploy", Model: "func:tester", Principal: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	f.waitFor(id, "approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })
	bob := xctv1.NewValidatorServiceClient(f.creds.Dial(t, f.valAddr, "bob"))
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Reason: "one charge"}); err != nil {
		t.Fatal(err)
	}
	entered(t, f.charge.entered)
	f.proxy.Cut() // the executor "dies" mid-call: nothing it does is recorded
	f.es.kill()
	close(gate1)

	charge2 := newCountTool("test.charge", xctv1.Effect_EFFECT_REVERSIBLE)
	ex2 := f.executorOn(t, f.ns.ClientURL(), charge2)
	f.es.ex = ex2
	f.es.start()
	events := f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	doubt := only(events, TypeStepInDoubt)[0]
	stepID := str(doubt.Data, "step_id")
	waitRecord(t, ex2, stepID, 1)

	retry := &xctv1.ResolveStepRequest{StepId: stepID, Decision: xctv1.StepDecision_STEP_DECISION_RETRY, Reason: "not in the ledger",
		RunId: id, InDoubtSeq: doubt.Seq}
	for _, who := range []struct{ name, as string }{{"dev itself", ""}, {"dev by a look-alike name", "DEV."}} {
		retry.ResolvedBy = who.as
		_, err := f.executorAs("dev").ResolveStep(ctx, retry)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "approv") {
			t.Errorf("%s releasing its own approved step for a retry: %v; want PERMISSION_DENIED", who.name, err)
		}
	}
	retry.ResolvedBy = ""
	if n := charge2.count(1); n != 0 {
		t.Fatalf("the second executor charged %d times after dev's own retry", n)
	}
	got, err := f.executorAs("carol").GetStep(ctx, &xctv1.GetStepRequest{StepId: stepID})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStep().GetResolution() != nil {
		t.Fatalf("the step's record holds a resolution after dev's refused retry: %v", got.GetStep().GetResolution())
	}
	// Another operator decides: the retry is taken and the run goes on.
	if _, err := f.executorAs("carol").ResolveStep(ctx, retry); err != nil {
		t.Fatalf("carol's retry: %v", err)
	}
	events = f.waitEnd(id)
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run:\n%s", describe(events))
	}
	if n := charge2.count(1); n != 1 {
		t.Fatalf("charges after carol's retry: %d, want 1", n)
	}
}
