package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
)

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A Start that fails after binding its listeners closes every one of them:
// the executor's (whose service failed) and the validator's (bound, never
// started).
func TestFailedStartClosesItsListeners(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	creds := grpcxtest.New(t)
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cfg.NATSURL, cfg.Replicas = ns.ClientURL(), 1
	cfg.ExecutorListen, cfg.ValidatorListen = freeAddr(t), freeAddr(t)
	cfg.Executor.Workspace = notADir // executor.New fails: the workspace is a file
	cfg.Auth.TokensFile = creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg, []string{TargetExecutor, TargetValidator}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	if err == nil {
		a.Stop(ctx)
		t.Fatal("Start with a workspace that is a file succeeded")
	}
	for _, addr := range []string{cfg.ExecutorListen, cfg.ValidatorListen} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("after the failed start (%v), %s is still bound: %v", err, addr, err)
		}
		_ = l.Close()
	}
}
