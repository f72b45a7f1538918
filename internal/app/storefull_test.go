package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
)

// TestHealthIsNotServingWhileAStreamCannotStore: a JetStream stream that
// refuses writes for want of room (here LCTL at its max_bytes with discard
// new, as a disk or a server store that filled) fails every run, so the
// services report NOT_SERVING (probes and balancers move away, the
// operator sees why in one log line naming the stream and the cause), and
// SERVING again once the stream has room, without a write to tell them
// (a NOT_SERVING service gets no calls). On main health said SERVING
// throughout.
func TestHealthIsNotServingWhileAStreamCannotStore(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	admin, err := jetstream.New(testutil.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	var cfg Config
	cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = ns.ClientURL(), testutil.NATSUsers(), 1
	cfg.ExecutorListen, cfg.ValidatorListen, cfg.OrchestratorListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Executor.Workspace = t.TempDir()
	cfg.Orchestrator.ScriptsDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg.Orchestrator.ScriptsDir, "done.yaml"), []byte("steps:\n  - done: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Auth.TokensFile = creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
	cfg.HealthListen = "127.0.0.1:0" // the kubelet's probe port
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var logs testutil.Buffer
	a, err := Start(ctx, cfg, []string{TargetExecutor, TargetValidator, TargetOrchestrator}, slog.New(slog.NewTextHandler(&logs, nil)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	health := healthpb.NewHealthClient(creds.Dial(t, a.Addr(TargetExecutor), grpcxtest.Service))
	orch := xctv1.NewOrchestratorServiceClient(creds.Dial(t, a.Addr(TargetOrchestrator), "alice"))
	waitHealth := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() error {
			h, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			if h.GetStatus() != want {
				return fmt.Errorf("health %s, want %s", h.GetStatus(), want)
			}
			return nil
		})
	}
	waitHealth(healthpb.HealthCheckResponse_SERVING)

	// The stream is full: no room for one more event.
	setLimit := func(maxBytes int64) {
		t.Helper()
		st, err := admin.Stream(ctx, "LCTL")
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		c.MaxBytes, c.Discard = maxBytes, jetstream.DiscardNew
		if _, err := admin.UpdateStream(ctx, c); err != nil {
			t.Fatalf("update LCTL: %v", err)
		}
	}
	setLimit(64)
	for i := range 3 {
		_, err := orch.StartRun(ctx, &xctv1.StartRunRequest{RunId: fmt.Sprintf("run-full-%d", i), Goal: "g", Model: "scripted:done.yaml"})
		if err == nil {
			t.Fatalf("run %d started on a full stream", i)
		}
		// Session 20 (faults20): refused as what it is, which a client
		// does not retry (UNAVAILABLE had `xct run` retrying for its
		// --start-retry), naming the stream and the cause; the first
		// learns it from its append, the others before any write.
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "LCTL") ||
			!strings.Contains(st.Message(), "maximum bytes exceeded") || !strings.Contains(st.Message(), "nothing recorded is lost") {
			t.Fatalf("StartRun %d on a full stream: %v; want RESOURCE_EXHAUSTED naming LCTL and the cause", i, err)
		}
	}
	// Nothing of a refused start is left: no owner key (a run no one
	// runs), and the stream holds what it held.
	owners, err := admin.KeyValue(ctx, "XCT_RUN_OWNERS")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := owners.Get(ctx, fmt.Sprintf("run-full-%d", i)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("owner key of the refused run-full-%d: %v", i, err)
		}
	}
	waitHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	// The probes' port says the same for readiness (""), and the process
	// is still alive for the liveness probe: restarting it frees nothing.
	probe, err := grpc.NewClient(a.HealthAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = probe.Close() }()
	probes := healthpb.NewHealthClient(probe)
	for service, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"":                    healthpb.HealthCheckResponse_NOT_SERVING,
		grpcx.LivenessService: healthpb.HealthCheckResponse_SERVING,
	} {
		if h, err := probes.Check(ctx, &healthpb.HealthCheckRequest{Service: service}); err != nil || h.GetStatus() != want {
			t.Errorf("the probe port's health of %q while LCTL is full: %v, %v; want %s", service, h, err, want)
		}
	}
	// One line for the stream, whatever the number of failed writes,
	// naming it and the cause.
	if n := strings.Count(logs.String(), "cannot store in stream LCTL"); n != 1 {
		t.Errorf("%d log lines say LCTL cannot store, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "maximum bytes exceeded") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}

	// Room again (the operator raised the limit): SERVING with no write
	// needed, and runs start.
	setLimit(-1)
	waitHealth(healthpb.HealthCheckResponse_SERVING)
	if !strings.Contains(logs.String(), "stores in stream LCTL again") {
		t.Errorf("the log does not say the stream stores again:\n%s", logs.String())
	}
	if _, err := orch.StartRun(ctx, &xctv1.StartRunRequest{RunId: "run-room", Goal: "g", Model: "scripted:done.yaml"}); err != nil {
		t.Fatalf("StartRun once the stream has room: %v", err)
	}
	if n := a.NATSRefusals(); n != 0 {
		t.Errorf("NATS refused %d requests of the services", n)
	}
}
