package testutil

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/provision"
)

// JetStream is an embedded JetStream server that a test can stop and start
// again on the same loopback port and store directory, to cut every
// client off NATS at the worst moment and bring the same data back.
type JetStream struct {
	tb   testing.TB
	dir  string
	port int
	mu   sync.Mutex
	srv  *server.Server
}

// RestartableJetStream starts a JetStream server that Stop and Start move
// down and up, provisioned once (RunJetStream); it is stopped when the test ends.
func RestartableJetStream(tb testing.TB) *JetStream {
	tb.Helper()
	j := &JetStream{tb: tb, dir: tb.TempDir(), port: -1}
	j.Start()
	tb.Cleanup(j.Stop)
	return j
}

// Start starts the server (again), on the port it had.
func (j *JetStream) Start() {
	j.tb.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.srv != nil {
		return
	}
	s, err := natsembed.Start(natsembed.Config{Port: j.port, StoreDir: j.dir, Users: testUsers(j.tb)})
	if err != nil {
		j.tb.Fatalf("start jetstream: %v", err)
	}
	j.srv = s
	first := j.port == -1
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		j.port = a.Port
	}
	if first {
		Provision(j.tb, s.ClientURL(), provision.Defaults())
		gone(j.tb, s)
	}
}

// Stop shuts the server down; clients see the connection drop.
func (j *JetStream) Stop() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.srv == nil {
		return
	}
	j.srv.Shutdown()
	j.srv.WaitForShutdown()
	j.srv = nil
}

// URL is the server's client URL, the same across restarts.
func (j *JetStream) URL() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.srv.ClientURL()
}

// Connect opens a connection that reconnects quickly and does not buffer
// while disconnected (a publish then fails at once), closed when the test
// ends.
func (j *JetStream) Connect(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(j.URL(), Admin(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		tb.Fatalf("connect nats: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}
