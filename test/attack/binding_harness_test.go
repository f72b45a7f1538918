// Package attack gathers the attacks on XCT's promise that the model
// cannot act outside what the system allows: each test reproduces one
// attack against a real cluster (gRPC over loopback, JetStream, files) and
// asserts that it fails. A new attack joins them here.
//
// Every attack starts its own cluster (an embedded JetStream server on a
// port of its own, the services on port 0, its own directories, keys and
// tokens), so the attacks run in parallel (t.Parallel): they wait much of
// their time (clusters starting, runs, child processes). An attack that
// reads the process's own state (runtime.MemStats' allocations, the
// environment through t.Setenv) stays serial; go test runs the serial
// tests first, none of them beside a parallel one.
package attack

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/orchestrator"
	"github.com/xct-dev/xct/services/tracer"
)

// bindCluster is the embedded cluster of one binding attack: every
// service in this process, the validator signing with key (the test
// keeps it, to sign what a stolen or replayed verdict would carry).
type bindCluster struct {
	app       *app.App
	creds     *grpcxtest.Creds
	workspace string
	scripts   string
	key       *verdict.Signer
	keyRaw    []byte
	natsURL   string
}

type bindOption func(*app.Config, *app.Options)

func startBindCluster(t *testing.T, opts ...bindOption) *bindCluster {
	t.Helper()
	return startBindClusterOn(t, testutil.RunJetStream(t), opts...)
}

// startBindClusterOn is startBindCluster on a JetStream server of the
// test's (provisioned, with testutil's users).
func startBindClusterOn(t *testing.T, ns *server.Server, opts ...bindOption) *bindCluster {
	t.Helper()
	return startBindTargets(t, ns, app.StartOrder, opts...)
}

// startReplicaOn starts another replica of the cluster of ns: every
// service but the tracer. There is exactly one tracer per stream
// (docs/kubernetes.md). Two would share the durable consumer "tracer", each
// deleting the other's as it sets its own up: a start that met that
// deletion failed ("create consumer tracer of LCTL: ... consumer closed"),
// and each tracer saw only part of every chain.
func startReplicaOn(t *testing.T, ns *server.Server, opts ...bindOption) *bindCluster {
	t.Helper()
	return startBindTargets(t, ns, []string{app.TargetExecutor, app.TargetValidator, app.TargetOrchestrator}, opts...)
}

func startBindTargets(t *testing.T, ns *server.Server, targets []string, opts ...bindOption) *bindCluster {
	t.Helper()
	if slices.Contains(targets, app.TargetTracer) {
		noTracerYet(t, ns)
	}
	c := &bindCluster{creds: grpcxtest.New(t)}
	base := t.TempDir()
	c.workspace, c.scripts = filepath.Join(base, "workspace"), filepath.Join(base, "scripts")
	for _, d := range []string{c.workspace, c.scripts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key, err := verdict.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	c.keyRaw = key
	if c.key, err = verdict.NewSigner(key, time.Minute); err != nil {
		t.Fatal(err)
	}
	trust, err := verdict.NewVerifier(c.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	var cfg app.Config
	cfg.NATSURL, cfg.NATSUsers = ns.ClientURL(), testutil.NATSUsers()
	c.natsURL = ns.ClientURL()
	cfg.Replicas = 1
	cfg.OrchestratorListen, cfg.ValidatorListen, cfg.ExecutorListen, cfg.TracerListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Orchestrator.ScriptsDir = c.scripts
	cfg.Executor.Workspace = c.workspace
	cfg.Tracer.DataDir = filepath.Join(base, "tracer")
	cfg.Validator.Signer, cfg.Executor.Verifier = c.key, trust
	cfg.Auth.TokensFile = c.creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: c.creds.Token(t, grpcxtest.Service),
		RateLimit: grpcx.DefaultRateLimit, RateBurst: grpcx.DefaultRateBurst}
	var o app.Options
	for _, opt := range opts {
		opt(&cfg, &o)
	}
	a, err := app.Start(context.Background(), cfg, targets, slog.New(slog.NewTextHandler(io.Discard, nil)), o)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	c.app = a
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a.Stop(ctx)
		// Every service's NATS user has what the service needs.
		if n := a.NATSRefusals(); n != 0 {
			t.Errorf("NATS refused the services %d requests (permissions violations; see natsauth)", n)
		}
	})
	return c
}

func withProposer(name string, p orchestrator.Proposer) bindOption {
	return func(_ *app.Config, o *app.Options) {
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer(name, p))
	}
}

func (c *bindCluster) executorAs(t *testing.T, principal string) xctv1.ExecutorServiceClient {
	return xctv1.NewExecutorServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetExecutor), principal))
}

func (c *bindCluster) validatorAs(t *testing.T, principal string) xctv1.ValidatorServiceClient {
	return xctv1.NewValidatorServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetValidator), principal))
}

func (c *bindCluster) orchestratorAs(t *testing.T, principal string) xctv1.OrchestratorServiceClient {
	return xctv1.NewOrchestratorServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetOrchestrator), principal))
}

func (c *bindCluster) writeScript(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.scripts, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runToEnd starts a run as principal and waits, through WatchRun, until
// it ends (waitRun); it returns the run as GetRun reads it.
func (c *bindCluster) runToEnd(t *testing.T, principal string, req *xctv1.StartRunRequest) *xctv1.Run {
	t.Helper()
	return c.runToEndWithin(t, principal, req, runWait)
}

// runWait bounds the wait for a run of a few steps to end.
const runWait = 60 * time.Second

// runToEndWithin is runToEnd for a run that may take up to wait: a run of
// hundreds of steps takes minutes under -race on a loaded machine.
func (c *bindCluster) runToEndWithin(t *testing.T, principal string, req *xctv1.StartRunRequest, wait time.Duration) *xctv1.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orchestratorAs(t, principal).StartRun(ctx, req)
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	return c.waitRunWithin(t, principal, resp.GetRun().GetRunId(), wait)
}

// waitRun waits, through WatchRun, until run id ends and returns it as
// GetRun reads it.
func (c *bindCluster) waitRun(t *testing.T, principal, id string) *xctv1.Run {
	t.Helper()
	return c.waitRunWithin(t, principal, id, runWait)
}

// waitRunWithin is waitRun waiting up to wait.
func (c *bindCluster) waitRunWithin(t *testing.T, principal, id string, wait time.Duration) *xctv1.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	orch := c.orchestratorAs(t, principal)
	stream, err := orch.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("watch %s: %v", id, err)
		}
	}
	got, err := orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetRun()
}

// proposal is a step as the orchestrator would ask the validator about it.
func proposal(t *testing.T, runID string, step int, tool string, args map[string]any) (*xctv1.ValidateRequest, *xctv1.ExecuteRequest) {
	t.Helper()
	st, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	id := wire.StepID(runID, step, tool, st)
	v := &xctv1.ValidateRequest{
		Run:      &xctv1.RunContext{RunId: runID, Principal: "alice", PrincipalRoles: []string{"submitter"}, StepsUsed: int32(step)},
		Step:     int32(step),
		StepId:   id,
		Proposal: &xctv1.NextStep{Tool: tool, Arguments: st},
	}
	return v, &xctv1.ExecuteRequest{RunId: runID, StepId: id, Tool: tool, Arguments: st}
}

func readWS(t *testing.T, ws, name string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ws, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// eachPolicy runs an attack against the shipped default policy and against
// a permissive one that allows every tool: the guard under test, not the
// policy, must be what stops it. The test runs in parallel with the others
// (the two policies one after the other).
func eachPolicy(t *testing.T, attack func(t *testing.T, policy bindOption)) {
	t.Parallel()
	t.Run("default policy", func(t *testing.T) {
		attack(t, func(*app.Config, *app.Options) {})
	})
	t.Run("permissive policy", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "allow-all.yaml")
		if err := os.WriteFile(path, []byte("rules:\n  - {id: allow-all, effect: allow, tools: [\"*\"]}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		attack(t, func(cfg *app.Config, _ *app.Options) { cfg.Validator.PolicyFile = path })
	})
}

// noTracerYet fails the test when ns already has a tracer's consumer: the
// cluster about to start would be a second tracer on the stream (use
// startReplicaOn).
func noTracerYet(t *testing.T, ns *server.Server) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch _, err := js.Consumer(ctx, eventlog.StreamName, tracer.ConsumerName); {
	case err == nil:
		t.Fatalf("this JetStream server has a tracer already: a second would fight it for the consumer %q (start the other replica with startReplicaOn)", tracer.ConsumerName)
	case !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrConsumerNotFound):
		t.Fatalf("look for a tracer's consumer: %v", err)
	}
}
