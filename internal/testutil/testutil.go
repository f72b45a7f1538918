// Package testutil holds helpers for tests that run real servers: an
// embedded JetStream server per test and polling instead of sleeping.
package testutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/provision"
)

// NATSUsers are the passwords of every NATS user on the test servers
// (natsauth.Users): fixed, since tests run on loopback only. The services
// of a test cluster connect with them (app.Config.NATSUsers), each as its
// own user.
func NATSUsers() natsauth.File {
	f := natsauth.File{}
	for _, u := range natsauth.Users {
		f[u] = "test-" + u + "-password"
	}
	return f
}

// NATSAs is the connect option presenting user's test credentials.
func NATSAs(user string) nats.Option {
	return natsauth.Credentials{User: user, Password: NATSUsers()[user]}.Option()
}

// Admin is NATSAs(natsauth.Admin): a test's own connection, allowed all.
func Admin() nats.Option { return NATSAs(natsauth.Admin) }

func testUsers(tb testing.TB) []*server.User {
	tb.Helper()
	users, err := natsauth.ServerUsers(NATSUsers())
	if err != nil {
		tb.Fatalf("nats users: %v", err)
	}
	return users
}

// RunJetStream starts an embedded JetStream server on a free loopback port
// with its store in a temporary directory, stopped when the test ends,
// and provisions XCT's streams and buckets on it as the admin (the
// defaults of provision.Defaults), as xct dev does before the services
// start.
func RunJetStream(tb testing.TB) *server.Server {
	tb.Helper()
	return RunJetStreamWith(tb, natsembed.Config{})
}

// RunJetStreamWith is RunJetStream with the embedded server's settings
// (port and store directory are the test's own whatever cfg says).
func RunJetStreamWith(tb testing.TB, cfg natsembed.Config) *server.Server {
	tb.Helper()
	s := RunBareJetStreamWith(tb, cfg)
	Provision(tb, s.ClientURL(), provision.Defaults())
	gone(tb, s)
	return s
}

// gone waits until the server no longer lists the provisioning's
// connection (closed, but removed by the server a moment later), so a
// test that looks at who is connected sees its own connections only.
func gone(tb testing.TB, s *server.Server) {
	tb.Helper()
	Eventually(tb, 10*time.Second, func() error {
		if n := s.NumClients(); n != 0 {
			return fmt.Errorf("%d connections left after provisioning", n)
		}
		return nil
	})
}

// RunBareJetStream is RunJetStream without XCT's streams: for tests of
// what happens before provisioning, or of provisioning itself.
func RunBareJetStream(tb testing.TB) *server.Server {
	tb.Helper()
	return RunBareJetStreamWith(tb, natsembed.Config{})
}

// Provision makes XCT's streams and buckets with s on the server at url,
// as the admin (provision.Run), failing the test on an error.
func Provision(tb testing.TB, url string, s provision.Settings) []provision.Result {
	tb.Helper()
	nc, err := nats.Connect(url, Admin())
	if err != nil {
		tb.Fatalf("provision: connect nats: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("provision: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := provision.Run(ctx, js, s)
	if err != nil {
		tb.Fatalf("provision: %v", err)
	}
	return res
}

// RunBareJetStreamWith is RunBareJetStream with the embedded server's
// settings.
func RunBareJetStreamWith(tb testing.TB, cfg natsembed.Config) *server.Server {
	tb.Helper()
	cfg.Port, cfg.StoreDir = -1, tb.TempDir()
	if cfg.Users == nil {
		cfg.Users = testUsers(tb)
	}
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

// Connect opens a NATS connection to s as the admin user, closed when the
// test ends.
func Connect(tb testing.TB, s *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), Admin())
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

// NATSCredentialsFile writes the test passwords of users (every user when
// none is named) to a credentials file (mode 0600) and returns its path.
func NATSCredentialsFile(tb testing.TB, users ...string) string {
	tb.Helper()
	all := NATSUsers()
	if len(users) == 0 {
		users = natsauth.Users
	}
	var b strings.Builder
	for _, u := range users {
		fmt.Fprintf(&b, "%s: %s\n", u, all[u])
	}
	path := filepath.Join(tb.TempDir(), "nats.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// NATSServerConfigFile writes a nats-server configuration file giving the
// test users their passwords and permissions, and JetStream XCT's limits
// (for tests that run the nats-server binary), and returns its path.
func NATSServerConfigFile(tb testing.TB) string {
	tb.Helper()
	block, err := natsauth.ServerConfig(NATSUsers())
	if err != nil {
		tb.Fatal(err)
	}
	block = "jetstream { " + natsauth.JetStreamLimits() + " }\n" + block
	path := filepath.Join(tb.TempDir(), "nats-auth.conf")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
