package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
)

// TestRollbackIsTracedUnderTheRun checks that the undo steps of a rollback,
// made after the run ended, are exported in the run's trace under its
// invoke_agent span, and that OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES name the exporting service. It sets the process
// environment, so it must not run in parallel.
func TestRollbackIsTracedUnderTheRun(t *testing.T) {
	rcv, addr := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_SERVICE_NAME", "xct-eu-1")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=platform")
	c := startCluster(t)
	c.writeScript(t, "write.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: traced.txt, content: "hello"}, goal: write}
  - done: true
    message: written
`)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:write.yaml"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("run ended %s: %s", run.GetStatus(), run.GetMessage())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Retried as told while the run's owner key outlives its end (it is
	// released once the run left the active set, after its status is
	// done: the run's end and the rollback's start race).
	var rb *xctv1.RollbackRunResponse
	testutil.Eventually(t, 30*time.Second, func() error {
		var err error
		rb, err = c.orchAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId()})
		if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "try again") {
			return err
		}
		if err != nil || rb.GetStatus() != "done" || len(rb.GetUndone()) != 1 {
			t.Fatalf("rollback %v: %v", rb, err)
		}
		return nil
	})
	c.app.Stop(ctx) // flushes the spans

	testutil.Eventually(t, time.Minute, func() error {
		spans := rcv.snapshot()
		byID := map[string]*tracepb.Span{}
		var root, undo *tracepb.Span
		for _, s := range spans {
			byID[string(s.GetSpanId())] = s
			switch {
			case strings.HasPrefix(s.GetName(), "invoke_agent ") && spanAttr(s, "gen_ai.conversation.id") == run.GetRunId():
				root = s
			case s.GetName() == "execute_tool xct.undo":
				undo = s
			}
		}
		if root == nil || undo == nil {
			return fmt.Errorf("no invoke_agent or undo span yet among %d", len(spans))
		}
		if string(undo.GetTraceId()) != string(root.GetTraceId()) {
			return errors.New("the undo step is not in the run's trace")
		}
		// Walk up from the undo step to the run's root.
		var path []string
		for s := undo; s != nil; s = byID[string(s.GetParentSpanId())] {
			path = append(path, s.GetName())
			if string(s.GetSpanId()) == string(root.GetSpanId()) {
				break
			}
			if len(s.GetParentSpanId()) == 0 {
				return fmt.Errorf("the undo step is not under invoke_agent: %v", path)
			}
		}
		if want := "rollback " + run.GetRunId(); len(path) != 3 || path[1] != want {
			return fmt.Errorf("path from the undo step to the root %v, want [execute_tool xct.undo, %s, invoke_agent …]", path, want)
		}
		if spanAttr(undo, "xct.step.outcome") != "success" {
			return fmt.Errorf("undo outcome %q", spanAttr(undo, "xct.step.outcome"))
		}
		rcv.mu.Lock()
		res := rcv.resources[string(root.GetSpanId())]
		rcv.mu.Unlock()
		got := map[string]string{}
		for _, kv := range res {
			got[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if got["service.name"] != "xct-eu-1" || got["team"] != "platform" || got["deployment.environment"] != "test" {
			return fmt.Errorf("resource %v: the OTEL_* variables were not honoured", got)
		}
		return nil
	})
}
