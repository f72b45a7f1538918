package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
)

// Finding 6: services started while NATS is down used to exit 1
// ("redaction key bucket: context deadline exceeded"). They now start, serve
// NOT_SERVING with calls refused as UNAVAILABLE naming NATS, and become
// SERVING once NATS answers, every service started in order.
func TestServicesWaitForNATS(t *testing.T) {
	t.Parallel()
	js := testutil.RestartableJetStream(t)
	url := js.URL()
	js.Stop() // NATS is down when the services start
	creds := grpcxtest.New(t)
	var cfg Config
	cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = url, testutil.NATSUsers(), 1
	cfg.ExecutorListen, cfg.ValidatorListen, cfg.OrchestratorListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Executor.Workspace = t.TempDir()
	cfg.Orchestrator.ScriptsDir = t.TempDir()
	cfg.Auth.TokensFile = creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg, []string{TargetExecutor, TargetValidator, TargetOrchestrator}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	if err != nil {
		t.Fatalf("start while NATS is down: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	conn := creds.Dial(t, a.Addr(TargetExecutor), grpcxtest.Service)
	health := healthpb.NewHealthClient(conn)
	exec := xctv1.NewExecutorServiceClient(conn)
	orch := xctv1.NewOrchestratorServiceClient(creds.Dial(t, a.Addr(TargetOrchestrator), "alice"))

	h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while NATS is down: %v, %v", h, err)
	}
	_, err = exec.ListTools(ctx, &xctv1.ListToolsRequest{})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "waiting for NATS at "+url) {
		t.Fatalf("a call while NATS is down: %v", err)
	}

	js.Start()
	testutil.Eventually(t, 30*time.Second, func() error {
		h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %s", h.GetStatus())
		}
		return nil
	})
	tools, err := exec.ListTools(ctx, &xctv1.ListToolsRequest{})
	if err != nil || len(tools.GetTools()) == 0 {
		t.Fatalf("ListTools once NATS answers: %v, %v", tools, err)
	}
	// The orchestrator started too: it reads the log (no such run).
	if _, err := orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: "run-none"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetRun once NATS answers: %v", err)
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the app failed: %v", err)
	default:
	}
}

// TestServicesWaitForProvisioning: the services may not create their
// streams (natsauth; the admin makes them: `xct nats provision`). Started
// against a server nobody provisioned, they serve NOT_SERVING, a call is
// refused as UNAVAILABLE saying which stream is missing and what to run,
// and they start once the admin has made the streams (a Kubernetes Job
// beside them), with no request refused by NATS on the way.
func TestServicesWaitForProvisioning(t *testing.T) {
	t.Parallel()
	ns := testutil.RunBareJetStream(t)
	creds := grpcxtest.New(t)
	var cfg Config
	cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = ns.ClientURL(), testutil.NATSUsers(), 1
	cfg.ExecutorListen, cfg.ValidatorListen, cfg.OrchestratorListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Executor.Workspace = t.TempDir()
	cfg.Orchestrator.ScriptsDir = t.TempDir()
	cfg.Auth.TokensFile = creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg, []string{TargetExecutor, TargetValidator, TargetOrchestrator}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	if err != nil {
		t.Fatalf("start on an unprovisioned server: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	conn := creds.Dial(t, a.Addr(TargetExecutor), grpcxtest.Service)
	health := healthpb.NewHealthClient(conn)
	exec := xctv1.NewExecutorServiceClient(conn)
	h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health on an unprovisioned server: %v, %v", h, err)
	}
	// The reason is the missing stream; a probe that timed out on a
	// loaded machine says "JetStream did not answer" first, so the reason
	// is waited for (it is asked again with backoff).
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := exec.ListTools(ctx, &xctv1.ListToolsRequest{})
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "xct nats provision") || !strings.Contains(st.Message(), "not provisioned") {
			return fmt.Errorf("a call on an unprovisioned server: %w", err)
		}
		return nil
	})
	if h, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while not provisioned: %v, %v", h, err)
	}

	testutil.Provision(t, ns.ClientURL(), provision.Defaults())
	testutil.Eventually(t, 30*time.Second, func() error {
		h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %s", h.GetStatus())
		}
		return nil
	})
	if tools, err := exec.ListTools(ctx, &xctv1.ListToolsRequest{}); err != nil || len(tools.GetTools()) == 0 {
		t.Fatalf("ListTools once provisioned: %v, %v", tools, err)
	}
	if n := a.NATSRefusals(); n != 0 {
		t.Errorf("NATS refused %d requests of the services", n)
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the app failed: %v", err)
	default:
	}
}

// Session 17 (ops17): --start-give-up ends a process that waited that
// long for NATS, naming what it waited for (for a supervisor that should
// see it); without it the process waits for as long as it takes.
func TestStartGivesUpWhenTold(t *testing.T) {
	t.Parallel()
	js := testutil.RestartableJetStream(t)
	url := js.URL()
	js.Stop()
	var cfg Config
	cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = url, testutil.NATSUsers(), 1
	cfg.ExecutorListen = "127.0.0.1:0"
	cfg.Executor.Workspace = t.TempDir()
	cfg.Security = grpcx.Security{Plaintext: true}
	cfg.Start = StartRetry{Timeout: time.Second, MaxWait: 100 * time.Millisecond, GiveUp: time.Second}
	keys, err := verdict.WriteKeyPair(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Executor.VerdictTrust = keys.Public
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg, []string{TargetExecutor}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	if err != nil {
		t.Fatalf("start while NATS is down: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	select {
	case err := <-a.Err():
		if !strings.Contains(err.Error(), "gave up after 1s (--start-give-up)") || !strings.Contains(err.Error(), "waiting for NATS at "+url) {
			t.Fatalf("the process ends with %v; want it to say it gave up waiting for NATS at %s", err, url)
		}
	case <-ctx.Done():
		t.Fatal("the process never gave up")
	}

	cfg.Start.GiveUp = 500 * time.Millisecond
	if err := cfg.Validate([]string{TargetExecutor}); err == nil || !strings.Contains(err.Error(), "--start-give-up 500ms is shorter than one start") {
		t.Fatalf("a give-up shorter than one start: %v", err)
	}
}
