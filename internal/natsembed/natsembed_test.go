package natsembed_test

import (
	"errors"
	"net"
	"strings"
	"sync"
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

// Session 19 (ops19), issue 17: with the embedded server's store on a
// full disk, xct dev said nothing of it: the server logs nothing (NoLog),
// a write it could not store gets no answer, and the services saw only
// their own timeouts ("claim run: context canceled" after 30 s; seen on
// a 3 MiB tmpfs, where the server logged "JetStream failed to store a
// msg on stream '$G > KV_XCT_RUN_QUOTA': write …: no space left on
// device"). Each error the server logs once it serves now goes to
// Config.OnError; here through the server's own logging call, with the
// words it used then.
func TestEmbeddedServerTellsItsErrors(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var told []string
	s, err := natsembed.Start(natsembed.Config{Port: -1, StoreDir: t.TempDir(), Users: []*server.User{{Username: "u", Password: "p"}},
		OnError: func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, msg)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	s.Noticef("a notice")
	s.Warnf("a warning")
	s.Errorf("JetStream failed to store a msg on stream '%s > %s': %v", "$G", "KV_XCT_RUN_QUOTA",
		errors.New("write /d/nats/jetstream/$G/streams/KV_XCT_RUN_QUOTA/msgs/1.blk: no space left on device"))
	mu.Lock()
	defer mu.Unlock()
	want := "JetStream failed to store a msg on stream '$G > KV_XCT_RUN_QUOTA': write /d/nats/jetstream/$G/streams/KV_XCT_RUN_QUOTA/msgs/1.blk: no space left on device"
	if len(told) != 1 || told[0] != want {
		t.Fatalf("told %q; want the error alone", told)
	}
}
