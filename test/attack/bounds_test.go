package attack

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

// deepModel proposes arguments nested depth levels deep, then finishes.
type deepModel struct{ depth int }

func (p deepModel) Name() string { return "deep" }
func (p deepModel) Close() error { return nil }
func (p deepModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if len(req.GetHistory()) > 0 {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "stop"}`}, nil
	}
	var b strings.Builder
	b.WriteString(`{"next_step": {"tool": "fs.read", "arguments": {"path": "a", "x": `)
	b.WriteString(strings.Repeat("[", p.depth))
	b.WriteString(strings.Repeat("]", p.depth))
	b.WriteString(`}}}`)
	return &xctv1.ProposeResponse{Output: b.String()}, nil
}

// Attack 5 (issue #11): tool arguments nested 5,000 deep were recorded,
// after which the run could never be read again (GetRun, WatchRun, lctl
// verify hit recursion limits; export exceeded 16 MB). Now they are an
// error signal to the model, nothing deep is recorded, and every reader
// reads the run.
func TestAttackDeeplyNestedArguments(t *testing.T) { eachPolicy(t, attackDeeplyNestedArguments) }

func attackDeeplyNestedArguments(t *testing.T, policy bindOption) {
	c := startBindCluster(t, policy, withProposer("deep", deepModel{depth: 5000}))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "nest", Model: "func:deep"})
	if len(run.GetSteps()) != 1 {
		t.Fatalf("steps: %v", run.GetSteps())
	}
	st := run.GetSteps()[0]
	e := st.GetResponse().GetError()
	if st.GetState() != xctv1.StepState_STEP_STATE_INVALID || e.GetCode() != string(wire.CodeGenerationFailed) || !strings.Contains(e.GetMessage(), "nested deeper") {
		t.Fatalf("the deep proposal: %v %v", st.GetState(), e)
	}
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.app.Tracer.WaitForSeq(ctx, run.GetRunId(), run.GetLastSeq()); err != nil {
		t.Fatal(err)
	}
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dave"))
	v, err := tracer.VerifyChain(ctx, &lctlv1.VerifyChainRequest{ChainId: run.GetRunId()})
	if err != nil || !v.GetOk() {
		t.Fatalf("verify: %v %v", v, err)
	}
	exp, err := tracer.ExportChain(ctx, &lctlv1.ExportChainRequest{ChainId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.GetContent()) > 1<<20 {
		t.Fatalf("export is %d bytes", len(exp.GetContent()))
	}
	f, err := lctl.DecodeFile(bytes.NewReader(exp.GetContent()), lctl.FormatJSON)
	if err != nil {
		t.Fatalf("the export does not decode: %v", err)
	}
	if err := lctl.Verify(f.Events); err != nil {
		t.Fatalf("lctl verify of the export: %v", err)
	}
	if d := wire.Depth(exp.GetContent()); d > wire.MaxDepth+8 {
		t.Fatalf("the export nests %d deep", d)
	}
	// A watch from the start replays the whole chain.
	stream, err := c.orchestratorAs(t, "dave").WatchRun(ctx, &xctv1.WatchRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := stream.Recv(); err != nil {
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Fatalf("watch: %v", err)
			}
			break
		}
		n++
	}
	if uint64(n) != run.GetLastSeq() {
		t.Fatalf("watched %d events of %d", n, run.GetLastSeq())
	}
}

// Attack 5 (issue #11): a caller could set any max_steps (1,000,000 was
// accepted). The server's limit refuses it, saying the limit.
func TestAttackUnboundedMaxSteps(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.MaxStepsLimit = 200
		cfg.Orchestrator.MaxStepsLimitByRole = map[string]int{"admin": 500}
	})
	c.writeScript(t, "done.yaml", "steps:\n  - done: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:done.yaml", MaxSteps: 1_000_000})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit of 200") {
		t.Fatalf("max_steps 1000000 as alice: %v", err)
	}
	if _, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:done.yaml", MaxSteps: 200}); err != nil {
		t.Fatalf("max_steps at the limit: %v", err)
	}
	// A role's own limit: admin may ask for up to 500.
	if _, err := c.orchestratorAs(t, "admin").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:done.yaml", MaxSteps: 400}); err != nil {
		t.Fatalf("400 as admin: %v", err)
	}
	_, err = c.orchestratorAs(t, "admin").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:done.yaml", MaxSteps: 501})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit of 500 set by role admin") {
		t.Fatalf("501 as admin: %v", err)
	}
}
