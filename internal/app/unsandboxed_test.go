package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/services/executor"
)

// TestUnsandboxedExecutorAndItsSecrets: an executor whose tools run
// without a sandbox does not start while a program could read its NATS
// credentials file or its tokens file (a program runs as its user); the
// operator's --unsandboxed-reads-secrets lets it start.
func TestUnsandboxedExecutorAndItsSecrets(t *testing.T) {
	ns := testutil.RunJetStream(t)
	creds := grpcxtest.New(t)
	tools, err := executor.ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  binaries:\n    - {name: echo}\n"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := verdict.WriteKeyPair(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := func(accept bool) (*App, error) {
		var cfg Config
		cfg.NATSURL, cfg.Replicas = ns.ClientURL(), 1
		cfg.NATSCredentialsFile = testutil.NATSCredentialsFile(t, "executor")
		cfg.ExecutorListen = "127.0.0.1:0"
		cfg.Executor.Workspace, cfg.Executor.Tools = t.TempDir(), tools
		cfg.Executor.UnsandboxedReadsSecrets, cfg.Executor.VerdictTrust = accept, keys.Public
		cfg.Auth.TokensFile = creds.Path
		cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return Start(ctx, cfg, []string{TargetExecutor}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	}
	a, err := start(false)
	if err == nil {
		a.Stop(context.Background())
		t.Fatal("an executor with sandbox: none started with its NATS credentials file readable")
	}
	for _, want := range []string{"nats.yaml", creds.Path, "--unsandboxed-reads-secrets"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s: %v", want, err)
		}
	}
	a, err = start(true)
	if err != nil {
		t.Fatalf("accepted by the operator: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a.Stop(ctx)
}
