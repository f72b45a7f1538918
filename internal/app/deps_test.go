package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/services/orchestrator"
)

// Session 18 (ops18), issue 17: the orchestrator said SERVING with the
// validator down, and nothing said otherwise: a readiness probe or a
// monitor could not tell that every step would fail
// (VALIDATOR_UNAVAILABLE). A process running the orchestrator now serves
// the health services xct.orchestrator.deps (and .validator, .executor),
// asked every --deps-probe; "" and liveness do not follow them. Here the
// validator, the executor and the orchestrator are three Apps (three
// processes' worth of gRPC servers and NATS connections); the validator is
// stopped and started again on its address.
func TestOrchestratorReportsItsDependencies(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	creds := grpcxtest.New(t)
	signer, _, err := verdict.NewPair(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := verdict.NewVerifier(signer.Public())
	if err != nil {
		t.Fatal(err)
	}
	base := func() Config {
		var cfg Config
		cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = ns.ClientURL(), testutil.NATSUsers(), 1
		cfg.Auth.TokensFile = creds.Path
		cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
		return cfg
	}
	start := func(cfg Config, target string) *App {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, err := Start(ctx, cfg, []string{target}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
		if err != nil {
			t.Fatalf("start %s: %v", target, err)
		}
		t.Cleanup(func() { stopApp(a) })
		return a
	}
	vcfg := base()
	vcfg.ValidatorListen, vcfg.Validator.Signer = "127.0.0.1:0", signer
	val := start(vcfg, TargetValidator)
	valAddr := val.Addr(TargetValidator)
	ecfg := base()
	ecfg.ExecutorListen, ecfg.Executor.Workspace, ecfg.Executor.Verifier = "127.0.0.1:0", t.TempDir(), verifier
	exe := start(ecfg, TargetExecutor)
	ocfg := base()
	ocfg.OrchestratorListen, ocfg.HealthListen = "127.0.0.1:0", "127.0.0.1:0"
	ocfg.Orchestrator.ScriptsDir = t.TempDir()
	ocfg.Orchestrator.ValidatorAddr, ocfg.Orchestrator.ExecutorAddr = valAddr, exe.Addr(TargetExecutor)
	ocfg.Orchestrator.DepsProbe = 50 * time.Millisecond
	orch := start(ocfg, TargetOrchestrator)

	// Both listeners answer the same: the service's own and the
	// health-only one a kubelet asks.
	var health []healthpb.HealthClient
	for _, addr := range []string{orch.Addr(TargetOrchestrator), orch.HealthAddr()} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		health = append(health, healthpb.NewHealthClient(conn))
	}
	deps := orchestrator.DepsHealthService
	// want asks every listener for the status of each service named,
	// and fails the poll (or the test, for "" and liveness, which never
	// follow a dependency) on another answer.
	want := func(statuses map[string]healthpb.HealthCheckResponse_ServingStatus) error {
		for _, h := range health {
			for _, svc := range []string{"", grpcx.LivenessService} {
				r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
				if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					t.Fatalf("health %q: %v %v; want SERVING whatever the dependencies", svc, r.GetStatus(), err)
				}
			}
			for svc, st := range statuses {
				r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
				if err != nil {
					return fmt.Errorf("health %q: %w", svc, err)
				}
				if r.GetStatus() != st {
					return fmt.Errorf("health %q: %v, want %v", svc, r.GetStatus(), st)
				}
			}
		}
		return nil
	}
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	testutil.Eventually(t, time.Minute, func() error {
		return want(map[string]healthpb.HealthCheckResponse_ServingStatus{deps: serving, deps + ".validator": serving, deps + ".executor": serving})
	})

	// The validator stops; its port is held so that it comes back there.
	stopApp(val)
	release := testutil.HoldPort(t, valAddr)
	testutil.Eventually(t, time.Minute, func() error {
		return want(map[string]healthpb.HealthCheckResponse_ServingStatus{deps: notServing, deps + ".validator": notServing, deps + ".executor": serving})
	})

	// It starts again on its address: the dependencies serve again.
	release()
	vcfg.ValidatorListen = valAddr
	start(vcfg, TargetValidator)
	testutil.Eventually(t, 3*time.Minute, func() error {
		return want(map[string]healthpb.HealthCheckResponse_ServingStatus{deps: serving, deps + ".validator": serving, deps + ".executor": serving})
	})

	// The executor stops: only its part and the whole go NOT_SERVING.
	stopApp(exe)
	testutil.Eventually(t, time.Minute, func() error {
		return want(map[string]healthpb.HealthCheckResponse_ServingStatus{deps: notServing, deps + ".validator": serving, deps + ".executor": notServing})
	})
	select {
	case err := <-orch.Err():
		t.Fatalf("the orchestrator's process failed: %v", err)
	default:
	}
}

func stopApp(a *App) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a.Stop(ctx)
}
