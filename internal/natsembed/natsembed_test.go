package natsembed_test

import (
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/xct-dev/xct/internal/natsembed"
)

// Session 18 (ops18), issue 17: a second `xct dev` (or `make run`) while
// one runs found the embedded server's port taken, and said only
// "embedded nats: not ready after 10s on 127.0.0.1:7422", ten seconds
// later (the server logs nothing). It now says why at once, with the
// server's own words.
func TestEmbeddedServerSaysItsPortIsTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	s, err := natsembed.Start(natsembed.Config{Port: port, StoreDir: t.TempDir(), Users: []*server.User{{Username: "u", Password: "p"}}})
	if err == nil {
		s.Shutdown()
		t.Fatal("the embedded server started on a port in use")
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("start on a port in use: %v; want the port and \"address already in use\"", err)
	}
}
