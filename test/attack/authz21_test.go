package attack

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/services/executor"
)

// Session 21 (authz21), issue 11: a cancel's reason is the canceller's
// words, and a hijacked agent cancelling its own run can put a secret in
// them. Every reader of the run (GetRun, ListRuns, WatchRun, the
// approval it withdrew) must see it redacted, as the chain holds it.
func TestAttackCancelReasonCarriesASecret(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{deployTool{}}
	})
	c.writeScript(t, "deploy.yaml", "steps:\n  - next_step: {tool: test.deploy, arguments: {target: prod}}\n  - done: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := c.orchestratorAs(t, "alice")
	resp, err := alice.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "scripted:deploy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	for {
		l, err := c.validatorAs(t, "dave").ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: id, All: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.GetApprovals()) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no approval for %s", id)
		case <-time.After(20 * time.Millisecond): // poll until the run asks
		}
	}
	reason := "rotating aws_access " + awsKey + " and Bearer q8Zx3vLm9TnR2wYp5KdA"
	cr, err := alice.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	b, _ := protojson.Marshal(cr)
	seen["CancelRun's answer"] = string(b)
	run := c.waitRun(t, "dave", id)
	b, _ = protojson.Marshal(run)
	seen["GetRun"] = string(b)
	l, err := c.orchestratorAs(t, "dave").ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = protojson.Marshal(l)
	seen["ListRuns"] = string(b)
	al, err := c.validatorAs(t, "dave").ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: id, All: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = protojson.Marshal(al)
	seen["ListApprovals"] = string(b)
	stream, err := c.orchestratorAs(t, "dave").WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	var chain strings.Builder
	for {
		msg, err := stream.Recv()
		if err != nil {
			break
		}
		b, _ := protojson.Marshal(msg)
		chain.Write(b)
	}
	seen["WatchRun"] = chain.String()
	for where, s := range seen {
		for _, secret := range []string{awsKey, "q8Zx3vLm9TnR2wYp5KdA"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s shows the cancel reason's secret %s: %s", where, secret, s)
			}
		}
	}
}
