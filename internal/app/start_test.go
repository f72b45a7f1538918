package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
)

// freeAddr is a loopback address with a port nobody listened on when it
// was picked. Another test may take it before it is bound again: callers
// that bind it retry on EADDRINUSE.
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

// listenersOf returns the loopback TCP ports this process listens on
// (its own sockets only, read from /proc: a port another process or test
// took says nothing of ours).
func listenersOf(t *testing.T) map[int]bool {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	table, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
			continue
		}
		_, hexPort, _ := strings.Cut(f[1], ":")
		port, err := strconv.ParseInt(hexPort, 16, 32)
		if err != nil {
			t.Fatalf("/proc/self/net/tcp: %q: %v", line, err)
		}
		ports[int(port)] = true
	}
	return ports
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
	cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = ns.ClientURL(), testutil.NATSUsers(), 1
	cfg.Executor.Workspace = notADir // executor.New fails: the workspace is a file
	cfg.Auth.TokensFile = creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The addresses are fixed before Start (a port of 0 would leave
	// nothing to look for after a failed Start). A port taken by another
	// parallel test in between fails Start before it binds both: pick
	// others.
	var err error
	for range 10 {
		cfg.ExecutorListen, cfg.ValidatorListen = freeAddr(t), freeAddr(t)
		var a *App
		a, err = Start(ctx, cfg, []string{TargetExecutor, TargetValidator}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
		if err == nil {
			a.Stop(ctx)
			t.Fatal("Start with a workspace that is a file succeeded")
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if !strings.Contains(err.Error(), "executor") || !strings.Contains(err.Error(), notADir) {
		t.Fatalf("Start failed with %v, want the executor's workspace refused", err)
	}
	open := listenersOf(t)
	for _, addr := range []string{cfg.ExecutorListen, cfg.ValidatorListen} {
		_, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); open[p] {
			t.Fatalf("after the failed start (%v), this process still listens on %s", err, addr)
		}
	}
}

// The goroutines that take a server's calls (grpcx.StreamWorkers) carry
// the profiler label of the service they serve, so the step benchmarks'
// CPU per service counts their calls where they belong, not as
// "nats-client" (the label Start runs under while it connects).
func TestCallWorkersCarryTheirServiceLabel(t *testing.T) {
	ns := testutil.RunJetStream(t)
	startExecutorAndValidator(t, ns.ClientURL())

	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	// debug=1: groups of identical goroutines, "N @ pcs", then "# labels:
	// {...}" when they have labels, then their frames.
	workers := map[string]int{}
	for _, group := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(group, "grpc.(*Server).serverWorker") {
			continue
		}
		// The first group follows the profile's own header line.
		group = group[strings.LastIndex(group[:strings.Index(group, " @ ")], "\n")+1:]
		var n int
		if _, err := fmt.Sscanf(group, "%d @", &n); err != nil {
			t.Fatalf("goroutine group %q: %v", group, err)
		}
		label := "none"
		if i := strings.Index(group, `"`+ProfileLabel+`":"`); i >= 0 {
			rest := group[i+len(ProfileLabel)+4:]
			label = rest[:strings.IndexByte(rest, '"')]
		}
		workers[label] += n
	}
	want := map[string]int{TargetExecutor: grpcx.StreamWorkers, TargetValidator: grpcx.StreamWorkers}
	if !maps.Equal(workers, want) {
		t.Fatalf("call workers by profiler label: %v, want %v", workers, want)
	}
}

// TestEachTargetConnectsAsItsOwnUser: a process of two targets has two
// NATS connections, each as the target's user with only its rights, and a
// request NATS refuses one of them is counted (NATSRefusals).
func TestEachTargetConnectsAsItsOwnUser(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	a := startExecutorAndValidator(t, ns.ClientURL())
	if len(a.conns) != 2 {
		t.Fatalf("%d NATS connections, want one per target", len(a.conns))
	}
	users := map[string]bool{}
	connz, err := ns.Connz(&server.ConnzOptions{Username: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range connz.Conns {
		users[c.AuthorizedUser] = true
	}
	if !users["executor"] || !users["validator"] || len(users) != 2 {
		t.Errorf("NATS users connected: %v, want executor and validator", users)
	}
	if a.NATSRefusals() != 0 {
		t.Fatalf("%d refusals after start", a.NATSRefusals())
	}
	// The validator's connection may not write a chain: NATS refuses,
	// and the process counts it.
	for _, nc := range a.conns {
		if nc.Opts.Name == "xct-validator" {
			if err := nc.Publish("lctl.chain.x", []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.Eventually(t, time.Minute, func() error {
		if n := a.NATSRefusals(); n != 1 {
			return fmt.Errorf("%d refusals counted, want 1", n)
		}
		return nil
	})
}

// startExecutorAndValidator starts one App with the executor and the
// validator on NATS at url, each on a loopback port, stopped when the test
// ends.
func startExecutorAndValidator(t *testing.T, url string) *App {
	t.Helper()
	creds := grpcxtest.New(t)
	var cfg Config
	cfg.NATSURL, cfg.NATSUsers, cfg.Replicas = url, testutil.NATSUsers(), 1
	cfg.ExecutorListen, cfg.ValidatorListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Executor.Workspace = t.TempDir()
	cfg.Auth.TokensFile = creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: creds.Token(t, grpcxtest.Service)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg, []string{TargetExecutor, TargetValidator}, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	return a
}
