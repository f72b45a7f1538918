package attack

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Session 6 (red team): attacks that combine allowed actions, each first
// seen to get through, then closed.

// A read-only role wrote a step record: GetStep is open to auditors and
// operators (to read records), and its fence flag records a step without
// a record as "not executed". Step ids are computable from what WatchRun
// shows (run, step number, tool, arguments), so an auditor who fenced a
// step between its verdict and its Execute made the orchestrator's call
// replay "not executed": the run's allowed step never ran. The fence is
// the orchestrator's (role service) only.
func TestAttackFenceByAReader(t *testing.T) {
	c := startBindCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vreq, ereq := proposal(t, "fence-run", 1, "fs.write", map[string]any{"path": "planned.txt", "content": "x"})
	v, err := c.validatorAs(t, "service:dev").Validate(ctx, vreq)
	if err != nil || v.GetVerdict().GetSigned() == nil {
		t.Fatalf("validate: %v %v", v, err)
	}
	for _, who := range []string{"dave", "carol", "dev", "admin"} {
		_, err := c.executorAs(t, who).GetStep(ctx, &xctv1.GetStepRequest{StepId: ereq.GetStepId(), Fence: true})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s fenced a step: %v", who, err)
		}
		// Reading stays open to them.
		if _, err := c.executorAs(t, who).GetStep(ctx, &xctv1.GetStepRequest{StepId: ereq.GetStepId()}); status.Code(err) != codes.NotFound {
			t.Errorf("%s reading a step without a record: %v", who, err)
		}
	}
	resp, err := c.executorAs(t, "service:dev").Execute(ctx, withVerdict(ereq, v.GetVerdict().GetSigned()))
	if err != nil || resp.GetResponse().GetError() != nil {
		t.Fatalf("the allowed step: %v %v", resp, err)
	}
	if got, _ := readWS(t, c.workspace, "planned.txt"); got != "x" {
		t.Fatalf("the allowed step did not act: planned.txt = %q", got)
	}
}
