package cli_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/session"
	"github.com/xct-dev/xct/services/tracer"
)

// live is an embedded JetStream server with a tracer serving gRPC on
// loopback.
type live struct {
	nc      *nats.Conn
	natsURL string
	tracer  string
	svc     *tracer.Service
	// env holds an auditor's token (LCTL_TOKEN) for the live commands.
	env map[string]string
}

func startLive(t *testing.T) *live {
	t.Helper()
	ns := testutil.RunJetStream(t)
	nc := testutil.Connect(t, ns)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := tracer.New(tracer.Config{DataDir: t.TempDir(), Replicas: 1, SnapshotEvery: 4}, nc, log)
	if err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("tracer", log, creds.ServerOptions()...)
	svc.Register(srv.GRPC)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		srv.Stop(ctx)
		if err := <-served; err != nil {
			t.Error(err)
		}
		if err := svc.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return &live{nc: nc, natsURL: ns.ClientURL(), tracer: srv.Addr(), svc: svc,
		env: map[string]string{"LCTL_TOKEN": creds.Token(t, "dave")}}
}

// record writes events to a new chain on the stream through a NATS
// session, the way a Go agent would, and waits for the tracer to have them.
func (l *live) record(t *testing.T, id string, events []lctl.Event) {
	t.Helper()
	ctx := context.Background()
	s, err := lctllive.NewSession(ctx, l.nc, id, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		var err error
		if e.Type == lctl.TypeCheckpoint {
			_, err = s.Checkpoint(ctx) // the state differs: other chain id, times
		} else {
			_, err = s.Record(ctx, e.Type, e.Agent, e.Data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := l.svc.WaitForSeq(wctx, id, uint64(len(events))); err != nil {
		t.Fatal(err)
	}
}

// TestLiveChains runs the commands against the tracer and checks they say
// what they say about the same chain exported to a file.
func TestLiveChains(t *testing.T) {
	l := startLive(t)
	l.record(t, "review-1", reviewChain(t, false))
	l.record(t, "review-2", reviewChain(t, true))
	tr := "--tracer=" + l.tracer
	dir := t.TempDir()
	file := filepath.Join(dir, "review-1.lctl.yaml")

	// Without a token the tracer says who may ask.
	code, _, errOut := run(t, nil, "stats", tr, "--chain", "review-1", "--credentials", filepath.Join(t.TempDir(), "none.yaml"))
	if code != 2 || !strings.Contains(errOut, "Unauthenticated") {
		t.Fatalf("no token: exit %d: %s", code, errOut)
	}
	code, out, errOut := run(t, l.env, "export", tr, "--chain", "review-1", "-o", file)
	if code != 0 || !strings.Contains(out, "Wrote "+file) {
		t.Fatalf("export: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := run(t, nil, "verify", file); code != 0 {
		t.Fatalf("the exported chain does not verify:\n%s", out)
	}
	// Each command gives the same answer live as on the exported file.
	for _, args := range [][]string{
		{"replay"},
		{"replay", "--to-seq", "10"},
		{"replay", "--to-seq", "23"},
		{"replay", "--to-seq", "13", "--hash"},
		{"replay", "--to-seq", "7", "--events"},
		{"stats"},
		{"bottleneck"},
		{"confidence"},
		{"verify"},
		{"query", "SELECT * WHERE confidence >= 0.5 ORDER BY confidence DESC"},
		{"validate", "--contracts", contrac},
	} {
		fileCode, fileOut, _ := run(t, nil, append(args, file)...)
		liveCode, liveOut, liveErr := run(t, l.env, append(args, tr, "--chain", "review-1")...)
		fileOut = strings.ReplaceAll(fileOut, file, "chain review-1")
		if liveCode != fileCode || liveOut != fileOut {
			t.Errorf("lctl %s: live (exit %d) and file (exit %d) differ\n--- live\n%s%s--- file\n%s", strings.Join(args, " "), liveCode, fileCode, liveOut, liveErr, fileOut)
		}
	}

	code, out, _ = run(t, l.env, "query", tr, "--chain", "review-1", "SELECT id WHERE tag = 'critical'")
	if code != 0 || !strings.Contains(out, "1 of 5 facts") {
		t.Errorf("query after --chain: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, l.env, "diff", tr, "--chain", "review-1", "--chain", "review-2")
	if code != 1 || !strings.Contains(out, "Events diverged at seq 9:") || !strings.Contains(out, "[ONLY IN v2]") {
		t.Errorf("live diff: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, l.env, "diff", tr, "--chain", "review-1", file)
	if code != 0 || !strings.Contains(out, "Chains are identical") {
		t.Errorf("diff of a chain and its export: exit %d\n%s", code, out)
	}

	code, _, errOut = run(t, l.env, "replay", tr, "--chain", "nope")
	if code != 2 || !strings.Contains(errOut, "has no such chain") {
		t.Errorf("unknown chain: exit %d: %s", code, errOut)
	}
	code, _, errOut = run(t, nil, "stats", "--tracer=127.0.0.1:1", "--timeout=2s", "--chain", "review-1")
	if code != 2 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("tracer down: exit %d: %s", code, errOut)
	}
}

// TestTail follows chains on the stream.
func TestTail(t *testing.T) {
	l := startLive(t)
	l.record(t, "tail-1", reviewChain(t, false)[:6])
	l.record(t, "tail-2", xctChain(t)[:3])
	nats := "--nats=" + l.natsURL
	creds := "--nats-credentials=" + testutil.NATSCredentialsFile(t, "reader")

	// Without credentials NATS refuses lctl, and lctl says so.
	code, _, errOut := run(t, nil, "tail", nats, "--chain", "tail-1", "--no-follow")
	if code != 2 || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("tail without NATS credentials: exit %d: %s", code, errOut)
	}

	code, out, errOut := run(t, nil, "tail", nats, creds, "--chain", "tail-1", "--no-follow")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 6 || !strings.HasPrefix(lines[1], "[2] code-analyzer: fact_added F1") || errOut != "" {
		t.Fatalf("tail --chain: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = run(t, nil, "tail", nats, creds, "--all", "--no-follow", "--json")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 9 {
		t.Fatalf("tail --all --json: exit %d, %d lines\n%s", code, len(lines), out)
	}
	if _, err := lctl.DecodeEvent([]byte(lines[8])); err != nil {
		t.Errorf("tail --json line does not decode: %v", err)
	}

	// Following: events appended while tailing arrive; --count ends it.
	done := make(chan string, 1)
	go func() {
		_, out, _ := run(t, nil, "tail", nats, creds, "--chain", "tail-3", "--count", "2")
		done <- out
	}()
	ctx := context.Background()
	s, err := lctllive.NewSession(ctx, l.nc, "tail-3", session.Options{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFact(ctx, session.Fact{ID: "F1", Text: "x", Confidence: 0.5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		if !strings.Contains(out, "[1] a: fact_added F1") || !strings.Contains(out, "[2] system: checkpoint") {
			t.Errorf("followed:\n%s", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tail --count 2 did not end")
	}

	code, _, errOut = run(t, nil, "tail", nats, creds, "--chain", "nope", "--no-follow")
	if code != 2 || !strings.Contains(errOut, "no events") {
		t.Errorf("tail of an unknown chain: exit %d: %s", code, errOut)
	}
	code, _, errOut = run(t, nil, "tail", "--nats=nats://127.0.0.1:1", "--all")
	if code != 2 || !strings.Contains(errOut, "connect to NATS") {
		t.Errorf("NATS down: exit %d: %s", code, errOut)
	}
}

// TestExportWritesYAMLToStdout checks export's --to.
func TestExportToStdout(t *testing.T) {
	l := startLive(t)
	l.record(t, "exp", xctChain(t))
	code, out, _ := run(t, l.env, "export", "--tracer="+l.tracer, "--chain", "exp", "--to", "yaml")
	if code != 0 || !strings.HasPrefix(out, "lctl: \"4.0\"\nchain:\n  id: exp\n") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	path := filepath.Join(t.TempDir(), "exp.lctl.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(t, nil, "verify", path); code != 0 {
		t.Fatalf("exported YAML does not verify:\n%s", out)
	}
}
