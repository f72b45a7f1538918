// Package testutil holds helpers for tests that run real servers: an
// embedded JetStream server per test and polling instead of sleeping.
package testutil

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/xct-dev/xct/internal/natsembed"
)

// RunJetStream starts an embedded JetStream server on a free loopback port
// with its store in a temporary directory, stopped when the test ends.
func RunJetStream(tb testing.TB) *server.Server {
	tb.Helper()
	return RunJetStreamWith(tb, natsembed.Config{})
}

// RunJetStreamWith is RunJetStream with the embedded server's settings
// (port and store directory are the test's own whatever cfg says).
func RunJetStreamWith(tb testing.TB, cfg natsembed.Config) *server.Server {
	tb.Helper()
	cfg.Port, cfg.StoreDir = -1, tb.TempDir()
	s, err := natsembed.Start(cfg)
	if err != nil {
		tb.Fatalf("start jetstream: %v", err)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a NATS connection to s, closed when the test ends.
func Connect(tb testing.TB, s *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		tb.Fatalf("connect nats: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Eventually polls check until it returns nil or the timeout passes, then
// fails the test with the last error.
func Eventually(tb testing.TB, timeout time.Duration, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(wait)
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}
